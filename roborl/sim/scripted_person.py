"""Moved to `roborl.hil.scripted_person` (issue 49); this path re-exports it for old imports."""

from roborl.hil.scripted_person import ScriptedPerson, ScriptedPersonConfig, with_scripted_person

__all__ = ["ScriptedPerson", "ScriptedPersonConfig", "with_scripted_person"]

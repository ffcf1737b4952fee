"""LLM policy plugin: a language model acts zero-shot through structured outputs (vLLM,
OpenAI-compatible servers, transformers)."""

from __future__ import annotations

from roborl.core.hookspecs import hookimpl
from roborl.plugins.llm.policy import LLMAlgorithm


@hookimpl
def roborl_algorithms() -> dict[str, type]:
    return {"llm": LLMAlgorithm}


@hookimpl
def roborl_cli_commands() -> dict[str, object]:
    from roborl.plugins.llm.model import cli

    return {"llm": cli}

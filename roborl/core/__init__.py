"""The roborl host: plugin manager, registries, interfaces, runner and CLI.

`core` knows no plugin, robot or sim module by name; everything else meets here through the
registry.
"""

"""Built-in plugins, one folder per family; each registers through the `roborl.plugins`
entry-point group exactly like a third-party plugin."""

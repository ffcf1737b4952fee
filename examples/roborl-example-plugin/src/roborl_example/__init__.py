"""An example third-party roborl plugin."""

"""roborl's command-line ROS 2 nodes (`roborl sim-robot`, `deploy`, `scripted-human`), their
shared pieces (`common`), and `processes`, which drives such nodes as subprocesses."""

"""Sim backends: Gymnasium's MuJoCo tasks and roborl's own MuJoCo tasks."""

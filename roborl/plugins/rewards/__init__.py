"""Learned rewards: a success classifier on camera images and `roborl reward train`."""

"""Training on a robot: the `robot` collector (whole episodes, updates while the robot holds)
and the actor-learner split (`actor_learner/`: an actor process at the control rate, the
learner in `roborl train`)."""

"""Actor-learner training on a robot (`collector=actor_learner`), as HIL-SERL runs it.

The **actor** (`roborl actor`, `actor.py`; its loop in `actor_loop.py`) is a process beside
the robot: it owns the robot env and its safety layer, runs the policy at the control rate,
streams transitions to the learner and loads the weights the learner publishes; it never runs
a gradient step. It keeps acting with its last weights while the learner is slow or
restarting, as long as it hears the learner's heartbeat; after
`actor_learner.learner_timeout_s` of silence it holds the robot and stops. The **learner** is
`roborl train` (`learner.py`; its config block in `settings.py`, its weights and heartbeat
thread in `publisher.py`): the off-policy loop with a collector that hands it whatever
arrived and publishes weights every `sync_every` updates. Messages are defined and checked in
`wire.py`. SERL (Luo et al., 2024) splits its actor and learner the same way over agentlace
(ZeroMQ); LeRobot's HIL-SERL port does it over gRPC streams.

Why ZeroMQ (pyzmq) as the transport, rather than Ray or gRPC:

- the actor must outlive a restarting learner and decide itself when to hold the robot: a Ray
  actor belongs to its driver (the learner) and dies with it unless detached into a cluster
  the robot machine must then join; two ZeroMQ sockets have no owner, and reconnect by
  themselves when a new learner binds the same address, which is what resuming needs;
- sends never block the control loop: a PUSH socket queues up to a high-water mark and a
  non-blocking send then fails at once (the actor counts the drop); the actor drains its SUB
  socket each tick and loads only the newest weights, so it never works through stale ones;
- CURVE authentication and encryption are built into libzmq (`keys.py`): one pinned actor
  key, no TLS certificates or extra services to run;
- weights are a few MB and transitions a few kB per chunk: one message each, no RPC schema or
  code generation (gRPC) needed; pyzmq is a small, maintained wheel with libzmq bundled.

Payloads are safetensors buffers and JSON, never pickles, so a peer on the port cannot make
either end run code; every received frame is checked (`wire.py`) and a bad one is dropped and
counted, so it cannot end the run either.
"""

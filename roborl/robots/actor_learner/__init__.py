"""Actor-learner training on a robot (`collector=actor_learner`), as HIL-SERL runs it.

The **actor** (`roborl actor`, `actor.py`) is a process beside the robot: it owns the robot env
and its safety layer, runs the policy at the control rate, streams transitions to the learner
and loads the weights the learner publishes; it never runs a gradient step, and it keeps acting
with its last weights while the learner is slow, dead or restarting. The **learner** is
`roborl train` (`learner.py`): the off-policy loop with a collector that hands it whatever
arrived and publishes weights every `sync_every` updates. Messages are defined and checked in
`wire.py`. SERL (Luo et al., 2024) splits its actor and learner the same way over agentlace
(ZeroMQ); LeRobot's HIL-SERL port does it over gRPC streams.

Why ZeroMQ (pyzmq) as the transport, rather than Ray or gRPC:

- the actor must outlive the learner: a Ray actor belongs to its driver (the learner) and dies
  with it unless detached into a cluster the robot machine must then join; two ZeroMQ sockets
  have no owner, and reconnect by themselves when a new learner binds the same address, which
  is what resuming from a checkpoint needs;
- sends never block the control loop: a PUSH socket queues up to a high-water mark and a
  non-blocking send then fails at once (the actor counts the drop); a SUB socket with CONFLATE
  keeps only the newest weights, so a slow actor never works through stale ones;
- weights are a few MB and transitions a few kB per chunk: one message each, no RPC schema or
  code generation (gRPC) needed; pyzmq is a small, maintained wheel with libzmq bundled.

Payloads are safetensors buffers and JSON, never pickles, so a peer on the port cannot make
either end run code.
"""

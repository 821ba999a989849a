"""cloudopt.agents: the RL agents that choose a training job's resources, and their tooling.

- :class:`agents.reinforce.SimplePolicy`: REINFORCE with a learned baseline.
- :class:`agents.morl.MultiObjectiveRLAgent`: one soft actor-critic pair per preference vector,
  SLA-aware policy switching, MC-dropout decision uncertainty, adaptive critic resets; its
  parts: :mod:`agents.policy_pair` (one preference's networks, targets, optimizers, buffer),
  :mod:`agents.episode` (finished episodes, advantage estimates), :mod:`agents.sla_switching`
  (the SLA rules).
- :mod:`agents.networks` (Actor, Critic, TwinCritic), :mod:`agents.buffer` (ReplayBuffer,
  n-step transitions), :mod:`agents.pareto` (Pareto front, hypervolume), :mod:`agents.metrics`
  (RLMetricsTracker), :mod:`agents.persist` (agent files).
- :mod:`agents.train` (training loops), :mod:`agents.exploration` (annealing, exploring
  starts), :mod:`agents.evaluate` (greedy evaluation on held-out seeds), :mod:`agents.recipes`
  (recommended settings), :mod:`agents.baselines` (static, threshold-heuristic and
  oracle-replay policies).
- :mod:`agents.registry`: the agents the orchestrator trains and compares, by name, behind one
  interface (:mod:`agents.registry.interface`); to add an agent, one module there and one
  ``register`` line (ARCHITECTURE.md, "To add").
"""

__cloudopt_package__ = True  # checked, without importing, by optimizer.foundation.install_check

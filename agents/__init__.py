"""cloudopt.agents: the RL agents that choose a training job's resources, and their tooling.

- :class:`agents.reinforce.SimplePolicy`: REINFORCE with a learned baseline.
- :class:`agents.morl.MultiObjectiveRLAgent`: one soft actor-critic pair per preference vector,
  SLA-aware policy switching, MC-dropout decision uncertainty, adaptive critic resets.
- :mod:`agents.networks` (Actor, Critic, TwinCritic), :mod:`agents.buffer` (ReplayBuffer),
  :mod:`agents.pareto` (Pareto front, hypervolume), :mod:`agents.metrics` (RLMetricsTracker),
  :mod:`agents.train` (training/evaluation loops, recommended settings),
  :mod:`agents.baselines` (static, threshold-heuristic and oracle-replay policies).
"""

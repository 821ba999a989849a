"""cloudopt.agents: the RL agents that choose a training job's resources, and their tooling.

Everything that trains an agent gets it from :mod:`agents.registry` (the static plan, the live
plan's peer, the benchmarks): an agent is a name and ``train(env_fn, setup, budget)``
returning a :class:`~agents.registry.interface.TrainedAgent` (``act``,
``action_probabilities``, ``uncertainty``). Each algorithm is one file that reads as CleanRL's
do (config dataclass, math helpers, networks, agent, training loop, registry entry):

- :mod:`agents.reinforce`: REINFORCE with a learned baseline (``SimplePolicy``,
  ``ReinforceConfig``), registered as ``reinforce``;
- :mod:`agents.morl`: the multi-objective actor-critic's settings (``MORLConfig``) and training
  loops, registered as ``morl``; its agent in :mod:`agents.morl_agent`
  (``MultiObjectiveRLAgent``: one pair per preference vector, SLA-aware policy switching
  with :mod:`agents.sla_switching`, MC-dropout uncertainty) and each preference's learner
  and updates in :mod:`agents.policy_pair`.

Shared pieces, small and typed: :mod:`agents.networks` (Actor, Critic, TwinCritic, factored
heads, masks), :mod:`agents.buffer` (ReplayBuffer, n-step transitions), :mod:`agents.episode`
(episodes for on-policy updates, advantages), :mod:`agents.rollout` (training seeds, lockstep
episodes), :mod:`agents.exploration` (annealing, exploring starts), :mod:`agents.evaluate`
(greedy evaluation on held-out seeds), :mod:`agents.baselines` (static, threshold-heuristic and
oracle-replay policies), :mod:`agents.pareto` (Pareto front, hypervolume),
:mod:`agents.metrics` (RLMetricsTracker), :mod:`agents.persist` (agent files). To add an agent:
one file and one ``register`` line (ARCHITECTURE.md, "To add").
"""

__cloudopt_package__ = True  # checked, without importing, by optimizer.foundation.install_check

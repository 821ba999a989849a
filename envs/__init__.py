"""cloudopt.envs: the workload model, the Gymnasium ``CloudEnvironment`` and its exact oracle.

``gymnasium.make("cloudopt/CloudEnv-v0", workload="resnet50-v100", preference="cost")`` builds
the environment; :func:`envs.oracle.optimal_policy` gives the optimum it is graded against.
"""

from gymnasium.envs.registration import register, registry

from envs.cloud_env import CloudEnvironment
from envs.lockstep import Lockstep, lockstep
from envs.model import EnvConfig, EnvModel, build_env_model
from envs.workload import PhaseSpec, WorkloadModel, WorkloadParams, list_presets

ENV_ID = "cloudopt/CloudEnv-v0"

if ENV_ID not in registry:
    register(id=ENV_ID, entry_point="envs.cloud_env:CloudEnvironment")

__all__ = [
    "ENV_ID",
    "CloudEnvironment",
    "EnvConfig",
    "EnvModel",
    "Lockstep",
    "PhaseSpec",
    "WorkloadModel",
    "WorkloadParams",
    "build_env_model",
    "list_presets",
    "lockstep",
]

"""cloudopt.envs: the workload model, the Gymnasium ``CloudEnvironment`` and its exact oracle.

``gymnasium.make("cloudopt/CloudEnv-v0", workload="resnet50-v100", preference="cost")`` builds
the environment (``"envs:cloudopt/CloudEnv-v0"`` after ``import gymnasium`` alone;
``cloudopt/CloudEnvMO-v0`` is its MO-Gymnasium variant); :func:`envs.oracle.optimal_policy` gives the optimum it is graded against.
"""

from gymnasium.envs.registration import register, registry

from envs.cloud_env import CloudEnvironment
from envs.lockstep import Lockstep, lockstep, masks_of, stacked_masks
from envs.model import EnvConfig, EnvModel, build_env_model
from envs.workload import PhaseSpec, WorkloadModel, WorkloadParams, list_presets

ENV_ID = "cloudopt/CloudEnv-v0"
MO_ENV_ID = "cloudopt/CloudEnvMO-v0"
"""The multi-objective variant (``step()`` returns the reward vector), for MO-Gymnasium."""

# Gymnasium 1.x has no plugin entry points: after ``import gymnasium`` alone, name the module,
# ``gymnasium.make("envs:cloudopt/CloudEnv-v0")``, and Gymnasium imports it to register these.
if ENV_ID not in registry:
    register(id=ENV_ID, entry_point="envs.cloud_env:CloudEnvironment")
if MO_ENV_ID not in registry:
    register(id=MO_ENV_ID, entry_point="envs.mo_cloud_env:MOCloudEnvironment")

__all__ = [
    "ENV_ID",
    "MO_ENV_ID",
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
    "masks_of",
    "stacked_masks",
]

__cloudopt_package__ = True  # checked, without importing, by optimizer.foundation.install_check

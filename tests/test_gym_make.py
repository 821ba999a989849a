"""``gymnasium.make`` as its users call it, in a fresh interpreter outside the repository (as
after ``pip install cloudopt``), with nothing of cloudopt imported first.

Gymnasium's ``"module:env_id"`` form imports ``envs`` (which registers both environments)
before looking the id up. The plain id needs ``import envs`` first: the installed Gymnasium
(1.x) loads no plugins on ``import gymnasium``.
"""

import subprocess
import sys

import pytest

CODE = """
import sys
import gymnasium
assert "envs" not in sys.modules
env = gymnasium.make("envs:cloudopt/CloudEnv-v0", workload="resnet50-v100", preference="cost")
obs, _ = env.reset(seed=0)
assert env.observation_space.contains(obs)
_, reward, *_ = env.step(env.action_space.sample())
import envs
assert env.spec.id == envs.ENV_ID and type(env.unwrapped) is envs.CloudEnvironment
mo = gymnasium.make("envs:cloudopt/CloudEnvMO-v0", disable_env_checker=True)
mo.reset(seed=0)
_, vector, *_ = mo.step(mo.action_space.sample())
assert mo.spec.id == envs.MO_ENV_ID and vector.shape == (4,), vector
print("ok", float(reward))
"""

PLAIN = """
import gymnasium
try:
    gymnasium.make("cloudopt/CloudEnv-v0")
except gymnasium.error.NamespaceNotFound as exc:
    print("not registered:", exc)
"""


def _python(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_make_with_the_module_prefix_after_import_gymnasium_alone(tmp_path):
    proc = _python(CODE, tmp_path)
    if "No module named 'envs'" in proc.stderr:
        pytest.skip("cloudopt is not installed (pip install -e .)")
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stderr[-3000:]


def test_the_plain_id_needs_envs_imported_first(tmp_path):
    proc = _python(PLAIN, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "not registered: Namespace cloudopt not found" in proc.stdout

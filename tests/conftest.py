import os
from pathlib import Path

import pytest

# Keep every test's torch/BLAS work on one thread: CI has two cores and runs subprocesses too.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
SHARED_DATA = SHARED / "data"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present beside the repository")
    return SHARED_DATA


@pytest.fixture
def config():
    """The default configuration with trials short enough for tests (the executors' tests)."""
    from optimizer.foundation.config import load_config

    cfg = load_config()
    cfg.run.trial_timeout_s = 60
    cfg.run.monitor_interval = 0.2
    return cfg

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


def in_ci() -> bool:
    """Whether the suite runs in CI (``CI`` set to anything but empty, 0 or false)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(what: str, install: str) -> None:
    """A test's dependency is missing: skipped on a newcomer's machine, failed in CI, where
    ``make test`` installs it (a skip there would hide the check it guards)."""
    message = f"{what} is not installed ({install})"
    if in_ci():
        pytest.fail(f"{message}; CI installs it, so the test fails instead of skipping",
                    pytrace=False)
    pytest.skip(message, allow_module_level=True)


def need(module: str, install: str = "pip install -e '.[dev]'"):
    """``module`` imported for a test, or :func:`missing` where it cannot be."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        missing(f"Python module {module}", install)

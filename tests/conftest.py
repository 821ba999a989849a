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


# --- Workers (pytest-xdist), one machine ---------------------------------------------
# `make test` runs the suite on three workers, a file to a worker (``--dist loadfile``: its
# module fixtures, often a whole main-job run, are made once), the longest units first
# (``durations.json``). Much of a test's time is a trial's script asleep or a Ray cluster
# waiting, so a third worker fills the two cores that two left a fifth idle. The Ray files are
# one unit, run by one worker one after another: each starts local Ray clusters, and a main
# command that starts a Ray of its own connects to whichever cluster it finds (their lock keeps
# that true under other ``--dist`` modes). The tests marked ``serial`` are one unit too, run
# back to back with one neighbour worker at most: they compare times measured for real, which
# more load would bend. (``xdist_group`` would say these units in marks, but pytest-xdist 3.8
# cannot group under pytest 9.2, whose node ids it no longer rewrites.)

RAY_FILES = {"test_ray_executor.py", "test_ray_cluster.py", "test_ray_train.py"}
SERIAL = {
    # tests whose pick, stage or time box follows measured times (each failed once with seven
    # other processes loading the two cores; they pass with one neighbour test, and alone)
    "test_in_process_probe.py::test_the_main_job_on_a_script_that_prints_nothing_fits_the_model_and_trains_the_agents",
    "test_in_process_probe.py::test_probes_measured_before_the_job_size_was_known_compete_once_a_whole_run_finds_it",
    "test_live_controller.py::test_a_plan_follows_the_running_jobs_stages_and_is_billed_per_interval",
    "test_loader_workers.py::test_main_job_sweeps_the_workers_and_recommends_the_measured_best",
    "test_loss_target.py::test_a_probe_of_another_batch_trains_on_to_the_scripts_loss",
    "test_optimize_cli.py::test_small_real_run",
    "test_env_real_trials.py",  # its module fixture measures 1- and 2-CPU trials to fit on
    "test_efficiency.py::test_the_noise_scale_of_a_real_script_seen_by_the_probe",
}
"""Tests (``file::name``) and files that run with one neighbour at most: marked ``serial``
here, in one list, so that what runs so and why can be read in one place."""


DURATIONS = Path(__file__).with_name("durations.json")
"""Seconds each test file took in a recorded run (``make test ARGS=--record-durations``)."""


def pytest_addoption(parser):
    parser.addoption("--record-durations", action="store_true",
                     help=f"write each test file's seconds to {DURATIONS.name} (the order the "
                          "workers take their units in: longest first)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "serial: measures wall time; runs with no other test beside it")


ALONE = {
    "test_env_real_trials.py",  # its fit spans 1- and 2-CPU trials
    # its model is fitted to five whole runs: with a neighbour, unfitted in 2 of 3 runs
    "test_in_process_probe.py::test_the_main_job_on_a_script_that_prints_nothing_fits_the_model_and_trains_the_agents",
}
"""Serial tests and files that run with no neighbour at all."""
SERIAL_IN_FILE = {"test_efficiency.py"}
"""Files whose serial test shares their module fixture: it stays in the file's unit (the
fixture would be made twice)."""


def _listed(nodeid: str, names: set[str]) -> bool:
    """Whether ``names`` holds the test's file or its ``file::name``."""
    name, _, test = nodeid.partition("::")
    name = Path(name).name
    return name in names or f"{name}::{test.split('[', 1)[0]}" in names


def _serial(nodeid: str) -> bool:
    return _listed(nodeid, SERIAL)


def unit_of(nodeid: str) -> str:
    """The scheduling unit of a test: ``ray``, ``serial`` or its file."""
    path = nodeid.split("::", 1)[0]
    if Path(path).name in RAY_FILES:
        return "ray"
    if _serial(nodeid) and Path(path).name not in SERIAL_IN_FILE:
        return "serial"
    return Path(path).name


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _serial(item.nodeid):
            item.add_marker(pytest.mark.serial)
    # Longest units first: the worker that takes the last one then waits least for the others
    # (a 30 s file taken last idled a core for 30 s). A file not yet timed goes after them.
    seconds = _recorded_seconds()
    # (stable: a unit keeps its order, but for the serial unit's ALONE files, last, where the
    # other workers' lanes drain at the end of theirs)
    items.sort(key=lambda i: (-seconds.get(unit_of(i.nodeid), 0.0), _listed(i.nodeid, ALONE)))


def _recorded_seconds() -> dict[str, float]:
    import json

    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` by :func:`unit_of` (the Ray files one unit, the serial tests one),
    the units in the order collected (longest first), not by their number of tests."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Units(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False
    return Units(config, log)


_seconds: dict[str, float] = {}
"""Each unit's seconds in this run (setup, call and teardown), for --record-durations."""


def pytest_runtest_logreport(report):
    # under xdist the controller is handed every worker's reports
    unit = unit_of(report.nodeid)
    _seconds[unit] = _seconds.get(unit, 0.0) + report.duration


def pytest_sessionfinish(session):
    config = session.config
    if not config.getoption("record_durations") or hasattr(config, "workerinput"):
        return
    import json

    from optimizer.foundation.atomic_files import atomic_write_text

    # a run of some files updates theirs; files since removed are dropped
    merged = {**_recorded_seconds(), **{k: round(v, 1) for k, v in _seconds.items()}}
    seconds = {k: v for k, v in sorted(merged.items())
               if k in ("ray", "serial") or DURATIONS.with_name(k).is_file()}
    atomic_write_text(DURATIONS, json.dumps(seconds, indent=1) + "\n")


def _lock_dir(config) -> Path | None:
    """The folder of the locks every worker of this run shares (None when not under xdist)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    import tempfile

    base = Path(tempfile.gettempdir()) / f"cloudopt-tests-{workerinput['testrunuid']}"
    base.mkdir(exist_ok=True)
    return base


_ray_lock = None
"""This worker's open Ray lock file while one of its Ray files runs."""
_serial_locks: dict = {}
"""The serial mutex and the other workers' lanes this worker holds while its serial tests run."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Every test holds its worker's lane shared. A ``serial`` test takes the serial mutex (one
    serial test at a time) and the lanes of all workers but one alone, so that at most one
    other test runs beside it (an :data:`ALONE` one takes every lane), and keeps them while the
    next test is serial too.
    Each lane's gate makes a waiting serial test block the lane's new holders, so it is not
    starved. A Ray file takes the Ray lock before its first test (its module fixtures start
    there) and gives it back after its last (their teardown ends there)."""
    global _ray_lock
    base = _lock_dir(item.config)
    if base is None:
        yield
        return
    import fcntl

    if item.path.name in RAY_FILES and _ray_lock is None:
        _ray_lock = open(base / "ray", "a")
        fcntl.flock(_ray_lock, fcntl.LOCK_EX)
    me = int(item.config.workerinput["workerid"].removeprefix("gw"))
    workers = int(item.config.workerinput["workercount"])
    needed = _lanes_needed(item, me, workers)
    if needed and not _serial_locks:
        mutex = open(base / "serial", "a")
        fcntl.flock(mutex, fcntl.LOCK_EX)
        _serial_locks["mutex"] = mutex
    for other in needed:
        if other not in _serial_locks:
            _serial_locks[other] = _lane(base, other, fcntl.LOCK_EX)
    lane = _lane(base, me, fcntl.LOCK_SH)
    try:
        yield
    finally:
        lane.close()  # closing a file releases its lock
        # keep what the next test needs (a serial batch drains its neighbour once), no more
        keep = _lanes_needed(nextitem, me, workers) if nextitem is not None else []
        for key in [k for k in _serial_locks if k not in keep and (k != "mutex" or not keep)]:
            _serial_locks.pop(key).close()
        if _ray_lock is not None and (nextitem is None or nextitem.path != item.path):
            _ray_lock.close()
            _ray_lock = None


def _lanes_needed(item, me: int, workers: int) -> list[int]:
    """The other workers' lanes ``item`` holds alone: none for a test that is not serial, all
    but one other worker's for a serial one, every other for an :data:`ALONE` one."""
    if item.get_closest_marker("serial") is None or workers < 2:
        return []
    others = [(me + k) % workers for k in range(1, workers)]
    return others if _listed(item.nodeid, ALONE) else others[:max(workers - 2, 0)]


def _lane(base: Path, worker: int, how: int):
    """Worker ``worker``'s lane lock, taken ``how`` through its gate; the open file."""
    import fcntl

    lane = open(base / f"lane-{worker}", "a")
    with open(base / f"gate-{worker}", "a") as gate:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(lane, how)
    return lane

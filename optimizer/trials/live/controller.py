"""The live controller: every interval, the job's phase in, an allocation out.

A :class:`Controller` is a thread beside a running trial. Each decision it reads the job's
phase (the probe's stage, :mod:`optimizer.trials.live.stages`) and its recent resource use
(the monitor's samples), asks a *decider* for the allocation to hold, and moves the job there
through :class:`~optimizer.trials.live.actuators.LiveTrial`. Deciders, one class each:

* :class:`PlanDecider`: the allocation a :class:`~optimizer.trials.live.plan.LivePlan` names
  for the phase (the agents' per-phase policy, or a static plan);
* :class:`ScheduleDecider`: an allocation by the share of the expected job time gone (the
  agents' plan with the phase hidden from their state: it can only follow the clock);
* :class:`ReactiveDecider`: phase-free rules on the last interval's use (``reactive-max``:
  its peak; ``reactive-trend``: for memory, the peak or the last sample plus its rise).

Whenever the controller leaves while the job runs (stopped, failed, its process exiting) it
first gives the job the largest allocation it could have asked for (the plan's most cores and
memory): the next stage may be the largest, and a controller that cannot act must not leave
it to be killed at the last stage's memory limit. A watchdog thread
(:mod:`optimizer.trials.live.watchdog`) does the same for a controller that died before it
could, or hangs. Memory moves by the rules of :mod:`optimizer.trials.live.memory_rules`
(raised at once, lowered only to a measured peak after a hold-down, never limited where it
was not) wherever it is enforced: the monitor's limit, or a pod's request.
The time each allocation was held is kept (:attr:`Controller.timeline`), so the run is billed
per interval at the allocation it held (:func:`billed_cost`).
"""

from __future__ import annotations

import atexit
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from optimizer.trials.live.actuators import Change, LiveTrial
from optimizer.trials.live.memory_rules import MemoryGovernor, MemoryPolicy
from optimizer.trials.live.plan import LivePlan, PhaseAllocation
from optimizer.trials.live.watchdog import STALL_S, ControllerWatchdog

SATURATED = 0.9
"""A window whose CPU peak is this share of the cores held wants more (use cannot show a
demand above the cores it has)."""
MEMORY_HEADROOM = 1.15
"""Memory limits of the phase-free rules sit this far above the level they track (the
limit is enforced: a rule without headroom kills the job it sizes)."""


class Decider(Protocol):
    name: str

    def decide(self, phase: str | None, usage: Sequence[dict[str, Any]], elapsed_s: float,
               held: PhaseAllocation) -> tuple[PhaseAllocation, str]:
        """The allocation to hold now, and why (in words)."""


@dataclass
class PlanDecider:
    """The plan's allocation for the phase; a phase the plan does not name gets the plan's
    fallback (the static allocation); before any phase is known, the job keeps what it has."""

    plan: LivePlan
    name: str = "plan"

    def decide(self, phase, usage, elapsed_s, held):
        if phase is None:
            return held, "phase not known yet"  # the job has not started its interpreter
        entry = self.plan.phases.get(phase)
        if entry is None:
            return self.plan.fallback, f"phase {phase!r} is not in the plan: its static allocation"
        return entry.allocation, f"phase {phase}" + (f": {entry.why}" if entry.why else "")


@dataclass
class ScheduleDecider:
    """Allocations by the share of the expected job time gone: ``steps`` are ``(share,
    allocation)`` pairs, each held from its share on."""

    steps: Sequence[tuple[float, PhaseAllocation]]
    expected_s: float
    name: str = "schedule"

    def decide(self, phase, usage, elapsed_s, held):
        share = elapsed_s / self.expected_s if self.expected_s > 0 else 1.0
        current = self.steps[0][1]
        for start, alloc in self.steps:
            if share >= start:
                current = alloc
        return current, f"{min(share, 9.99):.0%} of the expected time"


@dataclass
class ReactiveDecider:
    """Phase-free rules on the last ``window_s`` of samples, as the trace policies of the
    same names (``phases/policies/reactive_max.py``, ``reactive_trend.py``) but live: CPU is
    the peak's cores, one more when the window was saturated; memory the peak (``max``) or
    the last sample plus the window's rise (``trend``) with headroom."""

    max_cpus: int
    kind: str = "reactive-max"
    window_s: float = 2.0
    memory_floor_gb: float | None = None
    adapt_memory: bool = True
    """False: CPU only, the memory limit stays as the trial started (a rule that sees only
    the past cannot lower an enforced limit under a job that is about to grow without
    killing it; a Job's VPA in ``Initial`` mode also keeps its memory)."""

    @property
    def name(self) -> str:
        return self.kind

    def decide(self, phase, usage, elapsed_s, held):
        recent = [r for r in usage if r.get("time_s", 0.0) >= elapsed_s - self.window_s]
        if not recent:
            return held, "no samples yet"
        peak = max(float(r["cpu_cores"]) for r in recent)
        if peak >= SATURATED * held.cpus:
            cpus = held.cpus + 1
        else:
            # A single busy thread reads 0.9-1.1 cores: round down what noise adds.
            cpus = math.ceil(peak - 0.25)
        cpus = int(min(max(cpus, 1), self.max_cpus))
        mem = [float(r["mem_gb"]) for r in recent]
        level = max(mem)
        if not self.adapt_memory:
            return (PhaseAllocation(cpus, None),
                    f"peak {peak:.2f} cores over the last {self.window_s:g} s")
        if self.kind == "reactive-trend" and len(mem) >= 2:
            level = max(level, mem[-1] + (mem[-1] - mem[0]))
        memory = level * MEMORY_HEADROOM
        if self.memory_floor_gb is not None:
            memory = max(memory, self.memory_floor_gb)
        return (PhaseAllocation(cpus, round(memory, 3)),
                f"peak {peak:.2f} cores, {level:.2f} GB over the last {self.window_s:g} s")


WATCH_S = 0.05
"""How often a controller following the probe's stages reads them between decisions."""
MEMORY_WATCH_S = 0.1
"""How often a controller that enforces memory reads the latest resident sample between
decisions: a job growing into its limit is raised at once, not at the next interval."""


def watches_stages(decider: Decider) -> bool:
    """Whether a decider acts on the phase (so a stage change is worth deciding on at once);
    the phase-free rules and the schedule by the clock keep their interval."""
    return isinstance(decider, PlanDecider)


def largest_allocation(decider: Decider, initial: PhaseAllocation,
                       max_cpus: int) -> PhaseAllocation:
    """The most a decider may ask for, and what the job started with: what the job is given
    back when the controller leaves (the most cores of any of them, at most ``max_cpus``, and
    the most memory)."""
    allocs = [initial]
    plan = getattr(decider, "plan", None)
    if isinstance(plan, LivePlan):
        allocs.append(plan.largest())
    allocs.extend(alloc for _, alloc in getattr(decider, "steps", None) or ())
    cpus = max([a.cpus for a in allocs] + [int(getattr(decider, "max_cpus", 0) or 0)])
    memories = [a.memory_gb for a in allocs if a.memory_gb is not None]
    return PhaseAllocation(max(1, min(cpus, max_cpus)), max(memories) if memories else None)


class Controller(threading.Thread):
    """Acts every ``interval_s`` on one live trial until :meth:`stop` or the job's end."""

    def __init__(self, live: LiveTrial, decider: Decider,
                 phase_source: Callable[[], str | None], *, cores: Sequence[int],
                 initial: PhaseAllocation, interval_s: float = 1.0,
                 usage: Callable[[], Sequence[dict[str, Any]]] | None = None,
                 alive: Callable[[], bool] | None = None, memory_mode: str = "request",
                 watch_s: float | None = None, largest: PhaseAllocation | None = None,
                 memory_policy: MemoryPolicy | None = None,
                 stall_s: float | None = None) -> None:
        super().__init__(name=f"controller-{live.root_pid}", daemon=True)
        self.live = live
        self.decider = decider
        self.phase_source = phase_source
        self.cores = list(cores)
        self.interval_s = float(interval_s)
        self.usage = usage or (lambda: [])
        self.alive = alive or (lambda: True)
        self.held = initial
        self.memory_mode = memory_mode
        """``request``: a phase's memory is billed, the limit stays where the trial started
        (the plan's largest phase, as in a Burstable pod); ``limit``: the monitor enforces
        each phase's memory (by :mod:`~optimizer.trials.live.memory_rules`)."""
        self.watch_s = watch_s
        """Between decisions, read the phase this often and decide at once when it changes
        (None: only every ``interval_s``). For a cheap source, the probe's stages: a phase of
        under a second (checkpoint_heavy's saves) is over before a 0.5 s interval sees it."""
        self.largest = largest or largest_allocation(decider, initial, len(self.cores))
        """What the job is given back when the controller leaves while it runs."""
        self.governor = self._governor(memory_policy or MemoryPolicy())
        """The memory rules, where memory is enforced: the monitor's limit, or the request of
        a pod (evicted first when above it); None where a request is only billed."""
        self._last_phase: str | None = None
        self.timeline: list[tuple[float, int, float | None]] = [
            (0.0, initial.cpus, initial.memory_gb)]
        """``(t, cpus, memory_gb)`` from each change on (seconds since the trial started)."""
        self.phases_seen: dict[str, int] = {}
        self.error: str | None = None
        self.heartbeat = time.monotonic()
        """``time.monotonic()`` of the loop's last turn (the watchdog's sign of life)."""
        self.settled = threading.Event()
        """Set once the controller has left with the job at its largest allocation (or the
        job over): the watchdog stops watching."""
        self.retired: str | None = None
        """Why the controller was told to stop acting (the watchdog, the process exiting)."""
        self._halt = threading.Event()
        self._lock = threading.Lock()
        """Held while a decision is applied, so a restore never interleaves with one."""
        self.watchdog = ControllerWatchdog(
            self, stall_s=stall_s if stall_s is not None else max(STALL_S, 3 * self.interval_s))

    def _governor(self, policy: MemoryPolicy) -> MemoryGovernor | None:
        start = self.held.memory_gb
        if self.memory_mode == "limit":
            had = bool(getattr(self.live, "had_limit", True)) and start is not None
        elif getattr(self.live, "request_evicts", False):
            had = start is not None
        else:
            return None  # a request billed on this machine: nothing is killed or evicted by it
        return MemoryGovernor(had, self.largest.memory_gb, policy)

    def start(self) -> None:
        # The wrapper's process exiting while the job still runs (its main thread raised)
        # gives the job back its largest allocation too.
        atexit.register(self._at_exit)
        super().start()
        self.watchdog.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout)

    def retire(self, why: str) -> None:
        """Stop acting (the watchdog or the process exiting takes over): the loop ends, and
        a decision under way is not applied."""
        self.retired = why
        self._halt.set()

    def run(self) -> None:
        try:
            while self.alive() and self.retired is None:
                self.step()
                if self._wait():
                    break
        except Exception as exc:  # noqa: BLE001 - the job outlives its controller
            self.error = f"{type(exc).__name__}: {exc}"
            self.live.log(Change(self.live.now(), f"controller stopped ({self.error}); the "
                                  "job gets its largest allocation back", skipped=[self.error]))
        finally:
            self._settle()

    def _settle(self) -> None:
        """Leave the job at its largest allocation (a later stage may need it); where that
        fails, the watchdog sees the thread gone unsettled and tries again."""
        why = self.retired or (f"the controller stopped: {self.error}" if self.error
                               else "the controller stopped")
        try:
            if self.alive():
                self.restore_largest(why)
        except Exception as exc:  # noqa: BLE001 - the watchdog tries again
            self.error = f"{self.error + '; ' if self.error else ''}restore failed: {exc}"
            return
        self.mark_settled()

    def mark_settled(self) -> None:
        """The job is at its largest allocation (or over) and nothing will act on it again:
        the watchdog and the exit hook have nothing left to do."""
        self.settled.set()
        atexit.unregister(self._at_exit)

    def _at_exit(self) -> None:
        if self.settled.is_set() or not self.alive():
            return
        self.retire("the controller's process is exiting")
        try:
            self.restore_largest("the controller's process is exiting", lock_timeout=1.0)
        except Exception:  # noqa: BLE001 - nothing is left to report it to
            return

    def restore_largest(self, why: str, lock_timeout: float | None = None) -> list[Change]:
        """Give the job the largest allocation (:attr:`largest`): the most cores, and the
        most memory where memory is limited or requested (never a limit the job did not
        have). ``lock_timeout``: how long to wait for a decision under way (None: as long
        as it takes); past it, the resize under way is cancelled (``live.cancel_pending``)
        and its call in flight waited for (``live.patch_timeout_s``), so the restore's patch
        lands after it, never under it; then restore anyway, since a hung decision must not
        hold the job small."""
        acquired = self._lock.acquire(timeout=-1 if lock_timeout is None else lock_timeout)
        if not acquired:
            cancel = getattr(self.live, "cancel_pending", None)
            if cancel is not None:
                cancel()
            acquired = self._lock.acquire(
                timeout=float(getattr(self.live, "patch_timeout_s", 0.0)))
        try:
            memory = self.held.memory_gb
            unlimited = self.governor is not None and not self.governor.had_limit
            if not unlimited and memory is not None and self.largest.memory_gb is not None:
                memory = max(memory, self.largest.memory_gb)
            target = PhaseAllocation(max(self.held.cpus, self.largest.cpus), memory)
            return self._apply(target, f"restore the largest allocation ({why})",
                               self._last_phase)
        finally:
            if acquired:
                self._lock.release()

    def _tick(self) -> float | None:
        """How often to look between decisions (None: not at all)."""
        ticks = [self.watch_s] if self.watch_s else []
        if self.governor is not None and self.governor.had_limit:
            ticks.append(MEMORY_WATCH_S)
        return min(ticks) if ticks else None

    def _wait(self) -> bool:
        """Until the next decision: ``interval_s``, or less when the phase changes first or
        the job grows into its memory; True when stopped."""
        tick = self._tick()
        if tick is None:
            return self._halt.wait(self.interval_s)
        deadline = time.monotonic() + self.interval_s
        while (left := deadline - time.monotonic()) > 0:
            if self._halt.wait(min(tick, left)):
                return True
            self.heartbeat = time.monotonic()
            if self.watch_s and self.phase_source() != self._last_phase:
                break
            if self.governor is not None and self.governor.near_limit(self.usage(),
                                                                     self.held.memory_gb):
                break
        return False

    def step(self) -> list[Change]:
        """One decision: read the phase, decide, apply what changed."""
        self.heartbeat = time.monotonic()
        if self.retired is not None:
            return []
        phase = self._last_phase = self.phase_source()
        if phase is not None:
            self.phases_seen[phase] = self.phases_seen.get(phase, 0) + 1
        rows = self.usage()
        now = self.live.now()
        target, why = self.decider.decide(phase, rows, now, self.held)
        cause = f"{self.decider.name}: {why}"
        memory = target.memory_gb
        if self.governor is not None:
            memory, memory_why = self.governor.target(phase, memory, rows, now,
                                                      self.held.memory_gb)
            if memory != self.held.memory_gb:
                cause += f"; memory: {memory_why}"
        target = PhaseAllocation(min(target.cpus, len(self.cores)), memory)
        with self._lock:
            if self.retired is not None:
                return []  # the watchdog took over while this decision was being made
            return self._apply(target, cause, phase)

    def _apply(self, target: PhaseAllocation, cause: str, phase: str | None) -> list[Change]:
        """Move the job from :attr:`held` to ``target``; the changes made."""
        done = []
        memory = self.held.memory_gb
        moves_memory = target.memory_gb is not None and target.memory_gb != memory
        if target.cpus != self.held.cpus and moves_memory and self.memory_mode == "request" \
                and hasattr(self.live, "set_allocation"):  # a pod: one resize patch for both
            change = self.live.set_allocation(self.cores[:target.cpus], target.memory_gb,
                                              cause=cause, phase=phase)
            done.append(change)
            memory = _requested(change, target.memory_gb)
            moves_memory = False
        elif target.cpus != self.held.cpus:
            done.append(self.live.set_cpus(self.cores[:target.cpus], cause=cause, phase=phase))
        if moves_memory:
            if self.memory_mode == "request":
                change = self.live.set_memory_request(target.memory_gb, cause=cause,
                                                      phase=phase)
                done.append(change)
                memory = _requested(change, target.memory_gb)
            else:
                change = self.live.set_memory_limit(target.memory_gb, cause=cause, phase=phase)
                if change is not None and change.memory_limit_gb is not None:
                    memory = change.memory_limit_gb
                    done.append(change)
        if done:
            self.held = PhaseAllocation(target.cpus, memory)
            self.timeline.append((done[-1].t, self.held.cpus, self.held.memory_gb))
        return done


def _requested(change: Change, asked: float) -> float:
    """The memory request a change made (a pod's floor may have raised what was asked)."""
    return change.memory_request_gb if change.memory_request_gb is not None else asked


def held_seconds(timeline: Sequence[tuple[float, int, float | None]],
                 wall_s: float) -> tuple[float, float]:
    """CPU-seconds and GB-seconds held over a run of ``wall_s`` seconds."""
    cpu_s = gb_s = 0.0
    for i, (t, cpus, mem) in enumerate(timeline):
        end = timeline[i + 1][0] if i + 1 < len(timeline) else wall_s
        dt = max(min(end, wall_s) - t, 0.0)
        cpu_s += cpus * dt
        gb_s += (mem or 0.0) * dt
    return cpu_s, gb_s


def billed_cost(timeline: Sequence[tuple[float, int, float | None]], wall_s: float, *,
                gpus: int, cost_per_cpu_hour: float, cost_per_gb_hour: float,
                cost_per_gpu_hour: float) -> float:
    """Dollars for the run, each interval billed at the allocation held in it."""
    cpu_s, gb_s = held_seconds(timeline, wall_s)
    return (cpu_s * cost_per_cpu_hour + gb_s * cost_per_gb_hour
            + gpus * wall_s * cost_per_gpu_hour) / 3600.0


def wait_for(predicate: Callable[[], bool], timeout_s: float, poll_s: float = 0.05) -> bool:
    """Poll ``predicate`` until it holds or ``timeout_s`` passes (tests and the wrapper)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(poll_s)
    return predicate()


__all__ = ["Controller", "Decider", "PlanDecider", "ReactiveDecider", "ScheduleDecider",
           "billed_cost", "held_seconds", "largest_allocation", "wait_for"]

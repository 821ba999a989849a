"""A watchdog beside the live controller: a controller that dies or hangs gives the job back
its largest allocation.

The controller restores the plan's largest allocation itself when it leaves its loop (a
``finally``). That does not cover a controller whose restore fails (the thread ends with the
job still held small), nor one stuck in a call that never returns (a decider waiting on a
lock, kubectl past its timeout): a later, larger stage of the job would then be killed at the
last stage's memory limit, or run on the last stage's cores. The watchdog is a second thread
that notices either, from outside the controller, and restores. A resize the controller has
in flight is cancelled and waited for first (:meth:`Controller.restore_largest`): a patch
that reached the API server after the restore's would hold the job small again.
"""

from __future__ import annotations

import threading
import time
from typing import Any

POLL_S = 0.5
"""How often the watchdog looks (a thread's death is seen within this)."""
STALL_S = 60.0
"""A controller that has not come round its loop for this long is taken for hung: longer than
any one legitimate step (a pod resize reads its status a few times, kubectl times out at
30 s), far shorter than a training stage."""
TRIES = 3
"""Restores tried before the watchdog gives up (each failure is logged by the controller)."""


class ControllerWatchdog(threading.Thread):
    """Watches one controller (:class:`~optimizer.trials.live.controller.Controller`) until it
    has settled (left its loop with the job at its largest allocation, or the job ended).

    It reads ``ctl.settled`` (an Event), ``ctl.heartbeat`` (``time.monotonic()`` of the loop's
    last turn), ``ctl.is_alive()`` and ``ctl.alive()`` (the job), and calls
    ``ctl.retire(why)``, ``ctl.restore_largest(why, lock_timeout=...)`` and, for a thread
    that is gone, ``ctl.mark_settled()``.
    """

    def __init__(self, ctl: Any, *, stall_s: float = STALL_S, poll_s: float = POLL_S) -> None:
        super().__init__(name=f"{ctl.name}-watchdog", daemon=True)
        self.ctl = ctl
        self.stall_s = float(stall_s)
        self.poll_s = float(poll_s)
        self.fired: str | None = None
        """Why the watchdog restored (None: it never had to)."""

    def verdict(self) -> str | None:
        """Why the controller needs replacing now, or None while it does its work."""
        if not self.ctl.is_alive():
            return "the controller thread died before restoring the largest allocation"
        idle = time.monotonic() - self.ctl.heartbeat
        if idle > self.stall_s:
            return f"the controller has not stepped for {idle:.1f} s (hung)"
        return None

    def run(self) -> None:
        tries = 0
        while not self.ctl.settled.wait(self.poll_s):
            if not self.ctl.alive():
                return  # the job ended: nothing left to protect
            why = self.verdict()
            if why is None:
                continue
            self.fired = why
            self.ctl.retire(why)
            try:
                self.ctl.restore_largest(f"watchdog: {why}", lock_timeout=self.poll_s)
            except Exception:  # noqa: BLE001 - try again next poll; the job must not pay
                tries += 1
                if tries >= TRIES:
                    return
                continue
            if not self.ctl.is_alive():
                self.ctl.mark_settled()  # a hung one settles itself if it ever wakes
            return


__all__ = ["POLL_S", "STALL_S", "ControllerWatchdog"]

"""What every part of the in-process probe shares (see ``_cloudopt_probe``): the recording
:class:`State` of this process (:data:`STATE`, None until :func:`_cloudopt_probe.start`), the
guard every hook body runs under, and the small steps more than one hook takes: a batch's
size, the aggregated ``steps`` event, the anchor as training resumes, the control file's
order. The probe's modules import this one and never each other's private names, so none of
them imports another that imports it back. Standard library only: it runs inside the
user's process, loaded by top-level name from the site directory."""

import json
import os
import time

STEP_EVENT_S = 0.1  # at most one aggregated "steps" event per 0.1 s: small files on fast loops
FLUSH_S = 0.5
BUFFER_BYTES = 1 << 16  # events written at least every 64 KB: the buffer never grows
CONTROL_EVERY_S = 0.1  # a stat() at most 10 times a second: a thread count that lags
# the controller's change runs a stage on the cores of the one before it
READY_TICKS = 4  # a device value is read this many iterations (backward or step) after it was
# made: by then its stream has long finished with it


class State:
    """The probe's recording in this process: its event file and buffer, the counts (steps,
    backward passes, samples), the values waiting on a device, the control file's state."""

    def __init__(self, path: str) -> None:
        self.pid = os.getpid()
        self.t0 = time.perf_counter()
        # A raw descriptor and a buffer of our own: a forked child drops the buffer (an
        # io buffer would be flushed again at the child's exit), and a failed write switches
        # the probe off instead of raising into optimizer.step() or backward().
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.buf, self.buf_bytes, self.off = [], 0, False
        self.last_flush = self.t0
        self.steps = 0
        self.samples = 0
        self.last_step_event = -1.0
        self.pending_steps = 0
        self.batch = None
        # The batch the trial set (its flag's value, or the script's default), else the variable
        env_batch = (os.environ.get("CLOUDOPT_PROBE_BATCH", "")
                     or os.environ.get("OPTIMIZER_BATCH_SIZE", ""))
        self.env_batch = int(env_batch) if env_batch.isdigit() else None
        self.bin = None  # the losses since the last loss event: their sum (a float, or a
        # tensor on the loss's device), count, first step and backward pass, start time
        self.pending = []  # (ready_step, kind, payload, tensor or list of tensors)
        self.disabled = set()
        self.depth = 0
        self.grad_window = int(os.environ.get("CLOUDOPT_PROBE_GRAD_WINDOW", "4") or 4)
        self.window = None  # {"acc": [...], "small": [...], "samples": [...], "step": first}
        self.last_window_t = -1e9
        self.control = os.environ.get("CLOUDOPT_PROBE_CONTROL") or None
        self.control_mtime = None
        self.last_control_check = -CONTROL_EVERY_S
        self.eager_control_until = -1.0  # after a checkpoint: the file read at every tick
        self.resume_hook = None  # armed at a checkpoint's end, removed at the next forward
        self.loader_steps = {}
        # One training step per backward pass: a second optimizer stepping on the same batch
        # (sparse and dense parameters, say) is not a second step (0: no backward seen).
        self.backward_seq = 0
        self.counted_seq = -1
        self.ticks = 0  # backward passes and optimizer steps: deferred values ripen on these
        self.batch_seq = 0  # data-loader batches fetched
        self.counted_batch = 0  # the last fetched batch whose samples were counted
        self.samples_at_step = 0  # samples counted when the last optimizer step was taken
        self.scaled = None  # (id of a GradScaler's output, its scale) until backward takes it
        self.window_after = False  # this step's gradient is read after it (a closure made it)
        self.loader_bw = {}
        self.save_depth, self.saved = 0, False  # inside torch.save; a checkpoint just ended

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def emit(self, event: dict, flush: bool = False) -> None:
        if self.off or os.getpid() != self.pid:
            return  # a forked child (a data-loader worker) never writes
        event.setdefault("t", round(self.now(), 6))
        line = json.dumps(event, separators=(",", ":")) + "\n"
        self.buf.append(line)
        self.buf_bytes += len(line)
        # Stage changes go out at once: a live controller acts on them within its interval.
        if flush or self.buf_bytes >= BUFFER_BYTES or \
                event["t"] - (self.last_flush - self.t0) >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        self.last_flush = time.perf_counter()
        if self.off or os.getpid() != self.pid or not self.buf:
            return
        data = "".join(self.buf).encode("utf-8")
        self.buf, self.buf_bytes = [], 0
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError as exc:  # a full disk, a removed folder: the script goes on
            self.switch_off(exc)

    def switch_off(self, exc: BaseException) -> None:
        """Stop recording for good, saying so in one last line where it still fits (after a
        newline: a write cut short left half a line); the reader also sees no exit event."""
        self.off, self.buf, self.buf_bytes = True, [], 0
        self.pending, self.bin, self.window = [], None, None
        note = {"e": "probe_off", "error": repr(exc)[:300], "t": round(self.now(), 6)}
        try:
            os.write(self.fd, ("\n" + json.dumps(note) + "\n").encode("utf-8"))
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.fd = -1


STATE = None
"""The probe's :class:`State` in the process that started it (None: not recording)."""


def guard(name):
    """Run a hook body; on error record it once and switch that hook off."""
    def wrap(fn):
        def run(*args, **kwargs):
            s = STATE
            if s is None or name in s.disabled:
                return None
            try:
                return fn(s, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - never break the user's script
                s.disabled.add(name)
                s.emit({"e": "probe_error", "hook": name, "error": repr(exc)[:300]})
                return None
        return run
    return wrap


def batch_size(batch, depth=0):
    """dim 0 of the first tensor-like found in a batch (tuples, lists, dicts)."""
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    if depth > 3:
        return None
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            n = batch_size(item, depth + 1)
            if n is not None:
                return n
    return None


def steps_event(s, force=False):
    """The counts since the last ``steps`` event, at most every :data:`STEP_EVENT_S` (now
    with ``force``)."""
    if s.pending_steps and (force or s.now() - s.last_step_event >= STEP_EVENT_S):
        s.emit({"e": "steps", "step": s.steps, "bw": s.backward_seq, "samples": s.samples,
                "n": s.pending_steps})
        s.pending_steps = 0
        s.last_step_event = s.now()


def anchor(s):
    """The counts as training resumes, so the pause before it is not taken for training."""
    if s.ticks:
        s.emit({"e": "steps", "step": s.steps, "bw": s.backward_seq, "samples": s.samples,
                "n": 0})
        s.last_step_event = s.now()


@guard("control")
def check_control(s, torch, force=False):
    """Follow the control file's order (cores, intra-op threads) when it changed, looking at
    most every :data:`CONTROL_EVERY_S` (at every call with ``force``, or while a checkpoint's
    end is near)."""
    t = s.now()
    if s.control is None or (t - s.last_control_check < CONTROL_EVERY_S and not force
                             and t > s.eager_control_until):
        return
    s.last_control_check = t
    try:
        mtime = os.stat(s.control).st_mtime_ns
    except OSError:
        return
    if mtime == s.control_mtime:
        return
    s.control_mtime = mtime
    with open(s.control, encoding="utf-8") as fh:
        order = json.load(fh)
    if not isinstance(order, dict):
        return
    import _cloudopt_probe_load as load

    cores = load.as_cores(order.get("cpus"))
    if cores and hasattr(os, "sched_getaffinity") and os.sched_getaffinity(0) != cores:
        # Where the controller's pinning raced this process's own after loading torch.
        load.pin_own_threads(cores)
    n = order.get("num_threads")
    if type(n) is int and n >= 1:
        # Never more threads than cores the process may run on: a control file is input.
        n = min(n, len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else n
        # Called from the training thread: OpenMP's thread count is per calling thread.
        torch.set_num_threads(n)
    s.emit({"e": "control", "seq": order.get("seq"), "num_threads": torch.get_num_threads()})

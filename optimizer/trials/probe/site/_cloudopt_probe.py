"""The probe's hooks inside a training script's process: backward passes and optimizer steps,
samples, data-loader epochs, the loss, train/eval switches and gradient norms, as JSON lines in
the file named by ``CLOUDOPT_PROBE_EVENTS``.

A training iteration is seen however the update is written: every backward pass
(``torch.autograd.backward``, which ``Tensor.backward`` calls) and every ``torch.optim`` step is
counted, and events carry both counts (``bw`` and ``step``); the reader takes optimizer steps as
the unit where there are any, backward passes otherwise (a hand-written ``p.data.add_`` update).
A data-loader batch counts its samples once, at the first backward pass after it was fetched:
gradient accumulation's micro-batches each count, an LBFGS closure's repeated backward passes
over one batch do not. Without a loader no samples are counted here: the reader takes the batch
the trial set (``CLOUDOPT_PROBE_BATCH``, in the header) a step. The loss is the tensor ``backward`` is called on, divided by a
``GradScaler``'s scale where the scaler made it.

Only the standard library is imported here. Nothing happens until the script imports ``torch``
itself: a post-import hook on the ``torch`` module installs the torch hooks right after torch
has loaded. Every hook is guarded: an error disables that hook and is recorded once, and the
script goes on as without the probe. Values on a device (the loss, gradient norms) are read at
least two optimizer steps after they were made, so the probe never waits for a GPU stream.
"""

import atexit
import importlib.abc
import importlib.util
import json
import os
import sys
import time

VERSION = 1
STEP_EVENT_S = 0.1  # at most one aggregated "steps" event per 0.1 s: small files on fast loops
SAMPLE_EVERY_S = 0.1  # one loss event at most every 0.1 s: the mean of every loss since the
# last (the first steps each their own): a short job's curve from all its steps, not 1 in 40
GRAD_EVERY_S = 2.0  # a gradient-noise window at most every 2 s
FLUSH_S = 0.5
CONTROL_EVERY_S = 0.1  # a stat() at most 10 times a second: a thread count that lags
# the controller's change runs a stage on the cores of the one before it
MAX_WINDOW_ELEMENTS = 50_000_000
FIRST_STEPS = 5
READY_TICKS = 4  # a device value is read this many iterations (backward or step) after it was
# made: by then its stream has long finished with it
MAX_PENDING = 64  # never more values held than this, whatever the loop does (read at once past it)


class _State:
    def __init__(self, path: str) -> None:
        self.pid = os.getpid()
        self.t0 = time.perf_counter()
        self.file = open(path, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
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
        self.last_window_t = -GRAD_EVERY_S
        self.control = os.environ.get("CLOUDOPT_PROBE_CONTROL") or None
        self.control_mtime = None
        self.last_control_check = -CONTROL_EVERY_S
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
        if os.getpid() != self.pid or self.file.closed:
            return  # a forked child (a data-loader worker) never writes
        event.setdefault("t", round(self.now(), 6))
        self.file.write(json.dumps(event, separators=(",", ":")) + "\n")
        # Stage changes go out at once: a live controller acts on them within its interval.
        if flush or event["t"] - (self.last_flush - self.t0) >= FLUSH_S:
            self.file.flush()
            self.last_flush = time.perf_counter()


_STATE = None


def _guard(name):
    """Run a hook body; on error record it once and switch that hook off."""
    def wrap(fn):
        def run(*args, **kwargs):
            s = _STATE
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


def _batch_size(batch, depth=0):
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
            n = _batch_size(item, depth + 1)
            if n is not None:
                return n
    return None


def _resolve(s, final=False):
    """Read deferred device values made at least :data:`READY_TICKS` iterations ago (all of
    them at exit, and the oldest at once when more than :data:`MAX_PENDING` wait)."""
    if not s.pending:
        return
    keep = []
    force = len(s.pending) - MAX_PENDING
    for i, (ready, event, tensors) in enumerate(s.pending):
        if final or i < force or s.ticks >= ready:
            if isinstance(tensors, list):
                values = [float(x) for x in tensors]
                event["small"] = values[:-1]
                event["big"] = values[-1]
            elif isinstance(tensors, tuple):  # (loss, scale) of a GradScaler's output
                scale = float(tensors[1])
                event["value"] = float(tensors[0]) / scale if scale else float(tensors[0])
            else:
                event["value"] = float(tensors) / event.get("n", 1)
            s.emit(event)
        else:
            keep.append((ready, event, tensors))
    s.pending = keep


def _close_bin(s, t):
    """One loss event for the losses since the last: their mean, at their middle step (and
    backward pass) and time, with their count ``n``."""
    b, s.bin = s.bin, None
    if not b or not b["n"]:
        return
    (step, bw), n = b["last"], b["n"]
    event = {"e": "loss", "step": (b["step"] + step) / 2, "bw": (b["bw"] + bw) / 2, "n": n,
             "t": round((b["t"] + t) / 2, 6)}
    if isinstance(b["sum"], float):
        event["value"] = b["sum"] / n
        s.emit(event)
    else:
        s.pending.append((s.ticks + READY_TICKS, event, b["sum"]))


def _tick(s, torch):
    """One iteration's bookkeeping, after a backward pass or an optimizer step."""
    s.ticks += 1
    s.pending_steps += 1
    if s.ticks == 1:
        s.emit({"e": "first_step", "samples": s.batch if s.batch is not None else s.env_batch,
                "bw": s.backward_seq, "step": s.steps}, flush=True)
    if s.saved:  # training resumes after a checkpoint: a stage change, out at once
        s.saved = False
        _steps_event(s, force=True)
        s.file.flush()
        s.last_flush = time.perf_counter()
    _steps_event(s)
    _resolve(s)
    _check_control(torch)


def _steps_event(s, force=False):
    if s.pending_steps and (force or s.now() - s.last_step_event >= STEP_EVENT_S):
        s.emit({"e": "steps", "step": s.steps, "bw": s.backward_seq, "samples": s.samples,
                "n": s.pending_steps})
        s.pending_steps = 0
        s.last_step_event = s.now()


def _anchor(s):
    """The counts as training resumes, so the pause before it is not taken for training."""
    if s.ticks:
        s.emit({"e": "steps", "step": s.steps, "bw": s.backward_seq, "samples": s.samples,
                "n": 0})
        s.last_step_event = s.now()


@_guard("control")
def _check_control(s, torch):
    t = s.now()
    if s.control is None or t - s.last_control_check < CONTROL_EVERY_S:
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
    n = order.get("num_threads")
    if isinstance(n, int) and n >= 1:
        # Called from the training thread: OpenMP's thread count is per calling thread.
        torch.set_num_threads(n)
    s.emit({"e": "control", "seq": order.get("seq"), "num_threads": torch.get_num_threads()})


def _install(torch):
    s = _STATE
    s.emit({"e": "torch", "version": str(getattr(torch, "__version__", "?")),
            "num_threads": torch.get_num_threads()})
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    @_guard("grad")
    def pre_step(s, optimizer, args, kwargs):
        # A step with a closure (LBFGS, Lightning's automatic optimisation) makes its gradient
        # inside step(): it is read after the step instead.
        s.window_after = bool(args and args[0] is not None) or kwargs.get("closure") is not None
        if not s.window_after:
            _window(optimizer, s.steps + 1)

    @_guard("grad")
    def _window(s, optimizer, step):
        if s.window is not None and s.window["opt"] != id(optimizer):
            return  # a window follows one optimizer's parameters (the first with dense ones)
        if s.window is None and s.now() - s.last_window_t < GRAD_EVERY_S and s.steps >= 1:
            return
        grads = [p.grad for g in optimizer.param_groups for p in g["params"]
                 if p.grad is not None and not p.grad.is_sparse]
        if not grads:
            return
        # The samples behind this step's gradient: every micro-batch since the last step.
        seen = s.samples - s.samples_at_step
        samples = seen if seen > 0 else (s.batch if s.batch is not None else s.env_batch)
        with torch.no_grad():
            sq = torch.stack([n.float() for n in torch._foreach_norm(grads)]).pow(2).sum()
            w = s.window
            if w is None:
                if sum(g.numel() for g in grads) > MAX_WINDOW_ELEMENTS or s.grad_window < 2:
                    s.pending.append((s.ticks + READY_TICKS, {
                        "e": "grad", "step": step, "bw": s.backward_seq,
                        "samples": samples}, sq))
                    s.last_window_t = s.now()
                    return
                s.window = {"acc": [g.detach().float().clone() for g in grads],
                            "small": [sq], "samples": [samples], "step": step,
                            "opt": id(optimizer)}
                return
            if len(w["acc"]) != len(grads):
                s.window = None
                return
            torch._foreach_add_(w["acc"], [g.detach().float() for g in grads])
            w["small"].append(sq)
            w["samples"].append(samples)
            if len(w["small"]) >= s.grad_window:
                k = len(w["small"])
                big = torch.stack(torch._foreach_norm(w["acc"])).pow(2).sum() / (k * k)
                event = {"e": "gradwin", "step": w["step"], "k": k, "samples": w["samples"]}
                s.pending.append((s.ticks + READY_TICKS, event, [*w["small"], big]))
                s.window = None
                s.last_window_t = s.now()

    @_guard("steps")
    def post_step(s, optimizer, args, kwargs):
        if s.backward_seq and s.backward_seq == s.counted_seq:
            return
        s.counted_seq = s.backward_seq
        s.steps += 1
        if s.window_after:
            s.window_after = False
            _window(optimizer, s.steps)
        s.samples_at_step = s.samples
        if s.loader_current is not None:
            s.loader_steps[s.loader_current] = s.loader_steps.get(s.loader_current, 0) + 1
        _tick(s, torch)

    s.loader_current = None
    register_optimizer_step_pre_hook(pre_step)
    register_optimizer_step_post_hook(post_step)

    import torch.autograd as autograd

    original_backward = autograd.backward

    def backward(tensors, *args, **kwargs):
        _note_backward(tensors)
        result = original_backward(tensors, *args, **kwargs)
        _after_backward(torch)
        return result

    @_guard("backward")
    def _note_backward(s, tensors):
        s.backward_seq += 1
        if s.loader_current is not None:
            s.loader_bw[s.loader_current] = s.loader_bw.get(s.loader_current, 0) + 1
        if s.batch_seq != s.counted_batch and s.batch is not None:  # a new loader batch
            s.samples += s.batch
            s.counted_batch = s.batch_seq
        tensor = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
        scaled, s.scaled = s.scaled, None
        if not isinstance(tensor, torch.Tensor) or tensor.numel() != 1:
            return
        t, value = s.now(), tensor.detach()
        scale = scaled[1] if scaled is not None and scaled[0] == id(tensor) else None
        if s.ticks < FIRST_STEPS:
            s.pending.append((s.ticks + READY_TICKS, {
                "e": "loss", "step": s.steps + 1, "bw": s.backward_seq, "t": round(t, 6)},
                value if scale is None else (value, scale.detach().clone())))
            return
        if scale is not None:
            value = value.float() / scale
        # A CPU value is read at once (no stream to wait for); a device one is summed on its
        # device, one small kernel a step, and read when the bin's event ripens.
        value = float(value) if value.device.type == "cpu" else value.float()
        b = s.bin
        if b is None:
            s.bin = b = {"sum": 0.0, "n": 0, "step": s.steps + 1, "bw": s.backward_seq, "t": t}
        b["sum"] = b["sum"] + value
        b["n"] += 1
        b["last"] = (s.steps + 1, s.backward_seq)
        if t - b["t"] >= SAMPLE_EVERY_S:
            _close_bin(s, t)

    @_guard("tick")
    def _after_backward(s, torch):
        _tick(s, torch)

    autograd.backward = backward

    import _cloudopt_probe_hooks as more  # the same folder; standard library only

    for install in (more.install_scaler, more.install_save):
        try:
            install(torch, s)
        except Exception as exc:  # noqa: BLE001 - an old torch without torch.amp, say
            s.emit({"e": "probe_error", "hook": install.__name__, "error": repr(exc)[:300]})

    from torch.utils.data import dataloader

    base = dataloader._BaseDataLoaderIter
    original_next = base.__next__

    def __next__(self):
        starting = getattr(self, "_num_yielded", 1) == 0
        if starting:
            _loader_event(self, "epoch_start")
        try:
            batch = original_next(self)
        except StopIteration:
            _loader_event(self, "epoch_end")
            raise
        _note_batch(self, batch)
        return batch

    @_guard("loader")
    def _loader_event(s, it, kind):
        dataset = getattr(it, "_dataset", None)
        try:
            size = len(dataset)
        except Exception:  # noqa: BLE001 - an iterable dataset has no length
            size = None
        try:
            batches = len(it)
        except Exception:  # noqa: BLE001
            batches = None
        key = id(dataset)
        if kind == "epoch_start":
            s.loader_current = key
        elif s.loader_current == key:
            s.loader_current = None
        _steps_event(s, force=True)
        if kind == "epoch_start":
            _anchor(s)
        s.emit({"e": kind, "loader": key, "dataset_len": size, "batches": batches,
                "batch_size": getattr(it, "_index_sampler", None) and getattr(
                    getattr(it, "_index_sampler", None), "batch_size", None),
                "workers": getattr(it, "_num_workers", None), "step": s.steps,
                "bw": s.backward_seq,
                "steps_in_loader": s.loader_steps.get(key, 0),
                "bw_in_loader": s.loader_bw.get(key, 0)})
        _check_control(torch)

    @_guard("batch")
    def _note_batch(s, it, batch):
        n = _batch_size(batch)
        if n is not None:
            s.batch = n
            s.batch_seq += 1
        s.loader_current = id(getattr(it, "_dataset", None))

    base.__next__ = __next__

    module_cls = torch.nn.Module
    original_train = module_cls.train

    def train(self, mode=True):
        _note_mode(self, mode)
        if _STATE is not None:
            _STATE.depth += 1
        try:
            return original_train(self, mode)
        finally:
            if _STATE is not None:
                _STATE.depth -= 1

    @_guard("mode")
    def _note_mode(s, module, mode):
        if s.depth == 0 and bool(getattr(module, "training", mode)) != bool(mode):
            _steps_event(s, force=True)
            s.emit({"e": "mode", "train": bool(mode), "module": type(module).__name__,
                    "step": s.steps, "bw": s.backward_seq}, flush=True)
            if mode:
                _anchor(s)

    module_cls.train = train


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Installs the hooks right after ``torch`` itself has been imported by the script."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            try:
                _install(module)
            except Exception as exc:  # noqa: BLE001
                if _STATE is not None:
                    _STATE.emit({"e": "probe_error", "hook": "install", "error": repr(exc)[:300]})

        spec.loader.exec_module = exec_module
        return spec


def _at_exit():
    s = _STATE
    if s is None or os.getpid() != s.pid:
        return
    try:
        _steps_event(s, force=True)
        _close_bin(s, s.now())
        _resolve(s, final=True)
    except Exception:  # noqa: BLE001
        pass
    s.emit({"e": "exit", "step": s.steps, "bw": s.backward_seq, "samples": s.samples})
    s.file.close()


def start():
    """Start recording (once, and only in the process that first loaded the probe)."""
    global _STATE
    owner = os.environ.get("CLOUDOPT_PROBE_PID")
    if owner and owner != str(os.getpid()):
        return  # a child process (spawned data-loader worker, a subprocess): stay out
    os.environ["CLOUDOPT_PROBE_PID"] = str(os.getpid())
    _STATE = _State(os.environ["CLOUDOPT_PROBE_EVENTS"])
    _STATE.emit({"e": "header", "version": VERSION, "pid": os.getpid(), "wall": time.time(),
                 "batch": _STATE.env_batch,
                 "python": sys.executable, "argv": list(sys.argv)})
    atexit.register(_at_exit)
    if "torch" in sys.modules:
        _install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder())

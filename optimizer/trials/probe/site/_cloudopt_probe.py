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
import os
import sys
import time

import _cloudopt_probe_state as state  # the same folder; standard library only
from _cloudopt_probe_state import READY_TICKS, check_control, guard, steps_event

VERSION = 1
SAMPLE_EVERY_S = 0.1  # one loss event at most every 0.1 s: the mean of every loss since the
# last (the first steps each their own): a short job's curve from all its steps, not 1 in 40
MAX_LOADERS = 256  # per-loader counts kept (a script that builds a loader each epoch)
FIRST_STEPS = 5
MAX_PENDING = 64  # never more values held than this, whatever the loop does (read at once past it)


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


def _count(counts, key):
    """One more for ``key``; the oldest key goes past :data:`MAX_LOADERS`."""
    counts[key] = counts.pop(key, 0) + 1  # re-inserted: the dict's order is by last use
    if len(counts) > MAX_LOADERS:
        counts.pop(next(iter(counts)))


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
        steps_event(s, force=True)
        s.flush()
    steps_event(s)
    _resolve(s)
    check_control(torch)


def _install(torch):
    import _cloudopt_probe_grads as grads  # the same folder; standard library only

    s = state.STATE
    # at once: the runner reads it as "a torch job, still starting" until its first step
    s.emit({"e": "torch", "version": str(getattr(torch, "__version__", "?")),
            "num_threads": torch.get_num_threads()}, flush=True)
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    @guard("grad")
    def pre_step(s, optimizer, args, kwargs):
        # A step with a closure (LBFGS, Lightning's automatic optimisation) makes its gradient
        # inside step(): it is read after the step instead.
        s.window_after = bool(args and args[0] is not None) or kwargs.get("closure") is not None
        if not s.window_after:
            _window(optimizer, s.steps + 1)

    @guard("grad")
    def _window(s, optimizer, step):
        grads.window(s, torch, optimizer, step)

    @guard("steps")
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
            _count(s.loader_steps, s.loader_current)
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

    @guard("backward")
    def _note_backward(s, tensors):
        s.backward_seq += 1
        if s.loader_current is not None:
            _count(s.loader_bw, s.loader_current)
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

    @guard("tick")
    def _after_backward(s, torch):
        _tick(s, torch)

    autograd.backward = backward

    import _cloudopt_probe_hooks as more  # the same folder; standard library only

    for install in (more.install_scaler, more.install_save, more.install_loader,
                    more.install_mode):
        try:
            install(torch, s)
        except Exception as exc:  # noqa: BLE001 - an old torch without torch.amp, say
            s.emit({"e": "probe_error", "hook": install.__name__, "error": repr(exc)[:300]})



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
            import _cloudopt_probe_load as load  # the same folder; standard library only

            token = load.widen()
            try:
                original(module)
            finally:
                try:
                    load.restore(token)
                except Exception:  # noqa: BLE001 - the script's import torch must not fail
                    token = None
            try:
                _install(module)
                if token is not None:  # no more threads than the cores it is back on
                    import _cloudopt_probe_hooks as more

                    check_control(module, force=True)
                    more.clamp_threads(module)
            except Exception as exc:  # noqa: BLE001
                if state.STATE is not None:
                    state.STATE.emit({"e": "probe_error", "hook": "install",
                                      "error": repr(exc)[:300]})

        spec.loader.exec_module = exec_module
        return spec


def _at_exit():
    s = state.STATE
    if s is None or os.getpid() != s.pid:
        return
    try:
        steps_event(s, force=True)
        _close_bin(s, s.now())
        _resolve(s, final=True)
    except Exception:  # noqa: BLE001
        pass
    s.emit({"e": "exit", "step": s.steps, "bw": s.backward_seq, "samples": s.samples})
    s.flush()
    s.close()
    s.off = True


def _forked_child():
    """A fork (a data-loader worker, a subprocess by fork) drops the parent's unwritten
    events: only the parent writes them, once."""
    s = state.STATE
    if s is not None:
        s.buf, s.buf_bytes, s.pending, s.bin = [], 0, [], None


def _int_env(name):
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def start():
    """Start recording (once, and only in the process that first loaded the probe)."""
    owner = os.environ.get("CLOUDOPT_PROBE_PID")
    if owner and owner != str(os.getpid()):
        return  # a child process (spawned data-loader worker, a subprocess): stay out
    path = os.environ["CLOUDOPT_PROBE_EVENTS"]
    if os.environ.get("CLOUDOPT_PROBE_RANKS"):
        # A data-parallel trial: torchrun's launcher records nothing, each rank its own file
        # (rank 0 the trial's, rank r probe.rank{r}.jsonl beside it).
        rank = os.environ.get("RANK", "")
        if not rank.isdigit():
            return
        if rank != "0":
            base, ext = os.path.splitext(path)
            path = f"{base}.rank{rank}{ext}"
    os.environ["CLOUDOPT_PROBE_PID"] = str(os.getpid())
    s = state.STATE = state.State(path)
    s.emit({"e": "header", "version": VERSION, "pid": os.getpid(), "wall": time.time(),
            "batch": s.env_batch, "rank": _int_env("RANK"), "world": _int_env("WORLD_SIZE"),
            "python": sys.executable, "argv": list(sys.argv)}, flush=True)
    atexit.register(_at_exit)
    os.register_at_fork(after_in_child=_forked_child)
    if "torch" in sys.modules:
        _install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder())

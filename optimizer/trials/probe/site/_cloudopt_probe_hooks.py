"""More of the probe's hooks (see ``_cloudopt_probe``): a ``GradScaler``'s scaled loss, read
at its true value, ``torch.save`` as a stage of its own, data-loader epochs and batches, and
train/eval switches. Standard library only; every hook
body runs under the probe's guard."""

import os

import _cloudopt_probe_state as state  # the same folder; standard library only
from _cloudopt_probe_state import anchor, batch_size, check_control, guard, steps_event


def install_scaler(torch, s):
    """Remember the scale of the tensor a ``GradScaler`` returns: the backward pass on it
    records the loss divided by that scale."""
    from torch.amp import grad_scaler

    original_scale = grad_scaler.GradScaler.scale

    def scale(self, outputs):
        result = original_scale(self, outputs)
        _note_scaled(self, outputs, result)
        return result

    @guard("scale")
    def _note_scaled(s, scaler, outputs, result):
        if result is not outputs and isinstance(result, torch.Tensor):
            factor = getattr(scaler, "_scale", None)
            s.scaled = (id(result), factor) if factor is not None else None

    grad_scaler.GradScaler.scale = scale


def install_save(torch, s):
    """``torch.save`` marks a checkpoint: a live controller may hold fewer cores while the job
    serialises."""
    original_save = torch.save

    def save(*args, **kwargs):
        # Nested saves count once.
        _note_save(True)
        try:
            return original_save(*args, **kwargs)
        finally:
            _note_save(False)

    @guard("save")
    def _note_save(s, starting):
        s.save_depth += 1 if starting else -1
        if s.save_depth == (1 if starting else 0):
            if starting:
                steps_event(s, force=True)
            s.emit({"e": "save" if starting else "save_end", "step": s.steps,
                    "bw": s.backward_seq}, flush=True)
            s.saved = not starting
            if not starting and s.control is not None:
                _arm_resume(torch, s)

    torch.save = save


EAGER_CONTROL_S = 0.5


def _arm_resume(torch, s):
    """Under a live controller, the first forward pass after a checkpoint marks where the
    checkpoint ends (``resume``, out at once) and takes the control file's thread count
    before it runs: the controller held one core for the save, and the job still ran two
    threads there, which made the first iteration after each checkpoint 0.25 s slower
    (checkpoint_heavy, ten checkpoints: +9% time). One global hook, removed at its first call."""
    from torch.nn.modules import module

    if s.resume_hook is not None:
        return  # armed by an earlier checkpoint, no forward pass since

    def pre_forward(mod, args):
        handle, s.resume_hook = s.resume_hook, None
        if handle is not None:
            handle.remove()
        _resumed(mod)

    @guard("resume")
    def _resumed(s, mod):
        s.emit({"e": "resume", "step": s.steps, "bw": s.backward_seq}, flush=True)
        check_control(torch, force=True)
        clamp_threads(torch)
        # The controller answers 'resume' with the training stage's cores within its watch
        # interval: read its order at every tick until then, not 0.1 s after (one thread on
        # two cores for up to 0.2 s after each checkpoint cost checkpoint_heavy +8%).
        s.eager_control_until = s.now() + EAGER_CONTROL_S

    s.resume_hook = module.register_module_forward_pre_hook(pre_forward)


def clamp_threads(torch):
    """Never more threads than the cores the process may run on now: two OpenMP threads on
    one core wait on each other at every parallel region."""
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
        if torch.get_num_threads() > cores >= 1:
            torch.set_num_threads(cores)




def install_loader(torch, s):
    """Data-loader passes (``epoch_start``/``epoch_end``) and each fetched batch's size."""
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

    @guard("loader")
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
        steps_event(s, force=True)
        if kind == "epoch_start":
            anchor(s)
        s.emit({"e": kind, "loader": key, "dataset_len": size, "batches": batches,
                "batch_size": getattr(it, "_index_sampler", None) and getattr(
                    getattr(it, "_index_sampler", None), "batch_size", None),
                "workers": getattr(it, "_num_workers", None), "step": s.steps,
                "bw": s.backward_seq,
                "steps_in_loader": s.loader_steps.get(key, 0),
                "bw_in_loader": s.loader_bw.get(key, 0)})
        check_control(torch)

    @guard("batch")
    def _note_batch(s, it, batch):
        n = batch_size(batch)
        if n is not None:
            s.batch = n
            s.batch_seq += 1
        s.loader_current = id(getattr(it, "_dataset", None))

    base.__next__ = __next__


def install_mode(torch, s):
    """``Module.train``/``eval`` switches of the outermost module: the eval stage."""
    module_cls = torch.nn.Module
    original_train = module_cls.train

    def train(self, mode=True):
        _note_mode(self, mode)
        if state.STATE is not None:
            state.STATE.depth += 1
        try:
            return original_train(self, mode)
        finally:
            if state.STATE is not None:
                state.STATE.depth -= 1

    @guard("mode")
    def _note_mode(s, module, mode):
        if s.depth == 0 and bool(getattr(module, "training", mode)) != bool(mode):
            steps_event(s, force=True)
            s.emit({"e": "mode", "train": bool(mode), "module": type(module).__name__,
                    "step": s.steps, "bw": s.backward_seq}, flush=True)
            if mode:
                anchor(s)

    module_cls.train = train

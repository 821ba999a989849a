"""More of the probe's hooks (see ``_cloudopt_probe``): a ``GradScaler``'s scaled loss, read
at its true value, and ``torch.save`` as a stage of its own. Standard library only; every hook
body runs under the probe's guard."""

from _cloudopt_probe import _guard, _steps_event


def install_scaler(torch, s):
    """Remember the scale of the tensor a ``GradScaler`` returns: the backward pass on it
    records the loss divided by that scale."""
    from torch.amp import grad_scaler

    original_scale = grad_scaler.GradScaler.scale

    def scale(self, outputs):
        result = original_scale(self, outputs)
        _note_scaled(self, outputs, result)
        return result

    @_guard("scale")
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

    @_guard("save")
    def _note_save(s, starting):
        s.save_depth += 1 if starting else -1
        if s.save_depth == (1 if starting else 0):
            if starting:
                _steps_event(s, force=True)
            s.emit({"e": "save" if starting else "save_end", "step": s.steps,
                    "bw": s.backward_seq}, flush=True)
            s.saved = not starting

    torch.save = save



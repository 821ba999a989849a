"""The probe's gradient-noise windows (see ``_cloudopt_probe``): ``k`` consecutive steps'
squared gradient norms and the squared norm of their mean, from which the reader estimates
the gradient noise scale. Standard library only; the caller runs it under the probe's guard.

A window holds a running sum of the gradients. Where the model has more than
:data:`WINDOW_ELEMENTS` gradient elements, the window follows an evenly strided subset of them
(the same coordinates at every step): the sum then costs a few MB on the job's device
instead of a copy of every gradient (50M fp32 elements were 200 MB, on top of the very peak
cloudopt measures). The norms of a subset estimate the full ones times ``1/stride``; the
event carries ``stride`` and the reader scales them back. The noise scale, a ratio of two
such norms, does not depend on it.
"""

import os

from _cloudopt_probe_state import READY_TICKS  # the same folder; standard library only

GRAD_EVERY_S = 2.0  # a gradient-noise window at most every 2 s
# At most this many gradient elements summed (8 MB in fp32); the variable is for tests.
WINDOW_ELEMENTS = int(os.environ.get("CLOUDOPT_PROBE_WINDOW_ELEMENTS") or 2_000_000)


def window(s, torch, optimizer, step):
    """Add ``optimizer``'s current gradients to the open window (or open one), and close it
    into a ``gradwin`` event after ``s.grad_window`` steps."""
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
    w = s.window
    with torch.no_grad():
        if w is None:
            if s.grad_window < 2:
                _single(s, torch, grads, step, samples)
                return
            total = sum(g.numel() for g in grads)
            stride = -(-total // WINDOW_ELEMENTS)  # ceil: 1 keeps every element
            views = _views(grads, stride)
            s.window = {"acc": [v.detach().float().clone() for v in views],
                        "small": [_squared_norm(torch, views)], "samples": [samples],
                        "step": step, "opt": id(optimizer), "stride": stride,
                        "count": len(grads)}
            return
        if w["count"] != len(grads):
            s.window = None
            return
        views = _views(grads, w["stride"])
        torch._foreach_add_(w["acc"], [v.detach().float() for v in views])
        w["small"].append(_squared_norm(torch, views))
        w["samples"].append(samples)
        if len(w["small"]) >= s.grad_window:
            k = len(w["small"])
            big = torch.stack(torch._foreach_norm(w["acc"])).pow(2).sum() / (k * k)
            event = {"e": "gradwin", "step": w["step"], "k": k, "samples": w["samples"],
                     "stride": w["stride"]}
            s.pending.append((s.ticks + READY_TICKS, event, [*w["small"], big]))
            s.window = None
            s.last_window_t = s.now()


def _views(grads, stride):
    """Every gradient, or every ``stride``-th element of each (a view: nothing copied)."""
    return grads if stride <= 1 else [g.reshape(-1)[::stride] for g in grads]


def _squared_norm(torch, tensors):
    return torch.stack([n.float() for n in torch._foreach_norm(tensors)]).pow(2).sum()


def _single(s, torch, grads, step, samples):
    """One step's squared norm alone (windows are off)."""
    s.pending.append((s.ticks + READY_TICKS, {"e": "grad", "step": step, "bw": s.backward_seq,
                                              "samples": samples},
                      _squared_norm(torch, grads)))
    s.last_window_t = s.now()

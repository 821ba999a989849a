r"""Conditional Restricted Boltzmann Machine with Gaussian visible units (Taylor & Hinton 2007).

G. W. Taylor, G. E. Hinton and S. Roweis, "Modeling human motion using binary latent
variables", NIPS 2006, and Taylor & Hinton, "Factored conditional restricted Boltzmann machines",
ICML 2009; used for workload phases by AI4DL (Berral, Wang, Youssef, HotCloud'20).

The model
---------
A window is the current sample :math:`v = v_t \in \mathbb{R}^{n_v}` (features standardised to
zero mean, unit variance) and its history :math:`u = [v_{t-d}, \dots, v_{t-1}]` flattened
oldest first, :math:`u \in \mathbb{R}^{d \cdot n_v}` with ``d = delay``. Hidden units
:math:`h \in \{0,1\}^{n_h}` are binary. With unit-variance Gaussian visibles the energy is

.. math::

    E(v, h \mid u) = \tfrac12 \lVert v - \hat a \rVert^2 - \hat b^\top h - v^\top W h,
    \qquad \hat a = a + A^\top u, \qquad \hat b = b + B^\top u,

so the history shifts the visible biases through the autoregressive weights ``A``
(``(d n_v, n_v)``) and the hidden biases through the conditional weights ``B`` (``(d n_v, n_h)``);
``W`` is ``(n_v, n_h)``. The conditionals are

.. math::

    p(h_j = 1 \mid v, u) = \sigma(\hat b_j + \textstyle\sum_i v_i W_{ij}), \qquad
    p(v \mid h, u) = \mathcal N(\hat a + W h, I).

The *code* of a window is the vector of hidden probabilities :math:`p(h = 1 \mid v, u)`.

Training (CD-k)
---------------
For a minibatch of windows, the positive phase uses the data :math:`v^0` and
:math:`h^0 = p(h \mid v^0, u)`; the negative phase alternates ``k`` times: sample
:math:`\tilde h \sim \mathrm{Bernoulli}(h)`, set :math:`v^{s} = \hat a + W \tilde h` (the mean of
the Gaussian, as in Taylor's implementation, which keeps the chain from adding noise), and
:math:`h^{s} = p(h \mid v^{s}, u)`. With :math:`\langle\cdot\rangle` the minibatch mean and
:math:`v^k, h^k` the last negative sample, the gradient estimates are

.. math::

    \Delta W = \langle v^0 {h^0}^\top \rangle - \langle v^k {h^k}^\top \rangle, \quad
    \Delta A = \langle u (v^0 - v^k)^\top \rangle, \quad
    \Delta B = \langle u (h^0 - h^k)^\top \rangle,

    \Delta a = \langle v^0 - v^k \rangle, \quad \Delta b = \langle h^0 - h^k \rangle,

applied with momentum: :math:`m \leftarrow \mu m + \Delta`, :math:`\theta \leftarrow \theta +
\eta\, m`. The reported loss is the squared reconstruction error of one deterministic up-down
pass, :math:`\lVert v - (\hat a + W\, p(h \mid v, u)) \rVert^2`, averaged over windows and
features (scaled units).

Everything works on a whole batch of windows at once; windows of all executions are cut with one
``Tensor.unfold`` over the concatenated samples (:func:`stack_windows`), so there is no Python
loop over time steps or executions. The module runs on CUDA when asked to and is deterministic
for a given seed on a given device (initial weights come from NumPy's ``default_rng``, sampling
from a seeded ``torch.Generator``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

__all__ = [
    "CRBM",
    "Windows",
    "stack_windows",
    "windows_from_flat",
    "window_index",
    "resolve_device",
]

CHUNK = 1 << 20
"""Windows processed at once in inference (bounds memory on very long traces)."""


def _affine(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
    """``out = bias + x @ w``. On CPU through NumPy's BLAS, which handles these tall, skinny
    products (a million rows, 8 columns) about 4x faster than torch's CPU GEMM (37 vs 156 ms
    measured for 1M x 8 @ 8 x 10); the tensors share memory with the arrays, so nothing is
    copied."""
    if x.device.type == "cpu":
        res = out.numpy()
        np.matmul(x.numpy(), w.detach().numpy(), out=res)
        res += bias.detach().numpy()
    else:
        torch.addmm(bias, x, w, out=out)


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"``: CUDA when available, else CPU; anything else is passed to ``torch.device``."""
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} requested but CUDA is not available")
    return dev


class Windows(NamedTuple):
    """Windows cut from several executions.

    Attributes
    ----------
    v : Tensor of shape (n_windows, n_visible)
        Current sample of each window.
    u : Tensor of shape (n_windows, delay * n_visible)
        History of each window, oldest sample first.
    owner : ndarray of shape (n_windows,), int64
        Index of the execution the window comes from.
    position : ndarray of shape (n_windows,), int64
        Index of the window's current sample within its execution (``>= delay``).
    """

    v: torch.Tensor
    u: torch.Tensor
    owner: np.ndarray
    position: np.ndarray


def stack_windows(
    arrays: Sequence[np.ndarray],
    delay: int,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Windows:
    """Cut every window of ``delay + 1`` consecutive samples from each execution.

    Parameters
    ----------
    arrays : sequence of ndarray of shape (n_samples_i, n_visible)
        Scaled executions.
    delay : int
        History length ``d``.

    Returns
    -------
    Windows
        ``sum(max(n_samples_i - delay, 0))`` windows in execution order, then time order.
    """
    lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    n_vis = arrays[0].shape[1] if len(arrays) else 0
    flat = np.concatenate(arrays) if len(arrays) else np.zeros((0, n_vis))
    return windows_from_flat(flat, lengths, delay, device, dtype)


def window_index(lengths: np.ndarray, delay: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which windows of consecutive rows of concatenated executions lie inside one execution.

    Window ``w`` spans rows ``w .. w + delay`` of the concatenation (``w < sum(lengths) -
    delay``).

    Returns
    -------
    owner, position, valid : ndarray of shape (sum(lengths) - delay,)
        Execution of the window's current (last) sample, that sample's index within its
        execution, and whether the whole window is inside that execution (``position >=
        delay``).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    owner_of_sample = np.repeat(np.arange(len(lengths)), lengths)
    offsets = np.cumsum(lengths) - lengths
    owner = owner_of_sample[delay:]
    position = np.arange(delay, total) - offsets[owner]
    return owner, position, position >= delay


def windows_from_flat(
    flat: np.ndarray,
    lengths: np.ndarray,
    delay: int,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Windows:
    """:func:`stack_windows` for executions already concatenated.

    Parameters
    ----------
    flat : ndarray of shape (sum(lengths), n_visible)
        All samples, execution after execution.
    lengths : ndarray of shape (n_executions,)
        Samples per execution.
    """
    n_vis = flat.shape[1]
    if len(flat) <= delay:
        return Windows(
            torch.zeros((0, n_vis), dtype=dtype, device=device),
            torch.zeros((0, delay * n_vis), dtype=dtype, device=device),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
        )
    # One unfold over all samples gives every window; keep those inside one execution.
    last, position, valid = window_index(lengths, delay)
    keep = np.flatnonzero(valid)
    data = torch.as_tensor(flat, device=device).to(dtype)
    win = data.unfold(0, delay + 1, 1)  # (N - delay, n_vis, delay + 1), a view
    win = win.index_select(0, torch.as_tensor(keep, device=device)).transpose(1, 2)
    v = win[:, -1, :].contiguous()
    u = win[:, :-1, :].reshape(len(keep), delay * n_vis)
    return Windows(v, u, last[valid], position[valid])


class CRBM(nn.Module):
    """Conditional RBM with Gaussian visible and binary hidden units, trained with CD-k.

    Parameters
    ----------
    n_visible : int
        Features per sample.
    n_hidden : int, default=10
        Hidden units (the code size).
    delay : int, default=3
        Previous samples that condition the current one.
    random_state : int or None
        Seed for the initial weights (``np.random.default_rng``).

    Attributes
    ----------
    W : Parameter of shape (n_visible, n_hidden)
    A : Parameter of shape (delay * n_visible, n_visible)
        Autoregressive weights: history -> visible biases.
    B : Parameter of shape (delay * n_visible, n_hidden)
        Conditional weights: history -> hidden biases.
    a : Parameter of shape (n_visible,)
        Static visible biases.
    b : Parameter of shape (n_hidden,)
        Static hidden biases.
    """

    def __init__(
        self, n_visible: int, n_hidden: int = 10, delay: int = 3, *, random_state: int | None = None
    ) -> None:
        super().__init__()
        if n_visible < 1 or n_hidden < 1 or delay < 1:
            raise ValueError(
                f"n_visible, n_hidden and delay must be >= 1, got {n_visible}, {n_hidden}, {delay}"
            )
        self.n_visible, self.n_hidden, self.delay = int(n_visible), int(n_hidden), int(delay)
        rng = np.random.default_rng(random_state)
        n_hist = self.delay * self.n_visible

        def param(*shape: int, std: float = 0.0) -> nn.Parameter:
            values = rng.normal(0.0, std, size=shape) if std else np.zeros(shape)
            return nn.Parameter(torch.as_tensor(values, dtype=torch.float32), requires_grad=False)

        # Small random weights as in Hinton's RBM guide; biases start at zero (data are centred).
        self.W = param(self.n_visible, self.n_hidden, std=0.01)
        self.A = param(n_hist, self.n_visible, std=0.01)
        self.B = param(n_hist, self.n_hidden, std=0.01)
        self.a = param(self.n_visible)
        self.b = param(self.n_hidden)

    # ---- conditionals -------------------------------------------------------------------
    def dynamic_biases(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a_hat, b_hat)`` of shapes ``(n, n_visible)`` and ``(n, n_hidden)``."""
        return torch.addmm(self.a, u, self.A), torch.addmm(self.b, u, self.B)

    def hidden_probs(self, v: torch.Tensor, b_hat: torch.Tensor) -> torch.Tensor:
        """:math:`p(h=1 \\mid v, u)`, shape ``(n, n_hidden)``."""
        return torch.sigmoid(torch.addmm(b_hat, v, self.W))

    def visible_mean(self, h: torch.Tensor, a_hat: torch.Tensor) -> torch.Tensor:
        """Mean of :math:`p(v \\mid h, u)`, shape ``(n, n_visible)``."""
        return torch.addmm(a_hat, h, self.W.T)

    @torch.no_grad()
    def forward(self, v: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Codes (hidden probabilities) of windows, shape ``(n, n_hidden)``."""
        return self.hidden_probs(v, torch.addmm(self.b, u, self.B))

    @torch.no_grad()
    def reconstruction_errors(self, v: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Squared error of one mean-field up-down pass per window, shape ``(n,)``,
        averaged over features."""
        out = []
        for lo in range(0, len(v), CHUNK):
            vc, uc = v[lo : lo + CHUNK], u[lo : lo + CHUNK]
            a_hat, b_hat = self.dynamic_biases(uc)
            recon = self.visible_mean(self.hidden_probs(vc, b_hat), a_hat)
            out.append(((vc - recon) ** 2).mean(dim=1))
        return torch.cat(out) if out else v.new_zeros(0)

    @torch.no_grad()
    def codes(self, v: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Codes of any number of windows, computed in chunks of :data:`CHUNK`."""
        parts = [
            self.forward(v[lo : lo + CHUNK], u[lo : lo + CHUNK]) for lo in range(0, len(v), CHUNK)
        ]
        return torch.cat(parts) if parts else v.new_zeros((0, self.n_hidden))

    @torch.no_grad()
    def window_codes(self, flat: torch.Tensor) -> torch.Tensor:
        """Codes of every window of consecutive rows of ``flat``.

        The fast path for inference: the rows of all windows are laid side by side with
        ``delay + 1`` shifted copies of ``flat`` (``x = [v_t, v_{t-d}, ..., v_{t-1}]``) and
        encoded with one product ``x @ [W; B]``; no gather. Windows that straddle two
        executions are encoded too and dropped by the caller (:func:`window_index`).

        Parameters
        ----------
        flat : Tensor of shape (n_samples, n_visible)

        Returns
        -------
        Tensor of shape (max(n_samples - delay, 0), n_hidden)
        """
        d, n_v = self.delay, self.n_visible
        n = len(flat) - d
        if n <= 0:
            return flat.new_zeros((0, self.n_hidden))
        wb = torch.cat([self.W, self.B], 0)
        out = flat.new_empty((n, self.n_hidden))
        for lo in range(0, n, CHUNK):
            hi = min(n, lo + CHUNK)
            x = flat.new_empty((hi - lo, (d + 1) * n_v))
            x[:, :n_v] = flat[lo + d : hi + d]
            for lag in range(d):  # history block `lag` holds v_{t-d+lag}
                x[:, (lag + 1) * n_v : (lag + 2) * n_v] = flat[lo + lag : hi + lag]
            _affine(x, wb, self.b, out[lo:hi])
        return out.sigmoid_()

    # ---- training -----------------------------------------------------------------------
    _ORDER = ("W", "B", "A", "a", "b")
    """Layout of the flat parameter buffer used in training: ``W`` then ``B`` so that together
    they form one ``(n_visible + delay * n_visible, n_hidden)`` block."""

    def _flat_views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        views, offset = {}, 0
        for name in self._ORDER:
            shape = getattr(self, name).shape
            size = int(np.prod(shape))
            views[name] = flat[offset : offset + size].view(shape)
            offset += size
        n_rows = self.n_visible * (1 + self.delay)
        views["WB"] = flat[: n_rows * self.n_hidden].view(n_rows, self.n_hidden)
        return views

    @torch.no_grad()
    def _cd_gradients(
        self,
        x0: torch.Tensor,
        wb: torch.Tensor,
        grads: dict[str, torch.Tensor],
        k: int,
        generator: torch.Generator,
    ) -> None:
        """CD-k gradient sums of one minibatch, written into ``grads`` (views of one buffer).

        ``x0`` is ``(n, n_visible + delay * n_visible)``: each window's current sample then its
        history, so that ``x @ [W; B]`` gives ``v W + u B`` in one product and
        ``x0^T h0 - xk^T hk`` gives the ``W`` and ``B`` gradients together.
        """
        n_v = self.n_visible
        v0, u = x0[:, :n_v], x0[:, n_v:]
        a_hat = torch.addmm(self.a, u, self.A)
        h0 = torch.sigmoid(torch.addmm(self.b, x0, wb))
        hk, xk = h0, x0
        for _ in range(k):
            h_sample = torch.bernoulli(hk, generator=generator)
            vk = torch.addmm(a_hat, h_sample, self.W.T)  # mean of p(v | h, u)
            xk = torch.cat([vk, u], dim=1)
            hk = torch.sigmoid(torch.addmm(self.b, xk, wb))
        torch.mm(x0.T, h0, out=grads["WB"])
        grads["WB"].addmm_(xk.T, hk, alpha=-1.0)
        dv = v0 - xk[:, :n_v]
        torch.mm(u.T, dv, out=grads["A"])
        torch.sum(dv, 0, out=grads["a"])
        torch.sum(h0 - hk, 0, out=grads["b"])

    def fit_windows(
        self,
        v: torch.Tensor,
        u: torch.Tensor,
        *,
        epochs: int,
        batch_size: int = 64,
        lr: float = 1e-3,
        momentum: float = 0.9,
        k: int = 1,
        random_state: int | None = None,
        callback: Callable[[int, float], None] | None = None,
    ) -> list[float]:
        """Train with CD-k on shuffled minibatches of the given windows.

        Parameters
        ----------
        v : Tensor of shape (n_windows, n_visible)
        u : Tensor of shape (n_windows, delay * n_visible)
        epochs : int
            Passes over all windows.
        callback : callable(epoch, loss), optional
            Called after each epoch (progress bars).

        Returns
        -------
        list of float
            Reconstruction error over all windows after each epoch.
        """
        if len(v) == 0:
            raise ValueError("no windows to train on")
        device = v.device
        gen = torch.Generator(device=device)
        gen.manual_seed(int(np.random.default_rng(random_state).integers(2**62)))
        cpu_gen = torch.Generator().manual_seed(int(gen.initial_seed()) + 1)
        # All parameters live in one flat buffer during training, so the momentum update is
        # three tensor operations per minibatch instead of fifteen (the per-op overhead, not
        # the arithmetic, bounds the speed with 10 hidden units).
        flat = torch.cat([getattr(self, n).detach().reshape(-1) for n in self._ORDER])
        views = self._flat_views(flat)
        for name in self._ORDER:
            getattr(self, name).data = views[name]
        grad = torch.zeros_like(flat)
        grads = self._flat_views(grad)
        velocity = torch.zeros_like(flat)
        x = torch.cat([v, u], dim=1)
        curve: list[float] = []
        try:
            for epoch in range(epochs):
                shuffled = x[torch.randperm(len(x), generator=cpu_gen).to(device)]
                for lo in range(0, len(x), batch_size):
                    batch = shuffled[lo : lo + batch_size]
                    self._cd_gradients(batch, views["WB"], grads, k, gen)
                    velocity.mul_(momentum).add_(grad, alpha=1.0 / len(batch))
                    flat.add_(velocity, alpha=lr)
                curve.append(float(self.reconstruction_errors(v, u).mean()))
                if callback is not None:
                    callback(epoch, curve[-1])
        finally:
            for name in self._ORDER:  # own storage again (state dicts stay small and separate)
                getattr(self, name).data = getattr(self, name).data.clone()
        return curve

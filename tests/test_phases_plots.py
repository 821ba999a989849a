"""Figures are drawn to PNG files without a display (Agg)."""

from __future__ import annotations

import matplotlib
import numpy as np

from phases.plots import phase_color, plot_phase_stats, plot_trace, plot_transition_graph
from phases.sequences import TransitionGraph


def test_plots_write_png(tmp_path):
    rng = np.random.default_rng(0)
    values = rng.random((40, 2))
    phases = np.r_[[-1] * 3, [0] * 17, [1] * 20]
    assert matplotlib.get_backend().lower() == "agg"
    plot_trace(values, phases, features=["cpu", "mem"], title="x", path=tmp_path / "t.png")
    fig = plot_trace(values, phases, times=np.arange(40) * 0.5)
    assert len(fig.axes) == 2
    plot_phase_stats([values], [phases], ["cpu", "mem"], path=tmp_path / "s.png")
    graph = TransitionGraph.from_sequences([phases, np.r_[[2] * 5, [0] * 5]])
    plot_transition_graph(graph, path=tmp_path / "g.png")
    for name in ("t.png", "s.png", "g.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    assert phase_color(-1) != phase_color(0) and phase_color(0) == phase_color(10)

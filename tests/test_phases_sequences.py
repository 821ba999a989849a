"""Run lengths, packing, per-phase statistics, prototypes and the transition graph on
hand-made sequences."""

from __future__ import annotations

import numpy as np
import pytest

from phases.sequences import (
    PhaseRun,
    PrototypeTree,
    TransitionGraph,
    pack_sequence,
    phase_stats,
    run_lengths,
)


def test_run_lengths():
    assert run_lengths([3, 3, 2, 2, 2, 3]) == [
        PhaseRun(3, 0, 2),
        PhaseRun(2, 2, 3),
        PhaseRun(3, 5, 1),
    ]
    assert run_lengths([]) == []


def test_pack_sequence_collapses_repeats_and_alternations():
    assert pack_sequence([-1, -1, 3, 3, 2, 5, 1, 5, 1, 5, 1, 4]) == (3, 2, 5, 1, 4)
    assert pack_sequence([0, 1, 2, 0, 1, 2, 0, 1, 2, 3]) == (0, 1, 2, 3)
    assert pack_sequence([1, 2, 1, 3]) == (1, 2, 1, 3)  # no repetition: unchanged
    assert pack_sequence([-1, -1, 0], include_warmup=True) == (-1, 0)


def test_phase_stats_uses_original_values_and_skips_warmup():
    arrays = [np.array([[9.0, 9], [1, 10], [3, 30], [5, 50]]), np.array([[7.0, 70], [100, 1]])]
    seqs = [np.array([-1, 0, 0, 0]), np.array([0, 1])]
    stats = phase_stats(arrays, seqs, ["cpu", "mem"]).set_index(["phase", "feature"])
    row = stats.loc[(0, "cpu")]
    assert row["count"] == 4 and row["mean"] == 4.0 and row["max"] == 7.0
    assert row["median"] == 4.0 and row["q1"] == 2.5 and row["q3"] == 5.5
    assert stats.loc[(1, "mem")]["mean"] == 1.0
    assert -1 not in stats.index.get_level_values("phase")
    with pytest.raises(ValueError, match="execution 1"):
        phase_stats(arrays, [seqs[0], np.array([0])])


def test_prototype_tree_counts_and_coverage():
    seqs = [[0, 0, 1, 1, 2], [0, 1, 2, 2], [0, 1, 2, 1, 2, 1, 2], [0, 3], [0, 1, 3]]
    tree = PrototypeTree.from_sequences(seqs)
    top = tree.prototypes()
    assert top[0] == ((0, 1, 2), 3, 0.6)
    assert tree.coverage(1) == pytest.approx(0.6) and tree.coverage(3) == pytest.approx(1.0)
    assert tree.tree()[0]["count"] == 5 and tree.tree()[0]["children"][1]["count"] == 4
    assert tree.to_text().splitlines()[:3] == ["0 (5)", "  1 (4)", "    2 (3)"]
    frame = tree.to_frame(2)
    assert frame["sequence"].tolist() == ["0 > 1 > 2", "0 > 3"]  # ties: shorter first
    assert frame["cumulative_share"].iloc[-1] == pytest.approx(0.8)


def test_transition_graph_probabilities_dot_and_prediction():
    seqs = [np.array([-1, -1, 0, 0, 0, 1, 1, 2]), np.array([0, 1, 1, 1])]
    g = TransitionGraph.from_sequences(seqs)
    assert g.phases == [0, 1, 2]
    # from 0: 0->0 twice, 0->1 twice ; from 1: 1->1 three times, 1->2 once
    np.testing.assert_allclose(g.matrix, [[0.5, 0.5, 0], [0, 0.75, 0.25], [0, 0, 0]])
    assert g.counts.sum() == 8
    assert g.predict_next_phase([0, 0, 1]) == (1, 0.75)
    assert g.predict_next_phase([-1, 0]) == (0, 0.5)  # tie -> lower id
    assert g.predict_next_phase([2]) == (2, 1.0)  # never left
    assert g.next_phase_distribution([1]) == {1: 0.75, 2: 0.25}
    with pytest.raises(ValueError, match="not in the transition graph"):
        g.predict_next_phase([7])
    with pytest.raises(ValueError, match="no phase"):
        g.predict_next_phase([-1, -1])
    dot = g.to_dot()
    assert dot.startswith("digraph phases {") and 'p1 -> p2 [label="0.25"' in dot
    assert "p2 ->" not in dot
    table = g.to_frame()
    assert table.loc[1, 2] == 0.25 and table.index.name == "from"
    full = TransitionGraph.from_sequences(seqs, phases=range(4), include_warmup=True)
    assert full.phases == [-1, 0, 1, 2, 3] and full.counts[0, 0] == 1 and full.counts[0, 1] == 1
    assert 'pm1 [label="warm-up"]' in full.to_dot()

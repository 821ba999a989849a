import numpy as np
import pandas as pd
import pytest

from agents.pareto import hypervolume, pareto_front, pareto_mask, plot_front, save_front_csv


def test_pareto_mask_minimisation():
    pts = np.array([[1, 5], [2, 2], [3, 3], [5, 1], [2, 2], [6, 6]])
    # (3,3) is dominated by (2,2); (6,6) by everything; duplicates of a front point are kept
    assert pareto_mask(pts).tolist() == [True, True, False, True, True, False]


def test_hypervolume_2d_by_hand():
    # staircase: (1,3), (2,2), (3,1) against (4,4): 1*3 + 1*2 + 1*1... computed as rectangles
    # x in [1,2): height 4-3=1; [2,3): 4-2=2; [3,4): 4-1=3 -> 1 + 2 + 3 = 6
    pts = np.array([[1, 3], [2, 2], [3, 1], [3.5, 3.5]])
    assert hypervolume(pts, [4, 4]) == pytest.approx(6.0)
    # a point outside the reference box contributes nothing
    assert hypervolume(np.array([[5, 0]]), [4, 4]) == 0.0


def test_hypervolume_3d_by_hand():
    # two boxes against (2,2,2): (0,0,1) -> 2*2*1 = 4 ; (1,1,0) -> 1*1*2 = 2 ; overlap 1*1*1 = 1
    pts = np.array([[0, 0, 1], [1, 1, 0]])
    assert hypervolume(pts, [2, 2, 2]) == pytest.approx(5.0)
    # one point: the box volume
    assert hypervolume(np.array([[0.5, 1.0, 1.5]]), [1, 2, 3]) == pytest.approx(0.5 * 1 * 1.5)


def test_hypervolume_matches_monte_carlo_3d():
    rng = np.random.default_rng(0)
    pts = rng.random((8, 3))
    grid = rng.random((200_000, 3))
    dominated = (grid[:, None, :] >= pts[None, :, :]).all(axis=2).any(axis=1)
    assert hypervolume(pts, [1, 1, 1]) == pytest.approx(dominated.mean(), abs=0.01)


def test_front_csv_and_plot(tmp_path):
    df = pd.DataFrame(
        {
            "label": ["a", "b", "c"],
            "cost": [1, 2, 3],
            "time": [3, 1, 3],
            "resource": [0.5, 0.5, 0.5],
        }
    )
    front = pareto_front(df)
    assert front["on_front"].tolist() == [True, True, False]
    hv = save_front_csv(tmp_path / "front.csv", df, reference=[4, 4, 1])
    back = pd.read_csv(tmp_path / "front.csv")
    assert back["hypervolume"].iloc[0] == pytest.approx(hv)
    # (1,3) and (2,1) in 2-D against (4,4) = 1*1 + 2*3 = 7, times 0.5 in the third objective
    assert hv == pytest.approx(3.5)
    plot_front(tmp_path / "front.png", df)
    assert (tmp_path / "front.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="objective"):
        pareto_front(df.drop(columns="time"))

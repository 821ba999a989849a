"""ResourceAction and the allocation grid."""

import numpy as np
import pytest

from envs.actions import ResourceAction, ResourceGrid, powers_of_two
from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig


@pytest.fixture
def actions():
    res = ResourceConfig(
        gpu_count_min=0,
        gpu_count_max=4,
        cpu_count_min=2,
        cpu_count_max=16,
        memory_min=4.0,
        memory_max=32.0,
        memory_step=4.0,
    )
    grid = ResourceGrid.from_config(res, cpu_step=2, batch_sizes=powers_of_two(16, 256))
    return ResourceAction(res, grid)


def test_dimensions_and_noop(actions):
    assert actions.action_dim == 81 and actions.noop == 40
    assert actions.action_to_changes(40) == {
        "gpus": 0,
        "cpus": 0,
        "memory_gb": 0.0,
        "batch_factor": 1.0,
    }
    small = ResourceAction(actions.resource_config, actions.grid, batch_actions=False)
    assert small.action_dim == 27 and small.noop == 13
    assert small.action_to_changes(26) == {
        "gpus": 1,
        "cpus": 2,
        "memory_gb": 4.0,
        "batch_factor": 1.0,
    }


def test_every_action_is_distinct(actions):
    seen = {tuple(actions.action_to_changes(a).values()) for a in range(81)}
    assert len(seen) == 81


def test_descriptions(actions):
    assert actions.get_action_description(67) == (
        "Increase GPUs by 1, keep CPUs, keep memory, keep batch size"
    )
    assert actions.get_action_description(0) == (
        "Decrease GPUs by 1, decrease CPUs by 2, decrease memory by 4 GB, halve batch size"
    )
    assert actions.get_action_description(80).endswith("increase memory by 4 GB, double batch size")


def test_compute_new_allocation_clamps_at_bounds(actions):
    cur = Allocation(gpus=4, cpus=2, memory_gb=8.0, batch_size=256)
    new = actions.compute_new_allocation(80, cur)  # everything up
    assert (new.gpus, new.cpus, new.memory_gb, new.batch_size) == (4, 4, 12.0, 256)
    new = actions.compute_new_allocation(0, cur)  # everything down
    assert (new.gpus, new.cpus, new.memory_gb, new.batch_size) == (3, 2, 4.0, 128)


def test_next_index_table_agrees_with_compute_new_allocation(actions):
    table = actions.next_index_table()
    grid = actions.grid
    rng = np.random.default_rng(0)
    for a, u in zip(rng.integers(0, grid.n, 50), rng.integers(0, 81, 50), strict=False):
        expect = actions.compute_new_allocation(int(u), grid.allocation(int(a)))
        assert grid.allocation(int(table[a, u])) == expect


def test_grid_round_trip_and_powers_of_two(actions):
    grid = actions.grid
    assert grid.shape == (5, 8, 8, 5)
    for i in (0, 17, grid.n - 1):
        assert grid.index_of(grid.allocation(i)) == i
    assert powers_of_two(32, 512) == [32, 64, 128, 256, 512]
    assert powers_of_two(48, 60) == [48]

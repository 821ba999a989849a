import numpy as np
import pytest
import torch

from agents.buffer import ReplayBuffer, ReplayBufferSamples


def test_ring_buffer_wraps_and_keeps_newest():
    buf = ReplayBuffer(max_size=5, state_dim=2, seed=0)
    for i in range(7):
        buf.add(np.full(2, i), i, float(i), np.full(2, i + 1), i == 6)
    assert len(buf) == 5
    # slots 0 and 1 were overwritten by transitions 5 and 6; the oldest kept is 2
    assert sorted(buf.action.tolist()) == [2, 3, 4, 5, 6]
    assert buf.action[0] == 5 and buf.action[1] == 6 and buf.ptr == 2
    assert buf.done[1] == 1.0 and buf.done[0] == 0.0
    np.testing.assert_array_equal(buf.next_state[1], [7, 7])


def test_batched_add_wraps_across_the_end():
    buf = ReplayBuffer(max_size=4, state_dim=1)
    buf.add(np.zeros((3, 1)), [0, 1, 2], [0, 1, 2], np.zeros((3, 1)), [False] * 3)
    buf.add(np.ones((3, 1)), [3, 4, 5], [3, 4, 5], np.ones((3, 1)), [True] * 3)
    assert len(buf) == 4 and buf.ptr == 2
    assert buf.action.tolist() == [4, 5, 2, 3]


def test_sample_shapes_dtypes_and_device():
    buf = ReplayBuffer(max_size=100, state_dim=3, device="cpu", seed=1)
    for i in range(10):
        buf.add(np.arange(3) + i, i % 4, 0.5 * i, np.arange(3) + i + 1, False)
    batch = buf.sample(32)
    assert isinstance(batch, ReplayBufferSamples)
    assert batch.states.shape == (32, 3) and batch.next_states.shape == (32, 3)
    assert batch.actions.shape == (32,) and batch.rewards.shape == (32,)
    assert batch.dones.shape == (32,)
    assert batch.states.dtype == torch.float32 and batch.actions.dtype == torch.int64
    assert batch.rewards.dtype == torch.float32 and batch.dones.dtype == torch.float32
    assert batch.states.device.type == "cpu"
    # every sampled row is a stored transition: next_state = state + 1, reward = 0.5 * state[0]
    torch.testing.assert_close(batch.next_states, batch.states + 1)
    torch.testing.assert_close(batch.rewards, 0.5 * batch.states[:, 0])


def test_empty_sample_and_clear():
    buf = ReplayBuffer(max_size=3, state_dim=1)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(1)
    buf.add([1.0], 0, 1.0, [2.0], False)
    buf.clear()
    assert len(buf) == 0
    with pytest.raises(ValueError):
        ReplayBuffer(max_size=0, state_dim=1)

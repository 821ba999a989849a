"""Memory requests as fine as the peak needs (issue 42, part 3): slack within 20% at any size."""

import math

from hypothesis import given
from hypothesis import strategies as st

from optimizer.foundation.memory import (
    MIN_REQUEST_MIB,
    memory_quantity,
    memory_step_mib,
    memory_words,
    right_size_memory,
)

peaks = st.floats(min_value=MIN_REQUEST_MIB / 1024, max_value=4096.0, allow_nan=False)


@given(peaks)
def test_slack_is_at_most_20_percent_and_never_below_the_peak_with_margin(peak):
    request = right_size_memory(peak)
    assert request >= peak * 1.15 - 1e-9
    assert 1 - peak / request <= 0.20


@given(peaks)
def test_requests_are_whole_mebibytes_on_a_step_proportional_to_their_size(peak):
    request_mib = right_size_memory(peak) * 1024
    step = memory_step_mib(peak * 1.15 * 1024)
    assert math.isclose(request_mib, round(request_mib)) and round(request_mib) % step == 0
    assert step <= max(1, request_mib / 16)


@given(peaks, st.integers(min_value=1, max_value=4))
def test_out_of_memory_bumps_from_the_limit_by_1_2_each(peak, ooms):
    limit = peak * 1.1 + 0.05
    bumped = right_size_memory(peak, ooms=ooms, limit_gb=limit)
    assert bumped >= limit * 1.15 * 1.2 ** ooms - 1e-9
    assert bumped > right_size_memory(peak, ooms=ooms - 1, limit_gb=limit)


def test_the_issue_examples_as_kubernetes_quantities():
    # A 0.33 GB peak used to get 0.5 GB (34% slack), a 0.82 GB peak 1 GB.
    assert memory_quantity(right_size_memory(0.33)) == "400Mi"
    assert memory_quantity(right_size_memory(0.82)) == "992Mi"
    assert memory_quantity(right_size_memory(1.0)) == "1216Mi"  # 1177.6 → 64 MiB steps
    assert memory_quantity(right_size_memory(7.0)) == "8704Mi"  # 8243.2 MiB, 512 MiB steps
    assert memory_quantity(right_size_memory(11.0)) == "13Gi"


def test_words():
    assert memory_words(0.5) == "0.5 GB"
    assert memory_words(400 / 1024) == "0.39 GB"
    assert memory_words(12.75) == "12.75 GB"
    assert memory_words(8) == "8 GB"

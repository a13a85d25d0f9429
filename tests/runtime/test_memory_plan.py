"""The static memory plan: tensors live at the same step never share bytes, offsets are
aligned, and tensors that are never live together do share."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.runtime.memory_plan import (
    ALIGNMENT,
    MemoryPlan,
    TensorLifetime,
    align,
    plan_memory,
)


def check_plan(plan: MemoryPlan) -> None:
    """No two tensors live at a common step overlap; all fit the aligned arena."""
    allocations = plan.allocations
    for allocation in allocations:
        assert allocation.offset % ALIGNMENT == 0
        assert allocation.end <= plan.arena_bytes
    for i, a in enumerate(allocations):
        for b in allocations[i + 1 :]:
            if a.tensor.overlaps(b.tensor) and a.tensor.nbytes and b.tensor.nbytes:
                assert a.end <= b.offset or b.end <= a.offset, (a, b)
    assert plan.arena_bytes % ALIGNMENT == 0


@st.composite
def lifetimes(draw: st.DrawFn) -> list[TensorLifetime]:
    count = draw(st.integers(0, 24))
    tensors = []
    for index in range(count):
        first = draw(st.integers(0, 12))
        last = draw(st.integers(first, 14))
        nbytes = draw(st.sampled_from([0, 1, 4, 63, 64, 65, 100, 256, 1000, 4096]))
        tensors.append(TensorLifetime(f"t{index}", nbytes, first, last))
    return tensors


@settings(max_examples=200, deadline=None)
@given(lifetimes())
def test_live_tensors_never_overlap(tensors: list[TensorLifetime]) -> None:
    plan = plan_memory(tensors)
    check_plan(plan)
    assert [a.tensor for a in plan.allocations] == tensors  # the order given
    # Never worse than giving each tensor its own aligned buffer.
    assert plan.arena_bytes <= sum(align(t.nbytes) for t in tensors)
    # At least the bytes live at the busiest step.
    steps = {step for t in tensors for step in range(t.first, t.last + 1)}
    busiest = max(
        (sum(t.nbytes for t in tensors if t.first <= s <= t.last) for s in steps), default=0
    )
    assert plan.arena_bytes >= busiest


def test_a_chain_reuses_memory() -> None:
    """Each step reads the previous tensor and writes the next: two buffers suffice."""
    chain = [TensorLifetime(f"t{i}", 1000, i, i + 1) for i in range(6)]
    plan = plan_memory(chain)
    check_plan(plan)
    assert plan.arena_bytes == 2 * align(1000)
    assert plan.total_bytes == 6000


def test_a_step_never_writes_over_what_it_reads() -> None:
    """`a` is read by step 1, which writes `b`: both live at step 1."""
    plan = plan_memory([TensorLifetime("a", 64, 0, 1), TensorLifetime("b", 64, 1, 2)])
    assert plan.offset("a") != plan.offset("b")


def test_later_tensors_fit_under_an_earlier_big_one() -> None:
    """Everything after step 0 fits in the room the big step-0 tensor leaves."""
    tensors = [
        TensorLifetime("big", 8192, 0, 0),
        TensorLifetime("y", 4096, 1, 2),
        TensorLifetime("w", 2048, 2, 2),
        TensorLifetime("s", 1024, 1, 1),
    ]
    plan = plan_memory(tensors)
    check_plan(plan)
    assert plan.arena_bytes == 8192
    assert plan.total_bytes == 8192 + 4096 + 2048 + 1024


def test_plan_as_json() -> None:
    plan = plan_memory([TensorLifetime("x", 10, 0, 0)])
    assert plan.to_json() == {
        "alignment": 64,
        "arena_bytes": 64,
        "total_bytes": 10,
        "tensors": [{"name": "x", "offset": 0, "nbytes": 10, "first_step": 0, "last_step": 0}],
    }
    assert plan_memory([]).arena_bytes == 0


def test_bad_lifetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="first <= last"):
        TensorLifetime("x", 4, 3, 2)
    with pytest.raises(ValueError, match="unique"):
        plan_memory([TensorLifetime("x", 4, 0, 0), TensorLifetime("x", 4, 1, 1)])
    with pytest.raises(KeyError, match="not in the memory plan"):
        plan_memory([]).offset("x")

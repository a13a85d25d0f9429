"""program_key: states that lower to the same program, up to unroll pragmas that unroll
the same loops, share a key; equal keys mean identical generated code."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from sketch_cases import task_of

from ember.autoschedule.annotate import sample_initial_population
from ember.autoschedule.program import program_key
from ember.autoschedule.sketch import generate_sketches
from ember.backend import generate_kernel
from ember.schedule.lower import lower
from ember.schedule.steps import PragmaStep, replay


def with_pragma(task, state, value):  # type: ignore[no-untyped-def]
    """`state` with every unroll pragma set to `value` (replayed)."""
    steps = [replace(s, value=value) if isinstance(s, PragmaStep) else s for s in state.steps]
    return replay(task.compute_dag, steps)


@pytest.mark.parametrize("name", ["conv2d_3x3", "dense"])
def test_equal_keys_mean_the_same_code_and_pragmas_that_change_nothing_share_one(
    name: str,
) -> None:
    """Sampled states and their pragma variants (0, 16, 64, 512 and 100000): wherever
    two share a key, they render the same C; a pragma variant that renders another
    program never shares the key; and some pragma variants share it (the point)."""
    task = task_of(name)
    states = sample_initial_population(task, generate_sketches(task), 24, random.Random(0))
    with_pragmas = [s for s in states if any(isinstance(t, PragmaStep) for t in s.steps)]
    assert len(with_pragmas) >= 6
    code_by_key: dict[str, str] = {}
    merged = 0
    for state in with_pragmas[:8]:
        sources = set()
        for value in (0, 16, 64, 512, 100_000):
            variant = with_pragma(task, state, value)
            key = program_key(variant)
            assert key is not None
            source = generate_kernel(lower(variant, "k"), task.target).source
            assert code_by_key.setdefault(key, source) == source
            sources.add(source)
        keys = {program_key(with_pragma(task, state, v)) for v in (0, 16, 64, 512, 100_000)}
        assert len(keys) >= len(sources)
        merged += 5 - len(keys)
    assert merged > 0


def test_a_state_that_does_not_lower_has_no_key() -> None:
    from ember.schedule.state import Location, State

    task = task_of("softmax")
    state = State.initial(task.compute_dag)
    stage = replace(state.stages[1], location=Location.ATTACHED, attach_stage=4, attach_iter="i0")
    assert program_key(state.with_stage(1, stage)) is None

"""Random annotation: sampled states are distinct, legal, replay from their records,
compile to what the DAG computes, and lean toward the default schedule's structure."""

from __future__ import annotations

import importlib
import json
import math
import random

import pytest
from sketch_cases import DAGS, check_compiled, task_of

from ember.autoschedule import annotate
from ember.autoschedule.annotate import sample_initial_population
from ember.autoschedule.records import state_key
from ember.autoschedule.sketch import generate_sketches
from ember.schedule import Annotation, Location, State, lower, replay, step_from_json

# The module, not the function `ember.schedule.lower` (which shadows its name there).
lower_module = importlib.import_module("ember.schedule.lower")

SAMPLES = 10


@pytest.mark.parametrize("name", sorted(DAGS))
def test_sampled_states_compile_to_the_dags_value(name: str) -> None:
    task = task_of(name)
    sketches = generate_sketches(task)
    states = sample_initial_population(task, sketches, SAMPLES, random.Random(name))
    assert len(states) == SAMPLES
    assert len({state_key(s) for s in states}) == SAMPLES
    for state in states:
        record = json.dumps([step.to_json() for step in state.steps])  # type: ignore[attr-defined]
        again = replay(task.compute_dag, [step_from_json(s) for s in json.loads(record)])
        assert str(again) == str(state) and again.steps == state.steps
        check_compiled(state)


def test_every_sketch_gets_samples() -> None:
    task = task_of("conv2d_strided")
    sketches = generate_sketches(task)
    states = sample_initial_population(task, sketches, 64, random.Random(1))
    cached = [any(s.scope == "local" for s in state.stages) for state in states]
    padded = [state.stage("pad_temp").location is Location.ROOT for state in states]
    assert any(cached) and not all(cached)
    assert any(padded) and not all(padded)


def test_conv_samples_lean_toward_full_register_tiles() -> None:
    """Most samples of the first sketch vectorize 16 lanes and unroll a tile of
    several accumulators; the parallel loop is at the output's root."""
    task = task_of("conv2d_3x3")
    sketch = generate_sketches(task)[0]
    states = sample_initial_population(task, [sketch], 64, random.Random(2))
    vectorized = unrolled = 0
    for state in states:
        local = state.stage("conv2d_nhwc.local")
        lanes = [it for it in local.iters if it.annotation is Annotation.VECTORIZE]
        vectorized += bool(lanes) and lanes[0].name == "f.2"
        unrolled += any(it.annotation is Annotation.UNROLL for it in local.iters)
        relu = state.stage("relu")
        assert relu.iters[0].annotation is Annotation.PARALLEL
    assert vectorized >= 40 and unrolled >= 40


@pytest.mark.parametrize("fma_register_operands", [False, True])
def test_register_tiles_fit_the_registers(fma_register_operands: bool) -> None:
    """A tile's accumulators fit beside a register per weight vector and, where an
    FMA reads every operand from a register (AArch64), one per row for its broadcast
    input (x86: one broadcast register for the tile)."""
    rng = random.Random(4)
    shapes = [(1, 56, 56, 32), (1, 14, 14, 128), (1, 7, 7, 256), (1, 112, 112, 8)]
    for _ in range(400):
        shape = rng.choice(shapes)
        plan = annotate.sample_tile(shape, [64], [4], 32, 2, rng, fma_register_operands)
        vectors, rows = plan.tile[-1], math.prod(plan.tile[:-1])
        row_registers = rows if fma_register_operands else 1
        assert vectors * rows + vectors + row_registers <= 32, plan


def test_a_tiny_space_returns_what_exists() -> None:
    task = task_of("max_pool")
    states = sample_initial_population(task, generate_sketches(task), 500, random.Random(3))
    assert 0 < len(states) < 500
    assert len({state_key(s) for s in states}) == len(states)


def test_sampling_lowers_nothing_and_rarely_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """What keeps sampling cheap, asserted as behaviour rather than by a clock: no
    state is lowered (no bound inference, the costly part: regions come from the
    output's tile), and nearly every annotation attempt yields a new legal state."""

    def no_bound_inference(*args: object, **kwargs: object) -> None:
        raise AssertionError("sampling ran bound inference")

    monkeypatch.setattr(lower_module, "infer_region", no_bound_inference)
    attempts = 0
    annotate_once = annotate._Annotator.run

    def counted(annotator: annotate._Annotator) -> State:
        nonlocal attempts
        attempts += 1
        return annotate_once(annotator)

    monkeypatch.setattr(annotate._Annotator, "run", counted)
    task = task_of("conv2d_3x3")
    states = sample_initial_population(task, generate_sketches(task), 128, random.Random(4))
    assert len(states) == 128 and len({state_key(s) for s in states}) == 128
    # A conv's space is large and its annotations legal: few repeats (the loop allows
    # 8 attempts a state before it gives up on a small space).
    assert attempts <= 128 + 16, attempts
    # The patch would have caught lowering: lowering a sample trips it.
    with pytest.raises(AssertionError, match="bound inference"):
        lower(states[0])

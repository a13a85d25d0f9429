"""Mutation: mutated states are legal, replay from their records, compile to what the
DAG computes, and each kind of mutation does what it says."""

from __future__ import annotations

import math
import random

import pytest
from sketch_cases import DAGS, check_compiled, task_of

from ember.autoschedule.annotate import sample_initial_population
from ember.autoschedule.mutate import mutate
from ember.autoschedule.records import state_key
from ember.autoschedule.sketch import generate_sketches
from ember.autoschedule.sketch_rules import attached_region
from ember.schedule import (
    Annotation,
    ComputeAtStep,
    FuseStep,
    PragmaStep,
    SplitStep,
    State,
    replay,
)
from ember.schedule.state import SplitRelation

COMPILED = 6


def _mutants(name: str, count: int, seed: int) -> list[State]:
    task = task_of(name)
    rng = random.Random(seed)
    states = sample_initial_population(task, generate_sketches(task), 8, rng)
    found: list[State] = []
    for _ in range(20 * count):
        child = mutate(task, rng.choice(states), rng)
        if child is not None:
            found.append(child)
        if len(found) == count:
            break
    return found


@pytest.mark.parametrize("name", sorted(DAGS))
def test_mutated_states_compile_to_the_dags_value(name: str) -> None:
    mutants = _mutants(name, COMPILED, seed=len(name))
    assert len(mutants) == COMPILED
    for state in mutants:
        again = replay(state.dag, state.steps)  # type: ignore[arg-type]
        assert str(again) == str(state)
        check_compiled(state)


def _changed(parent: State, child: State) -> list[tuple[object, object]]:
    return [(a, b) for a, b in zip(parent.steps, child.steps, strict=False) if a != b]


def test_each_mutation_kind_occurs_and_keeps_what_it_must() -> None:
    task = task_of("conv2d_3x3")
    rng = random.Random(5)
    states = sample_initial_population(task, generate_sketches(task)[:1], 16, rng)
    seen: set[str] = set()
    for _ in range(200):
        parent = rng.choice(states)
        child = mutate(task, parent, rng)
        if child is None:
            continue
        assert state_key(child) != state_key(parent)
        changed = _changed(parent, child)
        if len(parent.steps) != len(child.steps) or any(
            isinstance(a, FuseStep) for a, _ in changed
        ):
            seen.add("parallel")
        elif all(isinstance(a, PragmaStep) for a, _ in changed):
            seen.add("unroll")
        elif all(isinstance(a, ComputeAtStep) for a, _ in changed):
            seen.add("compute_location")
        else:
            assert all(isinstance(a, SplitStep) for a, _ in changed)
            seen.add("tile_size")
    assert seen == {"parallel", "unroll", "compute_location", "tile_size"}


def test_splits_still_divide_what_they_split_after_mutation() -> None:
    """The output's splits divide its axes and the accumulator's divide the region it
    computes (repaired when the output's tile or the attach point changed), so no
    tail guard lands inside a register tile."""
    for state in _mutants("conv2d_3x3", 16, seed=6):
        local_index = state.stage_index("conv2d_nhwc.local")
        region = attached_region(state, local_index)
        assert region is not None
        local = state.stages[local_index]
        axes = [a.name for a in local.compute_op.axes]
        for relation in local.relations:
            if isinstance(relation, SplitRelation) and relation.parent in axes:
                extent = region[axes.index(relation.parent)]
                assert extent % math.prod(relation.extents[1:]) == 0
        for relation in state.stage("relu").relations:
            if isinstance(relation, SplitRelation):
                assert relation.parent_extent % math.prod(relation.extents[1:]) == 0


def test_vectorized_lanes_survive_mutation() -> None:
    """The accumulator and the output it is stored to keep one vector width. (On the
    packed conv: its samples vectorize; the plain dense's strided weight reads do not,
    where this check would compare two empty lists.)"""
    widths: list[list[int]] = []
    for state in _mutants("conv2d_packed", 12, seed=7):
        local = state.stage("conv2d_nhwc.local")
        lanes = [it.extent for it in local.iters if it.annotation is Annotation.VECTORIZE]
        output = state.stage("relu")
        out_lanes = [it.extent for it in output.iters if it.annotation is Annotation.VECTORIZE]
        assert lanes == out_lanes
        widths.append(lanes)
    assert [16] in widths  # mutants that vectorize were checked


def test_a_state_with_nothing_to_mutate_gives_none() -> None:
    task = task_of("dense")
    assert mutate(task, State.initial(task.compute_dag), random.Random(0)) is None

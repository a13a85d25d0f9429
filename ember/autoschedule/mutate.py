"""Mutation: a random neighbour of a state, for evolutionary search.

    child = mutate(task, state, rng)   # None: the mutation was illegal or changed nothing

One mutation edits the state's step list and replays it (no lowering, a few
milliseconds):

- *tile size*: move a prime factor between two levels of one split (the outer level
  included), keeping the product; a vectorized lanes level stays as it is;
- *parallel*: fuse one more or one fewer outer loop into the parallel loop;
- *unroll*: another auto_unroll_max_step for a pragma;
- *compute location*: another outer loop of the same consumer for an attached stage.

An attached accumulator is sized by the region its consumer's tile gives it, so after
a mutation that changes that region its splits are repaired to divide it again (one
split drives both, as in sketch generation).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import replace

from ember.autoschedule.annotate import UNROLL_STEPS
from ember.autoschedule.records import state_key
from ember.autoschedule.sketch_rules import attached_region
from ember.autoschedule.task import SearchTask
from ember.schedule.state import (
    Annotation,
    IteratorKind,
    Location,
    ScheduleError,
    State,
)
from ember.schedule.steps import (
    AnnotationStep,
    ComputeAtStep,
    FuseStep,
    PragmaStep,
    ReorderStep,
    RfactorStep,
    SplitStep,
    Step,
    replay,
)
from ember.te.dag import ComputeDAG

Edit = Callable[[State, list[Step], random.Random], list[Step] | None]


def mutate(task: SearchTask, state: State, rng: random.Random) -> State | None:
    """`state` with one random mutation (module docstring), or None when the chosen
    mutation does not apply, is illegal or changes nothing."""
    steps: list[Step] = list(state.steps)  # type: ignore[arg-type]
    edits: list[Edit] = []
    if any(isinstance(s, SplitStep) for s in steps):
        edits.append(_mutate_tile_size)
    if any(isinstance(s, AnnotationStep) and s.annotation is Annotation.PARALLEL for s in steps):
        edits.append(_mutate_parallel)
    if any(isinstance(s, PragmaStep) for s in steps):
        edits.append(_mutate_unroll)
    if any(isinstance(s, ComputeAtStep) for s in steps):
        edits.append(_mutate_compute_location)
    if not edits:
        return None
    try:
        new_steps = rng.choice(edits)(state, steps, rng)
        if new_steps is None:
            return None
        mutated = repair_attached_splits(task.compute_dag, new_steps)
    except ScheduleError:
        return None
    return None if state_key(mutated) == state_key(state) else mutated


def _prefix(state: State, steps: Sequence[Step], count: int) -> State:
    """The state after the first `count` steps."""
    return replay(state.dag, steps[:count])


# -- tile size -------------------------------------------------------------------------


def _mutate_tile_size(state: State, steps: list[Step], rng: random.Random) -> list[Step] | None:
    positions = [k for k, s in enumerate(steps) if isinstance(s, SplitStep)]
    position = rng.choice(positions)
    step = steps[position]
    assert isinstance(step, SplitStep)
    before = _prefix(state, steps, position)
    iterator = before.stages[step.stage_id].check_iter(step.iter_id)
    extent = _split_extent(state, before, step) or iterator.extent
    levels = [0, *step.factors]  # level 0: the outer extent, 0 when not exact
    if extent % math.prod(step.factors) == 0:
        levels[0] = extent // math.prod(step.factors)
    movable = list(range(len(levels)))
    if _is_vectorized(state, step, f"{iterator.name}.{len(step.factors)}"):
        movable.pop()
    sources = [k for k in movable if levels[k] > 1]
    if len(movable) < 2 or not sources:
        return None
    source = rng.choice(sources)
    target = rng.choice([k for k in movable if k != source])
    prime = rng.choice(_prime_factors(levels[source]))
    levels[source] //= prime
    if target > 0:
        levels[target] *= prime
    new = replace(step, factors=tuple(levels[1:]))
    return [*steps[:position], new, *steps[position + 1 :]]


def _split_extent(state: State, before: State, step: SplitStep) -> int | None:
    """For a split of an attached stage's original axis: that axis's extent in the
    region it computes (what its loops really run over), else None."""
    stage = before.stages[step.stage_id]
    final = state.stages[step.stage_id] if step.stage_id < len(state.stages) else None
    if final is None or final.name != stage.name or final.location is not Location.ATTACHED:
        return None
    region = attached_region(state, step.stage_id)
    axes = [a.name for a in stage.compute_op.axes]
    name = stage.iters[step.iter_id].name
    if region is None or name not in axes:
        return None
    return region[axes.index(name)]


def _is_vectorized(state: State, step: SplitStep, name: str) -> bool:
    if step.stage_id >= len(state.stages) or state.stages[step.stage_id].is_placeholder:
        return False
    stage = state.stages[step.stage_id]
    return any(it.name == name and it.annotation is Annotation.VECTORIZE for it in stage.iters)


def _prime_factors(value: int) -> list[int]:
    primes, divisor = [], 2
    while divisor * divisor <= value:
        while value % divisor == 0:
            primes.append(divisor)
            value //= divisor
        divisor += 1
    return primes + ([value] if value > 1 else [])


# -- parallel granularity --------------------------------------------------------------


def _mutate_parallel(state: State, steps: list[Step], rng: random.Random) -> list[Step] | None:
    """Fuse one more or one fewer leading loop into the parallel loop of a stage."""
    parallel = [
        k
        for k, s in enumerate(steps)
        if isinstance(s, AnnotationStep) and s.annotation is Annotation.PARALLEL and s.iter_id == 0
    ]
    if not parallel:
        return None
    at = rng.choice(parallel)
    stage_id = steps[at].stage_id  # type: ignore[attr-defined]
    fuse = at - 1 if at > 0 and _fuses_leading(steps[at - 1], stage_id) else None
    start = fuse if fuse is not None else at
    count = len(steps[fuse].iter_ids) if fuse is not None else 1  # type: ignore[attr-defined]
    before = _prefix(state, steps, start)
    limit = _fusable(before, stage_id)
    new_count = count + rng.choice([-1, 1])
    if not 1 <= new_count <= limit:
        new_count = count - 1 if new_count > limit else count + 1
    if not 1 <= new_count <= limit or new_count == count:
        return None
    shifted = _shift_positions(steps[at:], stage_id, count, new_count)
    if shifted is None:
        return None
    fused = [FuseStep(stage_id, tuple(range(new_count)))] if new_count > 1 else []
    return [*steps[:start], *fused, *shifted]


def _fuses_leading(step: Step, stage_id: int) -> bool:
    return isinstance(step, FuseStep) and step.stage_id == stage_id and step.iter_ids[0] == 0


def _fusable(state: State, stage_id: int) -> int:
    """How many leading iterators of the stage are unannotated spatial loops."""
    count = 0
    for iterator in state.stages[stage_id].iters:
        if iterator.kind is not IteratorKind.SPATIAL or iterator.annotation is not Annotation.NONE:
            break
        count += 1
    return count


def _shift_positions(
    steps: Sequence[Step], stage_id: int, count: int, new_count: int
) -> list[Step] | None:
    """`steps` with iterator positions of `stage_id` renumbered for a fused loop of
    `new_count` iterators instead of `count`; None when a step names a loop that the
    change fuses away (a compute_at there moves to the fused loop)."""

    def moved(position: int) -> int | None:
        if position == 0:
            return 0
        unfused = position + count - 1  # its position before any fuse
        return None if unfused < new_count else unfused - new_count + 1

    result: list[Step] = []
    for step in steps:
        if isinstance(step, ComputeAtStep) and step.target_stage_id == stage_id:
            target = moved(step.target_iter_id)
            step = replace(step, target_iter_id=0 if target is None else target)
        elif getattr(step, "stage_id", None) == stage_id:
            if isinstance(step, ReorderStep | FuseStep | RfactorStep):
                return None
            if isinstance(step, SplitStep | AnnotationStep | PragmaStep):
                position = moved(step.iter_id)
                if position is None:
                    return None
                step = replace(step, iter_id=position)
        result.append(step)
    return result


# -- unroll and compute location -------------------------------------------------------


def _mutate_unroll(state: State, steps: list[Step], rng: random.Random) -> list[Step] | None:
    positions = [k for k, s in enumerate(steps) if isinstance(s, PragmaStep)]
    position = rng.choice(positions)
    step = steps[position]
    assert isinstance(step, PragmaStep)
    value = rng.choice([v for v in UNROLL_STEPS if v != step.value])
    return [*steps[:position], replace(step, value=value), *steps[position + 1 :]]


def _mutate_compute_location(
    state: State, steps: list[Step], rng: random.Random
) -> list[Step] | None:
    """Another loop of the same consumer, outside its unrolled and vectorized loops."""
    positions = [k for k, s in enumerate(steps) if isinstance(s, ComputeAtStep)]
    position = rng.choice(positions)
    step = steps[position]
    assert isinstance(step, ComputeAtStep)
    target = _prefix(state, steps, position).stages[step.target_stage_id]
    inner = (Annotation.UNROLL, Annotation.VECTORIZE)
    outer = next(
        (k for k, it in enumerate(target.iters) if it.annotation in inner), len(target.iters)
    )
    choices = [k for k in range(outer) if k != step.target_iter_id]
    if not choices:
        return None
    new = replace(step, target_iter_id=rng.choice(choices))
    return [*steps[:position], new, *steps[position + 1 :]]


# -- repair ----------------------------------------------------------------------------


def repair_attached_splits(dag: ComputeDAG, steps: Sequence[Step]) -> State:
    """Replay `steps`, then make every split of an attached stage's spatial axis divide
    that axis's region again (its first factor shrunk to a common divisor), so a
    mutated tile never leaves guards inside a register tile. Raises ScheduleError
    when the steps are illegal."""
    # One replay, keeping the state before each step (what `_fit_split` reads); a
    # second only when a split changes (a second replay every time was half the cost
    # of a mutation).
    before: list[State] = []
    state = State.initial(dag)
    for step in steps:
        before.append(state)
        state = step.apply(state)
    regions = {
        i: attached_region(state, i)
        for i, s in enumerate(state.stages)
        if s.location is Location.ATTACHED
    }
    if not any(region is not None for region in regions.values()):
        return state
    repaired: list[Step] = []
    current: State | None = None  # once a split changed: the state of the repaired steps
    for step, unchanged in zip(steps, before, strict=True):
        previous = unchanged if current is None else current
        if isinstance(step, SplitStep) and regions.get(step.stage_id) is not None:
            fixed = _fit_split(previous, step, regions[step.stage_id], state)
            if fixed != step and current is None:
                current = previous
            step = fixed
        if current is not None:
            current = step.apply(current)
        repaired.append(step)
    return state if current is None else current


def _fit_split(
    current: State, step: SplitStep, region: tuple[int, ...] | None, final: State
) -> SplitStep:
    stage = current.stages[step.stage_id]
    if region is None or stage.name != final.stages[step.stage_id].name:
        return step
    axes = [a.name for a in stage.compute_op.axes]
    name = stage.iters[step.iter_id].name
    if name not in axes:
        return step
    extent = region[axes.index(name)]
    inner = math.prod(step.factors[1:])
    if extent % math.prod(step.factors) == 0 or extent % inner:
        return step
    first = math.gcd(step.factors[0], extent // inner)
    return replace(step, factors=(first, *step.factors[1:]))

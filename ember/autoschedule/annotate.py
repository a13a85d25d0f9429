"""Random annotation: complete sketches into legal States, the search's initial
population.

    states = sample_initial_population(task, generate_sketches(task), 256, random.Random(0))

Annotation replays a sketch's steps with its placeholder split factors filled, then
adds what a sketch leaves open: the parallel loop (how many outer loops to fuse),
vector lanes, unrolled register tiles, an auto-unroll pragma and, for an attached
stage, the loop it is computed at. Choices are random but biased toward what the
code generator turns into fast code (`ember.schedule.default` explains why):

- split factors divide the extents they split (no guards in unrolled tiles);
- a tiled reduction's register tile holds about as many accumulators as the vector
  registers allow beside the weight vectors and the broadcast input, its lanes as
  wide as the reads allow (`_sample_tile`);
- the parallel loop has at least a chunk per core, and nests with too little work
  for threads run on one.

Sampling lowers nothing (a few milliseconds a state): the accumulator's region is
derived from the output's tile, not by bound inference.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from ember.autoschedule.hardware import HardwareParams
from ember.autoschedule.records import state_key
from ember.autoschedule.sketch import Sketch
from ember.autoschedule.sketch_rules import (
    divisors,
    is_reduction,
    vector_lanes,
    vector_widths,
)
from ember.autoschedule.task import SearchTask
from ember.schedule.default import PARALLEL_CHUNKS_PER_CORE
from ember.schedule.default_dense import PARALLEL_MIN_WORK
from ember.schedule.state import (
    Annotation,
    IteratorKind,
    Location,
    ScheduleError,
    SplitRelation,
    Stage,
    State,
)
from ember.schedule.steps import (
    AnnotationStep,
    ComputeAtStep,
    FuseStep,
    PragmaStep,
    RfactorStep,
    SplitStep,
)

# auto_unroll_max_step values a pragma chooses from.
UNROLL_STEPS = (0, 16, 64, 512)
# Most iterations of a register tile written out (more: the accumulators spill anyway).
MAX_UNROLLED_TILE = 64
# Most vectors along the innermost axis of a register tile.
MAX_TILE_VECTORS = 8
# Attempts per wanted state before giving up on a small space.
ATTEMPTS_PER_STATE = 8


def sample_initial_population(
    task: SearchTask, sketches: Sequence[Sketch], count: int, rng: random.Random
) -> list[State]:
    """`count` distinct legal states annotated from randomly chosen `sketches` (fewer
    only when the space has fewer)."""
    if not sketches or count <= 0:
        return []
    infos = [SketchInfo.of(task, sketch.state) for sketch in sketches]
    # The first sketch (the default schedule's choices) is sampled most, later ones
    # (padding inlined into a conv, no cache_write) less: they are rarely faster.
    weights = [1 / (rank + 1) for rank in range(len(infos))]
    found: dict[str, State] = {}
    for _ in range(ATTEMPTS_PER_STATE * count + 32):
        if len(found) >= count:
            break
        info = rng.choices(infos, weights)[0]
        try:
            state = _Annotator(info, rng).run()
        except ScheduleError:
            continue
        found.setdefault(state_key(state), state)
    return list(found.values())


@dataclass(frozen=True, slots=True)
class SketchInfo:
    """What annotation needs to know about a sketch, worked out once per sketch."""

    task: SearchTask
    sketch: State
    # Attached stage -> the stage it is computed at, and the reverse.
    attached: dict[int, int]
    tiled_outputs: dict[int, int]
    # Root stages tiled S0 S1 R0 S2 R1 S3 (a split of a reduce iterator in the sketch).
    tiled_roots: frozenset[int]
    # Tiled stage (output or root) -> vector widths allowed along its innermost axis.
    widths: dict[int, list[int]]

    @staticmethod
    def of(task: SearchTask, sketch: State) -> SketchInfo:
        attached = {
            i: s.attach_stage
            for i, s in enumerate(sketch.stages)
            if s.location is Location.ATTACHED
        }
        tiled_outputs = {target: local for local, target in attached.items()}
        tiled_roots = frozenset(
            i
            for i, s in enumerate(sketch.stages)
            if s.location is Location.ROOT and _splits_reduction(s)
        )
        hardware = task.hardware_params
        widths = {o: _axis_widths(sketch, local, hardware) for o, local in tiled_outputs.items()}
        widths |= {i: _axis_widths(sketch, i, hardware) for i in tiled_roots}
        return SketchInfo(task, sketch, attached, tiled_outputs, tiled_roots, widths)


def _splits_reduction(stage: Stage) -> bool:
    if stage.is_placeholder:
        return False
    reduce = {a.name for a in stage.compute_op.reduce_axes}
    return any(isinstance(r, SplitRelation) and r.parent in reduce for r in stage.relations)


def _axis_widths(state: State, index: int, hardware: HardwareParams) -> list[int]:
    axes = state.stages[index].compute_op.axes
    return vector_widths(state, index, len(axes) - 1, hardware) if axes else [1]


@dataclass(frozen=True, slots=True)
class TilePlan:
    """Factors of one tiled reduction, per spatial axis (position): `outer` (S1 of the
    output), `multiple` (how many register tiles one accumulator region holds), `tile`
    (the register tile; along the innermost axis, in vectors), plus the vector
    `lanes` and the inner reduce factors by reduce-axis position."""

    lanes: int
    outer: tuple[int, ...]
    multiple: tuple[int, ...]
    tile: tuple[int, ...]
    reduce_inner: tuple[int, ...]

    def region(self, axis: int) -> int:
        """Elements of `axis` in one accumulator region (lanes included)."""
        lanes = self.lanes if axis == len(self.tile) - 1 else 1
        return self.multiple[axis] * self.tile[axis] * lanes

    @property
    def tile_iterations(self) -> int:
        return math.prod(self.tile)


def sample_tile(
    shape: Sequence[int],
    reduce_extents: Sequence[int],
    widths: Sequence[int],
    registers: int,
    min_parallel: int,
    rng: random.Random,
    fma_register_operands: bool = False,
) -> TilePlan:
    """A random tiling of an output of `shape`: lanes mostly the widest allowed; a
    register tile of `vectors` along the innermost axis and rows over the outer axes
    (nearest first, the largest that fits most likely) with about `registers`
    accumulators beside one register per weight vector and one for the broadcast
    input; regions mostly one tile; outer tiles and inner reduce factors uniform
    among divisors; the S0 loops left at least `min_parallel` iterations when the
    shape has them. With `fma_register_operands` (AArch64) every row holds its
    broadcast input in a register of its own, as `ember.schedule.default` sizes its
    tiles there: accumulators, weight vectors and rows fit the registers together."""
    last = len(shape) - 1
    lanes = widths[0] if rng.random() < 0.75 else rng.choice([*widths, 1])
    blocks = max(1, shape[last] // lanes)
    vectors = rng.choice([d for d in divisors(blocks) if d <= MAX_TILE_VECTORS])
    if fma_register_operands:  # rows * vectors + vectors + rows <= registers
        budget = max(1, (registers - vectors) // (vectors + 1))
    else:
        budget = max(1, (registers - vectors - 1) // vectors)
    tile = [1] * len(shape)
    tile[last] = vectors
    first_row = True
    for axis in range(last - 1, -1, -1):
        choices = [d for d in divisors(shape[axis]) if d <= budget]
        if shape[axis] == 1 or not choices:
            continue
        weights = [d * d if first_row else 1 for d in choices]
        tile[axis] = rng.choices(choices, weights)[0]
        budget //= tile[axis]
        first_row = False
    sizes = [shape[a] if a != last else blocks for a in range(len(shape))]
    multiple = [_mostly_one(sizes[a] // tile[a], 0.85, rng) for a in range(len(shape))]
    outer = [_mostly_one(sizes[a] // (tile[a] * multiple[a]), 0.5, rng) for a in range(len(shape))]
    parallel = [sizes[a] // (tile[a] * multiple[a] * outer[a]) for a in range(len(shape))]
    # Leave the parallel loop an iteration per core where the shape allows it.
    for levels in (outer, multiple):
        for axis in sorted(range(len(shape)), key=lambda a: -levels[a]):
            if math.prod(parallel) >= min_parallel:
                break
            parallel[axis] *= levels[axis]
            levels[axis] = 1
    reduce_inner = [rng.choice(divisors(e)) for e in reduce_extents]
    return TilePlan(lanes, tuple(outer), tuple(multiple), tuple(tile), tuple(reduce_inner))


def _mostly_one(extent: int, probability: float, rng: random.Random) -> int:
    """1 with `probability`, else a random divisor of `extent`."""
    if extent <= 1 or rng.random() < probability:
        return 1
    return rng.choice(divisors(extent))


@dataclass(eq=False)
class _Annotator:
    """One random completion of one sketch."""

    info: SketchInfo
    rng: random.Random
    plans: dict[int, TilePlan] = field(default_factory=dict)

    def run(self) -> State:
        sketch = self.info.sketch
        state = State.initial(sketch.dag)
        deferred: list[ComputeAtStep] = []
        steps = list(sketch.steps)
        for position, step in enumerate(steps):
            if isinstance(step, ComputeAtStep):
                deferred.append(step)
                continue
            if isinstance(step, SplitStep):
                following = steps[position + 1] if position + 1 < len(steps) else None
                step = self._fill(state, step, isinstance(following, RfactorStep))
            state = step.apply(state)  # type: ignore[attr-defined]
        for index, stage in enumerate(state.stages):
            if not stage.is_placeholder and stage.location is Location.ROOT:
                state = self._annotate_root(state, index)
        for step in deferred:
            state = self._compute_at(state, step)
        for local in self.info.attached:
            state = self._annotate_local(state, local)
        return state

    # -- split factors -----------------------------------------------------------------

    def _plan(self, index: int) -> TilePlan:
        """The tile plan of tiled output or root `index` (sampled on first use)."""
        if index not in self.plans:
            sketch = self.info.sketch
            anchor = self.info.tiled_outputs.get(index, index)
            op = sketch.stages[anchor].compute_op
            shape = [a.extent for a in sketch.stages[index].compute_op.axes]
            reduce = [a.extent for a in op.reduce_axes]
            hardware = self.info.task.hardware_params
            registers = hardware.vector_registers
            self.plans[index] = sample_tile(
                shape, reduce, self.info.widths[index], registers, hardware.num_cores,
                self.rng, hardware.fma_register_operands,
            )  # fmt: skip
        return self.plans[index]

    def _fill(self, state: State, step: SplitStep, before_rfactor: bool) -> SplitStep:
        stage = state.stages[step.stage_id]
        iterator = stage.check_iter(step.iter_id)
        if before_rfactor:
            factors: tuple[int, ...] = (self._rfactor_factor(iterator.extent),)
        elif step.stage_id in self.info.tiled_outputs or step.stage_id in self.info.tiled_roots:
            factors = self._tiled_factors(stage, step.stage_id, iterator.name)
        elif step.stage_id in self.info.attached:
            target = self.info.attached[step.stage_id]
            factors = self._local_factors(stage, self._plan(target), iterator.name)
        elif len(step.factors) == 1 and iterator.kind is IteratorKind.SPATIAL:
            factors = (self._lanes(state, step.stage_id, iterator.extent),)
        else:
            factors = _random_factors(iterator.extent, len(step.factors), self.rng)
        if len(factors) != len(step.factors):
            raise ScheduleError(f"sketch split of {iterator.name!r} has an unexpected shape")
        return SplitStep(step.stage_id, step.iter_id, factors)

    def _tiled_factors(self, stage: Stage, index: int, name: str) -> tuple[int, ...]:
        """Output of an accumulator: `S1, S2 [, lanes]`; tiled root: `S1, S2, S3 [, lanes]`."""
        plan = self._plan(index)
        op = stage.compute_op
        spatial = [a.name for a in op.axes]
        if name not in spatial:
            reduce = [a.name for a in op.reduce_axes]
            return (plan.reduce_inner[reduce.index(name)],)
        axis = spatial.index(name)
        lanes = (plan.lanes,) if axis == len(spatial) - 1 else ()
        if index in self.info.tiled_roots:
            return (plan.outer[axis], plan.multiple[axis], plan.tile[axis], *lanes)
        return (plan.outer[axis], plan.multiple[axis] * plan.tile[axis], *lanes)

    def _local_factors(self, stage: Stage, plan: TilePlan, name: str) -> tuple[int, ...]:
        """Accumulator: `S3 [, lanes]` per spatial axis, `R1` per reduce axis."""
        op = stage.compute_op
        spatial = [a.name for a in op.axes]
        if name in spatial:
            axis = spatial.index(name)
            lanes = (plan.lanes,) if axis == len(spatial) - 1 else ()
            return (plan.tile[axis], *lanes)
        reduce = [a.name for a in op.reduce_axes]
        return (plan.reduce_inner[reduce.index(name)],)

    def _lanes(self, state: State, index: int, extent: int) -> int:
        """Vector lanes for a root stage's innermost axis: mostly the widest power of
        two that divides the extent."""
        widest = vector_lanes(state, index, self.info.task.hardware_params)
        widths = [w for w in (64, 32, 16, 8, 4) if w <= widest and extent % w == 0]
        if not widths:
            return 1
        return widths[0] if self.rng.random() < 0.75 else self.rng.choice([*widths, 1])

    def _rfactor_factor(self, extent: int) -> int:
        """The inner part of an rfactor split: a proper divisor, multiples of 8 (whole
        vectors) favoured."""
        choices = [d for d in divisors(extent) if 1 < d < extent] or [extent]
        weights = [4 if d % 8 == 0 else 1 for d in choices]
        return self.rng.choices(choices, weights)[0]

    # -- annotations -------------------------------------------------------------------

    def _annotate_root(self, state: State, index: int) -> State:
        """Vectorize the lanes, unroll a tiled stage's register tile, fuse the outer
        loops into the parallel loop, add an auto-unroll pragma to reductions."""
        stage = state.stages[index]
        op = stage.compute_op
        tiled = index in self.info.tiled_outputs or index in self.info.tiled_roots
        if tiled:
            state = self._annotate_tile(state, index, self._output_tile_levels(index))
            outer = len(op.axes)
        else:
            state = self._vectorize_lanes(state, index)
            outer = _leading_spatial(state.stages[index])
        state = self._parallelize(state, index, outer)
        if tiled or is_reduction(state.stages[index]):
            value = self.rng.choice(UNROLL_STEPS)
            state = PragmaStep(index, 0, value).apply(state)
        return state

    def _output_tile_levels(self, index: int) -> tuple[str, str]:
        """Suffixes of the levels unrolled and vectorized in a tiled stage."""
        return (".2", ".3") if index in self.info.tiled_outputs else (".3", ".4")

    def _annotate_tile(self, state: State, index: int, levels: tuple[str, str]) -> State:
        """Unroll the register-tile loops (suffix `levels[0]`) when the tile is small
        enough to write out; vectorize the lanes (suffix `levels[1]`)."""
        plan = self._plan(self.info.attached.get(index, index))
        stage = state.stages[index]
        axes = [a.name for a in stage.compute_op.axes]
        if index in self.info.tiled_outputs:
            size = math.prod(plan.multiple[a] * plan.tile[a] for a in range(len(axes)))
            extents = [plan.multiple[a] * plan.tile[a] for a in range(len(axes))]
        else:
            size, extents = plan.tile_iterations, list(plan.tile)
        if size <= MAX_UNROLLED_TILE:
            for axis, name in enumerate(axes):
                if extents[axis] > 1:
                    iter_id = state.stages[index].iter_index(f"{name}{levels[0]}")
                    state = AnnotationStep(index, iter_id, Annotation.UNROLL).apply(state)
        if plan.lanes > 1:
            iter_id = state.stages[index].iter_index(f"{axes[-1]}{levels[1]}")
            state = AnnotationStep(index, iter_id, Annotation.VECTORIZE).apply(state)
        return state

    def _vectorize_lanes(self, state: State, index: int) -> State:
        """Vectorize the inner part of the sketch's lanes split, if it has one."""
        stage = state.stages[index]
        axes = stage.compute_op.axes
        if not axes or not stage.iters:
            return state
        name = f"{axes[-1].name}.1"
        split = any(
            isinstance(r, SplitRelation) and r.parent == axes[-1].name for r in stage.relations
        )
        inner = stage.iters[-1]
        if not split or inner.name != name or inner.extent < 2 or inner.extent & (inner.extent - 1):
            return state
        return AnnotationStep(index, len(stage.iters) - 1, Annotation.VECTORIZE).apply(state)

    def _parallelize(self, state: State, index: int, outer: int) -> State:
        """Fuse the first k of the `outer` leading loops and run the fused loop in
        parallel when the nest has enough work: k mostly all of them for a tiled stage,
        else the fewest giving every core several chunks; otherwise any k whose loop
        has an iteration per core."""
        hardware = self.info.task.hardware_params
        stage = state.stages[index]
        extents = [it.extent for it in stage.iters[:outer]]
        if not extents or hardware.num_cores < 2 or self._work(state, index) < PARALLEL_MIN_WORK:
            return state
        valid = [k for k in range(1, outer + 1) if math.prod(extents[:k]) >= hardware.num_cores]
        chunks = hardware.num_cores * PARALLEL_CHUNKS_PER_CORE
        enough = [k for k in valid if math.prod(extents[:k]) >= chunks]
        preferred = outer if index in self.info.tiled_outputs else (enough or [outer])[0]
        k = preferred if self.rng.random() < 0.5 or not valid else self.rng.choice(valid)
        if k > 1:
            state = FuseStep(index, tuple(range(k))).apply(state)
        if state.stages[index].iters[0].extent > 1:
            state = AnnotationStep(index, 0, Annotation.PARALLEL).apply(state)
        return state

    def _work(self, state: State, index: int) -> int:
        """Element operations of the nest: its spatial extents times the reduction (of
        the accumulator stage, for a tiled output)."""
        stage = state.stages[self.info.tiled_outputs.get(index, index)]
        op = stage.compute_op
        return math.prod(a.extent for a in op.axes + op.reduce_axes)

    def _compute_at(self, state: State, step: ComputeAtStep) -> State:
        """The sketch's attach point (the output's last S1 loop) mostly, else any
        loop outside it."""
        target = state.stages[step.target_stage_id]
        sketch_target = self.info.sketch.stages[step.target_stage_id]
        name = sketch_target.iters[step.target_iter_id].name
        position = target.iter_index(name)
        if self.rng.random() >= 0.75:
            position = self.rng.randint(0, position)
        return ComputeAtStep(step.stage_id, step.target_stage_id, position).apply(state)

    def _annotate_local(self, state: State, local: int) -> State:
        """The accumulator's register tile: unrolled rows and vectors, vector lanes."""
        return self._annotate_tile(state, local, (".1", ".2"))


def _leading_spatial(stage: Stage) -> int:
    """How many outermost iterators are plain spatial loops (fusable into one)."""
    count = 0
    for iterator in stage.iters[:-1] if len(stage.iters) > 1 else ():
        if iterator.kind is not IteratorKind.SPATIAL or iterator.annotation is not Annotation.NONE:
            break
        count += 1
    return count


def _random_factors(extent: int, count: int, rng: random.Random) -> tuple[int, ...]:
    """`count` inner factors of a split of `extent`, each a divisor of what is left."""
    factors = []
    remaining = extent
    for _ in range(count):
        factor = rng.choice(divisors(max(remaining, 1)))
        factors.append(factor)
        remaining //= factor
    return tuple(reversed(factors))


__all__ = ["SketchInfo", "TilePlan", "sample_initial_population", "sample_tile"]

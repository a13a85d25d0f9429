"""Default schedules: a deterministic State for every ComputeDAG topi produces, built
only from the transform steps the search uses, so untuned and tuned code take the same
path (`lower` -> codegen).

The recipe, in the order it is applied:

1. *Inline* every non-reduction stage that is not an output: elementwise producers
   and the epilogue chain between an anchor and the group's output. Padding stays at
   root (materialised once) when a reduction reads it: inlined, its select sits in
   the innermost loop of the micro-kernel, once per FMA, and halves its speed (3x3
   conv 56x56x64, one thread: 54 GFLOP/s inlined, 113 at root, 135 without padding);
   and when its condition tests its innermost axis (NCHW pads W), since inlined it
   would put a lane-dependent select into a vectorized loop, which then cannot be
   vectorized (its loads may fault).
2. *Anchors*: a reduction read only by an output, at the output's own indices (conv,
   dense, pool, ... with their bias/relu/residual epilogue, or alone), gets
   register-resident accumulators: `cache_write(anchor, "local")`, the copy-out stage
   inlined into the output (so the epilogue runs on the accumulators right before
   the store), the output tiled as
   `fused outer spatial (parallel) | rows (unroll) | vectors (unroll) | lanes (vector)`
   and the accumulator stage `compute_at` the fused outer loop, its loops reordered to
   `reduce axes..., rows, vectors, lanes`, the register tile innermost. The lanes run
   over the output's innermost axis (channels in NHWC), the rows over the nearest
   outer axis with more than one element (output pixels along W in NHWC). That is
   the worked example of the design document: 7 pixels x 4 vectors of 16 channels.
   The epilogue cannot instead be computed inside the anchor's nest (an output must
   stay at root), which is why the anchor is computed at the output's tile.
3. Every other root stage: a reduction (softmax's max and sum, norms' moments, full
   reductions) keeps its reduce loops inside and vectorizes its innermost spatial axis
   when every read is contiguous in it; an injective stage splits its innermost axis
   by the vector width and vectorizes it. Both fuse their outer spatial loops into one
   parallel loop when there is enough work for the cores.

Split factors always divide the extents they split (tails would put guards inside
the unrolled and vectorized loops), so odd sizes get narrower vectors, fewer rows or no
vectorization, never wrong code.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from ember.loop.analysis import linear_coefficients
from ember.schedule.state import Annotation, Location, Stage, State
from ember.schedule.steps import (
    AnnotationStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    FuseStep,
    ReorderStep,
    SplitStep,
)
from ember.target import Target
from ember.te.dag import ComputeDAG
from ember.te.expr import Expr, Reduce, Select, TensorRead, Var
from ember.te.tensor import Tensor
from ember.te.visit import free_vars, map_expr, substitute, walk

# A loop nest with fewer element operations than this runs on one thread: forking
# OpenMP threads costs a few microseconds, more than such a nest takes.
PARALLEL_MIN_WORK = 32 * 1024
# Most output rows one register tile holds (the worked example's 7 pixels fit it).
MAX_TILE_ROWS = 8
# Most vectors (or scalars, without vectorization) along the innermost axis per tile.
MAX_TILE_VECTORS = 4


def default_schedule(dag: ComputeDAG, target: Target) -> State:
    """The default schedule of `dag` for `target` (the recipe in the module docstring)."""
    state = _inline_producers(State.initial(dag), target)
    scheduled: set[int] = set()
    for output in _unique(dag.outputs):
        anchor = _anchor_of(state, output)
        if anchor is not None:
            state = _schedule_anchor(state, anchor, output, target)
            scheduled.add(id(output))
    for stage in [s for s in state.stages if _is_root_compute(s)]:
        if id(stage.tensor) in scheduled:
            continue
        index = _index_of(state, stage.tensor)
        if isinstance(stage.compute_op.body, Reduce):
            state = _schedule_reduction(state, index, target)
        else:
            state = _schedule_injective(state, index, target)
    return state


# -- analysis ------------------------------------------------------------------------


def _unique(tensors: Sequence[Tensor]) -> list[Tensor]:
    seen: dict[int, Tensor] = {}
    for tensor in tensors:
        seen.setdefault(id(tensor), tensor)
    return list(seen.values())


def _index_of(state: State, tensor: Tensor) -> int:
    return next(i for i, s in enumerate(state.stages) if s.tensor is tensor)


def _is_root_compute(stage: Stage) -> bool:
    return not stage.is_placeholder and stage.location is Location.ROOT


def _is_output(state: State, tensor: Tensor) -> bool:
    return any(tensor is t for t in state.dag.outputs)


def _expanded(state: State, index: int) -> Expr:
    """The stage's body with its inlined producers substituted (as lowering sees it)."""
    stages = state.stages

    def inline(node: Expr) -> Expr | None:
        if not isinstance(node, TensorRead):
            return None
        for producer, stage in enumerate(stages):
            if stage.tensor is node.tensor and stage.location is Location.INLINED:
                axes = stage.compute_op.axes
                mapping = {a.var: i for a, i in zip(axes, node.indices, strict=True)}
                return substitute(_expanded(state, producer), mapping)
        return None

    return map_expr(stages[index].compute_op.body, inline)


def _reads(state: State, index: int) -> list[TensorRead]:
    return [n for n in walk(_expanded(state, index)) if isinstance(n, TensorRead)]


def _readers(state: State, tensor: Tensor) -> list[int]:
    """Stages with loops that read `tensor` once inlined stages are substituted."""
    return [
        i
        for i, s in enumerate(state.stages)
        if not s.is_placeholder
        and s.location is not Location.INLINED
        and any(read.tensor is tensor for read in _reads(state, i))
    ]


def _keeps_padding_at_root(state: State, index: int) -> bool:
    """Whether stage `index` is a padding select to materialise (module docstring)."""
    op = state.stages[index].compute_op
    if "pad" not in op.tag or not isinstance(op.body, Select) or not op.axes:
        return False
    if op.axes[-1].var in free_vars(op.body.condition):
        return True
    return any(
        isinstance(state.stages[reader].compute_op.body, Reduce)
        for reader in state.consumers(index)
    )


def _contiguous_in(reads: Sequence[TensorRead], var: Var) -> bool:
    """Whether every read steps by 0 or 1 element as `var` steps by one: `var` in no
    index but the last, and there with stride 0 or 1 (a vector load or a broadcast)."""
    for read in reads:
        if any(var in free_vars(i) for i in read.indices[:-1]):
            return False
        if read.indices:
            linear = linear_coefficients(read.indices[-1], var)
            if linear is None or linear[0] not in (0, 1):
                return False
    return True


def _vector_lanes(state: State, index: int, target: Target) -> int:
    """Lanes of one vector register for the widest element type the stage touches."""
    dtypes = {state.stages[index].tensor.dtype} | {r.tensor.dtype for r in _reads(state, index)}
    return min(target.lanes(d) for d in dtypes)


def _lanes_dividing(extent: int, lanes: int) -> int:
    """The widest power-of-two vector (at least 4 lanes) that divides `extent`, else 1."""
    width = lanes
    while width >= 4:
        if extent % width == 0:
            return width
        width //= 2
    return 1


def _largest_divisor(extent: int, limit: int) -> int:
    return max(d for d in range(1, max(1, min(extent, limit)) + 1) if extent % d == 0)


def _num_cores(target: Target) -> int:
    return target.num_cores or os.cpu_count() or 1


def _register_budget(target: Target) -> int:
    """Accumulator registers of a tile: the vector registers less a few for the
    broadcast input and the weight vectors (AVX-512 and NEON have 32, AVX2 16)."""
    wide = "avx512f" in target.features or target.target_arch == "aarch64"
    return 28 if wide else 12


def _anchor_of(state: State, output: Tensor) -> Tensor | None:
    """The reduction whose accumulators the output's tile holds: the output itself,
    or a reduction that only the output reads, at the output's own indices."""
    index = _index_of(state, output)
    stage = state.stages[index]
    if stage.is_placeholder:
        return None
    op = stage.compute_op
    if isinstance(op.body, Reduce):
        return output if op.axes else None
    own = tuple(axis.var for axis in op.axes)
    candidates = []
    for read in _reads(state, index):
        producer = state.stages[_index_of(state, read.tensor)]
        if producer.is_placeholder or not isinstance(producer.compute_op.body, Reduce):
            continue
        if read.indices == own and read.tensor.shape == output.shape:
            candidates.append(read.tensor)
    anchors = _unique(candidates)
    if len(anchors) != 1 or _readers(state, anchors[0]) != [index]:
        return None
    return anchors[0]


# -- inlining ------------------------------------------------------------------------


def _inline_producers(state: State, target: Target) -> State:
    """Step 1: inline non-reduction intermediates (padding of the innermost axis
    excepted, see the module docstring)."""
    del target  # the choice does not depend on the target yet
    for stage in list(state.stages):
        if not _is_root_compute(stage) or _is_output(state, stage.tensor):
            continue
        index = _index_of(state, stage.tensor)
        if isinstance(stage.compute_op.body, Reduce) or _keeps_padding_at_root(state, index):
            continue
        state = ComputeInlineStep(index).apply(state)
    return state


# -- anchors -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Tile:
    """The register tile of an anchor's output: `rows` elements of axis `rows_axis`
    (None: no row blocking) x `vectors` groups of `lanes` elements of the innermost
    axis."""

    rows_axis: int | None
    rows: int
    vectors: int
    lanes: int


def _choose_tile(state: State, anchor: int, shape: Sequence[int], target: Target) -> _Tile:
    op = state.stages[anchor].compute_op
    last = len(shape) - 1
    lanes = 1
    if _contiguous_in(_reads(state, anchor), op.axes[last].var):
        lanes = _lanes_dividing(shape[last], _vector_lanes(state, anchor, target))
    vectors = _largest_divisor(shape[last] // lanes, MAX_TILE_VECTORS)
    rows_axis = next((a for a in range(last - 1, -1, -1) if shape[a] > 1), None)
    if rows_axis is None:
        return _Tile(None, 1, vectors, lanes)
    limit = min(MAX_TILE_ROWS, max(1, _register_budget(target) // vectors))
    return _Tile(rows_axis, _largest_divisor(shape[rows_axis], limit), vectors, lanes)


def _schedule_anchor(state: State, anchor: Tensor, output: Tensor, target: Target) -> State:
    """Step 2: accumulators in registers, computed at the output's tile."""
    index = _index_of(state, anchor)
    state = CacheWriteStep(index, "local").apply(state)
    local = index  # the cache stage takes the anchor's index; the copy moves up one
    if anchor is not output:
        state = ComputeInlineStep(index + 1).apply(state)
    tile = _choose_tile(state, local, output.shape, target)
    work = _work(state.stages[local])
    out = _index_of(state, output)
    state = _tile_output(state, out, tile, work, target)
    state = ComputeAtStep(local, out, 0).apply(state)
    return _tile_accumulator(state, local, tile)


def _tile_output(state: State, index: int, tile: _Tile, work: int, target: Target) -> State:
    """Split the output into outer loops and the register tile, and fuse the outer
    loops into iterator 0 (where the accumulators go), parallel if `work` is enough."""
    stage = state.stages[index]
    names = [it.name for it in stage.iters]
    last = len(names) - 1
    inner = _split_inner(stage.iters[last].name, tile.vectors, tile.lanes)
    if len(inner) > 1:
        state = SplitStep(index, last, _factors(tile.vectors, tile.lanes)).apply(state)
    outer = [*names[:last], inner[0]]
    tile_iters = list(inner[1:])
    if tile.rows_axis is not None and tile.rows > 1:
        state = SplitStep(index, tile.rows_axis, (tile.rows,)).apply(state)
        row = names[tile.rows_axis]
        outer[tile.rows_axis] = f"{row}.0"
        tile_iters.insert(0, f"{row}.1")
    state = _reorder(state, index, [*outer, *tile_iters])
    state = _parallelize(state, index, len(outer), work, target)
    return _annotate_tile(state, index, tile_iters, tile)


def _tile_accumulator(state: State, index: int, tile: _Tile) -> State:
    """Order the accumulator stage's loops `other axes, reduce axes, rows, vectors,
    lanes` and annotate the register tile (its extents come from the region)."""
    stage = state.stages[index]
    op = stage.compute_op
    last = len(op.axes) - 1
    last_name = op.axes[last].name
    inner = [last_name]
    if tile.lanes > 1:
        state = SplitStep(index, last, (tile.lanes,)).apply(state)
        inner = [f"{last_name}.0", f"{last_name}.1"]
    row = op.axes[tile.rows_axis].name if tile.rows_axis is not None else None
    tile_iters = ([row] if row is not None and tile.rows > 1 else []) + inner
    spatial = [a.name for a in op.axes if a.name not in tile_iters and a.name != last_name]
    reduce = [a.name for a in op.reduce_axes]
    state = _reorder(state, index, [*spatial, *reduce, *tile_iters])
    return _annotate_tile(state, index, tile_iters, tile)


def _split_inner(name: str, vectors: int, lanes: int) -> list[str]:
    """Iterator names of the innermost axis after splitting it for the tile."""
    factors = _factors(vectors, lanes)
    if not factors:
        return [name]
    return [f"{name}.{k}" for k in range(len(factors) + 1)]


def _factors(vectors: int, lanes: int) -> tuple[int, ...]:
    return tuple(f for f in (vectors, lanes) if f > 1)


def _annotate_tile(state: State, index: int, tile_iters: Sequence[str], tile: _Tile) -> State:
    """Unroll the rows and vectors of a tile, vectorize its lanes."""
    for position, name in enumerate(tile_iters):
        is_lanes = tile.lanes > 1 and position == len(tile_iters) - 1
        annotation = Annotation.VECTORIZE if is_lanes else Annotation.UNROLL
        iter_id = state.stages[index].iter_index(name)
        state = AnnotationStep(index, iter_id, annotation).apply(state)
    return state


# -- other root stages ---------------------------------------------------------------


def _schedule_reduction(state: State, index: int, target: Target) -> State:
    """Step 3 for a reduction: reduce loops inside the spatial ones; the innermost
    spatial axis vectorized below them when the reads are contiguous in it."""
    stage = state.stages[index]
    op = stage.compute_op
    if not op.axes:
        return state
    last = op.axes[-1]
    lanes = 1
    if _contiguous_in(_reads(state, index), last.var):
        lanes = _lanes_dividing(last.extent, _vector_lanes(state, index, target))
    spatial = [a.name for a in op.axes[:-1]]
    reduce = [a.name for a in op.reduce_axes]
    if lanes > 1:
        state = SplitStep(index, len(op.axes) - 1, (lanes,)).apply(state)
        state = _reorder(state, index, [*spatial, f"{last.name}.0", *reduce, f"{last.name}.1"])
        state = AnnotationStep(index, len(spatial) + 1 + len(reduce), Annotation.VECTORIZE).apply(
            state
        )
        outer = len(spatial) + 1
    else:
        outer = len(op.axes)
    return _parallelize(state, index, outer, _work(stage), target)


def _schedule_injective(state: State, index: int, target: Target) -> State:
    """Step 3 for an injective stage: innermost axis split by the vector width and
    vectorized, the rest fused into one parallel loop."""
    stage = state.stages[index]
    if not stage.iters:
        return state
    last = len(stage.iters) - 1
    lanes = _lanes_dividing(stage.iters[last].extent, _vector_lanes(state, index, target))
    if lanes > 1:
        state = SplitStep(index, last, (lanes,)).apply(state)
        state = AnnotationStep(index, last + 1, Annotation.VECTORIZE).apply(state)
    return _parallelize(state, index, last + 1, _work(stage), target)


def _parallelize(state: State, index: int, outer: int, work: int, target: Target) -> State:
    """Fuse the first `outer` (spatial) iterators into iterator 0 and run it in
    parallel when the nest's `work` is enough for more than one core."""
    if outer > 1:
        state = FuseStep(index, tuple(range(outer))).apply(state)
    fused = state.stages[index].iters[0]
    if work >= PARALLEL_MIN_WORK and fused.extent > 1 and _num_cores(target) > 1:
        state = AnnotationStep(index, 0, Annotation.PARALLEL).apply(state)
    return state


# -- step helpers --------------------------------------------------------------------


def _reorder(state: State, index: int, names: Sequence[str]) -> State:
    """Reorder the stage's iterators to `names` (all of them) if not already so."""
    stage = state.stages[index]
    order = tuple(stage.iter_index(name) for name in names)
    if order == tuple(range(len(stage.iters))):
        return state
    return ReorderStep(index, order).apply(state)


def _work(stage: Stage) -> int:
    """Element operations of the stage's loop nest: the product of its extents."""
    return math.prod(it.extent for it in stage.iters)

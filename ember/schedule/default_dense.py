"""Default schedules of matrix products: `dense_pack` (a dense layer whose constant
weight `pack_weights` re-laid out as `[N/b][K][b]`), `matmul` and `batch_matmul`
(both operands computed at run time, as in attention). `default_schedule` hands such
an anchor here; anything this module does not vectorize goes back to the generic
anchor recipe (`schedule_matrix_product` returns None).

The code it produces is the dense analogue of the conv micro-kernel of the design
document. The output `[batch..., M, N]` (or the epilogue's output, of that shape) is
tiled as

    fused(batch..., N tiles, M tiles) (parallel) | rows (unroll) | vectors (unroll) | lanes (vector)

and its accumulators (`cache_write`, computed at the fused loop) run
`k, rows, vectors, lanes`: per step of the reduction, `rows` broadcast elements of x
times `vectors` weight vectors, `rows x vectors` FMAs into registers, with the
epilogue (bias, relu, residual) applied to the accumulators right before the store.

Choices, measured on the development machine (AVX-512, one thread, accumulators
promoted to vector variables by `ember.loop.registers`):
- The tile holds as many accumulators as fit beside its weight vectors and the
  broadcast input: 6 rows x 4 vectors (24 + 4 + 1 of 32 registers) ran dense 512^3
  at 246-251 GFLOP/s and BERT's 128x3072 -> 768 at 247, 8 x 3 at 252 on the latter,
  while 7 x 4 (33 registers: spills) ran at 222 and 231, 14 x 2 at 248 and 209.
  Rows are balanced over M (a tail costs a guard per row, outside the vectors).
- N tiles outside M tiles: consecutive tiles of one thread reuse one weight panel
  (K x vectors x lanes, 128 KiB at K = 512) from L2 while x's rows stream; with M
  tiles outside, every row tile rereads the whole weight and two threads ran at
  1.35 ms against 0.59 ms.
- A split that does not divide N would put a guard inside the unrolled vectors and
  run 14-30x slower, so the vectors divide N / lanes, and lanes divide N (the packed
  block does by construction). A product whose right operand topi padded to whole
  vectors (N > 16, no multiple of 16: ViT's 197 tokens in Q.K^T) is tiled over the
  padded columns; its last tile's stores past N are predicated (`vectorize`), so
  the accumulators still live in registers (Q.K^T of ViT-B/16: 15.4 ms per layer
  in scalar code, 0.9 padded, two threads on AVX2).
- No cache tiling of K: a tile's accumulators stay in registers for its whole
  reduction, and the packed weight panel streams well even past L2: 512x4096 -> 512
  ran at 244 GFLOP/s and 256x8192 -> 1024 at 225, level with ONNX Runtime. (An
  unpacked right operand with a power-of-two row stride does suffer: matmul 1024^3
  of two inputs runs at 0.75x ONNX Runtime's speed, which packs it at run time.)
"""

from __future__ import annotations

import math

from ember.device import device_model
from ember.schedule.state import Annotation, State
from ember.schedule.steps import (
    AnnotationStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    FuseStep,
    SplitStep,
    reorder_to,
)
from ember.target import Target
from ember.te.expr import Reduce, TensorRead, Var
from ember.te.tensor import ComputeOp, Tensor
from ember.te.visit import walk

# Anchor tags (ember/topi/linalg.py) this module schedules.
MATRIX_PRODUCTS = ("dense_pack", "matmul", "batch_matmul")
# Fewer multiply-adds than this run on one thread (forking costs microseconds).
PARALLEL_MIN_WORK = 32 * 1024
# Widest and tallest register tile (a tile of one row takes up to 8 vectors: their
# independent accumulation chains hide the FMA latency).
MAX_VECTORS = 8
MAX_ROWS = 8


def schedule_matrix_product(
    state: State, anchor: Tensor, output: Tensor, target: Target
) -> State | None:
    """The register-tiled schedule of a matrix product `anchor` whose tile `output`
    stores (the anchor itself or its epilogue), or None when it is no matrix product
    this module vectorizes."""
    op = anchor.op
    if not isinstance(op, ComputeOp) or op.tag not in MATRIX_PRODUCTS or len(op.axes) < 1:
        return None
    lanes = _lanes(op, target)
    if lanes == 1:
        return None
    shape = output.shape
    rows_axis = next((a for a in range(len(shape) - 2, -1, -1) if shape[a] > 1), None)
    rows_extent = shape[rows_axis] if rows_axis is not None else 1
    # Columns padded to whole vectors (`ember.topi.linalg`) let the tile run past N: the
    # tiles then cover the anchor's columns, whose count the vectors divide.
    blocks = anchor.shape[-1] // lanes
    vectors, rows = _tile(rows_extent, blocks, device_model(target).vector_registers)
    index = _index_of(state, anchor)
    state = CacheWriteStep(index, "local").apply(state)
    local = index  # the cache stage takes the anchor's index; the copy moves up one
    if anchor is not output:
        state = ComputeInlineStep(index + 1).apply(state)
    out = _index_of(state, output)
    work = math.prod(it.extent for it in state.stages[local].iters)
    state = _tile_output(state, out, rows_axis, rows, vectors, lanes)
    state = parallelize_outer(state, out, work, target)
    state = ComputeAtStep(local, out, 0).apply(state)
    return _tile_accumulators(state, local, rows_axis if rows > 1 else None, lanes)


def _lanes(op: ComputeOp, target: Target) -> int:
    """Vector lanes along the output's last axis (N): the packed block of a
    `dense_pack`; for a matmul whose right operand is a matrix read `[..., k, j]`, the
    widest vector that divides N; else 1."""
    if not isinstance(op.body, Reduce):
        return 1
    reads = [node for node in walk(op.body.source) if isinstance(node, TensorRead)]
    if len(reads) != 2:
        return 1
    right, widest = reads[1], device_model(target).lanes(op.body.dtype)
    if op.tag == "dense_pack":
        block = right.tensor.shape[-1]
        return block if block <= widest and block & (block - 1) == 0 else 1
    last = op.axes[-1].var
    if right.tensor.ndim < 2 or not (
        isinstance(right.indices[-1], Var) and right.indices[-1] == last
    ):
        return 1
    return lanes_dividing(op.axes[-1].extent, widest)


def lanes_dividing(extent: int, lanes: int) -> int:
    """The widest power-of-two vector (at least 4 lanes, at most `lanes`) that divides
    `extent`, else 1."""
    width = lanes
    while width >= 4:
        if extent % width == 0:
            return width
        width //= 2
    return 1


def _tile(rows_extent: int, blocks: int, registers: int) -> tuple[int, int]:
    """(vectors, rows) of the register tile: the most accumulators that fit in the
    vector `registers` beside one weight vector per column and the broadcast input,
    vectors dividing the `blocks` of lanes along N (the fewer of equally many), rows
    balanced over `rows_extent`."""

    def rows_for(vectors: int) -> int:
        return max(1, min(MAX_ROWS, (registers - vectors - 1) // vectors, rows_extent))

    fitting = [d for d in range(1, min(blocks, MAX_VECTORS) + 1) if registers - d - 1 >= d]
    divisors = [d for d in fitting if blocks % d == 0]
    vectors = max(divisors, key=lambda d: (d * rows_for(d), -d))
    tiles = math.ceil(rows_extent / rows_for(vectors))
    return vectors, math.ceil(rows_extent / tiles)


def _tile_output(
    state: State, index: int, rows_axis: int | None, rows: int, vectors: int, lanes: int
) -> State:
    """Split N into (tiles, vectors, lanes) and the rows axis into (tiles, rows); order
    `other axes, N tiles, row tiles, rows, vectors, lanes`; fuse the outer loops."""
    names = [it.name for it in state.stages[index].iters]
    last = len(names) - 1
    column = names[last]
    state = SplitStep(index, last, (vectors, lanes)).apply(state)
    tile = [f"{column}.1", f"{column}.2"]
    rows_name = names[rows_axis] if rows_axis is not None else None
    outer = [name for name in names[:last] if name != rows_name] + [f"{column}.0"]
    if rows_axis is not None and rows > 1:
        state = SplitStep(index, rows_axis, (rows,)).apply(state)
        outer.append(f"{names[rows_axis]}.0")
        tile.insert(0, f"{names[rows_axis]}.1")
    elif rows_axis is not None:
        outer.append(names[rows_axis])
    state = reorder_to(state, index, [*outer, *tile])
    if len(outer) > 1:
        state = FuseStep(index, tuple(range(len(outer)))).apply(state)
    return _annotate_tile(state, index, 1)


def _tile_accumulators(state: State, index: int, rows_axis: int | None, lanes: int) -> State:
    """Order the accumulator stage `other axes, k, rows, vectors, lanes` (its extents
    come from the tile it is computed at) and annotate the tile."""
    op = state.stages[index].compute_op
    last = len(op.axes) - 1
    column = op.axes[last].name
    state = SplitStep(index, last, (lanes,)).apply(state)
    tile = [f"{column}.0", f"{column}.1"]
    if rows_axis is not None:
        tile.insert(0, op.axes[rows_axis].name)
    spatial = [axis.name for axis in op.axes if axis.name not in tile and axis.name != column]
    reduce = [axis.name for axis in op.reduce_axes]
    state = reorder_to(state, index, [*spatial, *reduce, *tile])
    return _annotate_tile(state, index, len(spatial) + len(reduce))


def _annotate_tile(state: State, index: int, first: int) -> State:
    """Unroll iterators `first..` of the stage but the last, vectorize the last."""
    count = len(state.stages[index].iters)
    for position in range(first, count):
        annotation = Annotation.VECTORIZE if position == count - 1 else Annotation.UNROLL
        if state.stages[index].iters[position].extent > 1 or annotation is Annotation.VECTORIZE:
            state = AnnotationStep(index, position, annotation).apply(state)
    return state


def parallelize_outer(state: State, index: int, work: int, target: Target) -> State:
    """Run the (fused) outer loop in parallel when the nest has `work` for the cores."""
    fused = state.stages[index].iters[0]
    cores = device_model(target).num_cores
    if work >= PARALLEL_MIN_WORK and fused.extent > 1 and cores > 1:
        state = AnnotationStep(index, 0, Annotation.PARALLEL).apply(state)
    return state


def _index_of(state: State, tensor: Tensor) -> int:
    return next(i for i, s in enumerate(state.stages) if s.tensor is tensor)

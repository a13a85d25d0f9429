"""Default schedules: a deterministic State for every ComputeDAG topi produces, built
only from the transform steps the search uses, so untuned and tuned code take the same
path (`lower` -> codegen).

The recipe, in the order it is applied:

1. *Inline* every non-reduction stage that is not an output: elementwise producers
   and the epilogue chain between an anchor and the group's output. Padding read by
   a conv stays at root (materialised once, ~2% of the conv): the conv broadcasts one
   padded element against a vector of weights, and inlined, its select would sit in
   the innermost loop of the micro-kernel, once per FMA (3x3 conv 56x56x64, one
   thread: 54 GFLOP/s inlined, 113 at root, back then). Padding read as vectors of
   channels (a depthwise conv, a pool: one load per multiply-add, bound by memory) is
   inlined: codegen turns its select into a branchless guarded load, and the pass of
   its own would double the memory traffic (depthwise 3x3 56x56x144, one thread: 94
   GFLOP/s inlined, 45 at root). Padding whose condition tests its innermost axis
   (NCHW pads W) stays at root, since inlined it would put a lane-dependent select
   into a vectorized loop, which then cannot be vectorized (its loads may fault).
   A stage of transcendental functions read by several stages (softmax's exp, read
   by its sum and its division) is not inlined either: computed once, not per reader.
2. *Anchors*: a reduction read only by an output, at the output's own indices (conv,
   dense, pool, ... with their bias/relu/residual epilogue, or alone), gets
   register-resident accumulators: `cache_write(anchor, "local")`, the copy-out stage
   inlined into the output (so the epilogue runs on the accumulators right before
   the store), the output tiled as
   `fused outer spatial (parallel) | rows (unroll) | vectors (unroll) | lanes (vector)`
   and the accumulator stage `compute_at` the fused outer loop, its loops reordered to
   `reduce axes..., rows, vectors, lanes`, the register tile innermost (codegen keeps
   it in vector registers, `ember.loop.registers`). The lanes run over the output's
   innermost axis (channels in NHWC), as wide as the reads allow (a grouped conv's
   vector must stay within a group); the rows over the nearest outer axis with more
   than one element (output pixels along W in NHWC). The tile has as many
   accumulators as the vector registers allow beside the weight vectors and the
   broadcast input: on AVX-512, 14 pixels x 2 vectors of 16 channels (31 of 32
   registers; the design's worked example, 7 x 4, needs 33 and spills one: 3x3 conv
   56x56x64 ran at 233 GFLOP/s against 251, one thread), fewer rows when rows would
   alias in the L1 cache (pixels of 1024 channels lie 4 KiB apart). Matrix products
   go to `default_dense`. The epilogue cannot instead be computed inside the
   anchor's nest (an output must stay at root), which is why the anchor is computed
   at the output's tile. The fused outer loop runs the spatial tiles outside the
   channel tiles, so that each core reads its share of the input once and the
   weights from L2, unless the weights outweigh the input on a multi-core target
   (ResNet-50's last stages), where each core streams its share of the weights.
3. Every other root stage: a reduction keeps its reduce loops inside and vectorizes
   its innermost spatial axis when every read is contiguous in it; one contiguous
   along its innermost reduce axis instead (softmax's max and sum, LayerNorm's
   moments: rows) is split by `rfactor` into one vector of partial results per row,
   computed at the row loop, which then adds up the vector. An injective stage splits
   its innermost axis by the vector width and vectorizes it; an axis no vector width
   divides gets whole vectors and a partial one (`vectorize` runs that one serially)
   when its reads are contiguous in it. A reduction fuses its outer spatial loops
   into one parallel loop when there is enough work for the cores; an injective
   stage fuses only the outer axes that give each core several chunks and keeps the
   rest as loops (ResNet-50's input padding, 3 channels: fused down to single
   elements it took a quarter of the first conv's time in index divisions).

A group that works row by row (LayerNorm, softmax: one injective output, every other
root stage a reduction along the rows' innermost axis or softmax's exp of a row that
fits in L1) runs instead in one parallel loop over the rows, each stage computed at
that loop for its row (`_schedule_rows`): a row is read from memory once per group,
not once per stage (LayerNorm over ViT-B/16's 197 x 768 on Zen 4, 2 threads: 0.050 ->
0.021 ms; softmax over its 12 x 197 x 197 on a Xeon, 2 threads: 0.200 -> 0.153 ms).

A Winograd conv's input transform, and an output transform with the epilogue inlined
into it, run tile by tile instead (`default_winograd`).

Split factors of register tiles divide the extents they split (tails would put
guards inside the unrolled loops), so odd sizes get narrower vectors or fewer rows,
never wrong code; the exception is a matrix product over columns padded to whole
vectors (`default_dense`), whose tail is a predicated store. Vectorized loops of rows
(step 3) may have a tail: `vectorize` versions the loop on it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ember.device import device_model, dtype_bytes
from ember.graph.ops.quantized import DOT_GROUP
from ember.loop.analysis import linear_coefficients
from ember.schedule.default_dense import (
    lanes_dividing,
    parallelize_outer,
    schedule_matrix_product,
)
from ember.schedule.default_winograd import schedule_winograd_transform
from ember.schedule.lower import expanded_reads, loop_readers
from ember.schedule.state import Annotation, Location, Stage, State
from ember.schedule.steps import (
    AnnotationStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    FuseStep,
    RfactorStep,
    SplitStep,
    reorder_to,
)
from ember.target import Target
from ember.te.dag import ComputeDAG
from ember.te.expr import Binary, BinaryOp, Call, Const, Expr, Reduce, Select, TensorRead, Var
from ember.te.tensor import ComputeOp, Tensor
from ember.te.visit import free_vars, map_expr, walk

# Chunks of a parallel loop per core, enough to balance the load between cores.
PARALLEL_CHUNKS_PER_CORE = 8
# Most output rows one register tile holds (14 pixels x 2 vectors of 16 channels fill
# AVX-512's 32 registers without a spill; the worked example's 7 x 4 spills one).
MAX_TILE_ROWS = 14
# Most vectors (or scalars, without vectorization) along the innermost axis per tile.
MAX_TILE_VECTORS = 4
# Functions an injective stage read by several stages is materialized for, rather
# than recomputed in each (softmax's exp: 2.9 -> 2.3 ms, one thread, on ViT's
# 12x197x197).
COSTLY_CALLS = frozenset({"exp", "log", "erf", "tanh", "sigmoid", "pow"})
# Independent FMA chains a core needs to keep its FMA units busy (latency 4 x 2 units).
MIN_ACCUMULATORS = 8
# Cycles from one FMA into an accumulator to the next (4 on the x86 and Arm cores we
# target): a core with two FMA units needs 8 independent chains to keep them busy.
FMA_LATENCY = 4
# Addresses this many bytes apart share an L1 cache set, which holds CACHE_WAYS lines
# (8 or more on the x86 and Arm cores we target).
ALIASING_BYTES = 4096
CACHE_WAYS = 8


def default_schedule(dag: ComputeDAG, target: Target) -> State:
    """The default schedule of `dag` for `target` (the recipe in the module docstring)."""
    state = _inline_producers(State.initial(dag), target)
    scheduled: set[int] = set()
    for output in _unique(dag.outputs):
        anchor = _anchor_of(state, output)
        if anchor is not None:
            product = schedule_matrix_product(state, anchor, output, target)
            state = product or _schedule_anchor(state, anchor, output, target)
            scheduled.add(id(output))
    rows = None if scheduled else _schedule_rows(state, target)
    if rows is not None:
        return rows
    for stage in [s for s in state.stages if _is_root_compute(s)]:
        if id(stage.tensor) in scheduled:
            continue
        index = _index_of(state, stage.tensor)
        if isinstance(stage.compute_op.body, Reduce):
            state = _schedule_reduction(state, index, target)
        else:
            winograd = schedule_winograd_transform(state, index, target)
            state = winograd or _schedule_injective(state, index, target)
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


def _readers(state: State, tensor: Tensor) -> list[int]:
    """Stages with loops that read `tensor` once inlined stages are substituted."""
    return loop_readers(state).get(id(tensor), [])


def _keeps_padding_at_root(state: State, index: int) -> bool:
    """Whether stage `index` is a padding select to materialise (module docstring)."""
    op = state.stages[index].compute_op
    if "pad" not in op.tag or not isinstance(op.body, Select) or not op.axes:
        return False
    if op.axes[-1].var in free_vars(op.body.condition):
        return True
    return any(
        broadcasts_from(state, reader, state.stages[index].tensor)
        for reader in state.consumers(index)
        if isinstance(state.stages[reader].compute_op.body, Reduce)
    )


def broadcasts_from(state: State, reader: int, tensor: Tensor) -> bool:
    """Whether reduction `reader` reads `tensor` other than as vectors along its own
    innermost axis: a conv's input, one element broadcast against a vector of weights
    (not a depthwise conv's or a pool's, read as vectors of channels)."""
    innermost = state.stages[reader].compute_op.axes[-1].var
    for read in expanded_reads(state, reader):
        if read.tensor is tensor:
            linear = linear_coefficients(read.indices[-1], innermost)
            vector = linear is not None and linear[0] == 1
            vector = vector and not any(innermost in free_vars(i) for i in read.indices[:-1])
            if not vector:
                return True
    return False


def contiguous_in(reads: Sequence[TensorRead], var: Var, lanes: int = 1) -> bool:
    """Whether every read steps by 0 or 1 element as `var` steps by one within a
    vector of `lanes` aligned lanes: `var` in no index but the last, and there with
    stride 0 or 1 (a vector load or a broadcast). With `d` a multiple of `lanes` (and
    `lanes` > 1), `var // d` is the same in every lane (a grouped conv's input channel
    group, a packed weight's block) and `var % d` steps like `var` (the lane within a
    packed weight's block)."""
    group = Var(f"{var.name}.group")

    def per_lane(node: Expr) -> Expr | None:
        match node:
            case Binary(BinaryOp.FLOOR_DIV, Var() as a, Const(d)) if a == var:
                return group if lanes > 1 and int(d) % lanes == 0 else None
            case Binary(BinaryOp.FLOOR_MOD, Var() as a, Const(d)) if a == var:
                return var if lanes > 1 and int(d) % lanes == 0 else None
        return None

    for read in reads:
        indices = [map_expr(i, per_lane) for i in read.indices]
        if _dot_product_operand(read):
            indices = indices[:-1]  # one vector of [lanes][4] bytes (ember.topi.quantized)
        if any(var in free_vars(i) for i in indices[:-1]):
            return False
        if indices:
            linear = linear_coefficients(indices[-1], var)
            if linear is None or linear[0] not in (0, 1):
                return False
    return True


def _dot_product_operand(read: TensorRead) -> bool:
    """Whether `read` takes one byte of a `[..., lanes, 4]` int8 block at a constant last
    index: a packed quantized weight, whose `[lanes][4]` bytes a dot-product instruction
    reads as one vector (four products per 32-bit lane)."""
    tensor = read.tensor
    return (
        tensor.dtype == "int8"
        and tensor.ndim >= 2
        and tensor.shape[-1] == DOT_GROUP
        and isinstance(read.indices[-1], Const)
    )


def _vector_width(reads: Sequence[TensorRead], var: Var, extent: int, lanes: int) -> int:
    """The widest power-of-two vector (at least 4 lanes, at most `lanes`) dividing
    `extent` along which every read is contiguous or the same in every lane, else 1."""
    width = lanes
    while width >= 4:
        if extent % width == 0 and contiguous_in(reads, var, width):
            return width
        width //= 2
    return 1


def _vector_lanes(state: State, index: int, target: Target) -> int:
    return vector_lanes(state, index, device_model(target).vector_bytes)


def vector_lanes(state: State, index: int, vector_bytes: int) -> int:
    """Lanes of one vector register of `vector_bytes` for the widest element type the
    stage touches."""
    dtypes = {state.stages[index].tensor.dtype}
    dtypes |= {read.tensor.dtype for read in expanded_reads(state, index)}
    return max(1, min(vector_bytes // dtype_bytes(d) for d in dtypes))


def _anchor_of(state: State, output: Tensor) -> Tensor | None:
    """The reduction whose accumulators the output's tile holds: the output itself,
    or a reduction that only the output reads, at the output's own indices."""
    index = _index_of(state, output)
    stage = state.stages[index]
    if stage.is_placeholder:
        return None
    op = stage.compute_op
    if not op.axes:
        return None  # a scalar (a reduction over everything, what reads it): no tile
    if isinstance(op.body, Reduce):
        return output
    own = tuple(axis.var for axis in op.axes)
    candidates = []
    for read in expanded_reads(state, index):
        producer = state.stages[_index_of(state, read.tensor)]
        if producer.is_placeholder or not isinstance(producer.compute_op.body, Reduce):
            continue
        if read.indices == own and _covers(read.tensor.shape, output.shape):
            candidates.append(read.tensor)
    anchors = _unique(candidates)
    if len(anchors) != 1 or _readers(state, anchors[0]) != [index]:
        return None
    return anchors[0]


def _covers(anchor: Sequence[int], output: Sequence[int]) -> bool:
    """Whether an anchor of shape `anchor` holds the output's elements at the output's
    own indices: the same shape, or one padded at the end (a matrix product over
    columns padded to whole vectors, `ember.topi.linalg`)."""
    return len(anchor) == len(output) and all(a >= o for a, o in zip(anchor, output, strict=True))


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
        if _is_costly(stage.compute_op.body) and len(_readers(state, stage.tensor)) > 1:
            continue  # softmax's exp, read by its sum and its division: computed once
        state = ComputeInlineStep(index).apply(state)
    return state


def _is_costly(body: Expr) -> bool:
    """Whether an element costs a transcendental function (tens of instructions even
    in vector form), so that computing it once per reader would cost more than a pass
    over memory."""
    return any(isinstance(node, Call) and node.name in COSTLY_CALLS for node in walk(body))


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
    reads = expanded_reads(state, anchor)
    last = len(shape) - 1
    widest = _vector_lanes(state, anchor, target)
    lanes = _vector_width(reads, op.axes[last].var, shape[last], widest)
    rows_axis = next((a for a in range(last - 1, -1, -1) if shape[a] > 1), None)
    row_extent, max_rows = 1, 1
    if rows_axis is not None:
        row_extent = shape[rows_axis]
        max_rows = _rows_without_aliasing(reads, op.axes[rows_axis].var)
    device = device_model(target)
    rows, vectors = _register_tile(
        row_extent,
        min(MAX_TILE_ROWS, max_rows),
        shape[last] // lanes,
        device.vector_registers,
        scalar_registers=device.fma_register_operands,
        broadcast_operands=device.broadcast_operands,
        max_vectors=_vectors_in_l2(op, reads, lanes, device.l2_cache_bytes),
    )
    return _Tile(rows_axis, rows, vectors, lanes)


def _vectors_in_l2(op: ComputeOp, reads: Sequence[TensorRead], lanes: int, l2_bytes: int) -> int:
    """The most vectors of a tile whose weight panel (the reduction's extent by the
    tile's channels, read by every row) fits in L2, where the tile's next rows find it
    again: ResNet's 7x7 3x3 convs over 512 channels read 295 KiB of weights per vector
    of 16, and 7 x 4 tiles (1.2 MiB a panel) ran 363 GFLOP/s against 413 for 7 x 2
    (1 MiB L2, AVX-512). Without weights (`_read_axes`: pools, reductions) there is
    no panel to keep."""
    reduction = math.prod(axis.extent for axis in op.reduce_axes)
    panel = reduction * lanes * dtype_bytes(op.dtype)
    has_weights = any(kind == "weights" for _, kind in _read_axes(op, reads))
    if not has_weights or not l2_bytes or not panel:
        return MAX_TILE_VECTORS
    return max(1, min(MAX_TILE_VECTORS, l2_bytes // panel))


def _rows_without_aliasing(reads: Sequence[TensorRead], row: Var) -> int:
    """The most tile rows whose reads stay clear of L1 set conflicts: rows `stride`
    bytes apart share a cache set every 4 KiB, so a conv over 1024 channels (4 KiB a
    pixel) puts all its rows' input lines into one set, and more of them than the
    cache has ways evict each other on every reduction step."""
    limit = MAX_TILE_ROWS
    for read in reads:
        stride, extent = 0, 1
        for index, size in zip(reversed(read.indices), reversed(read.tensor.shape), strict=True):
            linear = linear_coefficients(index, row)
            if linear is None:
                return limit  # not affine in the row: no fixed stride to judge
            stride += linear[0] * extent
            extent *= size
        stride_bytes = abs(stride) * dtype_bytes(read.tensor.dtype)
        if stride_bytes == 0:
            continue
        same_set = ALIASING_BYTES // math.gcd(stride_bytes, ALIASING_BYTES)
        limit = min(limit, max(same_set, 1) * CACHE_WAYS)
    return limit


def _register_tile(
    row_extent: int, max_rows: int, vector_extent: int, registers: int,
    scalar_registers: bool = False, broadcast_operands: bool = True,
    max_vectors: int = MAX_TILE_VECTORS,
) -> tuple[int, int]:  # fmt: skip
    """Rows x vectors of a register tile: divisors of the extents (no tails; rows with
    a tail only where no divisor gives MIN_ACCUMULATORS), at most `max_rows` rows,
    `max_vectors` vectors (`_vectors_in_l2`) and `registers - 4` accumulators, the
    most of them first; among as many, one that also leaves a register per weight
    vector and one for the broadcast input (no spill), then the most rows (the fewest
    weight vectors to load per tile). Without `broadcast_operands` (AVX2), each row's
    input is a load of its own too, and the loads, not the accumulators, bound the
    tile: it is chosen by the FMAs per cycle it allows (two units, two loads a cycle,
    FMA_LATENCY), then as above: 4 x 2 rather than 8 x 1 (ResNet-50's 3x3 conv
    56x56x64: 55 -> 67 GFLOP/s, two threads), 5 x 2 rather than 11 x 1 (SqueezeNet's
    55x55 3x3: 52 -> 62).

    `scalar_registers` (AArch64): every FMA operand is a register (x86's take the
    broadcast input from memory), and GCC loads each row's input into a register of
    its own, all of them before the FMAs: a tile fits when its accumulators, weight
    vectors and one register per row do, and among those that fit, the most
    accumulators, then the most FMAs per load."""
    tiles = [
        (rows, vectors)
        for rows in _divisors(row_extent, max_rows)
        for vectors in _divisors(vector_extent, max_vectors)
    ]
    candidates = [(rows, vectors) for rows, vectors in tiles if rows * vectors <= registers - 4]
    if scalar_registers:
        fitting = [(r, v) for r, v in candidates if r * v + v + r <= registers] or candidates
        return max(fitting, key=lambda t: (t[0] * t[1], t[0] * t[1] / (t[0] + t[1]), t[0]))

    def score(tile: tuple[int, int]) -> tuple[float, bool, int, int]:
        rows, vectors = tile
        accumulators = rows * vectors
        fits = accumulators + vectors + 1 <= registers
        if broadcast_operands:
            return accumulators, fits, accumulators, rows
        # FMAs per cycle the tile allows: two FMA units, two loads a cycle (a row's
        # broadcast and a column's weights for each rows x vectors FMAs), FMA_LATENCY
        # cycles before an accumulator is ready again.
        rate = min(2, 2 * accumulators / (rows + vectors), accumulators / FMA_LATENCY)
        return rate, fits, accumulators, rows

    best = max(candidates, key=score)
    if best[0] * best[1] < MIN_ACCUMULATORS:
        # Extents with few divisors (13 rows by 125 vectors: SqueezeNet's classifier
        # on AVX2, 1 x 1 before) leave the tiles under the 4-register margin with too few
        # accumulators to hide the FMA latency; a tile that fits its accumulators,
        # weight vectors and broadcast with one register to spare is better than a
        # short one. (With none to spare, MobileNetV3-small's 14 x 1 tiles on AVX2
        # were slower than its 7 x 1: benchmarks/compare.py, BENCHMARKS.md.)
        fitting = [(r, v) for r, v in tiles if r * v + v + 1 < registers]
        best = max([best, *fitting], key=lambda t: (t[0] * t[1], t[0]))
    if best[0] * best[1] < MIN_ACCUMULATORS:
        # Rows no divisor serves (Inception's 17, 71 and 73 pixels, ResNet-50's last 7:
        # 1 x 4, 7 x 1 and 1 x 1 tiles): rows with a tail, whose guards cost a compare
        # per row and step, beat too few FMA chains. Vectors still divide (a tail inside
        # the unrolled vectors would be a guard per FMA).
        best = _tailed_tile(best, row_extent, max_rows, vector_extent, registers,
                            broadcast_operands, max_vectors)  # fmt: skip
    return best


def _tailed_tile(
    best: tuple[int, int], row_extent: int, max_rows: int, vector_extent: int, registers: int,
    broadcast_operands: bool, max_vectors: int,
) -> tuple[int, int]:  # fmt: skip
    """A register tile whose rows need not divide `row_extent`, for `_register_tile`
    when no divisor gives MIN_ACCUMULATORS; `best` if none is better.

    With broadcast operands (AVX-512, 32 registers): the most accumulators that fit,
    discounted by the rows the tail wastes. Inception's 17x17 1x1 768 -> 192: 9 x 3,
    430 GFLOP/s (two threads), where 4 x 2 ran 207; 73x73 1x1 64 -> 80, 5 vectors:
    13 x 1, 360 GFLOP/s, where 1 x 1 ran 77.
    Without (AVX2, 16 registers): MIN_ACCUMULATORS in the fewest loads, never a
    single vector (it gains too few loads to pay for the guards: MobileNetV3-small's
    14 pixels keep 7 x 1). 4 x 2: 17x17 1x1 768 -> 192 46 -> 64 GFLOP/s, 7x7 3x3
    512 -> 512 56 -> 67, 71x71 3x3 80 -> 192 57 -> 75 (6 x 2 ran 69, 49 and 58)."""
    shapes = [
        (rows, vectors)
        for rows in range(2, min(max_rows, row_extent - 1) + 1)
        for vectors in _divisors(vector_extent, max_vectors)
    ]
    if broadcast_operands:

        def useful(tile: tuple[int, int]) -> float:
            rows, vectors = tile
            covered = -(-row_extent // rows) * rows
            return rows * vectors * row_extent / covered

        fitting = [(r, v) for r, v in shapes if r * v + v + 1 <= registers]
        return max([best, *fitting], key=useful)  # the first of equals: `best`, fewer rows
    tailed = [(r, v) for r, v in shapes if v > 1 and r * v == MIN_ACCUMULATORS]
    if not tailed:
        return best
    return max(tailed, key=lambda t: (-(t[0] + t[1]) / (t[0] * t[1]), t[0]))


def _divisors(extent: int, limit: int) -> list[int]:
    return [d for d in range(1, min(extent, limit) + 1) if extent % d == 0]


def _schedule_anchor(state: State, anchor: Tensor, output: Tensor, target: Target) -> State:
    """Step 2: accumulators in registers, computed at the output's tile."""
    index = _index_of(state, anchor)
    state = CacheWriteStep(index, "local").apply(state)
    local = index  # the cache stage takes the anchor's index; the copy moves up one
    if anchor is not output:
        state = ComputeInlineStep(index + 1).apply(state)
    tile = _choose_tile(state, local, anchor.shape, target)
    work = _work(state.stages[local])
    out = _index_of(state, output)
    channels_outer = device_model(target).num_cores > 1 and _weights_outweigh_input(state, local)
    state = _tile_output(state, out, tile, work, target, channels_outer)
    state = ComputeAtStep(local, out, 0).apply(state)
    return _tile_accumulator(state, local, tile)


def _weights_outweigh_input(state: State, local: int) -> bool:
    """Whether the anchor reads more bytes of weights than of input (`_read_axes`).
    Then the channel tiles go outermost, so that each core streams only its
    share of the weights (ResNet-50's 1x1 conv 14x14x1024 -> 512, two threads: 310
    GFLOP/s with the channel tiles inside, 390-430 outside; one thread: the reverse,
    by 5-20%). Otherwise each core reads only its share of the input."""
    op = state.stages[local].compute_op
    weights = inputs = 0
    for tensor, kind in _read_axes(op, expanded_reads(state, local)):
        size = math.prod(tensor.shape) * dtype_bytes(tensor.dtype)
        if kind == "input":
            inputs += size
        elif kind == "weights":
            weights += size
    return weights > inputs > 0


def _read_axes(op: ComputeOp, reads: Sequence[TensorRead]) -> list[tuple[Tensor, str]]:
    """Each tensor the anchor `op` reads, as "input" if no index uses the output's
    innermost (channel) axis, "weights" if they use it and none of the output's other
    axes (a conv's weights, the same for every pixel), else "other"."""
    channel, others = op.axes[-1].var, {axis.var for axis in op.axes[:-1]}
    kinds = []
    for tensor in _unique([read.tensor for read in reads]):
        indices = [i for read in reads if read.tensor is tensor for i in read.indices]
        used = set().union(*(free_vars(i) for i in indices))
        kind = "input" if channel not in used else "other" if used & others else "weights"
        kinds.append((tensor, kind))
    return kinds


def _tile_output(
    state: State, index: int, tile: _Tile, work: int, target: Target, channels_outer: bool
) -> State:
    """Split the output into outer loops and the register tile, and fuse the outer
    loops into iterator 0 (where the accumulators go), parallel if `work` is enough;
    the channel tiles outermost if `channels_outer`."""
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
    if channels_outer:
        outer.insert(0, outer.pop())
    state = reorder_to(state, index, [*outer, *tile_iters])
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
    state = reorder_to(state, index, [*spatial, *reduce, *tile_iters])
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
    reads, width = expanded_reads(state, index), _vector_lanes(state, index, target)
    if contiguous_in(reads, last.var):
        lanes = lanes_dividing(last.extent, width)
    innermost = op.reduce_axes[-1] if op.reduce_axes else None
    if (
        lanes == 1
        and innermost is not None
        and _row_fills_vectors(innermost.extent, width)
        and contiguous_in(reads, innermost.var)
    ):
        return _schedule_row_reduction(state, index, width, target)
    spatial = [a.name for a in op.axes[:-1]]
    reduce = [a.name for a in op.reduce_axes]
    if lanes > 1:
        state = SplitStep(index, len(op.axes) - 1, (lanes,)).apply(state)
        state = reorder_to(state, index, [*spatial, f"{last.name}.0", *reduce, f"{last.name}.1"])
        state = AnnotationStep(index, len(spatial) + 1 + len(reduce), Annotation.VECTORIZE).apply(
            state
        )
        outer = len(spatial) + 1
    else:
        outer = len(op.axes)
    return _parallelize(state, index, outer, _work(stage), target)


def _schedule_row_reduction(
    state: State, index: int, lanes: int, target: Target, parallel: bool = True
) -> State:
    """Step 3 for a reduction along its rows' contiguous innermost axis (softmax's max
    and sum, LayerNorm's moments): the axis split into vectors, and `rfactor` makes a
    partial stage of one vector of accumulators per row, `k.1` vectorized (a row's
    last, partial vector runs serially: `vectorize` versions the loop), computed at
    the row loop of the stage, which adds up the vector (LayerNorm over 768 on AVX2:
    ~3x faster than one scalar chain per row)."""
    op = state.stages[index].compute_op
    position = len(state.stages[index].iters) - 1
    name = op.reduce_axes[-1].name
    state = SplitStep(index, position, (lanes,)).apply(state)
    state = RfactorStep(index, position + 1, len(op.axes)).apply(state)
    partial, final = index, index + 1  # the partial stage is inserted before the stage
    rows = len(op.axes)
    others = [a.name for a in state.stages[partial].compute_op.reduce_axes]
    spatial = [a.name for a in op.axes]
    state = reorder_to(state, partial, [*spatial, *others, f"{name}.1"])
    last = len(state.stages[partial].iters) - 1
    state = AnnotationStep(partial, last, Annotation.VECTORIZE).apply(state)
    if rows:
        work = _work(state.stages[partial]) if parallel else 0
        state = _parallelize(state, final, rows, work, target)
        state = ComputeAtStep(partial, final, 0).apply(state)
    return state


def _schedule_injective(state: State, index: int, target: Target) -> State:
    """Step 3 for an injective stage: innermost axis split by the vector width and
    vectorized; the fewest outer axes that give every core several chunks of work
    fused into one parallel loop, the axes inside them kept as plain loops (a loop
    fused down to single elements pays a division and a modulo per element to
    rebuild its indices)."""
    stage = state.stages[index]
    if not stage.iters:
        return state
    tiled = _tile_transpose(state, index, target)
    if tiled is not None:
        return tiled
    state = _vectorize_innermost(state, index, target)
    return _parallelize_for_chunks(state, index, len(stage.iters), _work(stage), target)


def _parallelize_for_chunks(
    state: State, index: int, candidates: int, work: int, target: Target
) -> State:
    """Fuse the fewest of the first `candidates` iterators that give every core several
    chunks of work (all of them where none do) into one parallel loop."""
    extents = [it.extent for it in state.stages[index].iters[:candidates]]
    chunks = PARALLEL_CHUNKS_PER_CORE * device_model(target).num_cores
    outer = next((n for n in range(1, candidates) if math.prod(extents[:n]) >= chunks), candidates)
    return _parallelize(state, index, outer, work, target)


def _tile_transpose(state: State, index: int, target: Target) -> State | None:
    """A transposing copy in tiles, or None where the stage is none: its reads stride
    along the output's innermost axis (rows of the input, as attention's Kᵀ reads the
    projection's tokens 2304 floats apart) and are contiguous along another output
    axis. Element by element along the output's rows, every read lands on another
    cache line, and lines a power-of-two stride apart share a few L1 sets, so each is
    evicted before the next column comes back to it (ViT-B/16's Kᵀ: 0.09 ms a layer
    for 600 KB). Here the innermost axis splits into tiles of one vector's width of
    rows, which move outside the contiguous axis: a tile's lines are read along that
    axis before the next tile's. Elements stay scalar (a vector along the output's
    rows would be a gather)."""
    stage = state.stages[index]
    last = len(stage.iters) - 1
    tile, extent = _vector_lanes(state, index, target), stage.iters[last].extent
    if last < 1 or tile < 4 or extent < 2 * tile:
        return None
    reads = expanded_reads(state, index)
    axes = stage.compute_op.axes
    if not reads or contiguous_in(reads, axes[last].var):
        return None
    along = next(
        (
            position
            for position in range(last - 1, -1, -1)
            if stage.iters[position].extent >= tile and contiguous_in(reads, axes[position].var)
        ),
        None,
    )
    if along is None:
        return None
    state = SplitStep(index, last, (tile,)).apply(state)
    names = [it.name for it in state.stages[index].iters]
    rows, row = names[last], names[last + 1]
    order = [*names[:along], rows, *names[along:last], row]
    state = reorder_to(state, index, order)
    # The axes outside the contiguous one, tiles included, may make the parallel loop.
    return _parallelize_for_chunks(state, index, along + 1, _work(stage), target)


def _vectorize_innermost(state: State, index: int, target: Target) -> State:
    """An injective stage's innermost axis split by the vector width and vectorized
    (whole vectors and a partial one where its reads are contiguous in it)."""
    stage = state.stages[index]
    last = len(stage.iters) - 1
    width, extent = _vector_lanes(state, index, target), stage.iters[last].extent
    lanes = lanes_dividing(extent, width)
    if lanes == 1 and width >= 4 and extent >= 2 * width:
        innermost = stage.compute_op.axes[-1].var
        if contiguous_in(expanded_reads(state, index), innermost):
            # Whole vectors and one partial, which `vectorize` runs serially; reads
            # across the rows (a transpose's) would be gathers, slower than scalars.
            lanes = width
    if lanes > 1:
        state = SplitStep(index, last, (lanes,)).apply(state)
        state = AnnotationStep(index, last + 1, Annotation.VECTORIZE).apply(state)
    return state


# -- row-wise groups ------------------------------------------------------------------


def _row_group(state: State, l1_bytes: int) -> tuple[Tensor, list[Tensor]] | None:
    """The output and the other stages of a group that works row by row: one
    injective output of rank >= 2 and, as every other root stage, a reduction along
    the innermost axis whose shape is the output's rows, keepdims or not (LayerNorm's
    moments, softmax's max and sum), or an injective stage of the output's shape whose
    row, twice over, fits in `l1_bytes` (softmax's exp, kept for the row's later
    passes). None for any other group.

    Softmax in one pass, against a pass per stage, on a 2-core Xeon (Sapphire Rapids
    class), clang 19, median ms: 12x197x197 0.153 / 0.200, 12x384x384 0.55 / 0.89,
    12x128x128 0.065 / 0.069; GCC 12 on ViT-B/16's 12 softmaxes 4.06 / 4.57 ms. (On
    the Zen 4 of an earlier session, GCC's one-pass code had been slower, 0.41 against
    0.34 ms; not measured there since.) A longer row stays in passes: it would not
    stay in L1 between them."""
    outputs = _unique(state.dag.outputs)
    if len(outputs) != 1:
        return None
    output = outputs[0]
    op = state.stages[_index_of(state, output)].compute_op
    if isinstance(op.body, Reduce) or len(op.axes) < 2:
        return None
    rows = tuple(op.shape[:-1])
    members = [s for s in state.stages if _is_root_compute(s) and s.tensor is not output]
    if not members:
        return None
    for stage in members:
        member_op = stage.compute_op
        reads = expanded_reads(state, _index_of(state, stage.tensor))
        if not isinstance(member_op.body, Reduce):
            # A row of costly calls read by several stages (softmax's exp): kept for
            # the row's next pass where it stays in L1 beside the row it was read from.
            row_bytes = op.shape[-1] * dtype_bytes(member_op.dtype)
            if tuple(member_op.shape) != tuple(op.shape) or 2 * row_bytes > l1_bytes:
                return None
            if not contiguous_in(reads, member_op.axes[-1].var):
                return None
            continue
        if len(member_op.reduce_axes) != 1:
            return None
        if tuple(member_op.shape) not in (rows, (*rows, 1)):
            return None
        if not contiguous_in(reads, member_op.reduce_axes[0].var):
            return None
    return output, [s.tensor for s in members]


def _schedule_rows(state: State, target: Target) -> State | None:
    """A row-wise group in one pass over the rows: the output's rows fused into one
    parallel loop, its innermost axis vectorized, and each reduction computed at
    that loop for its row (by `rfactor`, as `_schedule_row_reduction` does), as is an
    injective member (softmax's exp, its row vectorized like the output's). As
    separate parallel passes, each stage read every row from memory again (LayerNorm
    over ViT-B/16's 197 x 768 on Zen 4, 2 threads: 0.050 -> 0.021 ms). None when the
    group is not row-wise."""
    group = _row_group(state, device_model(target).l1_cache_bytes)
    if group is None:
        return None
    output, members = group
    index = _index_of(state, output)
    work = _work(state.stages[index]) * (1 + len(members))
    rows = len(state.stages[index].compute_op.axes) - 1
    state = _vectorize_innermost(state, index, target)
    state = _parallelize(state, index, rows, work, target)
    for tensor in reversed(members):  # readers first: compute_at needs them placed
        member = _index_of(state, tensor)
        if isinstance(state.stages[member].compute_op.body, Reduce):
            state = _row_reduction_at_row(state, member, target)
        else:
            state = _vectorize_innermost(state, member, target)
        state = ComputeAtStep(_index_of(state, tensor), _index_of(state, output), 0).apply(state)
    return state


def _row_reduction_at_row(state: State, index: int, target: Target) -> State:
    """A reduction of a row-wise group: along its row in vectors of partial results
    where the row holds two vectors, else one scalar chain; no parallel loop (it runs
    inside the output's)."""
    op = state.stages[index].compute_op
    width = _vector_lanes(state, index, target)
    if _row_fills_vectors(op.reduce_axes[-1].extent, width):
        return _schedule_row_reduction(state, index, width, target, parallel=False)
    return state


def _row_fills_vectors(extent: int, width: int) -> bool:
    """Whether a reduced row of `extent` elements is long enough to be reduced in
    vectors of `width` lanes of partial results (two vectors at least: below that the
    final sum of the partials costs what the vectors saved)."""
    return width > 1 and extent >= 2 * width


def _parallelize(state: State, index: int, outer: int, work: int, target: Target) -> State:
    """Fuse the first `outer` (spatial) iterators into iterator 0 and run it in
    parallel when the nest's `work` is enough for more than one core."""
    if outer > 1:
        state = FuseStep(index, tuple(range(outer))).apply(state)
    return parallelize_outer(state, index, work, target)


# -- step helpers --------------------------------------------------------------------


def _work(stage: Stage) -> int:
    """Element operations of the stage's loop nest: the product of its extents."""
    return math.prod(it.extent for it in stage.iters)

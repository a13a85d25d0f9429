"""Default schedules of the two transforms of a Winograd conv (`ember.topi.winograd`):
loops over tiles, each tile's transform unrolled, channels in vectors.

The generic injective recipe runs an input transform `V[e, tile, c]` in its layout's
order, so each of the a*a transformed rows rereads the whole image (16 passes at
F(2x2)), and each element looks its coefficients up by the row `e` at run time. Here
the loops run `tile (parallel), c / lanes, e (unrolled), lanes (vector)`: with `e` a
constant in each unrolled copy, the compiler folds the lookups into constants, and
the 16 sums of a tile share the 16 vectors of its patch (loaded once per vector of
channels). The output transform (and the epilogue inlined into it: bias, residual,
relu) runs `image, tile rows, tile columns (parallel), k / lanes, row in tile, column
in tile (unrolled), lanes (vector)`: the 2 x 2 pixels of a tile share the vectors
of the product they sum. An output whose sides are not whole tiles keeps the generic
recipe.
"""

from __future__ import annotations

import math

from ember.device import device_model
from ember.schedule.default_dense import lanes_dividing, parallelize_outer
from ember.schedule.state import Annotation, State
from ember.schedule.steps import AnnotationStep, FuseStep, SplitStep, reorder_to
from ember.target import Target
from ember.te.tensor import ComputeOp
from ember.topi.common import WINOGRAD_INPUT, WINOGRAD_OUTPUT


def schedule_winograd_transform(state: State, index: int, target: Target) -> State | None:
    """The schedule of root stage `index` if it is a Winograd input transform, or an
    output transform (with its epilogue inlined) whose sides are whole tiles; else
    None."""
    op = state.stages[index].compute_op
    if op.tag == WINOGRAD_INPUT:
        return _schedule_input(state, index, target)
    tile = _output_tile(state, op)
    if tile is None:
        return None
    return _schedule_output(state, index, tile, target)


def _split_channels(state: State, index: int, target: Target) -> tuple[State, list[str]]:
    """Split the innermost (channel) axis into vectors of the target's lanes; the
    names of the channel loops, outermost first."""
    stage = state.stages[index]
    last = len(stage.iters) - 1
    name = stage.iters[last].name
    widest = device_model(target).lanes(stage.compute_op.body.dtype)
    lanes = lanes_dividing(stage.iters[last].extent, widest)
    if lanes == 1:
        return state, [name]
    return SplitStep(index, last, (lanes,)).apply(state), [f"{name}.0", f"{name}.1"]


def _finish(
    state: State, index: int, unrolled: list[str], vectorized: bool, target: Target
) -> State:
    """Unroll the `unrolled` iterators, vectorize the innermost if `vectorized`, run
    iterator 0 in parallel when there is work for more than one core."""
    stage = state.stages[index]
    for name in unrolled:
        state = AnnotationStep(index, stage.iter_index(name), Annotation.UNROLL).apply(state)
    count = len(state.stages[index].iters)
    if vectorized:
        state = AnnotationStep(index, count - 1, Annotation.VECTORIZE).apply(state)
    work = math.prod(it.extent for it in state.stages[index].iters)
    return parallelize_outer(state, index, work, target)


def _schedule_input(state: State, index: int, target: Target) -> State:
    rows, tiles, _ = (it.name for it in state.stages[index].iters)
    state, channels = _split_channels(state, index, target)
    state = reorder_to(state, index, [tiles, *channels[:-1], rows, channels[-1]])
    return _finish(state, index, [rows], len(channels) == 2, target)


def _output_tile(state: State, op: ComputeOp) -> int | None:
    """The tile size of the output transform `op` computes (itself, or an epilogue it
    is inlined into, of the same shape), when its sides are whole tiles."""
    transform = next(
        (
            s.compute_op
            for s in state.stages
            if not s.is_placeholder and s.compute_op.tag == WINOGRAD_OUTPUT
        ),
        None,
    )
    if transform is None or len(op.axes) != 4:
        return None
    if tuple(a.extent for a in op.axes) != tuple(a.extent for a in transform.axes):
        return None
    product = transform.input_tensors[0]
    tile = math.isqrt(product.shape[0]) - 2
    _, height, width, _ = (a.extent for a in op.axes)
    return tile if height % tile == 0 and width % tile == 0 else None


def _schedule_output(state: State, index: int, tile: int, target: Target) -> State:
    batch, rows, columns, _ = (it.name for it in state.stages[index].iters)
    state = SplitStep(index, 1, (tile,)).apply(state)
    state = SplitStep(index, 3, (tile,)).apply(state)
    state, channels = _split_channels(state, index, target)
    in_tile = [f"{rows}.1", f"{columns}.1"]
    order = [batch, f"{rows}.0", f"{columns}.0", *channels[:-1], *in_tile, channels[-1]]
    state = reorder_to(state, index, order)
    state = FuseStep(index, (0, 1, 2)).apply(state)
    return _finish(state, index, in_tile, len(channels) == 2, target)

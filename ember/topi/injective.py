"""Injective ops: each output element is one input element picked by index arithmetic.

reshape maps each run of axes whose sizes multiply to a run of the other shape's
through that run's row-major flat index alone (div/mod; length-1 axes read index 0), so
that a reshape splitting 768 channels into 12 x 64 reads `h*64 + d` and composes with
the transposes and slices around it into an affine index; concat is a balanced tree
of lazy selects on the concatenation axis; split makes one tensor per output; gather
reads at a data-dependent index (negative indices wrap with a floor modulo); pad maps
border positions back into the input (constant fill, reflect, edge); depth_to_space /
space_to_depth are a reshape-transpose-reshape done in one index map.
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.graph.ir import Attrs, TensorType
from ember.graph.ops.attrs import (
    AxisAttrs,
    BlockAttrs,
    PadAttrs,
    ReshapeAttrs,
    SliceAttrs,
    SplitAttrs,
    TileAttrs,
    TransposeAttrs,
)
from ember.graph.ops.tensor import block_plan
from ember.te import Const, Expr, Tensor, cast, compute, maximum, minimum, select
from ember.te.expr import INDEX_DTYPE
from ember.topi.common import (
    INJECTIVE,
    PAD,
    Declaration,
    axis_names,
    offset,
    pad_stage,
    scaled,
    typed,
)

ZERO = Const(0, INDEX_DTYPE)


def flat_index(index: Sequence[Expr], shape: Sequence[int]) -> Expr:
    """Row-major position of `index` in `shape`, as `((i0*d1 + i1)*d2 + i2)`."""
    flat: Expr | None = None
    for i, extent in zip(index, shape, strict=True):
        if extent == 1:
            continue  # its index is always 0
        flat = i if flat is None else flat * extent + i
    return ZERO if flat is None else flat


def unflatten(flat: Expr, shape: Sequence[int]) -> list[Expr]:
    """The index in `shape` of row-major position `flat` (< the size of `shape`)."""
    index: list[Expr] = []
    stride = 1
    for extent in shape:
        stride *= extent
    leading = True
    for extent in shape:
        stride //= max(extent, 1)
        if extent == 1:
            index.append(ZERO)
            continue
        component = flat if stride == 1 else flat // stride
        # The leading component is already < its extent; the others wrap.
        index.append(component if leading else component % extent)
        leading = False
    return index


def _injective(name: str, shape: Sequence[int], element: object, tag: str = INJECTIVE) -> Tensor:
    return compute(shape, element, name, tag, axis_names(len(shape)))  # type: ignore[arg-type]


def _reshape(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    assert isinstance(attrs, ReshapeAttrs)
    x = inputs[0]
    shape = outputs[0].shape

    def element(*ax: Expr) -> Expr:
        return x[tuple(reshaped_index(ax, shape, x.shape))]

    return [_injective("T_reshape", shape, element)]


def reshaped_index(
    index: Sequence[Expr], after: Sequence[int], before: Sequence[int]
) -> list[Expr]:
    """The index in `before` of the element at `index` in the same elements reshaped
    to `after`, run by run of matching axes (`matching_runs`)."""
    runs = matching_runs(before, after)
    if runs is None:  # an empty tensor: no element is ever read
        return unflatten(flat_index(index, after), before)
    result: list[Expr] = [ZERO] * len(before)
    for in_axes, out_axes in runs:
        flat = flat_index([index[a] for a in out_axes], [after[a] for a in out_axes])
        parts = unflatten(flat, [before[a] for a in in_axes])
        for axis, part in zip(in_axes, parts, strict=True):
            result[axis] = part
    return result


def matching_runs(
    before: Sequence[int], after: Sequence[int]
) -> list[tuple[list[int], list[int]]] | None:
    """The axes of a reshape from `before` to `after` in the shortest consecutive runs
    (input axes, output axes) whose sizes have equal products, length-1 axes left out
    (their index is 0); None where a size is 0."""
    if 0 in before or 0 in after:
        return None
    ins = [axis for axis, extent in enumerate(before) if extent != 1]
    outs = [axis for axis, extent in enumerate(after) if extent != 1]
    runs: list[tuple[list[int], list[int]]] = []
    i = o = 0
    while i < len(ins) and o < len(outs):
        in_run, out_run = [ins[i]], [outs[o]]
        in_size, out_size = before[ins[i]], after[outs[o]]
        i, o = i + 1, o + 1
        while in_size != out_size:
            if in_size < out_size:
                in_run.append(ins[i])
                in_size *= before[ins[i]]
                i += 1
            else:
                out_run.append(outs[o])
                out_size *= after[outs[o]]
                o += 1
        runs.append((in_run, out_run))
    return runs


def _transpose(
    inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
) -> list[Tensor]:
    assert isinstance(attrs, TransposeAttrs)
    x = inputs[0]

    def element(*ax: Expr) -> Expr:
        index: list[Expr] = [ZERO] * x.ndim
        for out_axis, in_axis in enumerate(attrs.perm):
            index[in_axis] = ax[out_axis]
        return x[tuple(index)]

    return [_injective("T_transpose", outputs[0].shape, element)]


def _along(index: Sequence[Expr], axis: int, value: Expr) -> tuple[Expr, ...]:
    """`index` with the entry of `axis` replaced by `value`."""
    return (*index[:axis], value, *index[axis + 1 :])


def _concat(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    assert isinstance(attrs, AxisAttrs)
    axis = attrs.axis
    pieces = [t for t in inputs if t.shape[axis] > 0]
    starts = []
    start = 0
    for piece in pieces:
        starts.append(start)
        start += piece.shape[axis]

    def choose(ax: tuple[Expr, ...], first: int, last: int) -> Expr:
        """The element from pieces[first:last], by a balanced tree of selects (a chain
        would nest as deep as there are pieces)."""
        if last - first == 1:
            return pieces[first][_along(ax, axis, offset(ax[axis], -starts[first]))]
        middle = (first + last) // 2
        low, high = choose(ax, first, middle), choose(ax, middle, last)
        return select(ax[axis] < starts[middle], low, high)

    def element(*ax: Expr) -> Expr:
        if not pieces:
            return typed(0, outputs[0].dtype)
        return choose(ax, 0, len(pieces))

    return [_injective("T_concat", outputs[0].shape, element)]


def _split(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    assert isinstance(attrs, SplitAttrs)
    x, axis = inputs[0], attrs.axis
    tensors = []
    begin = 0
    for k, (size, out) in enumerate(zip(attrs.sizes, outputs, strict=True)):

        def element(*ax: Expr, begin: int = begin) -> Expr:
            return x[_along(ax, axis, offset(ax[axis], begin))]

        tensors.append(_injective(f"T_split_{k}", out.shape, element))
        begin += size
    return tensors


def _slice(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    assert isinstance(attrs, SliceAttrs)
    x = inputs[0]

    def element(*ax: Expr) -> Expr:
        return x[
            tuple(
                offset(scaled(i, step), begin)
                for i, begin, step in zip(ax, attrs.begins, attrs.steps, strict=True)
            )
        ]

    return [_injective("T_strided_slice", outputs[0].shape, element)]


def _wrapped(index: Expr, extent: int) -> Expr:
    """An index in -extent..extent-1 (negative counts from the end) as 0..extent-1."""
    return cast(INDEX_DTYPE, index) % extent


def _gather(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    assert isinstance(attrs, AxisAttrs)
    x, indices = inputs
    axis = attrs.axis

    def element(*ax: Expr) -> Expr:
        picked = indices[ax[axis : axis + indices.ndim]]
        rest = ax[axis + indices.ndim :]
        return x[(*ax[:axis], _wrapped(picked, x.shape[axis]), *rest)]

    return [_injective("T_take", outputs[0].shape, element)]


def _gather_elements(
    inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
) -> list[Tensor]:
    assert isinstance(attrs, AxisAttrs)
    x, indices = inputs
    axis = attrs.axis

    def element(*ax: Expr) -> Expr:
        return x[_along(ax, axis, _wrapped(indices[ax], x.shape[axis]))]

    return [_injective("T_gather", outputs[0].shape, element)]


def _border_index(index: Expr, begin: int, end: int, extent: int, mode: str) -> Expr:
    """The input index that padded position `index` copies (reflect or edge mode)."""
    if begin == 0 and end == 0:
        return index
    moved = offset(index, -begin)
    if mode == "edge":
        if begin:
            moved = maximum(moved, 0)
        return minimum(moved, extent - 1) if end else moved
    # reflect about the first and last element (pads are shorter than the axis)
    if begin:
        moved = select(moved < 0, -moved, moved)
    if end:
        moved = select(moved >= extent, (2 * (extent - 1)) - moved, moved)
    return moved


def _pad(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    assert isinstance(attrs, PadAttrs)
    x = inputs[0]
    rank = x.ndim
    before, after = attrs.pads[:rank], attrs.pads[rank:]
    if attrs.mode == "constant":
        return [pad_stage(x, before, after, typed(attrs.value, x.dtype), "T_pad")]

    def element(*ax: Expr) -> Expr:
        return x[
            tuple(
                _border_index(i, b, e, n, attrs.mode)
                for i, b, e, n in zip(ax, before, after, x.shape, strict=True)
            )
        ]

    return [_injective("T_pad", outputs[0].shape, element, PAD)]


def _tile(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    assert isinstance(attrs, TileAttrs)
    x = inputs[0]

    def element(*ax: Expr) -> Expr:
        index: list[Expr] = []
        for i, extent, reps in zip(ax, x.shape, attrs.reps, strict=True):
            index.append(i if reps == 1 else ZERO if extent == 1 else i % extent)
        return x[tuple(index)]

    return [_injective("T_tile", outputs[0].shape, element)]


def _block(op: str) -> Declaration:
    """depth_to_space / space_to_depth: input (rank 4) -> rank 6 -> transpose -> output.
    An output index splits into the transposed rank-6 index, which permutes back to the
    rank-6 input index, which merges into the input index."""

    def declare(
        inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
    ) -> list[Tensor]:
        assert isinstance(attrs, BlockAttrs)
        x = inputs[0]
        shape6, perm, out_shape = block_plan(op, TensorType(x.shape, x.dtype), attrs)
        transposed = [shape6[p] for p in perm]

        def element(*ax: Expr) -> Expr:
            index6: list[Expr] = [ZERO] * 6
            for g, part in enumerate(reshaped_index(ax, out_shape, transposed)):
                index6[perm[g]] = part
            return x[tuple(reshaped_index(index6, shape6, x.shape))]

        return [_injective(f"T_{op}", out_shape, element)]

    return declare


DECLARATIONS: dict[str, Declaration] = {
    "reshape": _reshape,
    "transpose": _transpose,
    "concat": _concat,
    "split": _split,
    "slice": _slice,
    "gather": _gather,
    "gather_elements": _gather_elements,
    "pad": _pad,
    "tile": _tile,
    "depth_to_space": _block("depth_to_space"),
    "space_to_depth": _block("space_to_depth"),
}

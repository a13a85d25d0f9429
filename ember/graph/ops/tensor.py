"""Tensor-manipulation ops: reshape, transpose, concat, split, slice, gather, pad, ...

All of them only move data (no arithmetic), so their cost is `no_macs`. Attributes are
fully resolved by the frontend: static shapes, non-negative axes, clamped slice
bounds; type inference rejects anything else with a ShapeError that names the op and
the offending types.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeAlias

import numpy as np

from ember.errors import ShapeError
from ember.graph.ir import Attrs, TensorType
from ember.graph.ops.attrs import (
    AxisAttrs,
    BlockAttrs,
    PadAttrs,
    ReshapeAttrs,
    ShapeAttrs,
    SliceAttrs,
    SplitAttrs,
    TileAttrs,
    TransposeAttrs,
)
from ember.graph.ops.registry import (
    InferFn,
    OpDef,
    OpPattern,
    ReferenceFn,
    no_macs,
    register_op,
)


def check_axis(op: str, axis: int, ndim: int, what: str = "axis") -> None:
    """Axes in graph attrs are non-negative and inside the tensor's rank."""
    if not 0 <= axis < ndim:
        raise ShapeError(
            f"{op}: {what} {axis} is out of range for a rank-{ndim} tensor "
            f"(graph ops take axes in 0..{ndim - 1}; the frontend normalises negative axes)"
        )


def _shape_text(shape: Sequence[int]) -> str:
    return f"[{', '.join(str(d) for d in shape)}]"


# -- reshape ---------------------------------------------------------------------


def _reshape_infer(inputs: Sequence[TensorType], attrs: ReshapeAttrs) -> tuple[TensorType, ...]:
    (data,) = inputs
    if any(d < 0 for d in attrs.shape):
        raise ShapeError(
            f"reshape: target shape {_shape_text(attrs.shape)} has a negative dimension; "
            "graph reshape takes the complete static shape (resolve -1 and 0 first)"
        )
    count = math.prod(attrs.shape)  # a Python int: an int64 product may wrap
    if count != data.size:
        raise ShapeError(
            f"reshape: cannot reshape {data} ({data.size} elements) to "
            f"{_shape_text(attrs.shape)} ({count} elements)"
        )
    return (TensorType(tuple(attrs.shape), data.dtype),)


def _reshape_reference(xs: Sequence[np.ndarray], attrs: ReshapeAttrs) -> tuple[np.ndarray, ...]:
    return (xs[0].reshape(attrs.shape),)


# -- transpose -------------------------------------------------------------------


def _transpose_infer(inputs: Sequence[TensorType], attrs: TransposeAttrs) -> tuple[TensorType, ...]:
    (data,) = inputs
    if sorted(attrs.perm) != list(range(data.ndim)):
        raise ShapeError(
            f"transpose: perm {list(attrs.perm)} is not a permutation of the axes of {data} "
            f"(expected each of 0..{data.ndim - 1} exactly once)"
        )
    return (TensorType(tuple(data.shape[axis] for axis in attrs.perm), data.dtype),)


def _transpose_reference(xs: Sequence[np.ndarray], attrs: TransposeAttrs) -> tuple[np.ndarray, ...]:
    return (np.transpose(xs[0], attrs.perm),)


# -- concat and split ------------------------------------------------------------


def _concat_infer(inputs: Sequence[TensorType], attrs: AxisAttrs) -> tuple[TensorType, ...]:
    first = inputs[0]
    check_axis("concat", attrs.axis, first.ndim)
    for other in inputs[1:]:
        if other.dtype != first.dtype:
            raise ShapeError(f"concat: input dtypes differ ({first} vs {other})")
        others_match = other.ndim == first.ndim and all(
            a == b
            for axis, (a, b) in enumerate(zip(first.shape, other.shape, strict=True))
            if axis != attrs.axis
        )
        if not others_match:
            raise ShapeError(
                f"concat: inputs {first} and {other} must match on every axis "
                f"except the concatenation axis {attrs.axis}"
            )
    shape = list(first.shape)
    shape[attrs.axis] = sum(t.shape[attrs.axis] for t in inputs)
    return (TensorType(tuple(shape), first.dtype),)


def _concat_reference(xs: Sequence[np.ndarray], attrs: AxisAttrs) -> tuple[np.ndarray, ...]:
    return (np.concatenate(list(xs), axis=attrs.axis),)


def _split_infer(inputs: Sequence[TensorType], attrs: SplitAttrs) -> tuple[TensorType, ...]:
    (data,) = inputs
    check_axis("split", attrs.axis, data.ndim)
    extent = data.shape[attrs.axis]
    if not attrs.sizes or any(s < 0 for s in attrs.sizes) or sum(attrs.sizes) != extent:
        raise ShapeError(
            f"split: sizes {list(attrs.sizes)} must be non-negative and add up to "
            f"{extent}, the extent of axis {attrs.axis} of {data}"
        )
    outputs = []
    for size in attrs.sizes:
        shape = list(data.shape)
        shape[attrs.axis] = size
        outputs.append(TensorType(tuple(shape), data.dtype))
    return tuple(outputs)


def _split_reference(xs: Sequence[np.ndarray], attrs: SplitAttrs) -> tuple[np.ndarray, ...]:
    boundaries = np.cumsum(attrs.sizes)[:-1]
    return tuple(np.split(xs[0], boundaries, axis=attrs.axis))


# -- slice -----------------------------------------------------------------------


def _slice_length(begin: int, end: int, step: int) -> int:
    """len(range(begin, end, step)), for ints of any size (len() of a range longer than
    sys.maxsize raises)."""
    return max(0, -((begin - end) // step))


def _slice_infer(inputs: Sequence[TensorType], attrs: SliceAttrs) -> tuple[TensorType, ...]:
    (data,) = inputs
    lengths = {len(attrs.begins), len(attrs.ends), len(attrs.steps)}
    if lengths != {data.ndim}:
        raise ShapeError(
            f"slice: begins/ends/steps need one entry per axis of {data}, got "
            f"{list(attrs.begins)}/{list(attrs.ends)}/{list(attrs.steps)}"
        )
    shape = []
    for axis, (begin, end, step, extent) in enumerate(
        zip(attrs.begins, attrs.ends, attrs.steps, data.shape, strict=True)
    ):
        if step == 0:
            raise ShapeError(f"slice: step of axis {axis} is 0; steps must be non-zero")
        length = _slice_length(begin, end, step)
        # The first and last index are the extremes of an arithmetic sequence.
        first_and_last = (begin, begin + (length - 1) * step) if length else ()
        if first_and_last and (min(first_and_last) < 0 or max(first_and_last) >= extent):
            raise ShapeError(
                f"slice: {begin}:{end}:{step} on axis {axis} of {data} reads outside "
                f"0..{extent - 1}; clamp begins/ends first"
            )
        shape.append(length)
    return (TensorType(tuple(shape), data.dtype),)


def _slice_reference(xs: Sequence[np.ndarray], attrs: SliceAttrs) -> tuple[np.ndarray, ...]:
    # Python slices, not index lists: an empty slice may span 2**62 positions. Type
    # inference has checked every index taken lies in the axis; a negative end (under
    # a negative step) then means "down to index 0".
    slices = tuple(
        slice(b, None if e < 0 else e, s) if _slice_length(b, e, s) else slice(0, 0)
        for b, e, s in zip(attrs.begins, attrs.ends, attrs.steps, strict=True)
    )
    return (xs[0][slices].copy(),)


# -- gather ----------------------------------------------------------------------

_INDEX_DTYPES = ("int32", "int64")


def _gather_infer(inputs: Sequence[TensorType], attrs: AxisAttrs) -> tuple[TensorType, ...]:
    data, indices = inputs
    check_axis("gather", attrs.axis, data.ndim)
    if indices.dtype not in _INDEX_DTYPES:
        raise ShapeError(f"gather: indices must be int32 or int64, got {indices}")
    axis = attrs.axis
    shape = data.shape[:axis] + indices.shape + data.shape[axis + 1 :]
    return (TensorType(shape, data.dtype),)


def _wrapped_indices(op: str, indices: np.ndarray, extent: int) -> np.ndarray:
    """ONNX index semantics: -extent..-1 count from the end, anything else is an error."""
    if indices.size and (indices.min() < -extent or indices.max() >= extent):
        bad = indices[(indices < -extent) | (indices >= extent)].flat[0]
        raise ShapeError(f"{op}: index {bad} is out of range for an axis of size {extent}")
    return np.where(indices < 0, indices + extent, indices).astype(np.int64)


def _gather_reference(xs: Sequence[np.ndarray], attrs: AxisAttrs) -> tuple[np.ndarray, ...]:
    data, indices = xs
    wrapped = _wrapped_indices("gather", indices, data.shape[attrs.axis])
    return (np.take(data, wrapped, axis=attrs.axis),)


def _gather_elements_infer(
    inputs: Sequence[TensorType], attrs: AxisAttrs
) -> tuple[TensorType, ...]:
    data, indices = inputs
    check_axis("gather_elements", attrs.axis, data.ndim)
    if indices.dtype not in _INDEX_DTYPES:
        raise ShapeError(f"gather_elements: indices must be int32 or int64, got {indices}")
    if indices.ndim != data.ndim:
        raise ShapeError(f"gather_elements: indices {indices} must have the rank of data {data}")
    for axis, (size, extent) in enumerate(zip(indices.shape, data.shape, strict=True)):
        if axis != attrs.axis and size > extent:
            raise ShapeError(
                f"gather_elements: indices {indices} exceed data {data} on axis {axis}"
            )
    return (TensorType(indices.shape, data.dtype),)


def _gather_elements_reference(
    xs: Sequence[np.ndarray], attrs: AxisAttrs
) -> tuple[np.ndarray, ...]:
    data, indices = xs
    wrapped = _wrapped_indices("gather_elements", indices, data.shape[attrs.axis])
    # Every other axis reads the leading `indices.shape[axis]` positions of data.
    leading = tuple(
        slice(None) if axis == attrs.axis else slice(0, size)
        for axis, size in enumerate(indices.shape)
    )
    return (np.take_along_axis(data[leading], wrapped, axis=attrs.axis),)


# -- pad -------------------------------------------------------------------------

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge"}


def _pad_infer(inputs: Sequence[TensorType], attrs: PadAttrs) -> tuple[TensorType, ...]:
    (data,) = inputs
    rank = data.ndim
    if len(attrs.pads) != 2 * rank or any(p < 0 for p in attrs.pads):
        raise ShapeError(
            f"pad: pads {list(attrs.pads)} must be {2 * rank} non-negative numbers "
            f"(all begins, then all ends) for {data}"
        )
    if attrs.mode not in _PAD_MODES:
        raise ShapeError(f"pad: unknown mode {attrs.mode!r}; use one of {', '.join(_PAD_MODES)}")
    for axis, extent in enumerate(data.shape):
        widest = max(attrs.pads[axis], attrs.pads[rank + axis])
        if attrs.mode == "reflect" and widest >= max(extent, 1):
            raise ShapeError(
                f"pad: reflect padding {widest} on axis {axis} of {data} must be smaller "
                "than the axis"
            )
        if attrs.mode == "edge" and widest > 0 and extent == 0:
            raise ShapeError(f"pad: edge padding of the empty axis {axis} of {data}")
    shape = tuple(
        extent + attrs.pads[axis] + attrs.pads[rank + axis]
        for axis, extent in enumerate(data.shape)
    )
    return (TensorType(shape, data.dtype),)


def _pad_reference(xs: Sequence[np.ndarray], attrs: PadAttrs) -> tuple[np.ndarray, ...]:
    data = xs[0]
    rank = data.ndim
    if rank == 0:
        return (data.copy(),)  # nothing to pad (and np.pad takes no empty widths)
    widths = [(attrs.pads[axis], attrs.pads[rank + axis]) for axis in range(rank)]
    if attrs.mode == "constant":
        fill = np.asarray(attrs.value).astype(data.dtype)
        return (np.pad(data, widths, mode="constant", constant_values=fill),)
    return (np.pad(data, widths, mode=_PAD_MODES[attrs.mode]),)  # type: ignore[call-overload]


# -- broadcast_to and tile -------------------------------------------------------


def _broadcast_to_infer(inputs: Sequence[TensorType], attrs: ShapeAttrs) -> tuple[TensorType, ...]:
    (data,) = inputs
    target = tuple(attrs.shape)
    try:
        broadcast = np.broadcast_shapes(data.shape, target)
    except ValueError:
        broadcast = None
    if broadcast != target:
        raise ShapeError(
            f"broadcast_to: {data} cannot be broadcast to {_shape_text(target)} "
            "(each input axis must be 1 or equal the target, aligned from the right)"
        )
    return (TensorType(target, data.dtype),)


def _broadcast_to_reference(xs: Sequence[np.ndarray], attrs: ShapeAttrs) -> tuple[np.ndarray, ...]:
    return (np.broadcast_to(xs[0], attrs.shape).copy(),)


def _tile_infer(inputs: Sequence[TensorType], attrs: TileAttrs) -> tuple[TensorType, ...]:
    (data,) = inputs
    if len(attrs.reps) != data.ndim or any(r < 0 for r in attrs.reps):
        raise ShapeError(
            f"tile: reps {list(attrs.reps)} need one non-negative count per axis of {data}"
        )
    shape = tuple(extent * reps for extent, reps in zip(data.shape, attrs.reps, strict=True))
    return (TensorType(shape, data.dtype),)


def _tile_reference(xs: Sequence[np.ndarray], attrs: TileAttrs) -> tuple[np.ndarray, ...]:
    return (np.tile(xs[0], attrs.reps),)


# -- depth_to_space and space_to_depth -------------------------------------------
# Both are a reshape to rank 6, a transpose and a reshape back to rank 4. The tables
# below give the transpose for each (layout, mode); the rank-6 shapes are spelled out
# in `block_plan`, so the data movement can be read off directly.

_DEPTH_TO_SPACE_PERMS = {
    ("NCHW", "DCR"): (0, 3, 4, 1, 5, 2),  # (n, b, b, c, h, w) -> (n, c, h, b, w, b)
    ("NCHW", "CRD"): (0, 1, 4, 2, 5, 3),  # (n, c, b, b, h, w) -> (n, c, h, b, w, b)
    ("NHWC", "DCR"): (0, 1, 3, 2, 4, 5),  # (n, h, w, b, b, c) -> (n, h, b, w, b, c)
    ("NHWC", "CRD"): (0, 1, 4, 2, 5, 3),  # (n, h, w, c, b, b) -> (n, h, b, w, b, c)
}
_SPACE_TO_DEPTH_PERMS = {
    ("NCHW", "DCR"): (0, 3, 5, 1, 2, 4),  # (n, c, h, b, w, b) -> (n, b, b, c, h, w)
    ("NCHW", "CRD"): (0, 1, 3, 5, 2, 4),  # (n, c, h, b, w, b) -> (n, c, b, b, h, w)
    ("NHWC", "DCR"): (0, 1, 3, 2, 4, 5),  # (n, h, b, w, b, c) -> (n, h, w, b, b, c)
    ("NHWC", "CRD"): (0, 1, 3, 5, 2, 4),  # (n, h, b, w, b, c) -> (n, h, w, c, b, b)
}


def _block_dims(op: str, data: TensorType, attrs: BlockAttrs) -> tuple[int, int, int, int]:
    """(n, c, h, w) of a rank-4 input after checking layout, mode and block size."""
    if attrs.layout not in ("NCHW", "NHWC") or attrs.mode not in ("DCR", "CRD"):
        raise ShapeError(
            f"{op}: layout {attrs.layout!r} / mode {attrs.mode!r} is not supported "
            "(layouts NCHW, NHWC; modes DCR, CRD)"
        )
    if data.ndim != 4 or attrs.block_size < 1:
        raise ShapeError(f"{op}: needs a rank-4 input and a positive block size, got {data}")
    if attrs.layout == "NCHW":
        n, c, h, w = data.shape
    else:
        n, h, w, c = data.shape
    return n, c, h, w


def block_plan(
    op: str, data: TensorType, attrs: BlockAttrs
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(rank-6 shape, transpose perm, output shape) of a block op."""
    n, c, h, w = _block_dims(op, data, attrs)
    b = attrs.block_size
    nchw = attrs.layout == "NCHW"
    if op == "depth_to_space":
        if c % (b * b):
            raise ShapeError(f"{op}: channels of {data} are not divisible by {b}*{b}")
        depth = c // (b * b)
        channel_split = (b, b, depth) if attrs.mode == "DCR" else (depth, b, b)
        perm = _DEPTH_TO_SPACE_PERMS[(attrs.layout, attrs.mode)]
        if nchw:
            return (n, *channel_split, h, w), perm, (n, depth, h * b, w * b)
        return (n, h, w, *channel_split), perm, (n, h * b, w * b, depth)
    if h % b or w % b:
        raise ShapeError(f"{op}: height and width of {data} are not divisible by {b}")
    perm = _SPACE_TO_DEPTH_PERMS[(attrs.layout, attrs.mode)]
    if nchw:
        return (n, c, h // b, b, w // b, b), perm, (n, c * b * b, h // b, w // b)
    return (n, h // b, b, w // b, b, c), perm, (n, h // b, w // b, c * b * b)


def _block_infer(op: str) -> InferFn:
    def infer(inputs: Sequence[TensorType], attrs: BlockAttrs) -> tuple[TensorType, ...]:
        _, _, out_shape = block_plan(op, inputs[0], attrs)
        return (TensorType(out_shape, inputs[0].dtype),)

    return infer


def _block_reference(op: str) -> ReferenceFn:
    def reference(xs: Sequence[np.ndarray], attrs: BlockAttrs) -> tuple[np.ndarray, ...]:
        data = xs[0]
        shape6, perm, out_shape = block_plan(op, TensorType.of(data), attrs)
        return (data.reshape(shape6).transpose(perm).reshape(out_shape),)

    return reference


# -- registration ----------------------------------------------------------------

# attrs type, infer, reference, input counts (min, max or None for variadic), doc.
_OpRow: TypeAlias = tuple[type[Attrs], InferFn, ReferenceFn, tuple[int, int | None], str]

_DATA_MOVEMENT_OPS: dict[str, _OpRow] = {
    "reshape": (
        ReshapeAttrs,
        _reshape_infer,
        _reshape_reference,
        (1, 1),
        "Same elements in row-major order, new static shape.",
    ),
    "transpose": (
        TransposeAttrs,
        _transpose_infer,
        _transpose_reference,
        (1, 1),
        "Permute axes: output axis i is input axis perm[i].",
    ),
    "concat": (
        AxisAttrs,
        _concat_infer,
        _concat_reference,
        (1, None),
        "Join inputs along `axis`; all other axes must match.",
    ),
    "split": (
        SplitAttrs,
        _split_infer,
        _split_reference,
        (1, 1),
        "Cut along `axis` into consecutive pieces of `sizes`; one output per piece.",
    ),
    "slice": (
        SliceAttrs,
        _slice_infer,
        _slice_reference,
        (1, 1),
        "Strided window, one (begin, end, step) per axis, bounds already clamped.",
    ),
    "gather": (
        AxisAttrs,
        _gather_infer,
        _gather_reference,
        (2, 2),
        "Pick entries of `axis` by an index tensor of any rank; negative indices wrap.",
    ),
    "gather_elements": (
        AxisAttrs,
        _gather_elements_infer,
        _gather_elements_reference,
        (2, 2),
        "out[i][j][k] = data[i][index[i][j][k]][k] (for axis 1); negative indices wrap.",
    ),
    "pad": (
        PadAttrs,
        _pad_infer,
        _pad_reference,
        (1, 1),
        "Pad every axis with a constant, a reflection or the edge value.",
    ),
    "broadcast_to": (
        ShapeAttrs,
        _broadcast_to_infer,
        _broadcast_to_reference,
        (1, 1),
        "NumPy broadcasting of one input to a static shape.",
    ),
    "tile": (
        TileAttrs,
        _tile_infer,
        _tile_reference,
        (1, 1),
        "Repeat the whole tensor reps[i] times along axis i.",
    ),
    "depth_to_space": (
        BlockAttrs,
        _block_infer("depth_to_space"),
        _block_reference("depth_to_space"),
        (1, 1),
        "Move channel blocks into b x b spatial blocks (DCR or CRD order).",
    ),
    "space_to_depth": (
        BlockAttrs,
        _block_infer("space_to_depth"),
        _block_reference("space_to_depth"),
        (1, 1),
        "Move b x b spatial blocks into channels (inverse of depth_to_space, same mode).",
    ),
}

# broadcast_to is elementwise with a broadcast input, so it fuses like `add`; the rest
# read a few input elements per output element.
_PATTERNS = {"broadcast_to": OpPattern.BROADCAST}


def _register_all() -> None:
    for name, (attrs_type, infer, reference, (low, high), doc) in _DATA_MOVEMENT_OPS.items():
        register_op(
            OpDef(
                name,
                _PATTERNS.get(name, OpPattern.INJECTIVE),
                infer,
                reference,
                attrs_type=attrs_type,
                min_inputs=low,
                max_inputs=high,
                macs=no_macs,
                doc=doc,
            )
        )


_register_all()

__all__ = ["block_plan", "check_axis"]

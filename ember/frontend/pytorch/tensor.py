"""ATen converters that move data or make it: views and reshapes, permutes, slicing
and selection, concatenation and splitting, padding, casts, and the tensors a
program creates from nothing (full, arange, ...), which become constants.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ember.frontend.pytorch.registry import (
    DEFAULT_FLOAT,
    ConversionContext,
    TorchNode,
    converter,
    unsupported,
)
from ember.graph.ir import Value
from ember.graph.ops.attrs import (
    AxisAttrs,
    PadAttrs,
    ShapeAttrs,
    SliceAttrs,
    SplitAttrs,
    TileAttrs,
    TransposeAttrs,
)

# Slice bounds torch writes for "to the end" (sys.maxsize) and anything past it clamp.
_INT64_MAX = 2**63 - 1


def _dim(node: TorchNode, dim: int, rank: int) -> int:
    if not -max(rank, 1) <= dim < max(rank, 1):
        raise unsupported(node, f"dim {dim} is out of range for a rank-{rank} tensor")
    return dim % max(rank, 1)


def _resolve_shape(
    node: TorchNode, source: Sequence[int], target: Sequence[int]
) -> tuple[int, ...]:
    """A view's shape with its -1 inferred."""
    shape = list(target)
    unknown = [i for i, d in enumerate(shape) if d == -1]
    if unknown:
        known = math.prod(d for d in shape if d != -1)
        shape[unknown[0]] = math.prod(source) // known if known else 0
    if math.prod(shape) != math.prod(source):
        raise unsupported(node, f"cannot view {list(source)} as {list(target)}")
    return tuple(shape)


@converter("aten.view.default")
def convert_view(ctx: ConversionContext, node: TorchNode) -> Value:
    data = node.value(0)
    return ctx.reshape(data, _resolve_shape(node, data.shape, node.ints(1, "size")), node, "")


@converter("aten.squeeze.dims")
def convert_squeeze(ctx: ConversionContext, node: TorchNode) -> Value:
    data = node.value(0)
    rank = data.type.ndim
    dims = node.ints(1, "dim", list(range(rank)))
    axes = {_dim(node, d, rank) for d in dims}
    shape = [d for axis, d in enumerate(data.shape) if not (axis in axes and d == 1)]
    return ctx.reshape(data, shape, node, "")


@converter("aten.unsqueeze.default")
def convert_unsqueeze(ctx: ConversionContext, node: TorchNode) -> Value:
    data = node.value(0)
    axis = _dim(node, node.int_(1, "dim"), data.type.ndim + 1)
    shape = list(data.shape)
    shape.insert(axis, 1)
    return ctx.reshape(data, shape, node, "")


@converter("aten.permute.default")
def convert_permute(ctx: ConversionContext, node: TorchNode) -> Value:
    data = node.value(0)
    perm = tuple(_dim(node, d, data.type.ndim) for d in node.ints(1, "dims"))
    if perm == tuple(range(len(perm))):
        return data
    return ctx.add("transpose", [data], node, TransposeAttrs(perm))


@converter("aten.expand.default")
def convert_expand(ctx: ConversionContext, node: TorchNode) -> Value:
    """expand(self, size): -1 keeps a dimension; new leading dimensions may be added."""
    data = node.value(0)
    size = node.ints(1, "size")
    offset = len(size) - data.type.ndim
    shape = tuple(data.shape[i - offset] if d == -1 else d for i, d in enumerate(size))
    if shape == tuple(data.shape):
        return data
    return ctx.add("broadcast_to", [data], node, ShapeAttrs(shape))


@converter("aten.repeat.default")
def convert_repeat(ctx: ConversionContext, node: TorchNode) -> Value:
    data = node.value(0)
    reps = node.ints(1, "repeats")
    if len(reps) > data.type.ndim:
        data = ctx.reshape(
            data, (1,) * (len(reps) - data.type.ndim) + tuple(data.shape), node, "rank"
        )
    return ctx.add("tile", [data], node, TileAttrs(tuple(reps)))


@converter("aten.cat.default")
def convert_cat(ctx: ConversionContext, node: TorchNode) -> Value:
    tensors = node.arg(0, "tensors")
    if not isinstance(tensors, list | tuple) or not all(isinstance(t, Value) for t in tensors):
        raise unsupported(node, "needs a list of tensors")
    # torch skips empty 1-d tensors in cat (a legacy rule); so does Ember.
    values = [t for t in tensors if t.shape != (0,)]
    axis = _dim(node, node.int_(1, "dim", 0), values[0].type.ndim)
    if len(values) == 1:
        return values[0]
    dtype = values[0].dtype
    values = [ctx.cast(v, dtype, node) for v in values]
    return ctx.add("concat", values, node, AxisAttrs(axis))


def _clamped(start: int | None, end: int | None, extent: int) -> tuple[int, int]:
    """Python slice bounds on an axis of `extent`."""
    start = 0 if start is None else start
    end = extent if end is None or end >= _INT64_MAX else end
    start = start + extent if start < 0 else start
    end = end + extent if end < 0 else end
    return min(max(start, 0), extent), min(max(end, 0), extent)


@converter("aten.slice.Tensor")
def convert_slice(ctx: ConversionContext, node: TorchNode) -> Value:
    """slice(self, dim, start, end, step)."""
    data = node.value(0)
    rank = data.type.ndim
    axis = _dim(node, node.int_(1, "dim", 0), rank)
    start, end = node.arg(2, "start", None), node.arg(3, "end", None)
    step = node.int_(4, "step", 1)
    if step <= 0:
        raise unsupported(node, f"step {step}: torch slices forward only")
    begin, stop = _clamped(start, end, data.shape[axis])  # type: ignore[arg-type]
    if (begin, stop, step) == (0, data.shape[axis], 1):
        return data
    attrs = SliceAttrs.along(data.shape, axis, begin, max(stop, begin), step)
    return ctx.add("slice", [data], node, attrs)


@converter("aten.select.int")
def convert_select(ctx: ConversionContext, node: TorchNode) -> Value:
    """select(self, dim, index): one index of an axis, the axis dropped."""
    data = node.value(0)
    rank = data.type.ndim
    axis = _dim(node, node.int_(1, "dim"), rank)
    extent = data.shape[axis]
    index = node.int_(2, "index")
    if not -extent <= index < extent:
        raise unsupported(node, f"index {index} is out of range for an axis of {extent}")
    index %= extent
    attrs = SliceAttrs.along(data.shape, axis, index, index + 1)
    sliced = ctx.add("slice", [data], node, attrs, "slice")
    shape = [d for i, d in enumerate(data.shape) if i != axis]
    return ctx.reshape(sliced, shape, node, "")


@converter("aten.split_with_sizes.default")
def convert_split(ctx: ConversionContext, node: TorchNode) -> tuple[Value | None, ...]:
    data = node.value(0)
    axis = _dim(node, node.int_(2, "dim", 0), data.type.ndim)
    sizes = node.ints(1, "split_sizes")
    if len(sizes) == 1:
        return (data,)
    return ctx.builder.add_multi("split", [data], SplitAttrs(axis, tuple(sizes)), node.name)


@converter("aten.index_select.default")
def convert_index_select(ctx: ConversionContext, node: TorchNode) -> Value:
    data, indices = node.value(0), node.value(2, "index")
    axis = _dim(node, node.int_(1, "dim"), data.type.ndim)
    return ctx.add("gather", [data, indices], node, AxisAttrs(axis))


@converter("aten.index.Tensor")
def convert_index(ctx: ConversionContext, node: TorchNode) -> Value:
    """self[..., indices, ...] with one index tensor (the others `None`): a gather."""
    data = node.value(0)
    indices = node.arg(1, "indices")
    if not isinstance(indices, list | tuple):
        raise unsupported(node, f"indices {indices!r} are not a list")
    given = [(axis, i) for axis, i in enumerate(indices) if i is not None]
    if len(given) != 1 or not isinstance(given[0][1], Value):
        raise unsupported(node, "advanced indexing with more than one index tensor")
    axis, index = given[0][0], given[0][1]
    return ctx.add("gather", [data, index], node, AxisAttrs(axis))


@converter("aten.gather.default")
def convert_gather(ctx: ConversionContext, node: TorchNode) -> Value:
    data, index = node.value(0), node.value(2, "index")
    axis = _dim(node, node.int_(1, "dim"), data.type.ndim)
    if index.shape != data.shape and any(
        i != d for a, (i, d) in enumerate(zip(index.shape, data.shape, strict=True)) if a != axis
    ):
        raise unsupported(node, "gather with an index smaller than the input off its dim")
    return ctx.add("gather_elements", [data, index], node, AxisAttrs(axis))


@converter("aten.constant_pad_nd.default")
def convert_constant_pad(ctx: ConversionContext, node: TorchNode) -> Value:
    """constant_pad_nd(self, pad, value): `pad` lists (begin, end) pairs from the last
    axis backwards; negative ones crop."""
    data = node.value(0)
    rank = data.type.ndim
    pad = node.ints(1, "pad")
    begins, ends = [0] * rank, [0] * rank
    for k in range(len(pad) // 2):
        begins[rank - 1 - k], ends[rank - 1 - k] = pad[2 * k], pad[2 * k + 1]
    if any(p < 0 for p in begins + ends):
        raise unsupported(node, f"negative padding {pad} (cropping) is not supported")
    value = node.float_(2, "value", 0.0)
    return ctx.add("pad", [data], node, PadAttrs(tuple(begins + ends), "constant", value))


@converter("aten.flip.default")
def convert_flip(ctx: ConversionContext, node: TorchNode) -> Value:
    data = node.value(0)
    rank = data.type.ndim
    axes = {_dim(node, d, rank) for d in node.ints(1, "dims")}
    begins = tuple(d - 1 if a in axes else 0 for a, d in enumerate(data.shape))
    ends = tuple(-1 if a in axes else d for a, d in enumerate(data.shape))
    steps = tuple(-1 if a in axes else 1 for a in range(rank))
    return ctx.add("slice", [data], node, SliceAttrs(begins, ends, steps))


# -- casts ------------------------------------------------------------------------------


@converter("aten._to_copy.default")
def convert_to_copy(ctx: ConversionContext, node: TorchNode) -> Value:
    """`.to(dtype)` (device and layout changes mean nothing to a compiled graph)."""
    data = node.value(0)
    dtype = node.kwargs.get("dtype")
    return data if dtype is None else ctx.cast(data, str(dtype), node)


# -- tensors made from nothing --------------------------------------------------------


def _dtype(node: TorchNode, fill: object, index: int = -1) -> str:
    dtype = node.kwargs.get("dtype")
    if dtype is not None:
        return str(dtype)
    if isinstance(fill, bool):
        return "bool"
    return "int64" if isinstance(fill, int) else DEFAULT_FLOAT


@converter("aten.full.default")
def convert_full(ctx: ConversionContext, node: TorchNode) -> Value:
    fill = node.arg(1, "fill_value")
    return ctx.builder.constant(np.full(node.ints(0, "size"), fill, dtype=_dtype(node, fill)))


@converter("aten.scalar_tensor.default")
def convert_scalar_tensor(ctx: ConversionContext, node: TorchNode) -> Value:
    fill = node.arg(0, "s")
    return ctx.builder.constant(np.asarray(fill, dtype=node.kwargs.get("dtype") or DEFAULT_FLOAT))  # type: ignore[call-overload]


@converter("aten.full_like.default")
def convert_full_like(ctx: ConversionContext, node: TorchNode) -> Value:
    like = node.value(0)
    fill = node.arg(1, "fill_value")
    dtype = node.kwargs.get("dtype") or like.dtype
    return ctx.builder.constant(np.full(like.shape, fill, dtype=str(dtype)))


@converter("aten.arange.start_step")
def convert_arange(ctx: ConversionContext, node: TorchNode) -> Value:
    """arange(start, end, step) (every arange reaches Ember in this form)."""
    start, end, step = (node.arg(i, name, 1) for i, name in enumerate(("start", "end", "step")))
    if not all(isinstance(n, int | float) for n in (start, end, step)):
        raise unsupported(node, f"bounds {start}, {end}, {step} must be static numbers")
    dtype = node.kwargs.get("dtype")
    if dtype is None:
        dtype = "int64" if all(isinstance(n, int) for n in (start, end, step)) else DEFAULT_FLOAT
    return ctx.builder.constant(np.arange(start, end, step, dtype=str(dtype)))  # type: ignore[call-overload]

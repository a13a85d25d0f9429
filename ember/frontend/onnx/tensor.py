"""ONNX converters for tensor manipulation: shapes, slicing, gathering, padding.

Shape-valued inputs (Reshape's shape, Slice's starts, Pad's pads, ...) must be
constants; with the loader's constant folding that includes Shape -> Gather -> Concat
chains, because `Shape` itself becomes a constant here (Ember's shapes are static).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ember.errors import ModelLoadError, ShapeError, UnsupportedOperatorError
from ember.frontend.onnx.registry import (
    ConversionContext,
    OnnxNode,
    converter,
    int_list,
    single_value,
)
from ember.graph.ir import Value
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
from ember.graph.ops.math import broadcast_shapes
from ember.graph.passes.fold_constants import MAX_GROWN_BYTES


def normalize_axis(node: OnnxNode, axis: int, rank: int) -> int:
    """An ONNX axis in -rank..rank-1 as a non-negative graph axis."""
    if not -rank <= axis < rank:
        raise ModelLoadError(f"{node.where}: axis {axis} is out of range for a rank-{rank} input")
    return axis + rank if axis < 0 else axis


def normalize_axes(node: OnnxNode, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """Several axes, normalised; each may appear once."""
    normalized = tuple(normalize_axis(node, int(a), rank) for a in axes)
    if len(set(normalized)) != len(normalized):
        raise ModelLoadError(f"{node.where}: axes {list(axes)} repeat")
    return normalized


def attr_or_input(
    ctx: ConversionContext, node: OnnxNode, name: str, input_index: int, input_opset: int
) -> list[int] | None:
    """An ints operand that was an attribute before `input_opset` and an (optional,
    constant) input from then on; None when absent."""
    if ctx.opset < input_opset:
        value = node.attrs.get(name)
        return None if value is None else int_list(value)
    if node.optional_input(input_index) is None:
        return None
    return int_list(ctx.require_constant(node, input_index, name))


def reshape_to(ctx: ConversionContext, data: Value, shape: Sequence[int], name: str) -> Value:
    return ctx.builder.add("reshape", [data], ReshapeAttrs(tuple(int(d) for d in shape)), name)


# -- shapes ----------------------------------------------------------------------


def resolve_reshape(node: OnnxNode, source: Sequence[int], target: Sequence[int]) -> list[int]:
    """ONNX Reshape's target with 0 (copy the input dim) and -1 (infer) resolved."""
    allow_zero = bool(node.attr("allowzero", 0))
    shape = [
        source[i] if d == 0 and not allow_zero and i < len(source) else d
        for i, d in enumerate(target)
    ]
    unknown = [i for i, d in enumerate(shape) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in shape):
        raise ModelLoadError(
            f"node {node.name!r} (Reshape): target shape {list(target)} may hold at most "
            "one -1 and no other negative number"
        )
    if unknown:
        known = math.prod(d for d in shape if d != -1)
        total = math.prod(source)
        if known == 0 or total % known:
            raise ShapeError(
                f"node {node.name!r} (Reshape): cannot infer the -1 in {list(target)} "
                f"for an input of shape {list(source)}"
            )
        shape[unknown[0]] = total // known
    return shape


@converter("Reshape")
def convert_reshape(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    target = int_list(ctx.require_constant(node, 1, "shape"))
    return [reshape_to(ctx, data, resolve_reshape(node, data.shape, target), node.name)]


@converter("Flatten")
def convert_flatten(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    axis = node.int_attr("axis", 1)
    # axis == rank is allowed: everything goes into the first dimension.
    axis = axis if axis == data.type.ndim else normalize_axis(node, axis, data.type.ndim)
    shape = [math.prod(data.shape[:axis]), math.prod(data.shape[axis:])]
    return [reshape_to(ctx, data, shape, node.name)]


@converter("Squeeze")
def convert_squeeze(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    axes_given = attr_or_input(ctx, node, "axes", 1, input_opset=13)
    if axes_given is None:
        axes = tuple(i for i, d in enumerate(data.shape) if d == 1)
    else:
        axes = normalize_axes(node, axes_given, data.type.ndim)
    for axis in axes:
        if data.shape[axis] != 1:
            raise ShapeError(
                f"node {node.name!r} (Squeeze): axis {axis} of {data.type} has size "
                f"{data.shape[axis]}, only size-1 axes can be squeezed"
            )
    shape = [d for i, d in enumerate(data.shape) if i not in axes]
    return [reshape_to(ctx, data, shape, node.name)]


@converter("Unsqueeze")
def convert_unsqueeze(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    axes_given = attr_or_input(ctx, node, "axes", 1, input_opset=13)
    if axes_given is None:
        raise ModelLoadError(f"node {node.name!r} (Unsqueeze) has no axes")
    out_rank = data.type.ndim + len(axes_given)
    axes = normalize_axes(node, axes_given, out_rank)
    remaining = iter(data.shape)
    shape = [1 if i in axes else next(remaining) for i in range(out_rank)]
    return [reshape_to(ctx, data, shape, node.name)]


@converter("Shape")
def convert_shape(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    # Python slicing clamps and counts negative bounds from the end, as Shape-15 does.
    start = node.int_attr("start", 0)
    end = node.int_attr("end") if "end" in node.attrs else None
    dims = node.input(0).shape[start:end]
    return [ctx.builder.constant(np.array(dims, dtype=np.int64))]


@converter("Size")
def convert_size(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    return [ctx.builder.constant(np.array(node.input(0).type.size, dtype=np.int64))]


@converter("ConstantOfShape")
def convert_constant_of_shape(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    shape = int_list(ctx.require_constant(node, 0, "shape"))
    if any(d < 0 for d in shape):
        raise ShapeError(f"{node.where}: shape {shape} has a negative dimension")
    fill = np.asarray(node.attr("value", np.zeros(1, dtype=np.float32)))
    fill = single_value(node, fill, "the fill value")
    # A broadcast node: it folds to a param when small (`worth_folding`); a huge one
    # stays a node instead of being allocated here.
    scalar = ctx.builder.constant(np.asarray(fill, dtype=fill.dtype).reshape(()))
    return [ctx.builder.add("broadcast_to", [scalar], ShapeAttrs(tuple(shape)), node.name)]


@converter("Range")
def convert_range(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    start, limit, delta = (
        single_value(node, ctx.require_constant(node, i, what), what)
        for i, what in enumerate(("start", "limit", "delta"))
    )
    # ONNX defines the length as ceil((limit - start) / delta), clamped at 0.
    with np.errstate(all="ignore"):
        length = np.float64(limit.item() - start.item()) / np.float64(delta.item())
    if not np.isfinite(length):
        raise ModelLoadError(
            f"{node.where}: start {start.item()}, limit {limit.item()} and delta "
            f"{delta.item()} do not make a finite range"
        )
    count = max(math.ceil(length), 0)
    if count * start.dtype.itemsize > MAX_GROWN_BYTES:
        raise ModelLoadError(
            f"{node.where}: a range of {count} elements; Ember computes Range at import, "
            f"up to {MAX_GROWN_BYTES >> 20} MiB"
        )
    values = start.item() + delta.item() * np.arange(count)
    return [ctx.builder.constant(values.astype(start.dtype))]


# -- data movement ---------------------------------------------------------------


@converter("Transpose")
def convert_transpose(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    default = list(reversed(range(data.type.ndim)))
    perm = int_list(node.attr("perm", default))
    return [ctx.builder.add("transpose", [data], TransposeAttrs(tuple(perm)), node.name)]


@converter("Concat")
def convert_concat(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    inputs = [node.input(i) for i in range(len(node.inputs))]
    axis = normalize_axis(node, node.int_attr("axis"), inputs[0].type.ndim)
    return [ctx.builder.add("concat", inputs, AxisAttrs(axis), node.name)]


def _split_sizes(ctx: ConversionContext, node: OnnxNode, extent: int) -> list[int]:
    sizes = attr_or_input(ctx, node, "split", 1, input_opset=13)
    if sizes is not None:
        if len(sizes) != node.num_outputs:
            raise ShapeError(
                f"node {node.name!r} (Split): split gives {len(sizes)} sizes for "
                f"{node.num_outputs} output(s); give one size per output"
            )
        return sizes
    if "num_outputs" in node.attrs:
        # Split-18: equal pieces of ceil(extent / n), the last one smaller.
        count = node.int_attr("num_outputs")
        if count != node.num_outputs:
            raise ShapeError(
                f"node {node.name!r} (Split): num_outputs is {count}, but the node has "
                f"{node.num_outputs} output(s)"
            )
        piece = math.ceil(extent / count)
        return [min(piece, extent - i * piece) for i in range(count)]
    if extent % node.num_outputs:
        raise ShapeError(
            f"node {node.name!r} (Split): axis of size {extent} cannot be split into "
            f"{node.num_outputs} equal parts; give explicit split sizes"
        )
    return [extent // node.num_outputs] * node.num_outputs


@converter("Split")
def convert_split(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    axis = normalize_axis(node, node.int_attr("axis", 0), data.type.ndim)
    sizes = _split_sizes(ctx, node, data.shape[axis])
    attrs = SplitAttrs(axis, tuple(sizes))
    return list(ctx.builder.add_multi("split", [data], attrs, node.name))


def clamp_slice(start: int, end: int, step: int, extent: int) -> tuple[int, int]:
    """ONNX Slice's bounds: negative ones count from the end, then clamp to the axis
    (to -1 for a negative step's end, meaning "through index 0")."""
    start = start + extent if start < 0 else start
    end = end + extent if end < 0 else end
    if step > 0:
        return min(max(start, 0), extent), min(max(end, 0), extent)
    return min(max(start, 0), extent - 1), min(max(end, -1), extent - 1)


def _slice_operands(
    ctx: ConversionContext, node: OnnxNode
) -> tuple[list[int], list[int], list[int] | None, list[int] | None]:
    """(starts, ends, axes, steps) from Slice-1 attributes or Slice-10 inputs."""
    if ctx.opset < 10:
        axes = node.attrs.get("axes")
        return (
            int_list(node.attr("starts")),
            int_list(node.attr("ends")),
            None if axes is None else int_list(axes),
            None,
        )
    starts = int_list(ctx.require_constant(node, 1, "starts"))
    ends = int_list(ctx.require_constant(node, 2, "ends"))
    optional = [
        None if node.optional_input(i) is None else int_list(ctx.require_constant(node, i, name))
        for i, name in ((3, "axes"), (4, "steps"))
    ]
    return starts, ends, optional[0], optional[1]


@converter("Slice")
def convert_slice(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    rank = data.type.ndim
    starts, ends, axes_given, steps_given = _slice_operands(ctx, node)
    axes = normalize_axes(node, axes_given or range(len(starts)), rank)
    steps = steps_given or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps) or 0 in steps:
        raise ModelLoadError(
            f"node {node.name!r} (Slice): starts/ends/axes/steps must have one entry each "
            "per sliced axis and steps must be non-zero"
        )
    begins, stops, strides = [0] * rank, list(data.shape), [1] * rank
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        begins[axis], stops[axis] = clamp_slice(start, end, step, data.shape[axis])
        strides[axis] = step
    attrs = SliceAttrs(tuple(begins), tuple(stops), tuple(strides))
    return [ctx.builder.add("slice", [data], attrs, node.name)]


@converter("Gather", "GatherElements")
def convert_gather(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data, indices = node.input(0), node.input(1)
    axis = normalize_axis(node, node.int_attr("axis", 0), data.type.ndim)
    op = "gather" if node.op_type == "Gather" else "gather_elements"
    constant = ctx.constant(indices)
    extent = data.shape[axis]
    if constant is not None and constant.size:
        bad = constant[(constant < -extent) | (constant >= extent)]
        if bad.size:
            raise ModelLoadError(
                f"{node.where}: index {bad.flat[0]} is out of range for axis {axis} of size "
                f"{extent} (indices must lie in [{-extent}, {extent - 1}])"
            )
    return [ctx.builder.add(op, [data, indices], AxisAttrs(axis), node.name)]


@converter("Expand")
def convert_expand(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    requested = int_list(ctx.require_constant(node, 1, "shape"))
    # Expand broadcasts both ways: a 1 in `shape` keeps the input's dimension.
    shape = broadcast_shapes(data.shape, requested)
    return [ctx.builder.add("broadcast_to", [data], ShapeAttrs(shape), node.name)]


@converter("Tile")
def convert_tile(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    reps = int_list(ctx.require_constant(node, 1, "repeats"))
    return [ctx.builder.add("tile", [node.input(0)], TileAttrs(tuple(reps)), node.name)]


@converter("DepthToSpace", "SpaceToDepth")
def convert_block(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    # SpaceToDepth gained `mode` in opset 28; older models have none and mean DCR.
    attrs = BlockAttrs(node.int_attr("blocksize"), str(node.attr("mode", "DCR")))
    op = "depth_to_space" if node.op_type == "DepthToSpace" else "space_to_depth"
    return [ctx.builder.add(op, [node.input(0)], attrs, node.name)]


_ONNX_PAD_MODES = ("constant", "reflect", "edge")


def _pad_operands(ctx: ConversionContext, node: OnnxNode, rank: int) -> tuple[list[int], float]:
    """Pads over all axes (begins then ends) and the fill value, from Pad-2 attributes
    or Pad-11 / Pad-18 inputs."""
    if ctx.opset < 11:
        value = node.attr("value", 0.0)
        if not isinstance(value, float | int):
            raise ModelLoadError(f"node {node.name!r} (Pad): value must be a number")
        return int_list(node.attr("pads")), float(value)
    given = int_list(ctx.require_constant(node, 1, "pads"))
    fill_input = node.optional_input(2)
    fill = 0.0
    if fill_input is not None:
        fill_array = ctx.require_constant(node, 2, "constant_value")
        fill = float(fill_array.reshape(-1)[0]) if fill_array.size else 0.0
    axes_input = node.optional_input(3)
    if axes_input is None:
        return given, fill
    axes = normalize_axes(node, int_list(ctx.require_constant(node, 3, "axes")), rank)
    if len(given) != 2 * len(axes):
        raise ModelLoadError(f"node {node.name!r} (Pad): needs two pads per axis in `axes`")
    pads = [0] * (2 * rank)
    for i, axis in enumerate(axes):
        pads[axis], pads[rank + axis] = given[i], given[len(axes) + i]
    return pads, fill


@converter("Pad")
def convert_pad(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    rank = data.type.ndim
    mode = str(node.attr("mode", "constant"))
    if mode not in _ONNX_PAD_MODES:
        raise UnsupportedOperatorError(
            f"node {node.name!r} (Pad): mode {mode!r} is not supported "
            f"(supported: {', '.join(_ONNX_PAD_MODES)})"
        )
    pads, fill = _pad_operands(ctx, node, rank)
    if len(pads) != 2 * rank:
        raise ModelLoadError(f"node {node.name!r} (Pad): needs {2 * rank} pads for {data.type}")
    # Negative pads crop: pad by the positive parts, then slice the negative parts away.
    padded = ctx.builder.add(
        "pad", [data], PadAttrs(tuple(max(p, 0) for p in pads), mode, fill), node.name
    )
    if min(pads, default=0) >= 0:
        return [padded]
    begins = tuple(max(-p, 0) for p in pads[:rank])
    ends = tuple(d - max(-p, 0) for d, p in zip(padded.shape, pads[rank:], strict=True))
    attrs = SliceAttrs(begins, ends, (1,) * rank)
    return [ctx.builder.add("slice", [padded], attrs, f"{node.name}_crop")]


__all__ = ["clamp_slice", "int_list", "normalize_axes", "normalize_axis", "resolve_reshape"]

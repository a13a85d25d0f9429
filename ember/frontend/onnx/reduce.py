"""ONNX converters for reductions (Reduce*), ArgMax / ArgMin and TopK."""

from __future__ import annotations

from ember.errors import ModelLoadError
from ember.frontend.onnx.registry import ConversionContext, OnnxNode, converter, int_list
from ember.frontend.onnx.tensor import normalize_axes, normalize_axis
from ember.graph.ir import NoAttrs, Value
from ember.graph.ops.attrs import ArgReduceAttrs, ReduceAttrs, TopKAttrs

# ONNX op -> graph op.
REDUCE_OPS = {
    "ReduceSum": "reduce_sum",
    "ReduceMean": "reduce_mean",
    "ReduceMax": "reduce_max",
    "ReduceMin": "reduce_min",
    "ReduceProd": "reduce_prod",
    "ReduceSumSquare": "reduce_sum_square",
    "ReduceL1": "reduce_l1",
    "ReduceL2": "reduce_l2",
    "ReduceLogSumExp": "reduce_log_sum_exp",
    "ReduceLogSum": "reduce_sum",  # followed by a log
}

# The opset from which `axes` is an input instead of an attribute (ReduceSum went first).
_AXES_INPUT_OPSET = {"ReduceSum": 13}
_DEFAULT_AXES_INPUT_OPSET = 18


def _reduce_axes(ctx: ConversionContext, node: OnnxNode) -> list[int] | None:
    """The axes operand: attribute or constant input depending on the opset; None or
    an empty list when absent."""
    if ctx.opset < _AXES_INPUT_OPSET.get(node.op_type, _DEFAULT_AXES_INPUT_OPSET):
        axes = node.attrs.get("axes")
        return None if axes is None else int_list(axes)
    if node.optional_input(1) is None:
        return None
    return int_list(ctx.require_constant(node, 1, "axes"))


@converter(*REDUCE_OPS)
def convert_reduce(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    axes = _reduce_axes(ctx, node)
    if not axes and node.flag_attr("noop_with_empty_axes", False):
        # No axes with noop_with_empty_axes=1: the input passes through unchanged.
        return [ctx.builder.add("identity", [data], NoAttrs(), node.name)]
    attrs = ReduceAttrs(
        axes=normalize_axes(node, axes or [], data.type.ndim),
        keepdims=node.flag_attr("keepdims", True),
    )
    reduced = ctx.builder.add(REDUCE_OPS[node.op_type], [data], attrs, node.name)
    if node.op_type == "ReduceLogSum":
        return [ctx.builder.add("log", [reduced], NoAttrs(), f"{node.name}_log")]
    return [reduced]


@converter("ArgMax", "ArgMin")
def convert_arg_reduce(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    attrs = ArgReduceAttrs(
        axis=normalize_axis(node, node.int_attr("axis", 0), data.type.ndim),
        keepdims=node.flag_attr("keepdims", True),
        select_last_index=node.flag_attr("select_last_index", False),
    )
    return [ctx.builder.add(node.op_type.lower(), [data], attrs, node.name)]


@converter("TopK")
def convert_topk(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    if ctx.opset < 10:
        k = node.int_attr("k")
    else:
        k_values = int_list(ctx.require_constant(node, 1, "K"))
        if len(k_values) != 1:
            raise ModelLoadError(f"node {node.name!r} (TopK): K must hold one number")
        k = k_values[0]
    attrs = TopKAttrs(
        k=k,
        axis=normalize_axis(node, node.int_attr("axis", -1), data.type.ndim),
        largest=node.flag_attr("largest", True),
        sorted=node.flag_attr("sorted", True),
    )
    values, indices = ctx.builder.add_multi("topk", [data], attrs, node.name)
    return [values, indices]

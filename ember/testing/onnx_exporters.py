"""The ONNX exporter of each elementwise, data-movement and reduction graph op.

One function (or table row) per op, registered in `ember.testing.to_onnx.EXPORTERS`.
Ops whose ONNX counterpart needs a newer opset than the export targets are written
out of older ONNX ops with the same meaning (Gelu, Mish, HardSwish). The spatial and
neural-network ops are in `onnx_exporters_nn`.
"""

from __future__ import annotations

import math

import numpy as np

from ember.graph.ir import FLOAT_DTYPES, Node
from ember.graph.ops.attrs import (
    AlphaAttrs,
    ArgReduceAttrs,
    AxisAttrs,
    BlockAttrs,
    CastAttrs,
    ClipAttrs,
    GeluAttrs,
    HardSigmoidAttrs,
    PadAttrs,
    ReduceAttrs,
    ReshapeAttrs,
    SeluAttrs,
    ShapeAttrs,
    SliceAttrs,
    SplitAttrs,
    TileAttrs,
    TopKAttrs,
    TransposeAttrs,
)
from ember.graph.ops.tensor import block_plan
from ember.testing.to_onnx import Exporter, exporter, onnx_dtype


def _io(export: Exporter, node: Node) -> tuple[list[str], list[str]]:
    """ONNX names of a node's inputs and outputs."""
    return [export.name(v) for v in node.inputs], [v.name for v in node.outputs]


# Graph op -> ONNX op with the same inputs, outputs and meaning, and no attributes.
ONE_TO_ONE = {
    "identity": "Identity",
    "relu": "Relu",
    "sigmoid": "Sigmoid",
    "tanh": "Tanh",
    "erf": "Erf",
    "exp": "Exp",
    "log": "Log",
    "sqrt": "Sqrt",
    "reciprocal": "Reciprocal",
    "negative": "Neg",
    "abs": "Abs",
    "floor": "Floor",
    "ceil": "Ceil",
    "round": "Round",
    "sign": "Sign",
    "sin": "Sin",
    "cos": "Cos",
    "softplus": "Softplus",
    "softsign": "Softsign",
    "logical_not": "Not",
    "add": "Add",
    "subtract": "Sub",
    "multiply": "Mul",
    "divide": "Div",
    "power": "Pow",
    "maximum": "Max",
    "minimum": "Min",
    "equal": "Equal",
    "less": "Less",
    "less_equal": "LessOrEqual",
    "greater": "Greater",
    "greater_equal": "GreaterOrEqual",
    "logical_and": "And",
    "logical_or": "Or",
    "logical_xor": "Xor",
    "where": "Where",
}


@exporter(*ONE_TO_ONE)
def _one_to_one(export: Exporter, node: Node) -> None:
    inputs, outputs = _io(export, node)
    export.emit(ONE_TO_ONE[node.op], inputs, outputs)


@exporter("mod")
def _mod(export: Exporter, node: Node) -> None:
    # The reference is np.fmod: the remainder takes the dividend's sign, C style.
    inputs, outputs = _io(export, node)
    export.emit("Mod", inputs, outputs, fmod=1)


@exporter("floor_mod")
def _floor_mod(export: Exporter, node: Node) -> None:
    # The reference is np.mod: the remainder takes the divisor's sign, Python style.
    inputs, outputs = _io(export, node)
    if node.inputs[0].dtype not in FLOAT_DTYPES:
        export.emit("Mod", inputs, outputs, fmod=0)
        return
    # ONNX allows only fmod=1 on floats; NumPy's own fix-up turns it into np.mod:
    # a nonzero remainder whose sign differs from the divisor's gets the divisor added.
    _, divisor = inputs
    name, dtype = node.name, node.inputs[0].dtype
    remainder = export.emit_one("Mod", inputs, f"{name}/fmod", fmod=1)
    zero = export.scalar(0, dtype, f"{name}/zero")
    signs_differ = export.emit_one(
        "Xor",
        [
            export.emit_one("Less", [remainder, zero], f"{name}/remainder_negative"),
            export.emit_one("Less", [divisor, zero], f"{name}/divisor_negative"),
        ],
        f"{name}/signs_differ",
    )
    is_zero = export.emit_one("Equal", [remainder, zero], f"{name}/is_zero")
    nonzero = export.emit_one("Not", [is_zero], f"{name}/nonzero")
    fix = export.emit_one("And", [nonzero, signs_differ], f"{name}/fix")
    shifted = export.emit_one("Add", [remainder, divisor], f"{name}/shifted")
    export.emit("Where", [fix, shifted, remainder], outputs)


@exporter("prelu")
def _prelu(export: Exporter, node: Node) -> None:
    inputs, outputs = _io(export, node)
    x = node.inputs[0]
    if node.outputs[0].shape == x.shape:
        export.emit("PRelu", inputs, outputs)
        return
    # ONNX PRelu only broadcasts the slope; a slope that widens x needs the long form.
    dtype = x.dtype
    negative = export.emit_one("Less", [inputs[0], export.scalar(0, dtype, "zero")], node.name)
    scaled = export.emit_one("Mul", inputs, f"{node.name}/scaled")
    export.emit("Where", [negative, scaled, inputs[0]], outputs)


# -- unary ops with attributes ---------------------------------------------------------


@exporter("leaky_relu", "elu")
def _alpha(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, AlphaAttrs)
    inputs, outputs = _io(export, node)
    onnx_op = {"leaky_relu": "LeakyRelu", "elu": "Elu"}[node.op]
    export.emit(onnx_op, inputs, outputs, alpha=node.attrs.alpha)


@exporter("selu")
def _selu(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, SeluAttrs)
    inputs, outputs = _io(export, node)
    export.emit("Selu", inputs, outputs, alpha=node.attrs.alpha, gamma=node.attrs.gamma)


@exporter("hard_sigmoid")
def _hard_sigmoid(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, HardSigmoidAttrs)
    inputs, outputs = _io(export, node)
    export.emit("HardSigmoid", inputs, outputs, alpha=node.attrs.alpha, beta=node.attrs.beta)


@exporter("clip")
def _clip(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, ClipAttrs)
    inputs, outputs = _io(export, node)
    dtype = node.inputs[0].dtype
    # An empty name is ONNX's "optional input not given", here "unbounded".
    bounds = [
        "" if bound is None else export.scalar(bound, dtype, f"{node.name}/{which}")
        for which, bound in (("low", node.attrs.low), ("high", node.attrs.high))
    ]
    while bounds and bounds[-1] == "":
        bounds.pop()
    export.emit("Clip", [inputs[0], *bounds], outputs)


@exporter("cast")
def _cast(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, CastAttrs)
    inputs, outputs = _io(export, node)
    export.emit("Cast", inputs, outputs, to=onnx_dtype(node.attrs.dtype))


@exporter("hard_swish")
def _hard_swish(export: Exporter, node: Node) -> None:
    inputs, outputs = _io(export, node)
    if export.opset >= 14:
        export.emit("HardSwish", inputs, outputs)
        return
    # x * clip(x / 6 + 1 / 2, 0, 1) is x * HardSigmoid(x) with alpha 1/6, beta 1/2.
    gate = export.emit_one("HardSigmoid", inputs, f"{node.name}/gate", alpha=1 / 6, beta=0.5)
    export.emit("Mul", [inputs[0], gate], outputs)


@exporter("mish")
def _mish(export: Exporter, node: Node) -> None:
    inputs, outputs = _io(export, node)
    if export.opset >= 18:
        export.emit("Mish", inputs, outputs)
        return
    softplus = export.emit_one("Softplus", inputs, f"{node.name}/softplus")
    gate = export.emit_one("Tanh", [softplus], f"{node.name}/tanh")
    export.emit("Mul", [inputs[0], gate], outputs)


@exporter("gelu")
def _gelu(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, GeluAttrs)
    inputs, outputs = _io(export, node)
    if export.opset >= 20:
        export.emit("Gelu", inputs, outputs, approximate=node.attrs.approximate)
        return
    x, dtype, name = inputs[0], node.inputs[0].dtype, node.name

    def const(value: float, what: str) -> str:
        return export.scalar(value, dtype, f"{name}/{what}")

    if node.attrs.approximate == "tanh":
        # tanh(sqrt(2 / pi) * (x + 0.044715 x^3))
        cube = export.emit_one("Pow", [x, const(3, "three")], f"{name}/cube")
        inner = export.emit_one("Mul", [cube, const(0.044715, "coefficient")], f"{name}/term")
        inner = export.emit_one("Add", [x, inner], f"{name}/sum")
        inner = export.emit_one("Mul", [inner, const(math.sqrt(2 / math.pi), "scale")], name)
        curve = export.emit_one("Tanh", [inner], f"{name}/tanh")
    else:
        scaled = export.emit_one("Div", [x, const(math.sqrt(2), "sqrt2")], f"{name}/scaled")
        curve = export.emit_one("Erf", [scaled], f"{name}/erf")
    gate = export.emit_one("Add", [curve, const(1, "one")], f"{name}/gate")
    half = export.emit_one("Mul", [x, const(0.5, "half")], f"{name}/half")
    export.emit("Mul", [half, gate], outputs)


# -- data movement --------------------------------------------------------------------


@exporter("reshape")
def _reshape(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, ReshapeAttrs)
    inputs, outputs = _io(export, node)
    shape = export.ints(node.attrs.shape, f"{node.name}/shape")
    export.emit("Reshape", [inputs[0], shape], outputs)


@exporter("transpose")
def _transpose(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, TransposeAttrs)
    inputs, outputs = _io(export, node)
    export.emit("Transpose", inputs, outputs, perm=list(node.attrs.perm))


@exporter("concat", "gather", "gather_elements", "softmax", "log_softmax")
def _with_axis(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, AxisAttrs)
    inputs, outputs = _io(export, node)
    onnx_op = {
        "concat": "Concat",
        "gather": "Gather",
        "gather_elements": "GatherElements",
        "softmax": "Softmax",
        "log_softmax": "LogSoftmax",
    }[node.op]
    export.emit(onnx_op, inputs, outputs, axis=node.attrs.axis)


@exporter("split")
def _split(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, SplitAttrs)
    inputs, outputs = _io(export, node)
    sizes = export.ints(node.attrs.sizes, f"{node.name}/sizes")
    export.emit("Split", [inputs[0], sizes], outputs, axis=node.attrs.axis)


@exporter("slice")
def _slice(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, SliceAttrs)
    inputs, outputs = _io(export, node)
    attrs = node.attrs
    # Ember's end of -1 under a negative step means "through index 0"; ONNX would read
    # -1 as the last index, so it gets the most negative int64, which ONNX clamps to
    # "before index 0".
    lowest = int(np.iinfo(np.int64).min)
    ends = [
        lowest if step < 0 and end == -1 else end
        for end, step in zip(attrs.ends, attrs.steps, strict=True)
    ]
    name = node.name
    export.emit(
        "Slice",
        [
            inputs[0],
            export.ints(attrs.begins, f"{name}/starts"),
            export.ints(ends, f"{name}/ends"),
            export.ints(range(len(ends)), f"{name}/axes"),
            export.ints(attrs.steps, f"{name}/steps"),
        ],
        outputs,
    )


@exporter("pad")
def _pad(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, PadAttrs)
    inputs, outputs = _io(export, node)
    pad_inputs = [inputs[0], export.ints(node.attrs.pads, f"{node.name}/pads")]
    if node.attrs.mode == "constant":
        dtype = node.inputs[0].dtype
        pad_inputs.append(export.scalar(node.attrs.value, dtype, f"{node.name}/value"))
    export.emit("Pad", pad_inputs, outputs, mode=node.attrs.mode)


@exporter("broadcast_to")
def _broadcast_to(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, ShapeAttrs)
    inputs, outputs = _io(export, node)
    export.emit("Expand", [inputs[0], export.ints(node.attrs.shape, f"{node.name}/shape")], outputs)


@exporter("tile")
def _tile(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, TileAttrs)
    inputs, outputs = _io(export, node)
    export.emit("Tile", [inputs[0], export.ints(node.attrs.reps, f"{node.name}/reps")], outputs)


@exporter("depth_to_space", "space_to_depth")
def _block(export: Exporter, node: Node) -> None:
    attrs = node.attrs
    assert isinstance(attrs, BlockAttrs)
    if node.op == "space_to_depth" and attrs.mode != "DCR":
        # ONNX's SpaceToDepth is DCR only (a mode arrives in opset 28, past MAX_OPSET):
        # write out the reshape, transpose and reshape that define the op instead.
        _block_as_reshapes(export, node, attrs)
        return

    def core(data: str, output: str) -> None:
        if node.op == "depth_to_space":
            export.emit(
                "DepthToSpace", [data], [output], blocksize=attrs.block_size, mode=attrs.mode
            )
        else:
            export.emit("SpaceToDepth", [data], [output], blocksize=attrs.block_size)

    export.in_channels_first(node, attrs.layout, core)


def _block_as_reshapes(export: Exporter, node: Node, attrs: BlockAttrs) -> None:
    blocks_shape, perm, out_shape = block_plan(node.op, node.inputs[0].type, attrs)
    inputs, outputs = _io(export, node)
    blocks_shape_name = export.ints(blocks_shape, f"{node.name}/blocks_shape")
    blocks = export.emit_one("Reshape", [inputs[0], blocks_shape_name], f"{node.name}/blocks")
    moved = export.emit_one("Transpose", [blocks], f"{node.name}/moved", perm=list(perm))
    export.emit("Reshape", [moved, export.ints(out_shape, f"{node.name}/shape")], outputs)


# -- reductions -------------------------------------------------------------------------

REDUCTIONS = {
    "reduce_sum": "ReduceSum",
    "reduce_mean": "ReduceMean",
    "reduce_max": "ReduceMax",
    "reduce_min": "ReduceMin",
    "reduce_prod": "ReduceProd",
    "reduce_sum_square": "ReduceSumSquare",
    "reduce_l1": "ReduceL1",
    "reduce_l2": "ReduceL2",
    "reduce_log_sum_exp": "ReduceLogSumExp",
}


@exporter(*REDUCTIONS)
def _reduce(export: Exporter, node: Node) -> None:
    assert isinstance(node.attrs, ReduceAttrs)
    inputs, outputs = _io(export, node)
    onnx_op, axes = REDUCTIONS[node.op], list(node.attrs.axes)
    keepdims = int(node.attrs.keepdims)
    # Empty axes mean "all axes" in both; ONNX says so by leaving them out. ReduceSum
    # takes its axes as an input from opset 13, the others from opset 18.
    if not axes:
        export.emit(onnx_op, inputs, outputs, keepdims=keepdims)
    elif onnx_op == "ReduceSum" or export.opset >= 18:
        axes_input = export.ints(axes, f"{node.name}/axes")
        export.emit(onnx_op, [inputs[0], axes_input], outputs, keepdims=keepdims)
    else:
        export.emit(onnx_op, inputs, outputs, axes=axes, keepdims=keepdims)


@exporter("argmax", "argmin")
def _arg_reduce(export: Exporter, node: Node) -> None:
    attrs = node.attrs
    assert isinstance(attrs, ArgReduceAttrs)
    inputs, outputs = _io(export, node)
    export.emit(
        "ArgMax" if node.op == "argmax" else "ArgMin",
        inputs,
        outputs,
        axis=attrs.axis,
        keepdims=int(attrs.keepdims),
        select_last_index=int(attrs.select_last_index),
    )


@exporter("topk")
def _topk(export: Exporter, node: Node) -> None:
    attrs = node.attrs
    assert isinstance(attrs, TopKAttrs)
    inputs, outputs = _io(export, node)
    k = export.ints([attrs.k], f"{node.name}/k")
    export.emit(
        "TopK",
        [inputs[0], k],
        outputs,
        axis=attrs.axis,
        largest=int(attrs.largest),
        sorted=int(attrs.sorted),
    )

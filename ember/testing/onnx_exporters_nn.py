"""The ONNX exporter of each neural-network graph op: conv (and conv_pack, its weight
unpacked), pooling, normalisations, dense / matmul (and dense_pack, its weight
unpacked), resize, LRN and block-sparse dense.

ONNX's spatial ops are channels-first only, so channels-last nodes are wrapped in
Transposes (`Exporter.in_channels_first`) and their constant weights are transposed
into OI<spatial> order once, in the initializers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from ember.errors import UnsupportedOperatorError
from ember.graph.ir import Node, Value
from ember.graph.ops.attrs import (
    BatchNormAttrs,
    ConvAttrs,
    ConvTransposeAttrs,
    InstanceNormAttrs,
    LayerNormAttrs,
    LayoutAttrs,
    LrnAttrs,
    PoolAttrs,
    QConvAttrs,
    ResizeAttrs,
)
from ember.graph.ops.layout import parse_kernel_layout
from ember.graph.ops.quantized import DOT_GROUP, data_offset
from ember.graph.ops.sparse import SparseDenseAttrs, dense_from_bsr
from ember.testing.to_onnx import Exporter, exporter


def _unsupported(node: Node, why: str) -> UnsupportedOperatorError:
    return UnsupportedOperatorError(f"cannot export node {node.name!r} ({node.op}) to ONNX: {why}")


def _kernel_shape(node: Node) -> list[int]:
    """The spatial kernel sizes of a conv node's weight, whatever its layout."""
    attrs = node.attrs
    assert isinstance(attrs, ConvAttrs)
    weight = node.inputs[1]
    kernel = parse_kernel_layout(attrs.kernel_layout, node.op, weight.type.ndim - 2)
    return [weight.shape[axis] for axis in kernel.spatial_axes]


def _out_in_weight(export: Exporter, node: Node) -> str:
    """A conv's (or qconv's) weight in ONNX's (O, I/groups, *kernel) order."""
    attrs = node.attrs
    assert isinstance(attrs, ConvAttrs)
    weight = node.inputs[1]
    kernel = parse_kernel_layout(attrs.kernel_layout, node.op, weight.type.ndim - 2)
    return export.transposed(weight, kernel.to_out_in_first, f"{weight.name}/oi")


@exporter("conv")
def _conv(export: Exporter, node: Node) -> None:
    _emit_conv(export, node, _out_in_weight(export, node), _kernel_shape(node))


@exporter("conv_pack")
def _conv_pack(export: Exporter, node: Node) -> None:
    weight_value = node.inputs[1]
    blocks, *kernel, inputs, block = weight_value.shape
    rank = len(kernel)
    # [O/b, *kernel, I, b] -> [O/b, b, I, *kernel] -> Conv's (O, I, *kernel).
    order = (0, rank + 2, rank + 1, *range(1, rank + 1))
    transposed = export.transposed(weight_value, order, f"{weight_value.name}/t")
    shape = export.ints((blocks * block, inputs, *kernel), f"{weight_value.name}/shape")
    weight = export.emit_one("Reshape", [transposed, shape], f"{weight_value.name}/oi")
    _emit_conv(export, node, weight, kernel)


def _emit_conv(export: Exporter, node: Node, weight: str, kernel: list[int]) -> None:
    """ONNX's Conv of `node`'s data (channels-first, transposed there and back if need
    be) with `weight`, already in ONNX's (O, I/groups, *kernel)."""
    attrs = node.attrs
    assert isinstance(attrs, ConvAttrs)

    def core(data: str, output: str) -> None:
        export.emit(
            "Conv",
            [data, weight],
            [output],
            kernel_shape=kernel,
            strides=list(attrs.strides),
            pads=list(attrs.padding),
            dilations=list(attrs.dilations),
            group=attrs.groups,
        )

    export.in_channels_first(node, attrs.layout, core)


@exporter("conv_transpose")
def _conv_transpose(export: Exporter, node: Node) -> None:
    attrs = node.attrs
    assert isinstance(attrs, ConvTransposeAttrs)
    weight_value = node.inputs[1]
    weight = export.name(weight_value)

    def core(data: str, output: str) -> None:
        export.emit(
            "ConvTranspose",
            [data, weight],
            [output],
            kernel_shape=list(weight_value.shape[2:]),
            strides=list(attrs.strides),
            pads=list(attrs.padding),
            output_padding=list(attrs.output_padding),
            dilations=list(attrs.dilations),
            group=attrs.groups,
        )

    export.in_channels_first(node, attrs.layout, core)


@exporter("max_pool", "avg_pool")
def _pool(export: Exporter, node: Node) -> None:
    attrs = node.attrs
    assert isinstance(attrs, PoolAttrs)
    common: dict[str, Any] = {
        "kernel_shape": list(attrs.kernel),
        "strides": list(attrs.strides),
        "pads": list(attrs.padding),
        "ceil_mode": int(attrs.ceil_mode),
    }
    dilated = any(d != 1 for d in attrs.dilations)
    if node.op == "max_pool":
        onnx_op = "MaxPool"
        common["dilations"] = list(attrs.dilations)
    else:
        onnx_op = "AveragePool"
        common["count_include_pad"] = int(attrs.count_include_pad)
        if dilated and export.opset < 19:
            raise _unsupported(node, "AveragePool takes dilations from opset 19; export at 19+")
        if dilated:
            common["dilations"] = list(attrs.dilations)
    export.in_channels_first(
        node, attrs.layout, lambda data, output: export.emit(onnx_op, [data], [output], **common)
    )


@exporter("global_avg_pool", "global_max_pool")
def _global_pool(export: Exporter, node: Node) -> None:
    attrs = node.attrs
    assert isinstance(attrs, LayoutAttrs)
    onnx_op = "GlobalAveragePool" if node.op == "global_avg_pool" else "GlobalMaxPool"
    export.in_channels_first(
        node, attrs.layout, lambda data, output: export.emit(onnx_op, [data], [output])
    )


@exporter("batch_norm")
def _batch_norm(export: Exporter, node: Node) -> None:
    attrs = node.attrs
    assert isinstance(attrs, BatchNormAttrs)
    x = node.inputs[0]
    data, output = export.name(x), node.outputs[0].name
    if attrs.axis == 1:
        vectors = [export.name(v) for v in node.inputs[1:]]
        export.emit("BatchNormalization", [data, *vectors], [output], epsilon=attrs.epsilon)
        return
    arrays = [export.param_array(v) for v in node.inputs[1:]]
    if all(array is not None for array in arrays):
        # ONNX normalises axis 1 only. With constant statistics, a channels-last batch
        # norm is x * multiplier + shift, which needs no transposes.
        scale, bias, mean, variance = (np.asarray(a, dtype=np.float64) for a in arrays)
        multiplier = scale / np.sqrt(variance + attrs.epsilon)
        shift = bias - mean * multiplier
        along_axis = (-1,) + (1,) * (x.type.ndim - 1 - attrs.axis)
        multiplier_name, shift_name = (
            export.constant(a.reshape(along_axis).astype(x.dtype), f"{node.name}/{what}")
            for a, what in ((multiplier, "multiplier"), (shift, "shift"))
        )
        scaled = export.emit_one("Mul", [data, multiplier_name], f"{node.name}/scaled")
        export.emit("Add", [scaled, shift_name], [output])
        return
    if x.type.ndim < 2:
        raise _unsupported(node, "ONNX BatchNormalization needs data of rank >= 2")
    # Computed statistics: move the channel axis to 1 and back.
    order = [axis for axis in range(x.type.ndim) if axis != attrs.axis]
    order.insert(1, attrs.axis)
    moved = export.emit_one("Transpose", [data], f"{node.name}/to_axis1", perm=order)
    vectors = [export.name(v) for v in node.inputs[1:]]
    normalised = export.emit_one(
        "BatchNormalization", [moved, *vectors], node.name, epsilon=attrs.epsilon
    )
    back = [int(axis) for axis in np.argsort(order)]
    export.emit("Transpose", [normalised], [output], f"{node.name}/from_axis1", perm=back)


@exporter("instance_norm")
def _instance_norm(export: Exporter, node: Node) -> None:
    attrs = node.attrs
    assert isinstance(attrs, InstanceNormAttrs)
    scale, bias = (export.name(v) for v in node.inputs[1:])
    export.in_channels_first(
        node,
        attrs.layout,
        lambda data, output: export.emit(
            "InstanceNormalization", [data, scale, bias], [output], epsilon=attrs.epsilon
        ),
    )


@exporter("layer_norm")
def _layer_norm(export: Exporter, node: Node) -> None:
    attrs = node.attrs
    assert isinstance(attrs, LayerNormAttrs)
    x, scale, bias = node.inputs
    normalised_shape = x.shape[attrs.axis :]
    # ONNX Runtime wants scale and bias of exactly the normalised shape.
    scale_name, bias_name = (_broadcast(export, v, normalised_shape) for v in (scale, bias))
    data, output = export.name(x), node.outputs[0].name
    if export.opset >= 17:
        export.emit(
            "LayerNormalization",
            [data, scale_name, bias_name],
            [output],
            axis=attrs.axis,
            epsilon=attrs.epsilon,
        )
        return
    # Before opset 17: (x - mean) / sqrt(variance + epsilon) * scale + bias.
    axes = list(range(attrs.axis, x.type.ndim))
    name = node.name
    mean = export.emit_one("ReduceMean", [data], f"{name}/mean", axes=axes, keepdims=1)
    centred = export.emit_one("Sub", [data, mean], f"{name}/centred")
    squares = export.emit_one("Mul", [centred, centred], f"{name}/squares")
    variance = export.emit_one("ReduceMean", [squares], f"{name}/variance", axes=axes, keepdims=1)
    epsilon = export.scalar(attrs.epsilon, x.dtype, f"{name}/epsilon")
    shifted = export.emit_one("Add", [variance, epsilon], f"{name}/shifted")
    deviation = export.emit_one("Sqrt", [shifted], f"{name}/deviation")
    normalised = export.emit_one("Div", [centred, deviation], f"{name}/normalised")
    scaled = export.emit_one("Mul", [normalised, scale_name], f"{name}/scaled")
    export.emit("Add", [scaled, bias_name], [output])


def _broadcast(export: Exporter, value: Value, shape: tuple[int, ...]) -> str:
    """`value` broadcast to `shape`: pre-broadcast if a param, an Expand otherwise."""
    if value.shape == shape:
        return export.name(value)
    array = export.param_array(value)
    if array is not None:
        return export.constant(np.broadcast_to(array, shape), f"{value.name}/broadcast")
    target = export.ints(shape, f"{value.name}/shape")
    return export.emit_one("Expand", [export.name(value), target], f"{value.name}/broadcast")


@exporter("dense")
def _dense(export: Exporter, node: Node) -> None:
    x, weight = node.inputs
    # dense keeps its weight as (N, K); MatMul wants (K, N).
    transposed = export.transposed(weight, (1, 0), f"{weight.name}/t")
    export.emit("MatMul", [export.name(x), transposed], [node.outputs[0].name])


@exporter("dense_pack")
def _dense_pack(export: Exporter, node: Node) -> None:
    x, weight = node.inputs
    blocks, columns, block = weight.shape
    # [N/b, K, b] -> [K, N/b, b] -> MatMul's (K, N).
    transposed = export.transposed(weight, (1, 0, 2), f"{weight.name}/t")
    shape = export.ints((columns, blocks * block), f"{weight.name}/shape")
    unpacked = export.emit_one("Reshape", [transposed, shape], f"{weight.name}/unpacked")
    export.emit("MatMul", [export.name(x), unpacked], [node.outputs[0].name])


@exporter("matmul")
def _matmul(export: Exporter, node: Node) -> None:
    export.emit("MatMul", [export.name(v) for v in node.inputs], [node.outputs[0].name])


@exporter("lrn")
def _lrn(export: Exporter, node: Node) -> None:
    attrs = node.attrs
    assert isinstance(attrs, LrnAttrs)
    export.emit(
        "LRN",
        [export.name(node.inputs[0])],
        [node.outputs[0].name],
        size=attrs.size,
        alpha=attrs.alpha,
        beta=attrs.beta,
        bias=attrs.bias,
    )


@exporter("sparse_dense")
def _sparse_dense(export: Exporter, node: Node) -> None:
    attrs = node.attrs
    assert isinstance(attrs, SparseDenseAttrs)
    x, *bsr = node.inputs
    arrays = [export.param_array(v) for v in bsr]
    if any(array is None for array in arrays):
        raise _unsupported(node, "its BSR weight must be params to be densified for ONNX")
    data, indices, indptr = (np.asarray(array) for array in arrays)
    weight = dense_from_bsr(data, indices, indptr, attrs)
    # ONNX has no block-sparse op: the densified W[N, K], transposed for MatMul.
    transposed = export.constant(weight.T, f"{node.name}/dense_weight")
    export.emit("MatMul", [export.name(x), transposed], [node.outputs[0].name])


@exporter("resize")
def _resize(export: Exporter, node: Node) -> None:
    attrs = node.attrs
    assert isinstance(attrs, ResizeAttrs)
    mode = attrs.coordinate_transformation_mode
    if mode == "half_pixel_symmetric" and export.opset < 19:
        raise _unsupported(node, "half_pixel_symmetric needs ONNX opset 19 or later")
    if mode == "tf_half_pixel_for_nn":
        raise _unsupported(node, "ONNX dropped tf_half_pixel_for_nn in opset 13")
    x = node.inputs[0]
    scales_or_sizes = _resize_shape_inputs(export, node, x.shape, attrs)
    export.emit(
        "Resize",
        [export.name(x), "", *scales_or_sizes],
        [node.outputs[0].name],
        mode=attrs.mode,
        coordinate_transformation_mode=mode,
        nearest_mode=attrs.nearest_mode,
        cubic_coeff_a=attrs.cubic_coeff_a,
        exclude_outside=int(attrs.exclude_outside),
    )


def _resize_shape_inputs(
    export: Exporter, node: Node, in_shape: tuple[int, ...], attrs: ResizeAttrs
) -> list[str]:
    """Resize's (scales, sizes) inputs that make ONNX Runtime use Ember's scales.

    Given sizes, ONNX takes the scale as out / in; given scales, it takes the output
    size as in * scale rounded down, a product that float rounding can put just below
    an integer (5 * 1.4 = 6.99...). So sizes when Ember's scales are out / in, scales
    when their product is safely the size, and an error otherwise."""
    scales = np.asarray(attrs.scales, dtype=np.float32)
    sizes = np.asarray(attrs.sizes, dtype=np.int64)
    if np.array_equal(sizes.astype(np.float32) / np.asarray(in_shape, np.float32), scales):
        return ["", export.ints(attrs.sizes, f"{node.name}/sizes")]
    products = [
        np.asarray(in_shape, dtype) * scales.astype(dtype) for dtype in (np.float32, np.float64)
    ]
    if all(np.array_equal(np.floor(product).astype(np.int64), sizes) for product in products):
        return [export.constant(scales, f"{node.name}/scales")]
    raise _unsupported(
        node, f"scales {attrs.scales} and sizes {attrs.sizes} cannot both be kept in ONNX"
    )


@exporter("qconv")
def _qconv(export: Exporter, node: Node) -> None:
    """ONNX's ConvInteger: the same sum of (x - x_zero_point) * w in int32."""
    attrs = node.attrs
    assert isinstance(attrs, QConvAttrs)
    weight = _out_in_weight(export, node)
    zero = export.scalar(attrs.data_zero_point, node.inputs[0].dtype, f"{node.name}/zero_point")
    _emit_conv_integer(export, node, export.name(node.inputs[0]), weight, zero, None)


@exporter("qconv_pack")
def _qconv_pack(export: Exporter, node: Node) -> None:
    """ConvInteger over the data (made unsigned as the kernels make it) with the weight
    unpacked, plus what the zero-point padding adds: z * sum(w) over every tap and
    channel (padding channels included), and the correction input."""
    attrs = node.attrs
    assert isinstance(attrs, QConvAttrs)
    data_value, weight_value, correction = node.inputs
    blocks, *kernel, groups, block, _ = weight_value.shape
    rank = len(kernel)
    channels = data_value.shape[-1]
    # [O/b, *kernel, I4/4, b, 4] -> [O/b, b, I4/4, 4, *kernel] -> (O, I4, *kernel)
    order = (0, rank + 2, rank + 1, rank + 3, *range(1, rank + 1))
    transposed = export.transposed(weight_value, order, f"{weight_value.name}/t")
    shape = export.ints((blocks * block, groups * DOT_GROUP, *kernel), f"{node.name}/shape")
    full = export.emit_one("Reshape", [transposed, shape], f"{weight_value.name}/oi")
    starts, ends = (
        export.ints([0], f"{node.name}/start"),
        export.ints([channels], f"{node.name}/end"),
    )
    axis = export.ints([1], f"{node.name}/axis")
    weight = export.emit_one("Slice", [full, starts, ends, axis], f"{weight_value.name}/real")
    offset = data_offset(data_value.dtype)
    zero_point = attrs.data_zero_point + offset
    data = export.name(data_value)
    if offset:  # int8 data as the unsigned x + 128
        wide = export.emit_one("Cast", [data], f"{node.name}/wide", to=TensorProto.INT32)
        shift = export.scalar(offset, "int32", f"{node.name}/offset")
        data = export.emit_one("Add", [wide, shift], f"{node.name}/shifted")
        data = export.emit_one("Cast", [data], f"{node.name}/unsigned", to=TensorProto.UINT8)
    zero = export.scalar(zero_point, "uint8", f"{node.name}/zero_point")
    # z * sum(w) + correction, per output channel
    sums = export.emit_one("Cast", [full], f"{node.name}/w32", to=TensorProto.INT32)
    axes = export.ints(list(range(1, rank + 2)), f"{node.name}/axes")  # axes as input: 13+
    sums = export.emit_one("ReduceSum", [sums, axes], f"{node.name}/sums", keepdims=0)
    scaled = export.emit_one(
        "Mul", [sums, export.scalar(zero_point, "int32", f"{node.name}/z")], f"{node.name}/zsum"
    )
    extra = export.emit_one("Add", [scaled, export.name(correction)], f"{node.name}/extra")
    _emit_conv_integer(export, node, data, weight, zero, extra)


def _emit_conv_integer(
    export: Exporter, node: Node, data: str, weight: str, zero: str, extra: str | None
) -> None:
    """ConvInteger of `data` (the node's data, maybe converted, in the node's layout)
    and an (O, I, *kernel) weight, plus `extra` per output channel if given."""
    attrs = node.attrs
    assert isinstance(attrs, QConvAttrs)
    rank = len(attrs.strides)

    def core(data_first: str, output: str) -> None:
        common: dict[str, Any] = {
            "strides": list(attrs.strides),
            "pads": list(attrs.padding),
            "dilations": list(attrs.dilations),
            "group": attrs.groups,
        }
        if extra is None:
            export.emit("ConvInteger", [data_first, weight, zero], [output], **common)
            return
        sums = export.emit_one("ConvInteger", [data_first, weight, zero], f"{node.name}/sums",
                               **common)  # fmt: skip
        per_channel = export.ints([-1, *([1] * rank)], f"{node.name}/per_channel")
        column = export.emit_one("Reshape", [extra, per_channel], f"{node.name}/column")
        export.emit("Add", [sums, column], [output])

    export.in_channels_first(node, attrs.layout, core, data)

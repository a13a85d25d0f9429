"""ONNX neural-network converters against ONNX Runtime, across opsets and attribute
forms (auto_pad, output_shape, optional inputs), plus the errors a user sees for what
Ember does not import."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx_models import check_one_node, graph_model, one_node_model, onnx_model

from ember.errors import UnsupportedOperatorError
from ember.frontend import from_onnx
from ember.testing.oracle import check_against_onnxruntime, run_onnxruntime

RNG = np.random.default_rng(11)


def _random(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _ops(model: onnx.ModelProto) -> list[str]:
    graph, _ = from_onnx(model)
    return [node.op for node in graph.nodes]


def _unsupported(
    op_type: str,
    x: np.ndarray,
    opset: int,
    constants: dict[str, np.ndarray] | None = None,
    outputs: int = 1,
    input_names: list[str] | None = None,
    **attributes: object,
) -> str:
    model = one_node_model(
        op_type, x, opset, constants, outputs, input_names, name="n", **attributes
    )
    with pytest.raises(UnsupportedOperatorError) as info:
        from_onnx(model)
    return str(info.value)


# -- Conv / ConvTranspose ---------------------------------------------------------------


@pytest.mark.parametrize("auto_pad", ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("opset", [7, 11])
def test_conv_auto_pad_and_bias(auto_pad: str, opset: int) -> None:
    x = _random(2, 4, 9, 8)
    constants = {"w": _random(6, 2, 3, 4), "b": _random(6)}
    pads = {"pads": [1, 0, 2, 1]} if auto_pad == "NOTSET" else {}
    check_one_node(
        "Conv",
        x,
        opset,
        constants,
        auto_pad=auto_pad,
        strides=[2, 3],
        group=2,
        dilations=[1, 2] if auto_pad == "NOTSET" else [1, 1],
        **pads,
    )


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attributes"),
    [
        ((1, 3, 11), (5, 3, 3), {"strides": [2], "pads": [1, 2], "kernel_shape": [3]}),
        ((1, 2, 4, 5, 6), (3, 2, 2, 3, 2), {"auto_pad": "SAME_UPPER", "strides": [1, 2, 2]}),
        ((1, 6, 7, 7), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),  # depthwise
    ],
)
def test_conv_ranks_and_groups(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], attributes: dict[str, object]
) -> None:
    check_one_node("Conv", _random(*x_shape), 13, {"w": _random(*w_shape)}, **attributes)


def test_conv_of_data_without_spatial_axes_states_the_rank() -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="n")
    outputs = {"y": (onnx.TensorProto.FLOAT, None)}
    model = onnx_model([node], {"x": _random(2, 3)}, outputs, 13, {"w": _random(4, 3)})
    with pytest.raises(UnsupportedOperatorError) as info:
        from_onnx(model)
    assert str(info.value) == (
        "node 'n' (Conv): input float32[2, 3] has rank 2; Ember supports 1-d, 2-d and "
        "3-d data (N, C, spatial...: rank 3, 4 or 5)"
    )


def test_conv_graph_is_conv_then_bias_add() -> None:
    x = _random(1, 3, 5, 5)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    constants = {"w": _random(4, 3, 3, 3), "b": _random(4)}
    assert _ops(onnx_model([node], {"x": x}, ["y"], 13, constants)) == ["conv", "add"]


@pytest.mark.parametrize(
    "attributes",
    [
        {"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 0]},
        {"strides": [2, 3], "dilations": [2, 1], "group": 2},
        {"strides": [2, 2], "output_shape": [10, 9]},
        {"strides": [2, 2], "output_shape": [12, 10]},  # longer: zeros at the end
        {"strides": [2, 2], "output_shape": [10, 9], "auto_pad": "SAME_UPPER"},
        {"strides": [3, 2], "auto_pad": "SAME_UPPER"},
        {"strides": [3, 2], "auto_pad": "SAME_LOWER"},
        {"strides": [2, 2], "auto_pad": "VALID", "output_padding": [1, 1]},
    ],
)
def test_conv_transpose(attributes: dict[str, object]) -> None:
    x = _random(2, 4, 5, 4)
    groups = 2 if attributes.get("group") == 2 else 1
    constants = {"w": _random(4, 3, 3, 3), "b": _random(3 * groups)}
    check_one_node("ConvTranspose", x, 11, constants, **attributes)


def test_conv_transpose_1d_and_3d() -> None:
    check_one_node(
        "ConvTranspose", _random(1, 2, 6), 13, {"w": _random(2, 3, 4)}, strides=[3], pads=[1, 2]
    )
    check_one_node(
        "ConvTranspose",
        _random(1, 2, 3, 3, 2),
        13,
        {"w": _random(2, 2, 2, 2, 3)},
        strides=[2, 1, 2],
    )


# -- pooling ----------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [7, 10, 12, 19])
@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool"])
def test_pool_across_opsets(op_type: str, opset: int) -> None:
    attributes: dict[str, object] = {
        "kernel_shape": [3, 2],
        "strides": [2, 2],
        "pads": [1, 0, 1, 1],
    }
    if opset >= 10:
        attributes["ceil_mode"] = 1
    if opset >= 19 or (op_type == "MaxPool" and opset >= 10):
        attributes["dilations"] = [1, 2]
    if op_type == "AveragePool":
        attributes["count_include_pad"] = 1
    check_one_node(op_type, _random(2, 3, 8, 9), opset, **attributes)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_pool_auto_pad(auto_pad: str) -> None:
    x = _random(1, 2, 7, 6)
    check_one_node("MaxPool", x, 11, kernel_shape=[3, 2], strides=[2, 2], auto_pad=auto_pad)
    check_one_node("AveragePool", x, 11, kernel_shape=[2, 3], strides=[2, 3], auto_pad=auto_pad)


def test_pools_1d_3d_and_global() -> None:
    check_one_node("MaxPool", _random(1, 2, 9), 12, kernel_shape=[3], strides=[2], pads=[1, 1])
    check_one_node(
        "AveragePool", _random(1, 2, 4, 5, 6), 11, kernel_shape=[2, 2, 3], strides=[2, 2, 2]
    )
    for shape in [(2, 3, 5), (1, 4, 3, 5), (1, 2, 3, 2, 4)]:
        check_one_node("GlobalAveragePool", _random(*shape), 13)
        check_one_node("GlobalMaxPool", _random(*shape), 13)


def test_max_pool_indices_are_unsupported_when_used() -> None:
    x = _random(1, 1, 4, 4)
    message = _unsupported("MaxPool", x, 12, outputs=2, kernel_shape=[2, 2])
    assert message == (
        "node 'n' (MaxPool): Ember's converter does not produce output #1 ('y1'), which "
        "the model uses"
    )
    # Declared but unused, the Indices output is harmless.
    node = helper.make_node("MaxPool", ["x"], ["y", "indices"], kernel_shape=[2, 2])
    check_against_onnxruntime(onnx_model([node], {"x": x}, ["y"], 12), {"x": x})


# -- normalisation --------------------------------------------------------------------


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
def test_batch_norm_across_opsets(opset: int) -> None:
    constants = {
        "scale": _random(3),
        "bias": _random(3),
        "mean": _random(3),
        "var": RNG.uniform(0.5, 2, 3).astype(np.float32),
    }
    check_one_node("BatchNormalization", _random(2, 3, 4, 5), opset, constants, epsilon=1e-3)


def test_batch_norm_training_is_unsupported() -> None:
    constants = {"s": _random(3), "b": _random(3), "m": _random(3), "v": _random(3) ** 2}
    message = _unsupported(
        "BatchNormalization", _random(2, 3, 4), 15, constants, outputs=3, training_mode=1
    )
    assert message == (
        "node 'n' (BatchNormalization): training_mode=1 is not supported; export the model "
        "in eval mode"
    )
    # Opset 9 with the statistics outputs of training (typed by hand:
    # ONNX's shape inference leaves them untyped).
    statistics = ["mean", "var", "saved_mean", "saved_var"]
    node = helper.make_node("BatchNormalization", ["x", *constants], ["y", *statistics], name="n")
    model = onnx_model([node], {"x": _random(2, 3, 4)}, ["y"], 9, constants)
    model.graph.output.extend(
        helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [3]) for name in statistics
    )
    with pytest.raises(UnsupportedOperatorError) as info:
        from_onnx(model)
    assert str(info.value) == (
        "node 'n' (BatchNormalization): the mean and variance outputs of training mode are "
        "not supported; Ember imports inference graphs (export the model in eval mode)"
    )


def test_instance_and_layer_norm() -> None:
    for shape in [(2, 3, 7), (1, 4, 3, 5)]:
        constants = {"s": _random(shape[1]), "b": _random(shape[1])}
        check_one_node("InstanceNormalization", _random(*shape), 7, constants, epsilon=1e-3)
    x = _random(2, 3, 4)
    check_one_node("LayerNormalization", x, 17, {"s": _random(4), "b": _random(4)})
    check_one_node("LayerNormalization", x, 17, {"s": _random(3, 4)}, axis=-2, epsilon=1e-3)
    check_one_node("LayerNormalization", x, 17, {"s": _random(3, 4), "b": _random(3, 4)}, axis=1)


@pytest.mark.parametrize("axis", [0, -1])
def test_layer_norm_mean_and_inverse_deviation_outputs(axis: int) -> None:
    x = _random(2, 3, 4)
    node = helper.make_node(
        "LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv_std"], axis=axis
    )
    constants = {"s": _random(*x.shape[axis:]), "b": _random(*x.shape[axis:])}
    model = onnx_model([node], {"x": x}, ["y", "mean", "inv_std"], 17, constants)
    check_against_onnxruntime(model, {"x": x})


def test_lrn() -> None:
    check_one_node("LRN", _random(2, 6, 3, 3), 13, size=3, alpha=1e-3, beta=0.5, bias=2.0)


@pytest.mark.parametrize("size", [4, 2**31 - 1, 2**62 + 1])
def test_lrn_windows_wider_than_the_channels(size: int) -> None:
    """A window past every channel reads only zeros there, so it is cut at the channels
    (issue 18: a size of 2**31 made the interpreter pad by gigabytes). ONNX Runtime takes
    odd sizes only, and allocates the window: it checks the same sum with size 9 (every
    channel of 5) and alpha scaled to keep alpha / size. Compiled, the same."""
    import ember
    from ember.graph import interpret

    x = _random(1, 5, 2, 2)
    model = one_node_model("LRN", x, 13, size=size, alpha=1e-1, beta=0.75, bias=1.0)
    graph, params = from_onnx(model)
    (ours,) = interpret(graph, params, {"x": x}).values()
    alpha = 1e-1 * 9 / size if size > 9 else 1e-1
    peer = one_node_model("LRN", x, 13, size=9 if size > 9 else 5, alpha=alpha, beta=0.75)
    if size == 4:  # channels c-1 .. c+2
        squares = np.pad(x.astype(np.float64) ** 2, [(0, 0), (1, 2), (0, 0), (0, 0)])
        window = sum(squares[:, i : i + 5] for i in range(4))
        np.testing.assert_allclose(ours, x / (1 + 1e-1 / 4 * window) ** 0.75, rtol=1e-6)
    else:
        (theirs,) = run_onnxruntime(peer, {"x": x}).values()
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    (compiled,) = ember.build(graph, "llvm", params).load()(x=x).values()
    np.testing.assert_allclose(compiled, ours, rtol=1e-5, atol=1e-6)


# -- Gemm / MatMul ----------------------------------------------------------------------


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 1.0), (0.5, 2.0)])
@pytest.mark.parametrize("c_shape", [(6,), (1, 6), (4, 6), ()])
def test_gemm_with_constant_b_becomes_dense(
    trans_b: int, alpha: float, beta: float, c_shape: tuple[int, ...]
) -> None:
    b = _random(6, 5) if trans_b else _random(5, 6)
    constants = {"b": b, "c": _random(*c_shape)}
    x = _random(4, 5)
    check_one_node("Gemm", x, 13, constants, transB=trans_b, alpha=alpha, beta=beta)
    node = helper.make_node("Gemm", ["x", "b", "c"], ["y"], transB=trans_b, alpha=alpha, beta=beta)
    assert _ops(onnx_model([node], {"x": x}, ["y"], 13, constants))[0] == "dense"


@pytest.mark.parametrize("opset", [7, 11, 13])
def test_gemm_with_computed_b_and_transposes(opset: int) -> None:
    a, b, c = _random(5, 3), _random(4, 5), _random(4)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=2.0, beta=0.5)
    inputs = {"a": a, "b": b, "c": c}
    model = onnx_model([node], inputs, ["y"], opset)
    check_against_onnxruntime(model, inputs)
    assert "matmul" in _ops(model)


def test_gemm_without_c_and_matmul() -> None:
    check_one_node("Gemm", _random(3, 4), 11, {"b": _random(4, 2)}, input_names=["x", "b"])
    a, b = _random(2, 3, 4), _random(4, 5)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    check_against_onnxruntime(onnx_model([node], {"a": a, "b": b}, ["y"], 13), {"a": a, "b": b})


# -- Softmax ------------------------------------------------------------------------------


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize(("opset", "axis"), [(11, None), (11, 0), (11, -1), (13, None), (13, 1)])
def test_softmax_axis_semantics(op_type: str, opset: int, axis: int | None) -> None:
    # Opset 11 normalises over every axis from `axis` on; opset 13 over `axis` alone.
    attributes = {} if axis is None else {"axis": axis}
    check_one_node(op_type, _random(2, 3, 4) * 3, opset, **attributes)


# -- Resize / Upsample -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_opset_10(mode: str) -> None:
    x = _random(1, 2, 3, 4)
    check_one_node("Resize", x, 10, {"scales": np.array([1, 1, 2, 1.5], np.float32)}, mode=mode)
    if mode == "nearest":
        # Downsampling: before opset 11 ONNX Runtime rounds source indices up.
        check_one_node(
            "Resize", x, 10, {"scales": np.array([1, 1, 0.5, 0.5], np.float32)}, mode=mode
        )


@pytest.mark.parametrize("opset", [11, 13, 18, 19])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_scales_or_sizes(opset: int, mode: str) -> None:
    x = _random(1, 2, 5, 4)
    empty = np.array([], np.float32)
    roi = np.array([], np.float32)
    scales = {"roi": roi, "scales": np.array([1, 1, 2, 1.5], np.float32)}
    check_one_node(
        "Resize", x, opset, scales, mode=mode, coordinate_transformation_mode="align_corners"
    )
    sizes = {"roi": roi, "scales": empty, "sizes": np.array([1, 2, 7, 8], np.int64)}
    check_one_node(
        "Resize", x, opset, sizes, mode=mode, coordinate_transformation_mode="pytorch_half_pixel"
    )
    if opset >= 13:
        # Empty names skip roi and scales.
        sizes_only = {"sizes": np.array([1, 2, 8, 6], np.int64)}
        check_one_node(
            "Resize", x, opset, sizes_only, input_names=["x", "", "", "sizes"], mode=mode
        )


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_opset_18_axes_and_aspect_ratio(policy: str) -> None:
    x = _random(1, 2, 4, 6)
    constants = {"sizes": np.array([7, 8], np.int64)}
    check_one_node(
        "Resize",
        x,
        18,
        constants,
        input_names=["x", "", "", "sizes"],
        axes=[2, 3],
        keep_aspect_ratio_policy=policy,
        mode="linear",
    )
    scales = {"scales": np.array([2.5], np.float32)}
    check_one_node(
        "Resize", x, 18, scales, input_names=["x", "", "scales"], axes=[-1], mode="nearest"
    )


def test_resize_opset_19_half_pixel_symmetric() -> None:
    check_one_node(
        "Resize",
        _random(1, 1, 4, 6),
        19,
        {"sizes": np.array([1, 1, 8, 10], np.int64)},
        input_names=["x", "", "", "sizes"],
        coordinate_transformation_mode="half_pixel_symmetric",
        mode="linear",
    )


def test_resize_unsupported_forms() -> None:
    x = _random(1, 1, 4, 4)
    roi = np.array([0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9], np.float32)
    constants = {"roi": roi, "scales": np.array([1, 1, 2, 2], np.float32)}
    message = _unsupported(
        "Resize", x, 13, constants, coordinate_transformation_mode="tf_crop_and_resize"
    )
    assert message.startswith(
        "node 'n' (Resize): coordinate_transformation_mode 'tf_crop_and_resize' is not supported"
    )
    message = _unsupported("Resize", x, 18, constants, antialias=1, mode="linear")
    assert message == "node 'n' (Resize): antialias=1 is not supported"
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], name="n")
    model = onnx_model([node], {"x": x, "s": np.ones(4, np.float32)}, ["y"], 13)
    with pytest.raises(UnsupportedOperatorError) as info:
        from_onnx(model)
    assert "input #2 (scales) must be a constant" in str(info.value)


@pytest.mark.parametrize(
    ("scale", "error"),
    [
        (float("nan"), "need one positive, finite float32 entry per axis"),
        (float("inf"), "need one positive, finite float32 entry per axis"),
        (1e12, "exceed 1048576 on some axis"),
        (3e38, "longer than float32 counts"),
    ],
)
def test_resize_absurd_scales_are_refused(scale: float, error: str) -> None:
    """Issue 18: NaN and infinite scales raised ValueError / OverflowError, and 1e12 hung
    computing 4e12 source coordinates one by one."""
    from ember.errors import EmberError

    scales = numpy_helper.from_array(np.array([1, 1, scale, 1], np.float32), "scales")
    model = graph_model(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="n")],
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_value_info("y", onnx.TypeProto())],
        [scales],
        opset=13,
    )
    with pytest.raises(EmberError, match=error):
        from_onnx(model)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_opsets_7_and_9(mode: str) -> None:
    x = _random(1, 2, 3, 4)
    check_one_node("Upsample", x, 7, mode=mode, scales=[1.0, 1.0, 2.0, 3.0])
    check_one_node("Upsample", x, 9, {"scales": np.array([1, 1, 3, 2], np.float32)}, mode=mode)

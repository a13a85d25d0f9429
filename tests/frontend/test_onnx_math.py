"""Elementwise ONNX converters against ONNX Runtime, on one-node models across opsets."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_models import Declared, onnx_model

from ember.errors import ModelLoadError
from ember.frontend import from_onnx
from ember.frontend.onnx.math import BINARY_OPS, UNARY_OPS
from ember.graph import interpret
from ember.testing.oracle import check_against_onnxruntime

RNG = np.random.default_rng(0)
FLOAT = TensorProto.FLOAT


def _check(
    node: onnx.NodeProto,
    inputs: dict[str, np.ndarray],
    outputs: dict[str, Declared],
    opset: int,
    initializers: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Build a one-node model and compare Ember with ONNX Runtime on it."""
    return check_against_onnxruntime(
        onnx_model([node], inputs, outputs, opset, initializers), inputs
    )


def _floats(*shape: int, low: float = -3.0, high: float = 3.0) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype(np.float32)


# Ops whose input must avoid part of the real line; and the opset that introduced each op.
POSITIVE_ONLY = {"Log", "Sqrt", "Reciprocal"}
FIRST_OPSET = {"HardSwish": 14, "Mish": 18, "Softplus": 7, "Sign": 9, "Erf": 9, "Round": 11}


@pytest.mark.parametrize("onnx_op", sorted(UNARY_OPS))
def test_unary(onnx_op: str) -> None:
    if onnx_op == "Not":
        x = RNG.integers(0, 2, (2, 3)).astype(bool)
        _check(
            helper.make_node("Not", ["x"], ["y"]), {"x": x}, {"y": (TensorProto.BOOL, (2, 3))}, 13
        )
        return
    low = 0.1 if onnx_op in POSITIVE_ONLY else -3.0
    x = _floats(2, 3, 4, low=low)
    if onnx_op == "Round":
        x[0, 0, :3] = [0.5, 1.5, -2.5]  # halves round to even
    opset = max(13, FIRST_OPSET.get(onnx_op, 0))
    _check(helper.make_node(onnx_op, ["x"], ["y"]), {"x": x}, {"y": (FLOAT, x.shape)}, opset)


@pytest.mark.parametrize(
    ("onnx_op", "attrs", "opset"),
    [
        ("LeakyRelu", {}, 13),
        ("LeakyRelu", {"alpha": 0.3}, 7),
        ("Elu", {"alpha": 0.5}, 13),
        ("Selu", {}, 13),
        ("Selu", {"alpha": 2.0, "gamma": 3.0}, 7),
        ("HardSigmoid", {}, 13),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 7),
        ("Gelu", {}, 20),
        ("Gelu", {"approximate": "tanh"}, 20),
    ],
)
def test_unary_with_attributes(onnx_op: str, attrs: dict[str, object], opset: int) -> None:
    x = _floats(3, 5)
    _check(
        helper.make_node(onnx_op, ["x"], ["y"], **attrs), {"x": x}, {"y": (FLOAT, x.shape)}, opset
    )


def test_softsign_and_sign_of_zero() -> None:
    x = np.array([-2.0, -0.0, 0.0, 3.0], dtype=np.float32)
    for op in ("Softsign", "Sign", "Abs", "Neg"):
        _check(helper.make_node(op, ["x"], ["y"]), {"x": x}, {"y": (FLOAT, (4,))}, 13)


# -- Clip ------------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [7, 11, 13])
def test_clip_across_opsets(opset: int) -> None:
    x = _floats(4, 5)
    if opset < 11:
        node = helper.make_node("Clip", ["x"], ["y"], min=-1.0, max=0.5)
        initializers = {}
    else:
        node = helper.make_node("Clip", ["x", "low", "high"], ["y"])
        initializers = {"low": np.array(-1.0, np.float32), "high": np.array(0.5, np.float32)}
    ours = _check(node, {"x": x}, {"y": (FLOAT, x.shape)}, opset, initializers)
    np.testing.assert_array_equal(ours["y"], np.clip(x, -1.0, 0.5))


def test_clip_attribute_form_with_one_bound() -> None:
    x = _floats(6)
    node = helper.make_node("Clip", ["x"], ["y"], max=0.0)
    _check(node, {"x": x}, {"y": (FLOAT, x.shape)}, 7)


@pytest.mark.parametrize("bounds", [("", "high"), ("low", ""), ("low",), ()])
def test_clip_with_absent_bounds(bounds: tuple[str, ...]) -> None:
    x = _floats(3, 4)
    node = helper.make_node("Clip", ["x", *bounds], ["y"])
    initializers = {"low": np.array(-0.5, np.float32), "high": np.array(1.0, np.float32)}
    used = {name: initializers[name] for name in bounds if name}
    _check(node, {"x": x}, {"y": (FLOAT, x.shape)}, 13, used)


def test_clip_with_runtime_bounds_and_integers() -> None:
    x = _floats(3, 4)
    low, high = np.array(-1.0, np.float32), np.array(2.0, np.float32)
    node = helper.make_node("Clip", ["x", "low", "high"], ["y"])
    _check(node, {"x": x, "low": low, "high": high}, {"y": (FLOAT, x.shape)}, 13)
    ints = RNG.integers(-100, 100, (5,)).astype(np.int32)
    bounds = {"low": np.array(-7, np.int32), "high": np.array(9, np.int32)}
    _check(node, {"x": ints}, {"y": (TensorProto.INT32, (5,))}, 13, bounds)


@pytest.mark.parametrize("low", [np.zeros(0, np.float32), np.array([-1.0, 0.0], np.float32)])
def test_clip_bound_of_several_values_is_a_model_error(low: np.ndarray) -> None:
    node = helper.make_node("Clip", ["x", "low"], ["y"], name="clamp")
    model = onnx_model([node], {"x": _floats(3)}, {"y": (FLOAT, (3,))}, 13, {"low": low})
    message = (
        rf"node 'clamp' \(Clip\): the lower bound must be a single value, got .*{low.shape[0]}\]"
    )
    with pytest.raises(ModelLoadError, match=message):
        from_onnx(model)


# -- PRelu -----------------------------------------------------------------------------------


@pytest.mark.parametrize("slope_shape", [(3, 1, 1), (1,), (5,), (2, 3, 4, 5)])
def test_prelu_slope_broadcasts_onto_input(slope_shape: tuple[int, ...]) -> None:
    x = _floats(2, 3, 4, 5)
    slope = RNG.uniform(0.0, 0.5, slope_shape).astype(np.float32)
    node = helper.make_node("PRelu", ["x", "slope"], ["y"])
    _check(node, {"x": x}, {"y": (FLOAT, x.shape)}, 9, {"slope": slope})


def test_prelu_per_channel_slope_of_older_exporters() -> None:
    # A 1-d slope with one value per channel does not broadcast against NCHW under the
    # spec's rules, but older exporters wrote it; Ember reads it per channel.
    x = _floats(1, 3, 2, 2)
    slope = np.array([0.1, 0.2, 0.3], np.float32)
    node = helper.make_node("PRelu", ["x", "slope"], ["y"])
    model = onnx_model([node], {"x": x}, {"y": (FLOAT, x.shape)}, 9, {"slope": slope})
    ember_graph, params = from_onnx(model)
    result = interpret(ember_graph, params, {"x": x})["y"]
    expected = np.where(x < 0, slope.reshape(3, 1, 1) * x, x)
    np.testing.assert_array_equal(result, expected)


# -- binary and variadic ---------------------------------------------------------------------


@pytest.mark.parametrize("onnx_op", sorted(BINARY_OPS))
def test_binary_broadcasting(onnx_op: str) -> None:
    out_type = FLOAT
    if onnx_op in ("And", "Or", "Xor"):
        a = RNG.integers(0, 2, (2, 3, 4)).astype(bool)
        b = RNG.integers(0, 2, (3, 1)).astype(bool)
        out_type = TensorProto.BOOL
    else:
        a, b = _floats(2, 3, 4), _floats(3, 1)
        if onnx_op == "Pow":
            a = np.abs(a) + 0.1  # real results only
        if onnx_op == "Div":
            b = np.where(np.abs(b) < 0.1, 1.0, b).astype(np.float32)
        if onnx_op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
            b[0, 0] = a[0, 0, 0]  # include ties
            out_type = TensorProto.BOOL
    opset = 12 if onnx_op in ("LessOrEqual", "GreaterOrEqual") else 13
    node = helper.make_node(onnx_op, ["a", "b"], ["y"])
    _check(node, {"a": a, "b": b}, {"y": (out_type, (2, 3, 4))}, opset)


def test_integer_division_truncates_toward_zero() -> None:
    a = np.array([7, -7, 7, -7, 6], np.int32)
    b = np.array([2, 2, -2, -2, 3], np.int32)
    node = helper.make_node("Div", ["a", "b"], ["y"])
    ours = _check(node, {"a": a, "b": b}, {"y": (TensorProto.INT32, (5,))}, 13)
    np.testing.assert_array_equal(ours["y"], [3, -3, -3, 3, 2])


@pytest.mark.parametrize(
    ("fmod", "dtype"), [(0, np.int32), (1, np.int32), (1, np.float32), (0, np.int64)]
)
def test_mod_sign_conventions(fmod: int, dtype: type) -> None:
    a = np.array([5, -5, 5, -5, 7], dtype)
    b = np.array([3, 3, -3, -3, 7], dtype)
    node = helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)
    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    _check(node, {"a": a, "b": b}, {"y": (elem_type, (5,))}, 13)


def test_pow_with_integer_exponent() -> None:
    x = _floats(2, 3)
    exponent = np.array([2, 3, 0], np.int64)
    node = helper.make_node("Pow", ["x", "e"], ["y"])
    _check(node, {"x": x, "e": exponent}, {"y": (FLOAT, x.shape)}, 15)


def test_pow_of_integer_base_keeps_the_base_dtype() -> None:
    # A fractional or negative exponent is applied in floating point, then truncated.
    x = np.array([4, 9, 2, 2, 3], np.int32)
    node = helper.make_node("Pow", ["x", "e"], ["y"])
    fractional = np.array([0.5, 0.5, 1.5, 3.0, 2.0], np.float32)
    ours = _check(node, {"x": x, "e": fractional}, {"y": (TensorProto.INT32, (5,))}, 15)
    np.testing.assert_array_equal(ours["y"], [2, 3, 2, 8, 9])
    negative = np.array([1, 2, -1, 0, 3], np.int32)
    ours = _check(node, {"x": x, "e": negative}, {"y": (TensorProto.INT32, (5,))}, 15)
    np.testing.assert_array_equal(ours["y"], [4, 81, 0, 1, 27])


@pytest.mark.parametrize("onnx_op", ["Sum", "Mean", "Min", "Max"])
@pytest.mark.parametrize("count", [1, 3])
def test_variadic(onnx_op: str, count: int) -> None:
    shapes = [(2, 3, 4), (3, 1), (4,)][:count]
    inputs = {f"x{i}": _floats(*shape) for i, shape in enumerate(shapes)}
    node = helper.make_node(onnx_op, list(inputs), ["y"])
    _check(node, inputs, {"y": (FLOAT, (2, 3, 4))}, 13)


def test_where_and_comparisons_chain() -> None:
    condition = RNG.integers(0, 2, (2, 1, 4)).astype(bool)
    a, b = _floats(3, 4), _floats(2, 3, 1)
    node = helper.make_node("Where", ["c", "a", "b"], ["y"])
    _check(node, {"c": condition, "a": a, "b": b}, {"y": (FLOAT, (2, 3, 4))}, 16)


# -- Cast, Identity, Dropout, Constant ---------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (np.float32, TensorProto.INT32),
        (np.float32, TensorProto.BOOL),
        (np.float32, TensorProto.FLOAT16),
        (np.int64, TensorProto.FLOAT),
        (np.bool_, TensorProto.FLOAT),
        (np.float32, TensorProto.FLOAT),
    ],
)
def test_cast(source: type, target: int) -> None:
    x = (_floats(3, 4) * 10).astype(source)
    node = helper.make_node("Cast", ["x"], ["y"], to=target)
    _check(node, {"x": x}, {"y": (target, x.shape)}, 13)


def test_cast_like() -> None:
    x, like = _floats(3), np.zeros(1, np.int64)
    node = helper.make_node("CastLike", ["x", "like"], ["y"])
    _check(node, {"x": x * 10, "like": like}, {"y": (TensorProto.INT64, (3,))}, 15)


def test_identity() -> None:
    x = _floats(2, 2)
    _check(helper.make_node("Identity", ["x"], ["y"]), {"x": x}, {"y": (FLOAT, x.shape)}, 13)


@pytest.mark.parametrize("opset", [7, 10, 12, 13])
def test_dropout_is_identity_with_all_ones_mask(opset: int) -> None:
    x = _floats(2, 5)
    if opset < 12:
        node = helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.3)
        initializers = {}
    else:
        node = helper.make_node("Dropout", ["x", "ratio"], ["y", "mask"])
        initializers = {"ratio": np.array(0.3, np.float32)}
    # The mask has the input's type before opset 10, bool from then on.
    mask_type = FLOAT if opset < 10 else TensorProto.BOOL
    outputs = {"y": (FLOAT, x.shape), "mask": (mask_type, x.shape)}
    if opset >= 12:
        ours = _check(node, {"x": x}, outputs, opset, initializers)
    else:
        # ONNX Runtime writes an all-zero mask for opsets 7-11; the spec (and ONNX's
        # reference evaluator) keeps every element at inference, so Ember follows that.
        ours = _interpret_only(node, {"x": x}, outputs, opset)
        np.testing.assert_array_equal(ours["y"], x)
    assert ours["mask"].dtype == ("float32" if opset < 10 else "bool")
    assert ours["mask"].all()


def _interpret_only(
    node: onnx.NodeProto,
    inputs: dict[str, np.ndarray],
    outputs: dict[str, Declared],
    opset: int,
) -> dict[str, np.ndarray]:
    ember_graph, params = from_onnx(onnx_model([node], inputs, outputs, opset))
    return interpret(ember_graph, params, inputs)


@pytest.mark.parametrize(
    ("attribute", "value", "expected"),
    [
        ("value", onnx.numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3)), None),
        ("value_float", 2.5, np.array(2.5, np.float32)),
        ("value_floats", [1.0, 2.0], np.array([1.0, 2.0], np.float32)),
        ("value_int", 7, np.array(7, np.int64)),
        ("value_ints", [3, 4, 5], np.array([3, 4, 5], np.int64)),
    ],
    ids=["value", "value_float", "value_floats", "value_int", "value_ints"],
)
def test_constant_forms(attribute: str, value: object, expected: np.ndarray | None) -> None:
    if expected is None:
        expected = np.arange(6, dtype=np.float32).reshape(2, 3)
    node = helper.make_node("Constant", [], ["c"], **{attribute: value})
    elem_type = helper.np_dtype_to_tensor_dtype(expected.dtype)
    ours = _check(node, {}, {"c": (elem_type, expected.shape)}, 13)
    np.testing.assert_array_equal(ours["c"], expected)


def test_sparse_constant() -> None:
    values = onnx.numpy_helper.from_array(np.array([5.0, 6.0], np.float32), "values")
    indices = onnx.numpy_helper.from_array(np.array([1, 4], np.int64), "indices")
    sparse = helper.make_sparse_tensor(values, indices, [2, 3])
    node = helper.make_node("Constant", [], ["c"], sparse_value=sparse)
    # ONNX Runtime does not densify a sparse Constant into a model output.
    ours = _interpret_only(node, {}, {"c": (FLOAT, (2, 3))}, 13)
    np.testing.assert_array_equal(ours["c"], [[0, 5, 0], [0, 6, 0]])

"""Elementwise and broadcast declarations against the graph references."""

from __future__ import annotations

import numpy as np
import pytest
from topi_check import random, run_check

from ember.graph.ops.attrs import (
    AlphaAttrs,
    CastAttrs,
    ClipAttrs,
    GeluAttrs,
    HardSigmoidAttrs,
    SeluAttrs,
    ShapeAttrs,
)
from ember.topi.broadcast import BINARY
from ember.topi.elementwise import UNARY

POSITIVE_ONLY = {"log", "sqrt"}
SHAPE = (2, 3, 5)


def _unary_input(op: str, dtype: str = "float32") -> np.ndarray:
    if op == "logical_not":
        return random(SHAPE, "bool")
    x = random(SHAPE, dtype) * (3 if dtype == "float32" else 1)
    return np.abs(x) + 0.25 if op in POSITIVE_ONLY else x


CASES = [
    pytest.param(op, [_unary_input(op)], None, id=f"{op}-float32")
    for op in UNARY
    if op != "logical_not"
]
CASES += [pytest.param("logical_not", [_unary_input("logical_not")], None, id="logical_not")]
CASES += [
    pytest.param(op, [random(SHAPE, "int32")], None, id=f"{op}-int32")
    for op in ("identity", "relu", "negative", "abs", "sign", "floor", "round", "exp", "tanh")
]
CASES += [
    pytest.param("leaky_relu", [random(SHAPE)], AlphaAttrs(0.1), id="leaky_relu"),
    pytest.param("elu", [random(SHAPE)], AlphaAttrs(0.7), id="elu"),
    pytest.param("selu", [random(SHAPE)], SeluAttrs(1.67, 1.05), id="selu"),
    pytest.param("hard_sigmoid", [random(SHAPE)], HardSigmoidAttrs(0.2, 0.5), id="hard_sigmoid"),
    pytest.param("gelu", [random(SHAPE)], GeluAttrs(), id="gelu-erf"),
    pytest.param("gelu", [random(SHAPE)], GeluAttrs("tanh"), id="gelu-tanh"),
    pytest.param("clip", [random(SHAPE)], ClipAttrs(-0.5, 0.75), id="clip"),
    pytest.param("clip", [random(SHAPE)], ClipAttrs(None, 0.5), id="clip-high-only"),
    pytest.param("clip", [random(SHAPE, "int32")], ClipAttrs(-2.5, 3.5), id="clip-int32"),
    pytest.param("cast", [random(SHAPE) * 4], CastAttrs("int32"), id="cast-to-int32"),
    pytest.param("cast", [random(SHAPE, "int64")], CastAttrs("float32"), id="cast-to-float32"),
    pytest.param("cast", [random(SHAPE)], CastAttrs("bool"), id="cast-to-bool"),
]


def _binary_inputs(op: str, dtype: str) -> list[np.ndarray]:
    if op.startswith("logical"):
        return [random((2, 3, 4), "bool", 1), random((3, 1), "bool", 2)]
    a, b = random((2, 3, 4), dtype, 1), random((3, 1), dtype, 2)
    if op in ("divide", "mod", "floor_mod"):
        b = np.where(b == 0, 3, b).astype(dtype)
        b = np.where(np.abs(b) < 0.5, np.sign(b) + b, b).astype(dtype) if dtype != "int32" else b
    if op == "power":
        a = np.abs(a) + 0.5 if dtype == "float32" else np.abs(a) % 5
        b = b if dtype == "float32" else np.abs(b) % 4
    return [a.astype(dtype), b.astype(dtype)]


CASES += [
    pytest.param(op, _binary_inputs(op, "float32"), None, id=f"{op}-float32")
    for op in BINARY
    if not op.startswith("logical")
]
CASES += [
    pytest.param(op, _binary_inputs(op, "bool"), None, id=op)
    for op in ("logical_and", "logical_or", "logical_xor")
]
CASES += [
    pytest.param(op, _binary_inputs(op, "int32"), None, id=f"{op}-int32")
    for op in (
        "add",
        "subtract",
        "multiply",
        "divide",
        "mod",
        "floor_mod",
        "maximum",
        "power",
        "less",
    )
]
CASES += [
    pytest.param("add", [random((4, 1, 3)), random((5, 1))], None, id="add-both-broadcast"),
    pytest.param("multiply", [random(()), random((2, 3))], None, id="multiply-scalar"),
    pytest.param("prelu", [random((1, 4, 3, 3)), random((4, 1, 1), seed=3)], None, id="prelu-c"),
    pytest.param(
        "power", [np.abs(random((2, 3))) + 0.5, random((3,), "int32")], None, id="power-mixed"
    ),
    pytest.param(
        "where",
        [random((3, 1), "bool"), random((2, 3, 4), seed=1), random((4,), seed=2)],
        None,
        id="where",
    ),
    pytest.param("broadcast_to", [random((3, 1))], ShapeAttrs((2, 3, 4)), id="broadcast_to"),
]


@pytest.mark.parametrize(("op", "inputs", "attrs"), CASES)
def test_matches_reference(op, inputs, attrs) -> None:
    run_check(op, inputs, attrs)


def test_relu_prints_like_the_seed() -> None:
    dag = run_check("relu", [random((1, 2, 2, 3))])
    assert (
        str(dag).splitlines()[-1]
        == "T_relu(ax0, ax1, ax2, ax3) = max(placeholder[ax0, ax1, ax2, ax3], 0f)"
    )


def test_broadcast_reads_index_zero_on_size_one_axes() -> None:
    dag = run_check("add", [random((1, 5, 5, 8)), random((1, 5, 1, 1))])
    assert str(dag).splitlines()[-1] == (
        "T_add(ax0, ax1, ax2, ax3) = "
        "(placeholder[ax0, ax1, ax2, ax3] + placeholder[ax0, ax1, 0, 0])"
    )

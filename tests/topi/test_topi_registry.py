"""Every graph op has a declaration (or is documented as not expressible), and every
declared op is checked against its reference by some test case."""

from __future__ import annotations

import pytest
import test_topi_conv
import test_topi_elementwise
import test_topi_injective
import test_topi_linalg
import test_topi_norm
import test_topi_pool
import test_topi_quantized
import test_topi_reduce
import test_topi_resize
import test_topi_winograd
from topi_check import random, run_check

from ember.errors import EmberError, UnsupportedOperatorError
from ember.graph.ir import TensorType
from ember.graph.ops import all_ops
from ember.graph.ops.attrs import (
    AxisAttrs,
    ConvAttrs,
    GeluAttrs,
    PoolAttrs,
    ResizeAttrs,
    TopKAttrs,
)
from ember.te import placeholder
from ember.topi import DECLARATIONS, NOT_EXPRESSIBLE, NotExpressibleError, declare

FAMILIES = (
    test_topi_conv,
    test_topi_elementwise,
    test_topi_injective,
    test_topi_linalg,
    test_topi_norm,
    test_topi_pool,
    test_topi_quantized,
    test_topi_reduce,
    test_topi_resize,
    test_topi_winograd,
)


def test_every_graph_op_is_declared_or_documented_as_not_expressible() -> None:
    missing = sorted(op for op in all_ops() if op not in DECLARATIONS and op not in NOT_EXPRESSIBLE)
    assert not missing, f"graph ops without a compute declaration: {missing}"
    assert not set(DECLARATIONS) & set(NOT_EXPRESSIBLE)
    assert not set(DECLARATIONS) - set(all_ops()), "declarations for ops the graph lacks"


def test_every_declaration_has_a_reference_test_case() -> None:
    tested = {case.values[0] for family in FAMILIES for case in family.CASES}
    untested = sorted(set(DECLARATIONS) - tested)
    assert not untested, f"declared ops that no test compares with the reference: {untested}"


def test_topk_is_not_expressible_and_says_what_to_do() -> None:
    x = placeholder((2, 5))
    with pytest.raises(NotExpressibleError, match=r"topk.*reference implementation instead"):
        declare("topk", [x], TopKAttrs(2, 1))
    assert issubclass(NotExpressibleError, UnsupportedOperatorError)


def test_unknown_op_is_an_ember_error() -> None:
    with pytest.raises(EmberError, match="no compute declaration"):
        declare("no_such_op", [placeholder((2,))], TopKAttrs(1, 0))


def test_output_types_are_inferred_when_not_given() -> None:
    (out,) = declare("relu", [placeholder((2, 3))], all_ops()["relu"].attrs_type())
    assert out.shape == (2, 3) and out.dtype == "float32"
    assert TensorType(out.shape, out.dtype) == TensorType.of(random((2, 3)))


FLOAT64_CASES = [
    ("softmax", [random((2, 7), "float64")], AxisAttrs(1)),
    (
        "conv",
        [random((1, 5, 5, 3), "float64"), random((3, 3, 3, 2), "float64", 1)],
        ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO"),
    ),
    (
        "avg_pool",
        [random((1, 5, 5, 3), "float64")],
        PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, False, "NHWC"),
    ),
    ("gelu", [random((4, 3), "float64")], GeluAttrs("tanh")),
    (
        "resize",
        [random((1, 1, 4, 4), "float64")],
        ResizeAttrs((1, 1, 7, 9), (1, 1, 7 / 4, 9 / 4), "cubic", "half_pixel"),
    ),
]


@pytest.mark.parametrize(("op", "inputs", "attrs"), FLOAT64_CASES, ids=lambda v: str(v)[:12])
def test_float64_stays_float64(op, inputs, attrs) -> None:
    # Constants typed float32 would cost float64 results about nine digits.
    run_check(op, inputs, attrs, rtol=1e-10, atol=1e-12)

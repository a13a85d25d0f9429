"""Softmax, log_softmax and normalisation declarations against the graph references."""

from __future__ import annotations

import pytest
from topi_check import random, run_check

from ember.graph.ops.attrs import (
    AxisAttrs,
    BatchNormAttrs,
    InstanceNormAttrs,
    LayerNormAttrs,
    LrnAttrs,
)


def _batch_norm(shape, axis: int, case_id: str):
    channels = shape[axis]
    vectors = [random((channels,), seed=s) for s in (1, 2, 3)]
    variance = abs(random((channels,), seed=4)) + 0.5
    attrs = BatchNormAttrs(1e-5, axis)
    return pytest.param("batch_norm", [random(shape), *vectors, variance], attrs, id=case_id)


CASES = [
    pytest.param("softmax", [random((2, 10)) * 4], AxisAttrs(1), id="softmax"),
    pytest.param("softmax", [random((3, 4, 5))], AxisAttrs(1), id="softmax-middle"),
    pytest.param("softmax", [random((7,))], AxisAttrs(0), id="softmax-vector"),
    pytest.param("log_softmax", [random((2, 10)) * 4], AxisAttrs(1), id="log_softmax"),
    pytest.param("log_softmax", [random((4, 3, 2))], AxisAttrs(0), id="log_softmax-first"),
    pytest.param(
        "layer_norm",
        [random((2, 3, 8)) + 1, random((8,), seed=1), random((8,), seed=2)],
        LayerNormAttrs(2, 1e-5),
        id="layer_norm",
    ),
    pytest.param(
        "layer_norm",
        [random((2, 3, 4)), random((3, 1), seed=1), random((4,), seed=2)],
        LayerNormAttrs(1, 1e-3),
        id="layer_norm-two-axes",
    ),
    pytest.param(
        "layer_norm",
        [random((3, 4)), random((4,), seed=1), random((), seed=2)],
        LayerNormAttrs(0, 1e-5),
        id="layer_norm-all",
    ),
    pytest.param(
        "instance_norm",
        [random((2, 3, 5, 4)), random((3,), seed=1), random((3,), seed=2)],
        InstanceNormAttrs(1e-5, "NCHW"),
        id="instance_norm-nchw",
    ),
    pytest.param(
        "instance_norm",
        [random((2, 5, 4, 3)), random((3,), seed=1), random((3,), seed=2)],
        InstanceNormAttrs(1e-5, "NHWC"),
        id="instance_norm-nhwc",
    ),
    _batch_norm((2, 4, 3, 3), 1, "batch_norm-nchw"),
    _batch_norm((2, 3, 3, 5), 3, "batch_norm-nhwc"),
    pytest.param("lrn", [random((2, 7, 3, 3))], LrnAttrs(5, 1e-2, 0.75, 2.0), id="lrn"),
    pytest.param("lrn", [random((1, 4, 5))], LrnAttrs(2, 1e-3, 0.5, 1.0), id="lrn-even"),
    pytest.param("lrn", [random((1, 3, 2, 2))], LrnAttrs(1), id="lrn-size-1"),
]


@pytest.mark.parametrize(("op", "inputs", "attrs"), CASES)
def test_matches_reference(op, inputs, attrs) -> None:
    run_check(op, inputs, attrs)


def test_softmax_is_the_seeds_four_stages() -> None:
    dag = run_check("softmax", [random((1, 10))], AxisAttrs(1))
    assert str(dag).splitlines() == [
        "placeholder = PLACEHOLDER [1, 10]",
        "T_softmax_maxelem(i0) max= placeholder[i0, k]",
        "T_softmax_exp(i0, i1) = tir.exp((placeholder[i0, i1] - T_softmax_maxelem[i0]))",
        "T_softmax_expsum(i0) += T_softmax_exp[i0, k]",
        "T_softmax_norm(i0, i1) = (T_softmax_exp[i0, i1]/T_softmax_expsum[i0])",
    ]

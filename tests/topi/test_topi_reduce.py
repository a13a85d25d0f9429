"""Reduction and argmax/argmin declarations against the graph references."""

from __future__ import annotations

import numpy as np
import pytest
from topi_check import random, run_check

from ember.graph.ops.attrs import ArgReduceAttrs, ReduceAttrs
from ember.topi.reduce import DECLARATIONS

REDUCTIONS = [op for op in DECLARATIONS if op.startswith("reduce_")]
AXES = [((1,), True), ((0, 2), False), ((), True), ((2,), False), ((), False)]

CASES = [
    pytest.param(
        op,
        [random((3, 4, 5)) * (0.5 if op == "reduce_prod" else 2)],
        ReduceAttrs(axes, keep),
        id=f"{op}-{axes}-{keep}",
    )
    for op in REDUCTIONS
    for axes, keep in AXES
]
CASES += [
    pytest.param(op, [random((4, 6), "int32")], ReduceAttrs((1,), False), id=f"{op}-int32")
    for op in ("reduce_sum", "reduce_max", "reduce_min", "reduce_mean", "reduce_l1", "reduce_l2")
]
CASES += [
    pytest.param(
        "reduce_log_sum_exp", [random((4, 6), "int32")], ReduceAttrs((0,), True), id="lse-int32"
    )
]

# Ties: small integers make equal maxima likely, so first/last index matters.
TIES = np.array([[3, 1, 3, 0], [2, 2, 2, 2], [0, 5, 1, 5]], dtype="float32")
for op in ("argmax", "argmin"):
    CASES += [
        pytest.param(op, [random((3, 4, 5))], ArgReduceAttrs(1, True), id=f"{op}-keep"),
        pytest.param(op, [random((3, 4, 5))], ArgReduceAttrs(2, False), id=f"{op}-drop"),
        pytest.param(op, [TIES], ArgReduceAttrs(1, False), id=f"{op}-ties-first"),
        pytest.param(op, [TIES], ArgReduceAttrs(1, True, True), id=f"{op}-ties-last"),
        pytest.param(op, [random((6,), "int32")], ArgReduceAttrs(0, False), id=f"{op}-int32"),
    ]


@pytest.mark.parametrize(("op", "inputs", "attrs"), CASES)
def test_matches_reference(op, inputs, attrs) -> None:
    run_check(op, inputs, attrs)


def test_argmax_is_a_maximum_then_the_least_index_holding_it() -> None:
    dag = run_check("argmax", [TIES], ArgReduceAttrs(1, False))
    assert str(dag).splitlines()[1:] == [
        "T_argmax_max(ax0, ax1) max= placeholder[ax0, k]",
        "T_argmax(ax0) min= tir.if_then_else((placeholder[ax0, k] == T_argmax_max[ax0, 0]), k, 4)",
    ]


def test_sum_over_many_terms_is_rounded_once() -> None:
    # 10**5 float32 values: a float32 running sum would drift past the tolerance.
    values = np.full((1, 100_000), 0.1, dtype="float32")
    run_check("reduce_sum", [values], ReduceAttrs((1,), False), rtol=1e-7, atol=0)

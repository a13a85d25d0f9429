"""Injective declarations (reshape, transpose, concat, split, slice, gather, pad, tile,
depth/space blocks) against the graph references."""

from __future__ import annotations

import numpy as np
import pytest
from topi_check import random, run_check

from ember.graph.ops.attrs import (
    AxisAttrs,
    BlockAttrs,
    PadAttrs,
    ReshapeAttrs,
    SliceAttrs,
    SplitAttrs,
    TileAttrs,
    TransposeAttrs,
)
from ember.topi.injective import matching_runs

X = random((2, 3, 4, 5))

CASES = [
    pytest.param("reshape", [X], ReshapeAttrs((6, 20)), id="reshape-merge"),
    pytest.param("reshape", [X], ReshapeAttrs((4, 1, 30)), id="reshape-regroup"),
    pytest.param("reshape", [random((6,))], ReshapeAttrs((1, 2, 3, 1)), id="reshape-unit-axes"),
    pytest.param("reshape", [random((1, 1))], ReshapeAttrs(()), id="reshape-scalar"),
    pytest.param("reshape", [random((6, 4))], ReshapeAttrs((4, 6)), id="reshape-interleaved"),
    pytest.param(
        "reshape", [random((5, 1, 12))], ReshapeAttrs((1, 5, 1, 3, 4)), id="reshape-split-runs"
    ),
    pytest.param("reshape", [random((0, 3))], ReshapeAttrs((3, 0)), id="reshape-empty"),
    pytest.param("transpose", [X], TransposeAttrs((0, 2, 3, 1)), id="transpose-nhwc"),
    pytest.param("transpose", [X], TransposeAttrs((3, 1, 0, 2)), id="transpose"),
    pytest.param(
        "concat",
        [X, random((2, 1, 4, 5), seed=1), random((2, 4, 4, 5), seed=2)],
        AxisAttrs(1),
        id="concat",
    ),
    pytest.param(
        "concat", [random((3, 0)), random((3, 2), seed=1)], AxisAttrs(1), id="concat-empty"
    ),
    pytest.param("concat", [random((2, 3))], AxisAttrs(0), id="concat-one"),
    pytest.param("concat", [random((2, 3)), random((1, 3), "float32", 1)], AxisAttrs(0), id="c0"),
    pytest.param("split", [X], SplitAttrs(2, (1, 2, 1)), id="split"),
    pytest.param("split", [X], SplitAttrs(3, (5,)), id="split-one"),
    pytest.param("slice", [X], SliceAttrs((0, 1, 3, 0), (2, 3, -1, 5), (1, 1, -2, 2)), id="slice"),
    pytest.param("slice", [X], SliceAttrs((1, 0, 0, 4), (2, 3, 4, -1), (1, 2, 3, -1)), id="s2"),
    pytest.param("gather", [X, np.array([[2, -1], [0, 0]], "int64")], AxisAttrs(2), id="gather"),
    pytest.param("gather", [X, np.array(1, "int32")], AxisAttrs(0), id="gather-scalar"),
    pytest.param(
        "gather_elements",
        [random((3, 4)), np.array([[0, 2, -1], [1, 1, 0]], "int64")],
        AxisAttrs(1),
        id="gather_elements",
    ),
    pytest.param(
        "gather_elements",
        [random((3, 4)), np.array([[2], [0]], "int32")],
        AxisAttrs(0),
        id="gather_elements-axis0",
    ),
    pytest.param("pad", [X], PadAttrs((0, 1, 2, 0, 0, 2, 1, 3), "constant", 1.5), id="pad"),
    pytest.param("pad", [X], PadAttrs((0, 2, 3, 1, 1, 0, 2, 4), "reflect"), id="pad-reflect"),
    pytest.param("pad", [X], PadAttrs((1, 0, 4, 1, 0, 3, 2, 2), "edge"), id="pad-edge"),
    pytest.param(
        "pad", [random((3, 4), "int32")], PadAttrs((1, 0, 0, 2), "constant", 7.0), id="pad-int"
    ),
    pytest.param("tile", [random((2, 1, 3))], TileAttrs((2, 3, 1)), id="tile"),
]
for layout in ("NCHW", "NHWC"):
    for mode in ("DCR", "CRD"):
        attrs = BlockAttrs(2, mode, layout)
        deep = random((2, 8, 3, 2) if layout == "NCHW" else (2, 3, 2, 8))
        wide = random((2, 3, 4, 6) if layout == "NCHW" else (2, 4, 6, 3))
        CASES += [
            pytest.param("depth_to_space", [deep], attrs, id=f"d2s-{layout}-{mode}"),
            pytest.param("space_to_depth", [wide], attrs, id=f"s2d-{layout}-{mode}"),
        ]
CASES += [
    pytest.param(
        "depth_to_space", [random((1, 3, 2, 2))], BlockAttrs(1, "DCR", "NCHW"), id="d2s-b1"
    ),
    pytest.param(
        "space_to_depth", [random((1, 3, 6, 3))], BlockAttrs(3, "CRD", "NCHW"), id="s2d-b3"
    ),
]


@pytest.mark.parametrize(("op", "inputs", "attrs"), CASES)
def test_matches_reference(op, inputs, attrs) -> None:
    run_check(op, inputs, attrs)


def test_reshape_uses_the_flat_index() -> None:
    dag = run_check("reshape", [random((2, 6))], ReshapeAttrs((3, 4)))
    assert str(dag).splitlines()[-1] == (
        "T_reshape(ax0, ax1) = placeholder[floordiv(((ax0*4) + ax1), 6), "
        "floormod(((ax0*4) + ax1), 6)]"
    )


def test_reshape_maps_each_run_of_axes_alone() -> None:
    # Attention's split of a (tokens, 3 x channels) product: the token axis maps to
    # itself and the channel axis splits, with no division by the whole row.
    dag = run_check("reshape", [random((5, 1, 12))], ReshapeAttrs((1, 5, 1, 3, 4)))
    assert str(dag).splitlines()[-1] == (
        "T_reshape(ax0, ax1, ax2, ax3, ax4) = placeholder[ax1, 0, ((ax3*4) + ax4)]"
    )


@pytest.mark.parametrize(
    ("before", "after", "runs"),
    [
        ((197, 1, 2304), (1, 197, 1, 3, 768), [([0], [1]), ([2], [3, 4])]),
        ((6, 4), (4, 6), [([0, 1], [0, 1])]),
        ((2, 3, 4), (24,), [([0, 1, 2], [0])]),
        ((2, 3, 4), (6, 4), [([0, 1], [0]), ([2], [1])]),
        ((1,), (1, 1), []),
        ((0, 3), (3, 0), None),
    ],
)
def test_matching_runs(before, after, runs) -> None:
    assert matching_runs(before, after) == runs


def test_concat_is_a_select_chain() -> None:
    dag = run_check("concat", [random((2, 1)), random((2, 2)), random((2, 1))], AxisAttrs(1))
    assert str(dag).splitlines()[-1] == (
        "T_concat(ax0, ax1) = tir.if_then_else((ax1 < 1), placeholder[ax0, ax1], "
        "tir.if_then_else((ax1 < 3), placeholder[ax0, (ax1 - 1)], placeholder[ax0, (ax1 - 3)]))"
    )


def test_split_makes_one_stage_per_output() -> None:
    dag = run_check("split", [random((4, 3))], SplitAttrs(0, (1, 3)))
    assert [t.name for t in dag.outputs] == ["T_split_0", "T_split_1"]

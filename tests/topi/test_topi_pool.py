"""Pooling declarations (max / avg windows, both layouts, ceil mode, padding counted
or not, dilation; global pools) against the graph references."""

from __future__ import annotations

import pytest
from topi_check import random, run_check

from ember.graph.ops.attrs import LayoutAttrs, PoolAttrs


def _pool(op: str, shape, kernel, strides, padding, dilations, ceil, include, layout, case_id):
    attrs = PoolAttrs(kernel, strides, padding, dilations, ceil, include, layout)
    return pytest.param(op, [random(shape)], attrs, id=f"{op}-{case_id}")


WINDOWS = [
    # shape, kernel, strides, padding, dilations, ceil_mode, count_include_pad, layout, id
    ((1, 9, 9, 3), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, False, "NHWC", "resnet"),
    ((2, 3, 8, 7), (3, 2), (2, 1), (0, 1, 1, 0), (1, 1), False, False, "NCHW", "asym"),
    ((1, 10, 10, 2), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), True, False, "NHWC", "ceil"),
    ((1, 2, 9, 8), (3, 3), (3, 2), (1, 1, 1, 1), (1, 1), True, True, "NCHW", "ceil-incl"),
    ((1, 11, 11, 2), (3, 3), (2, 2), (2, 2, 2, 2), (2, 2), False, True, "NHWC", "dilated"),
    ((2, 2, 8, 8), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False, False, "NCHW", "plain"),
    ((1, 7, 7, 3), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, True, "NHWC", "incl-pad"),
    ((1, 10, 10, 2), (3, 3), (2, 2), (1, 1, 1, 1), (2, 1), True, False, "NHWC", "ceil-dil"),
    ((2, 3, 10), (3,), (2,), (1, 0), (1,), True, False, "NCW", "1d"),
    (
        (1, 5, 6, 6, 2),
        (2, 3, 3),
        (2, 2, 1),
        (0, 1, 1, 1, 1, 0),
        (1, 1, 1),
        False,
        False,
        "NDHWC",
        "3d",
    ),
]

CASES = [_pool(op, *window) for window in WINDOWS for op in ("max_pool", "avg_pool")]
CASES += [
    _pool(
        "max_pool", (1, 6, 6, 2), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, False, "NHWC", "int"
    )
]
CASES[-1] = pytest.param(
    "max_pool",
    [random((1, 6, 6, 2), "int32")],
    PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, False, "NHWC"),
    id="max_pool-int32",
)
CASES += [
    pytest.param(op, [random(shape)], LayoutAttrs(layout), id=f"{op}-{layout}")
    for op in ("global_avg_pool", "global_max_pool")
    for shape, layout in (
        ((2, 5, 6, 3), "NHWC"),
        ((1, 4, 5, 5), "NCHW"),
        ((1, 3, 4, 4, 2), "NDHWC"),
    )
]


@pytest.mark.parametrize(("op", "inputs", "attrs"), CASES)
def test_matches_reference(op, inputs, attrs) -> None:
    run_check(op, inputs, attrs)


def test_unpadded_pool_reads_its_input_directly() -> None:
    attrs = PoolAttrs((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False, False, "NHWC")
    dag = run_check("max_pool", [random((1, 4, 4, 3))], attrs)
    assert str(dag).splitlines() == [
        "placeholder = PLACEHOLDER [1, 4, 4, 3]",
        "pool_max(ax0, ax1, ax2, ax3) max= placeholder[ax0, ((ax1*2) + rv0), ((ax2*2) + rv1), ax3]",
    ]


def test_average_of_full_windows_divides_by_a_constant() -> None:
    attrs = PoolAttrs((3, 3), (1, 1), (0, 0, 0, 0), (1, 1), False, False, "NHWC")
    dag = run_check("avg_pool", [random((1, 5, 5, 2))], attrs)
    # (The printer's spacing around `/` is its own business.)
    assert str(dag).splitlines()[-1] == (
        "pool_avg(ax0, ax1, ax2, ax3) = (pool_sum[ax0, ax1, ax2, ax3]/9f)"
    )


def test_max_pool_pads_with_the_lowest_value() -> None:
    attrs = PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, False, "NHWC")
    dag = run_check("max_pool", [random((1, 5, 5, 2))], attrs)
    assert str(dag).splitlines()[1].endswith("placeholder[i0, (i1 - 1), (i2 - 1), i3], -inff)")


def test_global_average_pool_is_a_sum_then_a_division() -> None:
    dag = run_check("global_avg_pool", [random((1, 7, 7, 4))], LayoutAttrs("NHWC"))
    assert str(dag).splitlines()[1:] == [
        "adaptive_pool_sum(ax0, ax1, ax2, ax3) += placeholder[ax0, rv0, rv1, ax3]",
        "adaptive_pool_avg(ax0, ax1, ax2, ax3) = (adaptive_pool_sum[ax0, ax1, ax2, ax3]/49f)",
    ]


def test_partial_windows_divide_by_a_count_per_position() -> None:
    attrs = PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, False, "NHWC")
    dag = run_check("avg_pool", [random((1, 6, 6, 1))], attrs)
    divisor = str(dag).splitlines()[-1].split("/", 1)[1]
    assert "float32(" in divisor and "ax1" in divisor and "ax2" in divisor

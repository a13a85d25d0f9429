"""resize declarations (every mode and coordinate transform) against the reference,
which evaluates source coordinates exactly."""

from __future__ import annotations

import pytest
from topi_check import random, run_check

from ember.graph.ops.attrs import ResizeAttrs
from ember.graph.ops.resize import COORDINATE_TRANSFORMS, NEAREST_MODES

UP = ((1, 2, 4, 5), (1, 2, 7, 9))  # odd factors land on rounding boundaries
DOWN = ((2, 3, 9, 8), (2, 3, 4, 3))


def _resize(shape, sizes, mode, transform, nearest="round_prefer_floor", **extra):
    scales = tuple(out / size for out, size in zip(sizes, shape, strict=True))
    attrs = ResizeAttrs(sizes, scales, mode, transform, nearest, **extra)
    case_id = f"{mode}-{transform}-{nearest}-{sizes}-{sorted(extra.items())}"
    return pytest.param("resize", [random(shape)], attrs, id=case_id)


CASES = [
    _resize(shape, sizes, mode, transform)
    for shape, sizes in (UP, DOWN)
    for mode in ("nearest", "linear", "cubic")
    for transform in COORDINATE_TRANSFORMS
]
CASES += [
    _resize(shape, sizes, "nearest", transform, nearest)
    for shape, sizes in (UP, DOWN)
    for transform in ("half_pixel", "asymmetric", "align_corners")
    for nearest in NEAREST_MODES
    if nearest != "round_prefer_floor"  # the default, covered above
]
CASES += [
    _resize(*UP, "cubic", "half_pixel", cubic_coeff_a=-0.5, exclude_outside=True),
    _resize(*DOWN, "cubic", "align_corners", exclude_outside=True),
    _resize((1, 1, 3, 3), (1, 1, 6, 6), "linear", "asymmetric"),  # whole-index coordinates
    _resize((2, 4, 5), (3, 4, 8), "linear", "pytorch_half_pixel"),  # batch axis resized
    _resize((1, 3, 5, 5), (1, 3, 1, 1), "linear", "pytorch_half_pixel"),
    _resize((1, 2, 5), (1, 2, 5), "cubic", "half_pixel"),  # unchanged axis
]
# An explicit scale that differs from out / in (the model gave scales, not sizes).
CASES.append(
    pytest.param(
        "resize",
        [random((1, 1, 4, 4))],
        ResizeAttrs((1, 1, 6, 7), (1.0, 1.0, 1.6, 1.8), "linear", "half_pixel"),
        id="explicit-scales",
    )
)
CASES.append(
    pytest.param(
        "resize",
        [random((1, 3, 3), "int32")],
        ResizeAttrs((1, 5, 7), (1.0, 5 / 3, 7 / 3), "nearest", "half_pixel"),
        id="nearest-int32",
    )
)


@pytest.mark.parametrize(("op", "inputs", "attrs"), CASES)
def test_matches_reference(op, inputs, attrs) -> None:
    run_check(op, inputs, attrs)


def test_nearest_upsample_by_two_is_integer_arithmetic() -> None:
    attrs = ResizeAttrs((1, 4, 6, 1), (1.0, 2.0, 2.0, 1.0), "nearest", "asymmetric", "floor")
    dag = run_check("resize", [random((1, 2, 3, 1))], attrs)
    assert str(dag).splitlines()[-1] == (
        "T_resize(ax0, ax1, ax2, ax3) = placeholder[ax0, floordiv(ax1, 2), floordiv(ax2, 2), ax3]"
    )

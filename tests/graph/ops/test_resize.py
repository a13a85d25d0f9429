"""resize: every mode, nearest rounding and coordinate transform against ONNX
Runtime's Resize-19 on the same data, up- and downsampling, 1 to 3 resized axes, and
the type-inference errors a user sees."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from onnx_node_runner import F32, assert_close, random_array, run_onnx_node, type_error

from ember.graph.ir import TensorType
from ember.graph.ops import evaluate
from ember.graph.ops.attrs import ResizeAttrs
from ember.graph.ops.resize import COORDINATE_TRANSFORMS, NEAREST_MODES


def _compare(
    x: np.ndarray, sizes: tuple[int, ...], *, use_scales: bool = False, **attributes: object
) -> None:
    """Resize `x` to `sizes` with Ember and with ONNX Runtime (given sizes, or scales
    out/in when `use_scales`), with the same ONNX attributes."""
    scales = tuple(
        float(np.float32(out) / np.float32(size)) for out, size in zip(sizes, x.shape, strict=True)
    )
    attrs = ResizeAttrs(sizes=sizes, scales=scales, **attributes)  # type: ignore[arg-type]
    (ours,) = evaluate("resize", [x], attrs)
    if use_scales:
        inputs = {"x": x, "scales": np.array(scales, np.float32)}
        names = ["x", "", "scales"]
    else:
        inputs = {"x": x, "sizes": np.array(sizes, np.int64)}
        names = ["x", "", "", "sizes"]
    theirs = run_onnx_node("Resize", inputs, opset=19, node_inputs=names, **attributes)
    assert_close(ours, theirs)


SIZE_CASES = [
    ((1, 2, 4, 5), (1, 2, 8, 10)),  # upsample x2
    # Downsample. Odd input and even output lengths keep every half_pixel coordinate
    # off the rounding boundaries, where ONNX Runtime's float32 arithmetic and the
    # exact coordinates may differ (see test_exact_coordinates_decide_ties).
    ((1, 1, 5, 7), (1, 1, 4, 4)),
    ((2, 3, 4, 4), (2, 3, 7, 5)),  # odd factors
    ((3, 6), (3, 13)),  # 1 resized axis
]


@pytest.mark.parametrize("nearest_mode", list(NEAREST_MODES))
@pytest.mark.parametrize("transform", list(COORDINATE_TRANSFORMS))
@pytest.mark.parametrize(("shape", "sizes"), SIZE_CASES)
def test_nearest_matches_onnxruntime(
    shape: tuple[int, ...], sizes: tuple[int, ...], transform: str, nearest_mode: str
) -> None:
    _compare(
        random_array(*shape),
        sizes,
        mode="nearest",
        coordinate_transformation_mode=transform,
        nearest_mode=nearest_mode,
    )


# tf_half_pixel_for_nn is for nearest only (ONNX Runtime rejects it for linear).
INTERPOLATING_TRANSFORMS = [t for t in COORDINATE_TRANSFORMS if t != "tf_half_pixel_for_nn"]


@pytest.mark.parametrize("transform", INTERPOLATING_TRANSFORMS)
@pytest.mark.parametrize(
    ("shape", "sizes"),
    [*SIZE_CASES, ((1, 2, 3, 4, 3), (1, 2, 5, 3, 6))],  # trilinear
)
def test_linear_matches_onnxruntime(
    shape: tuple[int, ...], sizes: tuple[int, ...], transform: str
) -> None:
    _compare(random_array(*shape), sizes, mode="linear", coordinate_transformation_mode=transform)


@pytest.mark.parametrize("exclude_outside", [0, 1])
@pytest.mark.parametrize("transform", INTERPOLATING_TRANSFORMS)
@pytest.mark.parametrize(("shape", "sizes"), SIZE_CASES)
def test_cubic_matches_onnxruntime(
    shape: tuple[int, ...], sizes: tuple[int, ...], transform: str, exclude_outside: int
) -> None:
    _compare(
        random_array(*shape),
        sizes,
        mode="cubic",
        coordinate_transformation_mode=transform,
        exclude_outside=exclude_outside,
        cubic_coeff_a=-0.5,
    )


def test_axes_that_shrink_are_resized_before_those_that_grow() -> None:
    # Found by atheris: growing a batch of 2 to 2**20 before shrinking 126 channels to 1
    # made 4 GiB of intermediate results for a 4 MiB output.
    x = np.random.default_rng(0).random((2, 126, 4, 4)) < 0.5
    attrs = ResizeAttrs(sizes=(4096, 1, 2, 2), scales=(2048.0, 1 / 126, 0.5, 0.5))
    tracemalloc.start()
    try:
        (ours,) = evaluate("resize", [x], attrs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20  # growing first would hold 4096 x 126 x 16 bytes (8 MiB)
    # One channel of 126, half-pixel: source (0 + 0.5) * 126 - 0.5 = 62.5, rounded down.
    only = ResizeAttrs((4096, 1, 2, 2), (2048.0, 1, 0.5, 0.5))
    expected = evaluate("resize", [x[:, 62:63]], only)
    assert ours.shape == (4096, 1, 2, 2) and np.array_equal(ours, expected[0])


def test_scales_with_borderline_float32_products() -> None:
    # 5 -> 3 has scale float32(0.6); coordinates follow ONNX Runtime's float32 arithmetic.
    x = random_array(1, 1, 5, 5)
    for mode in ("nearest", "linear"):
        _compare(
            x, (1, 1, 3, 3), use_scales=True, mode=mode, coordinate_transformation_mode="asymmetric"
        )


@pytest.mark.parametrize(
    ("size", "out", "transform", "nearest_mode", "expected"),
    [
        # 7 -> 4, asymmetric: coordinates 0, 1.75, 3.5, 5.25; the tie 3.5 rounds per mode.
        (7, 4, "asymmetric", "round_prefer_ceil", [0, 2, 4, 5]),
        (7, 4, "asymmetric", "round_prefer_floor", [0, 2, 3, 5]),
        # 5 -> 3, half_pixel: coordinates 1/3, 2, 11/3; the integer 2 is its own floor.
        (5, 3, "half_pixel", "floor", [0, 2, 3]),
        (5, 3, "half_pixel_symmetric", "floor", [0, 2, 3]),
        (5, 3, "half_pixel", "ceil", [1, 2, 4]),
        # 11 -> 13, tf_half_pixel_for_nn: output 6 sits at exactly 6.5 * 11 / 13 = 5.5.
        (
            11,
            13,
            "tf_half_pixel_for_nn",
            "round_prefer_floor",
            [0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9, 10, 10],
        ),
    ],
)
def test_exact_coordinates_decide_ties(
    size: int, out: int, transform: str, nearest_mode: str, expected: list[int]
) -> None:
    x = np.arange(size, dtype=np.float32).reshape(1, size)
    scale = float(np.float32(out) / np.float32(size))
    attrs = ResizeAttrs((1, out), (1.0, scale), "nearest", transform, nearest_mode)
    (ours,) = evaluate("resize", [x], attrs)
    assert ours.reshape(-1).astype(int).tolist() == expected


def test_nearest_keeps_integer_values_exactly() -> None:
    x = np.arange(12, dtype=np.uint8).reshape(1, 1, 3, 4)
    attrs = ResizeAttrs(
        (1, 1, 6, 8),
        (1.0, 1.0, 2.0, 2.0),
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
    (ours,) = evaluate("resize", [x], attrs)
    np.testing.assert_array_equal(ours, x.repeat(2, axis=2).repeat(2, axis=3))


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        (
            ResizeAttrs((1, 8), (1.0, 2.0, 2.0)),
            "resize of float32[1, 4]: scales (1.0, 2.0, 2.0) need one entry per axis",
        ),
        (
            ResizeAttrs((1, 8), (1.0, 2.0), mode="area"),
            "resize of float32[1, 4]: mode 'area' is not one of nearest, linear, cubic",
        ),
        (
            ResizeAttrs((1, 8), (1.0, 2.0), coordinate_transformation_mode="tf_crop_and_resize"),
            "resize of float32[1, 4]: coordinate_transformation_mode 'tf_crop_and_resize' is "
            "not one of " + ", ".join(COORDINATE_TRANSFORMS),
        ),
        (
            ResizeAttrs((1, 8), (1.0, 0.0)),
            "resize of float32[1, 4]: scales (1.0, 0.0) must be positive",
        ),
    ],
)
def test_resize_type_errors(attrs: ResizeAttrs, message: str) -> None:
    assert type_error("resize", [TensorType((1, 4), F32)], attrs) == message


def test_linear_resize_rejects_integers() -> None:
    attrs = ResizeAttrs((1, 8), (1.0, 2.0), mode="linear")
    assert type_error("resize", [TensorType((1, 4), "uint8")], attrs) == (
        "resize of uint8[1, 4]: linear interpolation needs floating-point data, got uint8"
    )

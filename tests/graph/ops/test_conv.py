"""conv and conv_transpose: references against ONNX Runtime's Conv / ConvTranspose,
channels-last layouts against the channels-first result, MAC counts against
hand-computed values, and the type-inference errors a user sees."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_node_runner import (
    F32,
    assert_close,
    channels_last,
    count_macs,
    random_array,
    run_onnx_node,
    spatial_axes,
    type_error,
)

from ember.graph.ir import TensorType
from ember.graph.ops import evaluate, get_op
from ember.graph.ops.attrs import ConvAttrs, ConvTransposeAttrs
from ember.graph.ops.registry import OpPattern

# -- conv ------------------------------------------------------------------------------

CONV_CASES = [
    # data shape, weight shape, strides, padding (begins, ends), dilations, groups
    ((1, 3, 7, 9), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((2, 4, 10, 11), (6, 2, 3, 2), (2, 3), (0, 1, 2, 0), (1, 1), 2),  # asymmetric pads
    ((1, 5, 9, 8), (5, 1, 3, 3), (2, 2), (1, 1, 1, 1), (2, 1), 5),  # depthwise, dilated
    ((1, 4, 6, 6), (8, 1, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 4),  # grouped 1x1, multiplier 2
    ((2, 3, 13), (5, 3, 4), (3,), (2, 1), (2,), 1),  # 1-d
    ((1, 2, 5, 6, 7), (4, 2, 3, 2, 3), (1, 2, 2), (1, 0, 1, 0, 1, 1), (1, 1, 2), 1),  # 3-d
]


@pytest.mark.parametrize(
    ("data", "weight", "strides", "padding", "dilations", "groups"), CONV_CASES
)
def test_conv_matches_onnxruntime(
    data: tuple[int, ...],
    weight: tuple[int, ...],
    strides: tuple[int, ...],
    padding: tuple[int, ...],
    dilations: tuple[int, ...],
    groups: int,
) -> None:
    x, w = random_array(*data), random_array(*weight)
    spatial = spatial_axes(len(strides))
    attrs = ConvAttrs(strides, padding, dilations, groups, "NC" + spatial, "OI" + spatial)
    (ours,) = evaluate("conv", [x, w], attrs)
    theirs = run_onnx_node(
        "Conv", {"x": x, "w": w}, strides=strides, pads=padding, dilations=dilations, group=groups
    )
    assert_close(ours, theirs)


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
@pytest.mark.parametrize("kernel_channels_last", [True, False])
def test_conv_channels_last_equals_channels_first(case: int, kernel_channels_last: bool) -> None:
    data, weight, strides, padding, dilations, groups = CONV_CASES[case]
    rank = len(strides)
    spatial = spatial_axes(rank)
    x, w = random_array(*data), random_array(*weight)
    first = ConvAttrs(strides, padding, dilations, groups, "NC" + spatial, "OI" + spatial)
    (expected,) = evaluate("conv", [x, w], first)
    kernel_layout = spatial + "IO" if kernel_channels_last else "OI" + spatial
    kernel = np.transpose(w, (*range(2, rank + 2), 1, 0)) if kernel_channels_last else w
    last = ConvAttrs(strides, padding, dilations, groups, "N" + spatial + "C", kernel_layout)
    (ours,) = evaluate("conv", [channels_last(x), kernel], last)
    assert ours.shape == channels_last(expected).shape
    assert_close(ours, channels_last(expected))


def test_conv_mac_counts() -> None:
    # ResNet's first conv: 64 outputs x 112 x 112 positions x 3 channels x 7 x 7 taps.
    stem = ConvAttrs((2, 2), (3, 3, 3, 3), (1, 1), 1)
    inputs = [TensorType((1, 3, 224, 224), F32), TensorType((64, 3, 7, 7), F32)]
    assert count_macs("conv", inputs, stem) == 118013952
    # Depthwise 3x3 on 32 x 112 x 112, channels-last: one input channel per output.
    depthwise = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 32, "NHWC", "HWIO")
    inputs = [TensorType((1, 112, 112, 32), F32), TensorType((3, 3, 1, 32), F32)]
    assert count_macs("conv", inputs, depthwise) == 32 * 112 * 112 * 9
    assert get_op("conv").counts_macs and get_op("conv").pattern is OpPattern.ANCHOR


@pytest.mark.parametrize(
    ("data", "weight", "attrs", "message"),
    [
        (
            (1, 6, 8, 8),
            (4, 4, 3, 3),
            ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 2),
            "conv: data has 6 channels but the weight (4, 4, 3, 3) (OIHW) takes 4 input "
            "channels per group x 2 groups = 8; check groups and layouts",
        ),
        (
            (1, 6, 8, 8),
            (5, 3, 3, 3),
            ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 2),
            "conv: 6 input channels and 5 output channels must both be divisible by groups=2",
        ),
        (
            (1, 3, 8),
            (4, 3, 3),
            ConvAttrs((1,), (0, 0), (1,), 1, "NCHW", "OIW"),
            "conv: data of rank 3 does not match layout 'NCHW' (4 axes)",
        ),
        (
            (1, 3, 8, 8),
            (4, 3, 3, 3),
            ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "NCWH"),
            "conv: unsupported data layout 'NCWH'; use a channels-first layout (NCW, NCHW, "
            "NCDHW) or a channels-last one (NWC, NHWC, NDHWC)",
        ),
        (
            (1, 3, 8, 8),
            (4, 3, 3, 3),
            ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "NCHW", "IOHW"),
            "conv: unsupported kernel layout 'IOHW' for 2-d data; use 'OIHW' or 'HWIO'",
        ),
        (
            (1, 3, 4, 4),
            (4, 3, 5, 5),
            ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1),
            "conv: a kernel of 5 with dilation 1 does not fit in a spatial axis of 4 padded "
            "by (0, 0); use a smaller kernel or more padding",
        ),
        (
            (1, 3, 8, 8),
            (4, 3, 3, 3),
            ConvAttrs((1,), (0, 0, 0, 0), (1, 1), 1),
            "conv: strides has 1 entries but the data has 2 spatial axes; give one per "
            "spatial axis",
        ),
    ],
)
def test_conv_type_errors(
    data: tuple[int, ...], weight: tuple[int, ...], attrs: ConvAttrs, message: str
) -> None:
    assert type_error("conv", [TensorType(data, F32), TensorType(weight, F32)], attrs) == message


def test_conv_rejects_mixed_and_integer_dtypes() -> None:
    attrs = ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1)
    mixed = [TensorType((1, 3, 4, 4), F32), TensorType((2, 3, 1, 1), "float16")]
    assert type_error("conv", mixed, attrs) == "conv: data is float32 but weight is float16"
    ints = [TensorType((1, 3, 4, 4), "int32"), TensorType((2, 3, 1, 1), "int32")]
    assert type_error("conv", ints, attrs) == "conv: needs floating-point data, got int32"


# -- conv_transpose --------------------------------------------------------------------

CONV_TRANSPOSE_CASES = [
    # data, weight (I, O/groups, *kernel), strides, padding, output_padding, dilations, groups
    ((1, 3, 5, 4), (3, 2, 3, 3), (2, 2), (1, 1, 1, 1), (1, 0), (1, 1), 1),
    ((2, 4, 3, 5), (4, 3, 2, 3), (3, 1), (0, 1, 2, 0), (2, 0), (1, 2), 2),
    ((1, 6, 4, 4), (6, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 6),  # depthwise
    ((1, 2, 7), (2, 3, 4), (2,), (1, 2), (0,), (2,), 1),  # 1-d
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), (2, 1, 2), (0, 1, 0, 1, 0, 1), (1, 0, 0), (1, 1, 1), 1),
]


@pytest.mark.parametrize(
    ("data", "weight", "strides", "padding", "output_padding", "dilations", "groups"),
    CONV_TRANSPOSE_CASES,
)
def test_conv_transpose_matches_onnxruntime(
    data: tuple[int, ...],
    weight: tuple[int, ...],
    strides: tuple[int, ...],
    padding: tuple[int, ...],
    output_padding: tuple[int, ...],
    dilations: tuple[int, ...],
    groups: int,
) -> None:
    x, w = random_array(*data), random_array(*weight)
    layout = "NC" + spatial_axes(len(strides))
    attrs = ConvTransposeAttrs(strides, padding, output_padding, dilations, groups, layout)
    (ours,) = evaluate("conv_transpose", [x, w], attrs)
    theirs = run_onnx_node(
        "ConvTranspose",
        {"x": x, "w": w},
        strides=strides,
        pads=padding,
        output_padding=output_padding,
        dilations=dilations,
        group=groups,
    )
    assert_close(ours, theirs)


def test_conv_transpose_of_no_input_channels_is_zeros_like_onnxruntime() -> None:
    # Found by atheris: with C = 0 the reshape to rows could not infer its -1.
    x, w = np.zeros((1, 0, 2, 7), np.float32), np.zeros((0, 3, 3, 2), np.float32)
    attrs = ConvTransposeAttrs((1, 1), (0, 0, 0, 0), (0, 0), (1, 1), 1, "NCHW")
    (ours,) = evaluate("conv_transpose", [x, w], attrs)
    assert_close(ours, run_onnx_node("ConvTranspose", {"x": x, "w": w}))
    assert ours.shape == (1, 3, 4, 8) and not ours.any()


def test_conv_transpose_channels_last_andcount_macs() -> None:
    x, w = random_array(2, 4, 3, 5), random_array(4, 3, 2, 3)
    first = ConvTransposeAttrs((2, 2), (0, 1, 1, 0), (1, 1), (1, 1), 2, "NCHW")
    last = ConvTransposeAttrs((2, 2), (0, 1, 1, 0), (1, 1), (1, 1), 2, "NHWC")
    (expected,) = evaluate("conv_transpose", [x, w], first)
    (ours,) = evaluate("conv_transpose", [channels_last(x), w], last)
    assert_close(ours, channels_last(expected))
    # Each of the 2*4*3*5 inputs meets 3 output channels x 2 x 3 taps.
    types = [TensorType(x.shape, F32), TensorType(w.shape, F32)]
    assert count_macs("conv_transpose", types, first) == 2 * 4 * 3 * 5 * 3 * 2 * 3


def test_conv_transpose_type_errors() -> None:
    attrs = ConvTransposeAttrs((2, 2), (0, 0, 0, 0), (0, 0), (1, 1), 1)
    message = type_error(
        "conv_transpose", [TensorType((1, 4, 3, 3), F32), TensorType((3, 2, 2, 2), F32)], attrs
    )
    assert message == (
        "conv_transpose: data has 4 channels but the weight (3, 2, 2, 2) expects 3 (weight "
        "layout: input channels, output channels per group, kernel...)"
    )
    too_much = ConvTransposeAttrs((1, 1), (2, 2, 2, 2), (0, 0), (1, 1), 1)
    message = type_error(
        "conv_transpose", [TensorType((1, 4, 1, 1), F32), TensorType((4, 2, 2, 2), F32)], too_much
    )
    assert "spatial axis 0 would have length -2" in message

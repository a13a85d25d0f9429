"""Convolution declarations (conv, depthwise, grouped, 1-/2-/3-d, transposed) against
the graph references."""

from __future__ import annotations

import numpy as np
import pytest
from topi_check import random, run_check

from ember.graph.ops.attrs import ConvAttrs, ConvTransposeAttrs
from ember.graph.ops.layout import parse_data_layout, parse_kernel_layout


def _conv_case(
    layout: str,
    kernel_layout: str,
    batch: int,
    channels: int,
    sizes: tuple[int, ...],
    out_channels: int,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    padding: tuple[int, ...],
    dilations: tuple[int, ...],
    groups: int = 1,
    case_id: str = "",
):
    data_layout = parse_data_layout(layout, "test")
    shape = [0] * len(layout)
    shape[data_layout.batch_axis] = batch
    shape[data_layout.channel_axis] = channels
    for axis, size in zip(data_layout.spatial_axes, sizes, strict=True):
        shape[axis] = size
    weights = parse_kernel_layout(kernel_layout, "test", len(sizes))
    weight_shape = [0] * len(kernel_layout)
    weight_shape[weights.out_axis] = out_channels
    weight_shape[weights.in_axis] = channels // groups
    for axis, size in zip(weights.spatial_axes, kernel, strict=True):
        weight_shape[axis] = size
    attrs = ConvAttrs(strides, padding, dilations, groups, layout, kernel_layout)
    inputs = [random(shape, seed=1), random(weight_shape, seed=2)]
    return pytest.param("conv", inputs, attrs, id=case_id)


CASES = [
    _conv_case("NHWC", "HWIO", 1, 3, (7, 7), 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "nhwc"),
    _conv_case(
        "NHWC", "HWIO", 2, 5, (9, 8), 6, (3, 2), (2, 3), (2, 0, 1, 1), (1, 1), 1, "nhwc-odd"
    ),
    _conv_case("NHWC", "HWIO", 1, 4, (9, 9), 4, (3, 3), (1, 2), (2, 2, 2, 2), (2, 1), 1, "dilated"),
    _conv_case("NCHW", "OIHW", 2, 3, (8, 7), 5, (3, 3), (2, 2), (1, 1, 0, 1), (1, 1), 1, "nchw"),
    _conv_case("NCHW", "OIHW", 1, 6, (6, 6), 4, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, "1x1"),
    _conv_case("NHWC", "HWIO", 1, 6, (7, 6), 9, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 3, "grp"),
    _conv_case("NCHW", "OIHW", 2, 4, (7, 7), 6, (3, 3), (2, 1), (1, 0, 0, 1), (1, 2), 2, "grp-c"),
    _conv_case("NHWC", "HWIO", 1, 8, (9, 9), 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8, "dw"),
    _conv_case("NHWC", "HWIO", 2, 4, (8, 9), 4, (3, 3), (2, 2), (0, 1, 1, 1), (1, 1), 4, "dw-s2"),
    _conv_case("NCHW", "OIHW", 1, 4, (8, 8), 8, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 4, "dw-x2"),
    _conv_case("NHWC", "HWIO", 1, 3, (7, 7), 6, (5, 3), (1, 2), (2, 1, 2, 1), (1, 1), 3, "dw-m2"),
    _conv_case("NHWC", "OIHW", 1, 3, (6, 6), 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "mixed"),
    _conv_case("NCHW", "HWIO", 1, 3, (6, 6), 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "mixed2"),
    _conv_case("NWC", "WIO", 2, 3, (11,), 4, (3,), (2,), (1, 2), (1,), 1, "conv1d-nwc"),
    _conv_case("NCW", "OIW", 1, 4, (10,), 6, (5,), (1,), (2, 2), (2,), 2, "conv1d-ncw"),
    _conv_case(
        "NDHWC",
        "DHWIO",
        1,
        3,
        (5, 6, 6),
        4,
        (3, 3, 3),
        (1, 2, 2),
        (1, 1, 1, 1, 1, 1),
        (1, 1, 1),
        1,
        "conv3d-ndhwc",
    ),
    _conv_case(
        "NCDHW",
        "OIDHW",
        2,
        2,
        (4, 5, 5),
        3,
        (3, 1, 3),
        (2, 1, 1),
        (1, 0, 1, 0, 0, 1),
        (1, 1, 1),
        1,
        "conv3d-ncdhw",
    ),
]


def _pack_case(sizes: tuple[int, ...], channels: int, out_channels: int, block: int,
               kernel: tuple[int, ...], strides: tuple[int, ...], padding: tuple[int, ...],
               case_id: str):  # fmt: skip
    """conv_pack: channels-last data, the weight as [O/b, *kernel, I, b]."""
    layout = {1: "NWC", 2: "NHWC", 3: "NDHWC"}[len(sizes)]
    kernel_layout = {1: "WIO", 2: "HWIO", 3: "DHWIO"}[len(sizes)]
    attrs = ConvAttrs(strides, padding, (1,) * len(sizes), 1, layout, kernel_layout)
    weight = random((out_channels // block, *kernel, channels, block), seed=2)
    return pytest.param("conv_pack", [random((1, *sizes, channels), seed=1), weight], attrs,
                        id=case_id)  # fmt: skip


CASES += [
    _pack_case((7, 7), 5, 32, 16, (3, 3), (1, 1), (1, 1, 1, 1), "pack"),
    _pack_case((9, 8), 3, 8, 4, (3, 2), (2, 1), (0, 1, 1, 0), "pack-s2"),
    _pack_case((11,), 4, 8, 8, (3,), (1,), (1, 1), "pack-1d"),
    _pack_case((3, 4, 4), 2, 8, 4, (1, 3, 3), (1, 1, 1), (0, 1, 1, 0, 1, 1), "pack-3d"),
]


def _transpose_case(
    layout: str,
    channels: int,
    sizes: tuple[int, ...],
    out_per_group: int,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    padding: tuple[int, ...],
    output_padding: tuple[int, ...],
    dilations: tuple[int, ...],
    groups: int,
    case_id: str,
):
    data_layout = parse_data_layout(layout, "test")
    shape = [0] * len(layout)
    shape[data_layout.batch_axis] = 2
    shape[data_layout.channel_axis] = channels
    for axis, size in zip(data_layout.spatial_axes, sizes, strict=True):
        shape[axis] = size
    attrs = ConvTransposeAttrs(strides, padding, output_padding, dilations, groups, layout)
    weight = random((channels, out_per_group, *kernel), seed=2)
    return pytest.param("conv_transpose", [random(shape, seed=1), weight], attrs, id=case_id)


CASES += [
    _transpose_case("NCHW", 3, (4, 5), 2, (3, 3), (2, 2), (1, 1, 1, 1), (1, 0), (1, 1), 1, "t-s2"),
    _transpose_case("NCHW", 4, (5, 4), 3, (3, 2), (1, 3), (0, 1, 2, 0), (0, 2), (2, 1), 2, "t-grp"),
    _transpose_case(
        "NHWC", 3, (4, 4), 2, (4, 4), (2, 2), (1, 1, 1, 1), (0, 0), (1, 1), 1, "t-nhwc"
    ),
    _transpose_case(
        "NCHW", 2, (3, 3), 2, (2, 2), (3, 3), (4, 4, 0, 0), (0, 0), (1, 1), 1, "t-crop"
    ),
    _transpose_case("NCW", 2, (6,), 3, (3,), (2,), (0, 0), (1,), (1,), 1, "t-1d"),
    _transpose_case(
        "NCDHW",
        2,
        (3, 3, 2),
        2,
        (2, 3, 2),
        (2, 1, 2),
        (0, 1, 0, 1, 0, 1),
        (1, 0, 1),
        (1, 1, 1),
        1,
        "t-3d",
    ),
]


@pytest.mark.parametrize(("op", "inputs", "attrs"), CASES)
def test_matches_reference(op, inputs, attrs) -> None:
    run_check(op, inputs, attrs)


def test_nhwc_conv_prints_like_the_seed() -> None:
    attrs = ConvAttrs((2, 2), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO")
    dag = run_check("conv", [random((1, 8, 8, 3)), random((3, 3, 3, 4))], attrs)
    assert str(dag).splitlines() == [
        "placeholder = PLACEHOLDER [1, 8, 8, 3]",
        "pad_temp(i0, i1, i2, i3) = tir.if_then_else(((((i1 >= 1) && (i1 < 9)) && (i2 >= 1)) "
        "&& (i2 < 9)), placeholder[i0, (i1 - 1), (i2 - 1), i3], 0f)",
        "placeholder = PLACEHOLDER [3, 3, 3, 4]",
        "conv2d_nhwc(nn, yy, xx, ff) += (pad_temp[nn, ((yy*2) + ry), ((xx*2) + rx), rc]"
        "*placeholder[ry, rx, rc, ff])",
    ]


def test_depthwise_conv_has_its_own_stage() -> None:
    attrs = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 4, "NHWC", "HWIO")
    dag = run_check("conv", [random((1, 5, 5, 4)), random((3, 3, 1, 4))], attrs)
    lines = str(dag).splitlines()
    assert lines[1].startswith("PaddedInput(i0, i1, i2, i3) = tir.if_then_else(")
    assert lines[-1] == (
        "DepthwiseConv2d(b, i, j, c) += (PaddedInput[b, (i + di), (j + dj), c]"
        "*placeholder[di, dj, 0, c])"
    )
    assert dag.outputs[0].op.tag == "depthwise_conv2d_nhwc"


def test_unpadded_conv_keeps_a_copy_stage() -> None:
    attrs = ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "NHWC", "HWIO")
    dag = run_check("conv", [random((1, 4, 4, 8)), random((1, 1, 8, 8))], attrs)
    assert str(dag).splitlines()[1] == "pad_temp(i0, i1, i2, i3) = placeholder[i0, i1, i2, i3]"


def test_conv_flop_count_is_two_per_multiply_accumulate() -> None:
    attrs = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO")
    dag = run_check("conv", [random((1, 6, 6, 4)), random((3, 3, 4, 5))], attrs)
    assert dag.flop_count == 2 * (6 * 6 * 5) * (3 * 3 * 4)
    assert np.prod(dag.outputs[0].shape) == 180

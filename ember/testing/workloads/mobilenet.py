"""MobileNet v1 (Howard et al. 2017): depthwise separable convolutions, and MobileNet
v2 (Sandler et al. 2018): inverted residuals with linear bottlenecks and relu6."""

from __future__ import annotations

from ember.graph.ir import Value
from ember.testing.workloads.layers import NetBuilder

# MobileNet v1 after the stem: (output channels, stride) of each separable block.
SEPARABLE_BLOCKS = (
    (64, 1),
    (128, 2),
    (128, 1),
    (256, 2),
    (256, 1),
    (512, 2),
    (512, 1),
    (512, 1),
    (512, 1),
    (512, 1),
    (512, 1),
    (1024, 2),
    (1024, 1),
)

# MobileNet v2: (expansion factor, output channels, repeats, stride of the first).
INVERTED_RESIDUAL_STAGES = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def separable_block(net: NetBuilder, x: Value, channels: int, stride: int, name: str) -> Value:
    """3x3 depthwise conv (one filter per channel), then 1x1 pointwise conv."""
    depthwise = net.conv_bn_relu(
        x, net.channels(x), 3, stride, 1, groups=net.channels(x), name=f"{name}_depthwise"
    )
    return net.conv_bn_relu(depthwise, channels, 1, name=f"{name}_pointwise")


def mobilenet(net: NetBuilder, data: Value, num_classes: int) -> Value:
    x = net.conv_bn_relu(data, 32, 3, 2, 1, name="stem_conv")
    for index, (channels, stride) in enumerate(SEPARABLE_BLOCKS, start=1):
        x = separable_block(net, x, channels, stride, name=f"block{index}")
    return net.classifier(x, num_classes)


def _conv_bn_relu6(
    net: NetBuilder,
    x: Value,
    channels: int,
    kernel: int,
    stride: int,
    padding: int,
    groups: int,
    name: str,
) -> Value:
    out = net.conv(x, channels, kernel, stride, padding, groups, name=name)
    return net.relu6(net.batch_norm(out, name=f"{name}_bn"), name=f"{name}_relu6")


def inverted_residual(
    net: NetBuilder, x: Value, expansion: int, channels: int, stride: int, name: str
) -> Value:
    """1x1 expand (skipped when the factor is 1), 3x3 depthwise, 1x1 linear project;
    the input is added back when the shape is unchanged."""
    in_channels = net.channels(x)
    hidden = in_channels * expansion
    out = x
    if expansion != 1:
        out = _conv_bn_relu6(net, out, hidden, 1, 1, 0, 1, name=f"{name}_expand")
    out = _conv_bn_relu6(net, out, hidden, 3, stride, 1, hidden, name=f"{name}_depthwise")
    out = net.conv(out, channels, 1, name=f"{name}_project")
    # No activation after the projection: the "linear bottleneck".
    out = net.batch_norm(out, name=f"{name}_project_bn")
    if stride == 1 and in_channels == channels:
        out = net.add(out, x, name=f"{name}_add")
    return out


def mobilenet_v2(net: NetBuilder, data: Value, num_classes: int) -> Value:
    x = _conv_bn_relu6(net, data, 32, 3, 2, 1, 1, name="stem_conv")
    for stage, (expansion, channels, repeats, first_stride) in enumerate(
        INVERTED_RESIDUAL_STAGES, start=1
    ):
        for unit in range(1, repeats + 1):
            stride = first_stride if unit == 1 else 1
            x = inverted_residual(
                net, x, expansion, channels, stride, name=f"stage{stage}_unit{unit}"
            )
    x = _conv_bn_relu6(net, x, 1280, 1, 1, 0, 1, name="head_conv")
    return net.classifier(x, num_classes)

"""Inception v3 (Szegedy et al. 2015) for 299x299 images, without the auxiliary head.

Block names follow the usual A-E naming: A at 35x35, B reduces to 17x17, C at 17x17
with factorised 1x7 / 7x1 convs, D reduces to 8x8, E at 8x8 with split 1x3 / 3x1
branches. Every conv is conv + batch norm (epsilon 1e-3) + relu.
"""

from __future__ import annotations

from ember.graph.ir import Value
from ember.testing.workloads.layers import IntOrTuple, NetBuilder

EPSILON = 1e-3


def _unit(
    net: NetBuilder,
    x: Value,
    channels: int,
    kernel: IntOrTuple,
    name: str,
    strides: IntOrTuple = 1,
    padding: IntOrTuple = 0,
) -> Value:
    return net.conv_bn_relu(x, channels, kernel, strides, padding, name=name, epsilon=EPSILON)


def _pool_branch(net: NetBuilder, x: Value, channels: int, name: str) -> Value:
    """3x3 average pool (same size) then a 1x1 projection."""
    pooled = net.avg_pool(x, 3, 1, 1, name=f"{name}_pool")
    return _unit(net, pooled, channels, 1, name=f"{name}_proj")


def block_a(net: NetBuilder, x: Value, pool_channels: int, name: str) -> Value:
    branch1x1 = _unit(net, x, 64, 1, f"{name}_1x1")
    branch5x5 = _unit(net, x, 48, 1, f"{name}_5x5_reduce")
    branch5x5 = _unit(net, branch5x5, 64, 5, f"{name}_5x5", padding=2)
    branch3x3 = _unit(net, x, 64, 1, f"{name}_3x3_reduce")
    branch3x3 = _unit(net, branch3x3, 96, 3, f"{name}_3x3_1", padding=1)
    branch3x3 = _unit(net, branch3x3, 96, 3, f"{name}_3x3_2", padding=1)
    branch_pool = _pool_branch(net, x, pool_channels, f"{name}_pool")
    return net.concat([branch1x1, branch5x5, branch3x3, branch_pool], name=f"{name}_concat")


def block_b(net: NetBuilder, x: Value, name: str) -> Value:
    """Grid reduction 35 -> 17."""
    branch3x3 = _unit(net, x, 384, 3, f"{name}_3x3", strides=2)
    branch_double = _unit(net, x, 64, 1, f"{name}_dbl_reduce")
    branch_double = _unit(net, branch_double, 96, 3, f"{name}_dbl_1", padding=1)
    branch_double = _unit(net, branch_double, 96, 3, f"{name}_dbl_2", strides=2)
    branch_pool = net.max_pool(x, 3, 2, name=f"{name}_pool")
    return net.concat([branch3x3, branch_double, branch_pool], name=f"{name}_concat")


def block_c(net: NetBuilder, x: Value, channels_7x7: int, name: str) -> Value:
    """7x7 convs factorised into 1x7 and 7x1."""
    c7 = channels_7x7
    branch1x1 = _unit(net, x, 192, 1, f"{name}_1x1")
    branch7x7 = _unit(net, x, c7, 1, f"{name}_7x7_reduce")
    branch7x7 = _unit(net, branch7x7, c7, (1, 7), f"{name}_7x7_1", padding=(0, 3))
    branch7x7 = _unit(net, branch7x7, 192, (7, 1), f"{name}_7x7_2", padding=(3, 0))
    branch_double = _unit(net, x, c7, 1, f"{name}_dbl_reduce")
    for index, (channels, kernel, padding) in enumerate(
        [(c7, (7, 1), (3, 0)), (c7, (1, 7), (0, 3)), (c7, (7, 1), (3, 0)), (192, (1, 7), (0, 3))],
        start=1,
    ):
        branch_double = _unit(
            net, branch_double, channels, kernel, f"{name}_dbl_{index}", padding=padding
        )
    branch_pool = _pool_branch(net, x, 192, f"{name}_pool")
    return net.concat([branch1x1, branch7x7, branch_double, branch_pool], name=f"{name}_concat")


def block_d(net: NetBuilder, x: Value, name: str) -> Value:
    """Grid reduction 17 -> 8."""
    branch3x3 = _unit(net, x, 192, 1, f"{name}_3x3_reduce")
    branch3x3 = _unit(net, branch3x3, 320, 3, f"{name}_3x3", strides=2)
    branch7x7 = _unit(net, x, 192, 1, f"{name}_7x7_reduce")
    branch7x7 = _unit(net, branch7x7, 192, (1, 7), f"{name}_7x7_1", padding=(0, 3))
    branch7x7 = _unit(net, branch7x7, 192, (7, 1), f"{name}_7x7_2", padding=(3, 0))
    branch7x7 = _unit(net, branch7x7, 192, 3, f"{name}_7x7_3", strides=2)
    branch_pool = net.max_pool(x, 3, 2, name=f"{name}_pool")
    return net.concat([branch3x3, branch7x7, branch_pool], name=f"{name}_concat")


def _split_1x3_3x1(net: NetBuilder, x: Value, name: str) -> list[Value]:
    """The E block's fork: a 1x3 and a 3x1 conv of the same input, side by side."""
    return [
        _unit(net, x, 384, (1, 3), f"{name}_1x3", padding=(0, 1)),
        _unit(net, x, 384, (3, 1), f"{name}_3x1", padding=(1, 0)),
    ]


def block_e(net: NetBuilder, x: Value, name: str) -> Value:
    branch1x1 = _unit(net, x, 320, 1, f"{name}_1x1")
    branch3x3 = _unit(net, x, 384, 1, f"{name}_3x3_reduce")
    branch3x3_parts = _split_1x3_3x1(net, branch3x3, f"{name}_3x3")
    branch_double = _unit(net, x, 448, 1, f"{name}_dbl_reduce")
    branch_double = _unit(net, branch_double, 384, 3, f"{name}_dbl_1", padding=1)
    branch_double_parts = _split_1x3_3x1(net, branch_double, f"{name}_dbl")
    branch_pool = _pool_branch(net, x, 192, f"{name}_pool")
    return net.concat(
        [branch1x1, *branch3x3_parts, *branch_double_parts, branch_pool], name=f"{name}_concat"
    )


def inception_v3(net: NetBuilder, data: Value, num_classes: int) -> Value:
    # Stem: 299 -> 149 -> 147 -> 147 -> 73 -> 73 -> 71 -> 35.
    x = _unit(net, data, 32, 3, "stem_conv1", strides=2)
    x = _unit(net, x, 32, 3, "stem_conv2")
    x = _unit(net, x, 64, 3, "stem_conv3", padding=1)
    x = net.max_pool(x, 3, 2, name="stem_pool1")
    x = _unit(net, x, 80, 1, "stem_conv4")
    x = _unit(net, x, 192, 3, "stem_conv5")
    x = net.max_pool(x, 3, 2, name="stem_pool2")
    for index, pool_channels in enumerate((32, 64, 64), start=1):
        x = block_a(net, x, pool_channels, name=f"mixed_a{index}")
    x = block_b(net, x, name="mixed_b")
    for index, channels_7x7 in enumerate((128, 160, 160, 192), start=1):
        x = block_c(net, x, channels_7x7, name=f"mixed_c{index}")
    x = block_d(net, x, name="mixed_d")
    for index in (1, 2):
        x = block_e(net, x, name=f"mixed_e{index}")
    return net.classifier(x, num_classes)

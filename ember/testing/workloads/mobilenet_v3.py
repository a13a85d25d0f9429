"""MobileNet v3 Small (Howard et al. 2019, "Searching for MobileNetV3"), as torchvision's
`mobilenet_v3_small` defines it: inverted residuals with 3x3 and 5x5 depthwise
convolutions, squeeze-and-excitation gates (hard sigmoid) in most blocks, hard-swish
activations in the later ones, and a 576 -> 1024 -> classes head. Batch norms use
torchvision's epsilon 0.001. The network is small and made of many small layers, so
per-kernel overhead shows in its run time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ember.graph.ir import Value
from ember.testing.workloads.layers import NetBuilder

EPSILON = 1e-3


class Bottleneck(NamedTuple):
    kernel: int
    expanded: int
    channels: int
    squeeze_excite: bool
    hard_swish: bool  # else relu
    stride: int


# torchvision's configuration of mobilenet_v3_small, after the 16-channel stem.
SMALL_BLOCKS = (
    Bottleneck(3, 16, 16, True, False, 2),
    Bottleneck(3, 72, 24, False, False, 2),
    Bottleneck(3, 88, 24, False, False, 1),
    Bottleneck(5, 96, 40, True, True, 2),
    Bottleneck(5, 240, 40, True, True, 1),
    Bottleneck(5, 240, 40, True, True, 1),
    Bottleneck(5, 120, 48, True, True, 1),
    Bottleneck(5, 144, 48, True, True, 1),
    Bottleneck(5, 288, 96, True, True, 2),
    Bottleneck(5, 576, 96, True, True, 1),
    Bottleneck(5, 576, 96, True, True, 1),
)
LAST_CHANNELS = 1024


def make_divisible(value: float, divisor: int = 8) -> int:
    """The nearest multiple of `divisor` to `value`, rounding down by at most 10%
    (torchvision's _make_divisible), for the squeeze-and-excitation widths."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv_bn(
    net: NetBuilder,
    x: Value,
    channels: int,
    kernel: int,
    stride: int,
    groups: int,
    activation: Callable[[Value, str], Value] | None,
    name: str,
    gamma: float = 1.0,
) -> Value:
    out = net.conv(x, channels, kernel, stride, (kernel - 1) // 2, groups, name=name)
    out = net.batch_norm(out, name=f"{name}_bn", epsilon=EPSILON, gamma=gamma)
    return activation(out, f"{name}_act") if activation else out


def squeeze_excite(net: NetBuilder, x: Value, name: str) -> Value:
    """x times a per-channel gate: global average, 1x1 conv down to a quarter, relu,
    1x1 conv back, hard sigmoid."""
    channels = net.channels(x)
    pooled = net.global_avg_pool(x, name=f"{name}_pool")
    squeezed = net.conv(pooled, make_divisible(channels // 4), 1, name=f"{name}_fc1", bias=True)
    squeezed = net.relu(squeezed, name=f"{name}_relu")
    gate = net.conv(squeezed, channels, 1, name=f"{name}_fc2", bias=True)
    return net.multiply(x, net.hard_sigmoid(gate, name=f"{name}_gate"), name=f"{name}_scale")


def bottleneck(net: NetBuilder, x: Value, block: Bottleneck, name: str) -> Value:
    """1x1 expand (skipped when the width stays), depthwise conv, optional
    squeeze-and-excitation, 1x1 linear projection; the input is added back when the
    shape is unchanged."""
    activation = net.hard_swish if block.hard_swish else net.relu
    in_channels = net.channels(x)
    out = x
    if block.expanded != in_channels:
        out = _conv_bn(net, out, block.expanded, 1, 1, 1, activation, f"{name}_expand")
    out = _conv_bn(
        net, out, block.expanded, block.kernel, block.stride, block.expanded, activation,
        f"{name}_depthwise",
    )  # fmt: skip
    if block.squeeze_excite:
        out = squeeze_excite(net, out, f"{name}_se")
    # A gate halves the activations on average (hard sigmoid of ~0); a larger
    # projection scale makes up for most of it, so that random weights keep the
    # activations near unit scale through the 11 blocks (neither a flat softmax nor
    # an overflow).
    gamma = 1.4 if block.squeeze_excite else 1.0
    out = _conv_bn(net, out, block.channels, 1, 1, 1, None, f"{name}_project", gamma)
    if block.stride == 1 and in_channels == block.channels:
        out = net.add(out, x, name=f"{name}_add")
    return out


def mobilenet_v3_small(net: NetBuilder, data: Value, num_classes: int) -> Value:
    x = _conv_bn(net, data, 16, 3, 2, 1, net.hard_swish, "stem_conv")
    for index, block in enumerate(SMALL_BLOCKS, start=1):
        x = bottleneck(net, x, block, f"block{index}")
    x = _conv_bn(net, x, 6 * net.channels(x), 1, 1, 1, net.hard_swish, "head_conv")
    pooled = net.flatten(net.global_avg_pool(x, name="pool_final"))
    hidden = net.hard_swish(net.dense(pooled, LAST_CHANNELS, name="fc1"), name="fc1_act")
    # torchvision's dropout (p=0.2) is the identity at inference.
    logits = net.dense(hidden, num_classes, name="fc")
    return net.softmax(logits, name="output")

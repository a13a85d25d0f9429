"""ResNet v1 (He et al. 2015): resnet-18/34 with basic blocks, 50/101/152 with
bottlenecks; batch norm after every conv. The blocks are written for any spatial
rank, so `resnet3d` reuses them with 3-D convolutions.
"""

from __future__ import annotations

from ember.graph.ir import Value
from ember.testing.workloads.layers import NetBuilder

# num_layers -> (units per stage, uses bottleneck blocks)
STAGE_UNITS: dict[int, tuple[tuple[int, ...], bool]] = {
    18: ((2, 2, 2, 2), False),
    34: ((3, 4, 6, 3), False),
    50: ((3, 4, 6, 3), True),
    101: ((3, 4, 23, 3), True),
    152: ((3, 8, 36, 3), True),
}

# The last batch norm of each residual branch scales by this much less, so that the
# identity path dominates and 50 stacked blocks keep activations of the same order.
RESIDUAL_GAMMA = 0.15


def basic_block(net: NetBuilder, x: Value, channels: int, stride: int, name: str) -> Value:
    """Two 3x3 convs plus the shortcut."""
    out = net.conv_bn_relu(x, channels, 3, stride, 1, name=f"{name}_conv1")
    out = net.conv(out, channels, 3, 1, 1, name=f"{name}_conv2")
    out = net.batch_norm(out, name=f"{name}_conv2_bn", gamma=RESIDUAL_GAMMA)
    return _join(net, x, out, channels, stride, name)


def bottleneck_block(net: NetBuilder, x: Value, channels: int, stride: int, name: str) -> Value:
    """1x1 reduce to channels/4, 3x3 (carrying the stride), 1x1 expand, plus shortcut."""
    mid = channels // 4
    out = net.conv_bn_relu(x, mid, 1, 1, 0, name=f"{name}_conv1")
    out = net.conv_bn_relu(out, mid, 3, stride, 1, name=f"{name}_conv2")
    out = net.conv(out, channels, 1, 1, 0, name=f"{name}_conv3")
    out = net.batch_norm(out, name=f"{name}_conv3_bn", gamma=RESIDUAL_GAMMA)
    return _join(net, x, out, channels, stride, name)


def _join(net: NetBuilder, x: Value, branch: Value, channels: int, stride: int, name: str) -> Value:
    """relu(branch + shortcut); the shortcut is a strided 1x1 conv + bn when the shape
    changes, the identity otherwise."""
    shortcut = x
    if stride != 1 or net.channels(x) != channels:
        shortcut = net.conv(x, channels, 1, stride, 0, name=f"{name}_shortcut")
        shortcut = net.batch_norm(shortcut, name=f"{name}_shortcut_bn")
    return net.relu(net.add(branch, shortcut, name=f"{name}_add"), name=f"{name}_relu")


def residual_stages(net: NetBuilder, x: Value, num_layers: int) -> Value:
    """The four stages; the first unit of stages 2-4 halves every spatial size."""
    units, bottleneck = STAGE_UNITS[num_layers]
    widths = (256, 512, 1024, 2048) if bottleneck else (64, 128, 256, 512)
    block = bottleneck_block if bottleneck else basic_block
    for stage, (count, channels) in enumerate(zip(units, widths, strict=True), start=1):
        for unit in range(1, count + 1):
            stride = 2 if stage > 1 and unit == 1 else 1
            x = block(net, x, channels, stride, name=f"stage{stage}_unit{unit}")
    return x


def resnet(net: NetBuilder, data: Value, num_classes: int, num_layers: int) -> Value:
    """7x7/2 conv stem and 3x3/2 max pool, four stages, classifier."""
    x = net.conv_bn_relu(data, 64, 7, 2, 3, name="stem_conv")
    x = net.max_pool(x, 3, 2, 1, name="stem_pool")
    x = residual_stages(net, x, num_layers)
    return net.classifier(x, num_classes)

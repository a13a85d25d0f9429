"""SqueezeNet v1.1 (Iandola et al. 2016): fire modules, no batch norm, a 1x1 conv as
the classifier. Pools round their output size up (ceil mode), as the original does."""

from __future__ import annotations

from ember.graph.ir import Value
from ember.testing.workloads.layers import NetBuilder


def fire(net: NetBuilder, x: Value, squeeze: int, expand: int, name: str) -> Value:
    """1x1 squeeze, then 1x1 and 3x3 expands side by side, concatenated."""
    squeezed = net.conv(x, squeeze, 1, name=f"{name}_squeeze", bias=True)
    squeezed = net.relu(squeezed, name=f"{name}_squeeze_relu")
    expand1 = net.conv(squeezed, expand, 1, name=f"{name}_expand1x1", bias=True)
    expand3 = net.conv(squeezed, expand, 3, padding=1, name=f"{name}_expand3x3", bias=True)
    branches = [
        net.relu(expand1, name=f"{name}_expand1x1_relu"),
        net.relu(expand3, name=f"{name}_expand3x3_relu"),
    ]
    return net.concat(branches, name=f"{name}_concat")


def squeezenet_v1_1(net: NetBuilder, data: Value, num_classes: int) -> Value:
    x = net.relu(net.conv(data, 64, 3, 2, name="conv1", bias=True), name="conv1_relu")
    x = net.max_pool(x, 3, 2, name="pool1", ceil_mode=True)
    x = fire(net, x, 16, 64, name="fire2")
    x = fire(net, x, 16, 64, name="fire3")
    x = net.max_pool(x, 3, 2, name="pool3", ceil_mode=True)
    x = fire(net, x, 32, 128, name="fire4")
    x = fire(net, x, 32, 128, name="fire5")
    x = net.max_pool(x, 3, 2, name="pool5", ceil_mode=True)
    x = fire(net, x, 48, 192, name="fire6")
    x = fire(net, x, 48, 192, name="fire7")
    x = fire(net, x, 64, 256, name="fire8")
    x = fire(net, x, 64, 256, name="fire9")
    # The classifier is a 1x1 conv to one channel per class, then an average.
    x = net.relu(net.conv(x, num_classes, 1, name="conv10", bias=True), name="conv10_relu")
    pooled = net.flatten(net.global_avg_pool(x, name="pool10"))
    return net.softmax(pooled, name="output")

"""3-D ResNet for video clips (Hara et al. 2018): ResNet's blocks with 3x3x3 convs.

The stem keeps the time axis at full resolution (3x7x7 conv, stride 1x2x2) and then
max-pools all three axes; the four stages are ResNet's, with every stride applied to
time, height and width alike.
"""

from __future__ import annotations

from ember.graph.ir import Value
from ember.testing.workloads.layers import NetBuilder
from ember.testing.workloads.resnet import residual_stages


def resnet3d(net: NetBuilder, data: Value, num_classes: int, num_layers: int) -> Value:
    x = net.conv_bn_relu(data, 64, (3, 7, 7), (1, 2, 2), (1, 3, 3), name="stem_conv")
    x = net.max_pool(x, 3, 2, 1, name="stem_pool")
    x = residual_stages(net, x, num_layers)
    return net.classifier(x, num_classes)

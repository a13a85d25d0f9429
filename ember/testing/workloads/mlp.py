"""A multi-layer perceptron: flatten, dense 128 / 64 / classes with relu between."""

from __future__ import annotations

import numpy as np

from ember.graph.ir import Value
from ember.testing.workloads.layers import NetBuilder


def _nchw_flatten_order(image_shape: tuple[int, ...]) -> np.ndarray:
    """For an NHWC image, the NCHW-flattened index of each NHWC-flattened element:
    permuting the first layer's columns by it makes both layouts compute the same."""
    channels, spatial = image_shape[-1], image_shape[:-1]
    nchw_index = np.arange(int(np.prod(image_shape))).reshape(channels, *spatial)
    return np.moveaxis(nchw_index, 0, -1).reshape(-1)


def mlp(net: NetBuilder, data: Value, num_classes: int) -> Value:
    # Dense layers after a flatten have no spatial structure; He scaling keeps the
    # relu activations at unit scale.
    order = _nchw_flatten_order(data.shape[1:]) if net.layout.channels_last else None
    x = net.flatten(data)
    x = net.dense(x, 128, name="fc1", std=np.sqrt(2 / x.shape[1]), input_order=order)
    x = net.relu(x, name="fc1_relu")
    x = net.relu(net.dense(x, 64, name="fc2", std=np.sqrt(2 / 128)), name="fc2_relu")
    return net.softmax(net.dense(x, num_classes, name="fc3"), name="output")

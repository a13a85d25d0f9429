"""Layer helpers for the built-in workloads: conv, batch norm, pooling, dense, ...

`NetBuilder` wraps a `GraphBuilder` with the data layout of the network and a seeded
random generator, so that a network definition reads like a layer list and never
mentions layouts. Weights are always drawn in the channels-first kernel layout (OIHW,
OIDHW) and transposed afterwards for channels-last networks: the NCHW and NHWC
variants of a workload therefore hold the same numbers and compute the same function.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ember.graph.builder import GraphBuilder
from ember.graph.ir import Graph, Params, Value
from ember.graph.ops.attrs import (
    AxisAttrs,
    BatchNormAttrs,
    ClipAttrs,
    ConvAttrs,
    HardSigmoidAttrs,
    LayoutAttrs,
    PoolAttrs,
    ReshapeAttrs,
)

# Every workload's weights come from this seed, so runs and machines agree.
SEED = 0


@dataclass(frozen=True, slots=True)
class Layout:
    """A data layout with the kernel layout that goes with it."""

    data: str  # "NCHW", "NHWC", "NCDHW", "NDHWC"
    kernel: str  # "OIHW", "HWIO", "OIDHW", "DHWIO"

    @property
    def channels_last(self) -> bool:
        return self.data.endswith("C")

    @property
    def channel_axis(self) -> int:
        return self.data.index("C")

    @property
    def spatial_rank(self) -> int:
        return len(self.data) - 2


LAYOUTS = {
    "NCHW": Layout("NCHW", "OIHW"),
    "NHWC": Layout("NHWC", "HWIO"),
    "NCDHW": Layout("NCDHW", "OIDHW"),
    "NDHWC": Layout("NDHWC", "DHWIO"),
}

IntOrTuple = int | Sequence[int]


class NetBuilder:
    """Builds one network: layer helpers in the network's layout and dtype."""

    def __init__(self, name: str, layout: Layout, dtype: str, seed: int = SEED) -> None:
        self.graph = GraphBuilder(name)
        self.layout = layout
        self.dtype = dtype
        self.rng = np.random.default_rng(seed)

    # -- weights -------------------------------------------------------------------

    def _spatial(self, value: IntOrTuple) -> tuple[int, ...]:
        """An int repeated over the spatial axes, or a tuple checked for length."""
        if isinstance(value, int):
            return (value,) * self.layout.spatial_rank
        assert len(value) == self.layout.spatial_rank, value
        return tuple(value)

    def _param(self, name: str, array: np.ndarray) -> Value:
        return self.graph.param(name, array.astype(self.dtype))

    def channel_vector(self, name: str, array: np.ndarray) -> Value:
        """A per-channel vector shaped to broadcast against data in this layout."""
        if not self.layout.channels_last:
            array = array.reshape((-1,) + (1,) * self.layout.spatial_rank)
        return self._param(name, array)

    # -- layers --------------------------------------------------------------------

    def channels(self, x: Value) -> int:
        return x.shape[self.layout.channel_axis]

    def conv(
        self,
        x: Value,
        channels: int,
        kernel: IntOrTuple,
        strides: IntOrTuple = 1,
        padding: IntOrTuple = 0,
        groups: int = 1,
        name: str = "conv",
        bias: bool = False,
    ) -> Value:
        """Convolution with He-initialised weights (std sqrt(2 / fan_in)), which keeps
        the variance of ReLU activations steady from layer to layer."""
        kernel_shape = self._spatial(kernel)
        in_per_group = self.channels(x) // groups
        fan_in = in_per_group * math.prod(kernel_shape)
        std = math.sqrt(2.0 / fan_in)
        weight = self.rng.standard_normal(
            (channels, in_per_group, *kernel_shape), dtype=np.float32
        ) * np.float32(std)
        if self.layout.channels_last:
            # OI<spatial> -> <spatial>IO, so both layouts hold the same weights.
            rank = self.layout.spatial_rank
            weight = weight.transpose(*range(2, 2 + rank), 1, 0)
        pads = self._spatial(padding)
        attrs = ConvAttrs(
            strides=self._spatial(strides),
            padding=pads + pads,
            dilations=(1,) * self.layout.spatial_rank,
            groups=groups,
            layout=self.layout.data,
            kernel_layout=self.layout.kernel,
        )
        out = self.graph.add("conv", [x, self._param(f"{name}_weight", weight)], attrs, name=name)
        if bias:
            values = self.rng.standard_normal(channels, dtype=np.float32) * np.float32(0.05)
            out = self.add(out, self.channel_vector(f"{name}_bias", values), name=f"{name}_bias")
        return out

    def batch_norm(
        self, x: Value, name: str = "bn", epsilon: float = 1e-5, gamma: float = 1.0
    ) -> Value:
        """Inference batch norm with statistics near those of a He-initialised conv's
        output (mean 0, variance 1), so it neither grows nor shrinks activations much.
        `gamma` scales the learned scale: residual branches use < 1 to keep the sum
        of 50 blocks bounded."""
        channels = self.channels(x)
        scale = self.rng.uniform(0.8, 1.2, channels) * gamma
        shift = self.rng.normal(0.0, 0.05, channels)
        mean = self.rng.normal(0.0, 0.05, channels)
        variance = self.rng.uniform(0.8, 1.2, channels)
        vectors = [
            self._param(f"{name}_{what}", array.astype(np.float32))
            for what, array in (
                ("gamma", scale),
                ("beta", shift),
                ("moving_mean", mean),
                ("moving_var", variance),
            )
        ]
        attrs = BatchNormAttrs(epsilon=epsilon, axis=self.layout.channel_axis)
        return self.graph.add("batch_norm", [x, *vectors], attrs, name=name)

    def relu(self, x: Value, name: str = "relu") -> Value:
        return self.graph.add("relu", [x], name=name)

    def relu6(self, x: Value, name: str = "relu6") -> Value:
        return self.graph.add("clip", [x], ClipAttrs(low=0.0, high=6.0), name=name)

    def hard_swish(self, x: Value, name: str = "hard_swish") -> Value:
        """x * relu6(x + 3) / 6 (torch.nn.Hardswish)."""
        return self.graph.add("hard_swish", [x], name=name)

    def hard_sigmoid(self, x: Value, name: str = "hard_sigmoid") -> Value:
        """relu6(x + 3) / 6 (torch.nn.Hardsigmoid; ONNX HardSigmoid with alpha 1/6)."""
        return self.graph.add("hard_sigmoid", [x], HardSigmoidAttrs(1 / 6, 0.5), name=name)

    def add(self, a: Value, b: Value, name: str = "add") -> Value:
        return self.graph.add("add", [a, b], name=name)

    def multiply(self, a: Value, b: Value, name: str = "multiply") -> Value:
        return self.graph.add("multiply", [a, b], name=name)

    def conv_bn_relu(
        self,
        x: Value,
        channels: int,
        kernel: IntOrTuple,
        strides: IntOrTuple = 1,
        padding: IntOrTuple = 0,
        groups: int = 1,
        name: str = "conv",
        epsilon: float = 1e-5,
    ) -> Value:
        """The unit most of these networks are made of."""
        out = self.conv(x, channels, kernel, strides, padding, groups, name=name)
        out = self.batch_norm(out, name=f"{name}_bn", epsilon=epsilon)
        return self.relu(out, name=f"{name}_relu")

    def _pool(
        self,
        op: str,
        x: Value,
        kernel: IntOrTuple,
        strides: IntOrTuple,
        padding: IntOrTuple,
        name: str,
        ceil_mode: bool = False,
        count_include_pad: bool = False,
    ) -> Value:
        pads = self._spatial(padding)
        attrs = PoolAttrs(
            kernel=self._spatial(kernel),
            strides=self._spatial(strides),
            padding=pads + pads,
            dilations=(1,) * self.layout.spatial_rank,
            ceil_mode=ceil_mode,
            count_include_pad=count_include_pad,
            layout=self.layout.data,
        )
        return self.graph.add(op, [x], attrs, name=name)

    def max_pool(
        self,
        x: Value,
        kernel: IntOrTuple,
        strides: IntOrTuple,
        padding: IntOrTuple = 0,
        name: str = "max_pool",
        ceil_mode: bool = False,
    ) -> Value:
        return self._pool("max_pool", x, kernel, strides, padding, name, ceil_mode)

    def avg_pool(
        self,
        x: Value,
        kernel: IntOrTuple,
        strides: IntOrTuple,
        padding: IntOrTuple = 0,
        name: str = "avg_pool",
        count_include_pad: bool = True,
    ) -> Value:
        return self._pool(
            "avg_pool", x, kernel, strides, padding, name, count_include_pad=count_include_pad
        )

    def global_avg_pool(self, x: Value, name: str = "global_avg_pool") -> Value:
        return self.graph.add("global_avg_pool", [x], LayoutAttrs(self.layout.data), name=name)

    def concat(self, values: list[Value], name: str = "concat") -> Value:
        """Concatenate along the channel axis."""
        return self.graph.add("concat", values, AxisAttrs(self.layout.channel_axis), name=name)

    def flatten(self, x: Value, name: str = "flatten") -> Value:
        """(N, ...) -> (N, product of the rest)."""
        shape = (x.shape[0], math.prod(x.shape[1:]))
        return self.graph.add("reshape", [x], ReshapeAttrs(shape), name=name)

    def dense(
        self,
        x: Value,
        units: int,
        name: str = "dense",
        std: float | None = None,
        input_order: np.ndarray | None = None,
    ) -> Value:
        """y = x W^T + b with W of shape (units, in). The default std 1/sqrt(in) gives
        logits of unit scale, so the closing softmax is neither flat nor one-hot.
        `input_order` permutes W's columns (how mlp makes its NHWC flatten agree with
        the NCHW one)."""
        in_features = x.shape[-1]
        std = std if std is not None else 1.0 / math.sqrt(in_features)
        weight = self.rng.standard_normal((units, in_features), dtype=np.float32)
        weight *= np.float32(std)
        if input_order is not None:
            weight = weight[:, input_order]
        bias = self.rng.standard_normal(units, dtype=np.float32) * np.float32(0.05)
        out = self.graph.add("dense", [x, self._param(f"{name}_weight", weight)], name=name)
        return self.add(out, self._param(f"{name}_bias", bias), name=f"{name}_bias")

    def softmax(self, x: Value, name: str = "softmax") -> Value:
        return self.graph.add("softmax", [x], AxisAttrs(x.type.ndim - 1), name=name)

    def classifier(self, x: Value, num_classes: int) -> Value:
        """global average pool, flatten, dense, softmax: the head of every CNN here."""
        pooled = self.global_avg_pool(x, name="pool_final")
        logits = self.dense(self.flatten(pooled), num_classes, name="fc")
        return self.softmax(logits, name="output")

    def build(self, output: Value) -> tuple[Graph, Params]:
        return self.graph.build([output])

"""TFLite models for the TFLite frontend's tests and benchmarks, written with
`tflite_builder` (no TensorFlow): the networks people ship to phones, at any width
and resolution, with seeded random weights.

    python -m ember.testing.tflite_models mobilenet_v2 -o mobilenet_v2.tflite [--size 224]

Each is laid out as the TFLite converter lays such a network out: NHWC, batch norm
folded into the convolution's bias, activations fused into the operator that precedes
them, OHWI convolution filters, [1, KH, KW, C] depthwise filters, [out, in] fully
connected weights, SAME padding, MEAN for global pooling, a final SOFTMAX.

- `mobilenet_v1`: depthwise-separable blocks, ReLU6 (Howard et al. 2017);
- `mobilenet_v2`: inverted residuals with linear bottlenecks (Sandler et al. 2018);
- `resnet`: ResNet-18's basic blocks, PAD + VALID max pool as TF writes the stem;
- `efficientnet_lite`: EfficientNet-Lite0's MBConv blocks (ReLU6, no squeeze-excite,
  3x3 and 5x5 depthwise kernels);
- `audio`: a keyword-spotting model on 49 frames of 40 mel features: 1-D
  convolutions (EXPAND_DIMS, CONV_2D with a 1 x k filter, RESHAPE), hard-swish and
  logistic gating, MEAN over time, FULLY_CONNECTED.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ember.testing.tflite_builder import TFLiteModel

INPUT_NAME = "input"


class NetworkBuilder:
    """Layers on a `TFLiteModel`, each computing its output shape as TFLite does."""

    def __init__(self, input_shape: Sequence[int], seed: int = 0, name: str = "network",
                 quantized: bool = False) -> None:  # fmt: skip
        self.model = TFLiteModel(description=name)
        self.rng = np.random.default_rng(seed)
        self.quantized = quantized
        self._grids: dict[int, tuple[float, int]] = {}
        self.input = self.model.input(INPUT_NAME, input_shape)
        self._count = 0
        if quantized:  # float in, QUANTIZE, int8 throughout (activations in about -4..4)
            self.input = self._op("QUANTIZE", [self.input], input_shape, grid=(8 / 255, 0))

    def shape(self, tensor: int) -> tuple[int, ...]:
        return self.model.shape_of(tensor)

    def _op(
        self,
        op: str,
        inputs: Sequence[int],
        shape: Sequence[int],
        options: str | None = None,
        grid: tuple[float, int] | None = None,
        **fields: object,
    ) -> int:
        """An operator; quantized, its output is int8 on `grid` (scale, zero point), by
        default the grid its fused activation's range wants, or its first input's."""
        if not self.quantized:
            return self.model.operator(op, inputs, shape, options, **fields)  # type: ignore[arg-type]
        if grid is None:
            activation = str(fields.get("FusedActivationFunction"))
            grid = _ACTIVATION_GRIDS.get(activation, self._grids.get(inputs[0], _LINEAR_GRID))
        quantization = ([grid[0]], [grid[1]], 0)
        out = self.model.operator(
            op,
            inputs,
            shape,
            options,
            output_dtype="int8",
            output_quantization=quantization,
            **fields,
        )
        self._grids[out] = grid
        return out

    def _weights(self, x: int, shape: Sequence[int], fan_in: int, axis: int) -> tuple[int, int]:
        """Seeded weights (He's scale) and biases; quantized, int8 weights with a scale
        per output channel (`axis`) and int32 biases on input scale x weight scale."""
        self._count += 1
        weight = self.rng.standard_normal(shape) * math.sqrt(2.0 / max(fan_in, 1))
        channels = shape[axis]
        bias = self.rng.standard_normal(channels) * 0.1
        if not self.quantized:
            float_weight = self.model.constant(f"weight_{self._count}", weight.astype(np.float32))
            return float_weight, self.model.constant(f"bias_{self._count}", bias.astype(np.float32))
        others = tuple(a for a in range(len(shape)) if a != axis)
        scales = np.maximum(np.abs(weight).max(axis=others), 1e-8) / 127
        broadcast = [1] * len(shape)
        broadcast[axis] = channels
        quantized = np.round(weight / scales.reshape(broadcast)).astype(np.int8)
        in_scale = self._grids[x][0]
        bias_scales = in_scale * scales
        weight_grid = (scales.tolist(), [0] * channels, axis)
        bias_grid = (bias_scales.tolist(), [0] * channels, 0)
        bias_q = np.round(bias / bias_scales).astype(np.int32)
        return (
            self.model.constant(f"weight_{self._count}", quantized, quantization=weight_grid),
            self.model.constant(f"bias_{self._count}", bias_q, quantization=bias_grid),
        )

    @staticmethod
    def _same(size: int, stride: int) -> int:
        return -(-size // stride)

    def conv(self, x: int, channels: int, kernel: int | tuple[int, int] = 3, stride: int = 1,
             activation: str = "RELU6", padding: str = "SAME") -> int:  # fmt: skip
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        n, h, w, c = self.shape(x)
        weight, bias = self._weights(x, (channels, kh, kw, c), kh * kw * c, 0)
        if padding == "SAME":
            out_h, out_w = self._same(h, stride), self._same(w, stride)
        else:
            out_h, out_w = (h - kh) // stride + 1, (w - kw) // stride + 1
        return self._op(
            "CONV_2D", [x, weight, bias], (n, out_h, out_w, channels),
            "Conv2DOptions", Padding=padding, StrideW=stride, StrideH=stride,
            FusedActivationFunction=activation,
        )  # fmt: skip

    def depthwise(self, x: int, kernel: int = 3, stride: int = 1, activation: str = "RELU6") -> int:
        n, h, w, c = self.shape(x)
        weight, bias = self._weights(x, (1, kernel, kernel, c), kernel * kernel, 3)
        shape = (n, self._same(h, stride), self._same(w, stride), c)
        return self._op(
            "DEPTHWISE_CONV_2D", [x, weight, bias], shape, "DepthwiseConv2DOptions",
            Padding="SAME", StrideW=stride, StrideH=stride, DepthMultiplier=1,
            FusedActivationFunction=activation,
        )  # fmt: skip

    def add(self, a: int, b: int, activation: str = "NONE") -> int:
        return self._op("ADD", [a, b], self.shape(a), "AddOptions",
                        FusedActivationFunction=activation)  # fmt: skip

    def mul(self, a: int, b: int) -> int:
        shape = np.broadcast_shapes(self.shape(a), self.shape(b))
        return self._op("MUL", [a, b], shape, "MulOptions", grid=_LINEAR_GRID)

    def unary(self, op: str, x: int) -> int:
        return self._op(op, [x], self.shape(x), grid=_UNARY_GRIDS.get(op))

    def mean(self, x: int, axes: Sequence[int], keep: bool = False) -> int:
        shape = self.shape(x)
        out = (
            tuple(1 if a in axes else d for a, d in enumerate(shape))
            if keep
            else tuple(d for a, d in enumerate(shape) if a not in axes)
        )
        axis_tensor = self.model.constant(f"axes_{self._count}", np.asarray(axes, np.int32))
        self._count += 1
        return self._op("MEAN", [x, axis_tensor], out, "ReducerOptions", KeepDims=keep)

    def fully_connected(self, x: int, units: int, activation: str = "NONE") -> int:
        rows, features = self.shape(x)
        weight, bias = self._weights(x, (units, features), features, 0)
        return self._op(
            "FULLY_CONNECTED", [x, weight, bias], (rows, units),
            "FullyConnectedOptions", FusedActivationFunction=activation,
        )  # fmt: skip

    def reshape(self, x: int, shape: Sequence[int]) -> int:
        target = self.model.constant(f"shape_{self._count}", np.asarray(shape, np.int32))
        self._count += 1
        return self._op("RESHAPE", [x, target], tuple(shape), "ReshapeOptions",
                        NewShape=list(shape))  # fmt: skip

    def expand_dims(self, x: int, axis: int) -> int:
        shape = list(self.shape(x))
        shape.insert(axis, 1)
        axis_tensor = self.model.constant(f"axis_{self._count}", np.asarray([axis], np.int32))
        self._count += 1
        return self._op("EXPAND_DIMS", [x, axis_tensor], shape)

    def pad(self, x: int, pads: Sequence[tuple[int, int]]) -> int:
        shape = tuple(d + a + b for d, (a, b) in zip(self.shape(x), pads, strict=True))
        paddings = self.model.constant(f"paddings_{self._count}", np.asarray(pads, np.int32))
        self._count += 1
        return self._op("PAD", [x, paddings], shape)

    def max_pool(self, x: int, kernel: int, stride: int, padding: str = "VALID") -> int:
        n, h, w, c = self.shape(x)
        if padding == "SAME":
            out = (n, self._same(h, stride), self._same(w, stride), c)
        else:
            out = (n, (h - kernel) // stride + 1, (w - kernel) // stride + 1, c)
        return self._op(
            "MAX_POOL_2D", [x], out, "Pool2DOptions", Padding=padding, StrideW=stride,
            StrideH=stride, FilterWidth=kernel, FilterHeight=kernel,
        )  # fmt: skip

    def classifier(self, features: int, classes: int) -> int:
        """MEAN over the pixels, FULLY_CONNECTED, SOFTMAX: the output."""
        pooled = self.mean(features, (1, 2))
        return self.output(self.softmax(self.fully_connected(pooled, classes)))

    def softmax(self, x: int) -> int:
        return self._op("SOFTMAX", [x], self.shape(x), "SoftmaxOptions", grid=_UNIT_GRID, Beta=1.0)

    def output(self, tensor: int) -> int:
        """Mark a model output; quantized, DEQUANTIZE it to float first."""
        if self.quantized:
            tensor = self.model.operator("DEQUANTIZE", [tensor], self.shape(tensor))
        self.model.output(tensor)
        return tensor

    def build(self) -> bytes:
        return self.model.build()


# The int8 grids (scale, zero point) of a quantized network's activations, chosen from
# the range each one's activation allows (a calibration would measure it; these models
# are random, so ranges are what is known): 0..6 after ReLU6, 0..8 after ReLU, -8..8 with
# no activation; softmax and logistic on TFLite's fixed 1/256 grid.
_ACTIVATION_GRIDS = {"RELU6": (6 / 255, -128), "RELU": (8 / 255, -128), "NONE": (16 / 255, 0)}
_LINEAR_GRID = (16 / 255, 0)
_UNIT_GRID = (1 / 256, -128)
_UNARY_GRIDS = {"LOGISTIC": _UNIT_GRID, "HARD_SWISH": (8.5 / 255, -117)}


def _width(channels: int, alpha: float) -> int:
    """Channels scaled by the width multiplier, rounded to 8 as the MobileNets do."""
    return max(8, int(channels * alpha + 4) // 8 * 8)


def mobilenet_v1(size: int = 224, alpha: float = 1.0, classes: int = 1001,
                 quantized: bool = False) -> bytes:  # fmt: skip
    net = NetworkBuilder((1, size, size, 3), name="mobilenet_v1", quantized=quantized)
    x = net.conv(net.input, _width(32, alpha), 3, 2)
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5,
              (1024, 2), (1024, 1)]  # fmt: skip
    for channels, stride in blocks:
        x = net.depthwise(x, 3, stride)
        x = net.conv(x, _width(channels, alpha), 1)
    net.classifier(x, classes)
    return net.build()


def _inverted_residual(net: NetworkBuilder, x: int, out: int, stride: int, expand: int,
                       kernel: int = 3) -> int:  # fmt: skip
    channels = net.shape(x)[3]
    y = net.conv(x, channels * expand, 1) if expand != 1 else x
    y = net.depthwise(y, kernel, stride)
    y = net.conv(y, out, 1, activation="NONE")
    return net.add(x, y) if stride == 1 and channels == out else y


def mobilenet_v2(size: int = 224, alpha: float = 1.0, classes: int = 1001,
                 quantized: bool = False) -> bytes:  # fmt: skip
    net = NetworkBuilder((1, size, size, 3), name="mobilenet_v2", quantized=quantized)
    x = net.conv(net.input, _width(32, alpha), 3, 2)
    stages = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
              (6, 160, 3, 2), (6, 320, 1, 1)]  # fmt: skip
    for expand, channels, count, stride in stages:
        for index in range(count):
            x = _inverted_residual(
                net, x, _width(channels, alpha), stride if index == 0 else 1, expand
            )
    x = net.conv(x, max(1280, _width(1280, alpha)), 1)
    net.classifier(x, classes)
    return net.build()


def resnet(size: int = 224, width: int = 64, classes: int = 1000, quantized: bool = False) -> bytes:
    """ResNet-18 (basic blocks, 2-2-2-2) at `width` channels in the first stage."""
    net = NetworkBuilder((1, size, size, 3), name="resnet18", quantized=quantized)
    x = net.pad(net.input, [(0, 0), (3, 3), (3, 3), (0, 0)])
    x = net.conv(x, width, 7, 2, activation="RELU", padding="VALID")
    x = net.pad(x, [(0, 0), (1, 1), (1, 1), (0, 0)])
    x = net.max_pool(x, 3, 2)
    for stage in range(4):
        channels = width * 2**stage
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            shortcut = x
            if stride != 1 or net.shape(x)[3] != channels:
                shortcut = net.conv(x, channels, 1, stride, activation="NONE")
            y = net.conv(x, channels, 3, stride, activation="RELU")
            y = net.conv(y, channels, 3, activation="NONE")
            x = net.add(shortcut, y, activation="RELU")
    net.classifier(x, classes)
    return net.build()


def efficientnet_lite(size: int = 224, width: float = 1.0, classes: int = 1000,
                      quantized: bool = False) -> bytes:  # fmt: skip
    """EfficientNet-Lite0: (expand, kernel, stride, channels, repeats) as published."""
    net = NetworkBuilder((1, size, size, 3), name="efficientnet_lite0", quantized=quantized)
    x = net.conv(net.input, _width(32, width), 3, 2)
    stages = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
              (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]  # fmt: skip
    for expand, kernel, stride, channels, repeats in stages:
        for index in range(repeats):
            out = _width(channels, width)
            x = _inverted_residual(net, x, out, stride if index == 0 else 1, expand, kernel)
    x = net.conv(x, 1280, 1)
    net.classifier(x, classes)
    return net.build()


def audio(frames: int = 49, features: int = 40, channels: int = 64, classes: int = 12,
          quantized: bool = False) -> bytes:  # fmt: skip
    """Keyword spotting on [1, frames, features] log-mel input: 1-D convolutions as the
    TFLite converter writes Keras Conv1D, a gated block, MEAN over time."""
    net = NetworkBuilder((1, frames, features), name="audio_kws", quantized=quantized)
    x = net.expand_dims(net.input, 1)  # [1, 1, frames, features]
    x = net.conv(x, channels, (1, 5), 1, activation="RELU")
    for stride in (2, 1, 2):
        y = net.depthwise(x, 3, stride, activation="NONE")
        y = net.unary("HARD_SWISH", y)
        gate = net.unary("LOGISTIC", net.conv(y, channels, 1, activation="NONE"))
        x = net.mul(net.conv(y, channels, 1, activation="NONE"), gate)
    _, _, time, width = net.shape(x)
    x = net.reshape(x, (1, time, width))
    pooled = net.mean(x, (1,))
    hidden = net.fully_connected(pooled, 32, activation="RELU")
    logits = net.fully_connected(hidden, classes)
    net.output(net.softmax(logits))
    return net.build()


MODELS: dict[str, Callable[..., bytes]] = {
    "mobilenet_v1": mobilenet_v1,
    "mobilenet_v2": mobilenet_v2,
    "resnet": resnet,
    "efficientnet_lite": efficientnet_lite,
    "audio": audio,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--size", type=int, default=None, help="image size (not for audio)")
    parser.add_argument(
        "--int8", action="store_true", help="int8 activations and weights, float in and out"
    )
    args = parser.parse_args(argv)
    options: dict[str, object] = {"quantized": args.int8}
    if args.size is not None:
        options["size"] = args.size
    args.output.write_bytes(MODELS[args.model](**options))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Small ONNX models built node by node to mimic older ONNX model zoo exports.

Zoo models came from MXNet, Caffe2, early PyTorch and tf2onnx at opsets 7-12, with
patterns today's exporters no longer write: BatchNormalization's `spatial` attribute,
initializers repeated as graph inputs (IR version 3), Sum, Dropout with a ratio
attribute, Softmax's 2-D coercion, Clip bounds as attributes, Upsample, LRN,
Squeeze/Unsqueeze/ReduceMean with axes attributes, flattening through
Shape->Gather->Unsqueeze->Concat->Reshape. Each builder returns a checked ModelProto with
random weights from a seeded generator; the tests compare it with ONNX Runtime.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class ZooGraph:
    """Collects nodes and initializers; names every intermediate value `t<N>`."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.count = 0

    def fresh(self, hint: str = "t") -> str:
        self.count += 1
        return f"{hint}{self.count}"

    def constant(self, array: np.ndarray, hint: str = "const") -> str:
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, shape: tuple[int, ...], scale: float = 1.0, offset: float = 0.0) -> str:
        """A float32 initializer, normal(offset, scale / sqrt(fan_in))."""
        fan_in = max(1, int(np.prod(shape[1:]))) if len(shape) > 1 else 1
        data = offset + self.rng.standard_normal(shape) * scale / math.sqrt(fan_in)
        return self.constant(data.astype(np.float32), "w")

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs: object) -> str:
        """Add a node; returns its first output's name (use `op_multi` for more)."""
        return self.op_multi(op_type, inputs, outputs, **attrs)[0]

    def op_multi(
        self, op_type: str, inputs: list[str], outputs: int = 1, **attrs: object
    ) -> list[str]:
        names = [self.fresh() for _ in range(outputs)]
        self.nodes.append(
            helper.make_node(op_type, inputs, names, name=self.fresh(op_type), **attrs)
        )
        return names

    def batch_norm(self, x: str, channels: int, **attrs: object) -> str:
        """BatchNormalization with non-trivial statistics."""
        scale = self.constant((self.rng.random(channels) + 0.5).astype(np.float32))
        bias = self.constant((self.rng.random(channels) - 0.5).astype(np.float32))
        mean = self.constant((self.rng.random(channels) - 0.5).astype(np.float32))
        var = self.constant((self.rng.random(channels) + 0.5).astype(np.float32))
        return self.op("BatchNormalization", [x, scale, bias, mean, var], **attrs)

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        kernel: int,
        stride: int = 1,
        group: int = 1,
        bias: bool = True,
        scale: float = 1.0,
        pads: list[int] | None = None,
        auto_pad: str | None = None,
    ) -> str:
        """Conv padded by `pads` (default: symmetric k // 2) or by `auto_pad`."""
        inputs = [x, self.weight((cout, cin // group, kernel, kernel), scale)]
        if bias:
            inputs.append(self.constant((self.rng.random(cout) * 0.2 - 0.1).astype(np.float32)))
        padding: dict[str, object] = {"auto_pad": auto_pad} if auto_pad else {}
        if not auto_pad:
            padding["pads"] = pads if pads is not None else [kernel // 2] * 4
        return self.op(
            "Conv",
            inputs,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            group=group,
            **padding,
        )

    def model(
        self,
        name: str,
        inputs: list[onnx.ValueInfoProto],
        outputs: dict[str, str],
        opset: int,
        ir_version: int,
        initializers_as_inputs: bool = False,
        declared_shapes: dict[str, list[int]] | None = None,
    ) -> onnx.ModelProto:
        """The model; `outputs` maps each graph output name to the value it exposes
        (through an Identity, so output names read like a zoo model's).

        With `initializers_as_inputs`, every initializer is also listed as a graph input,
        as IR version 3 required (an input with an initializer is a default value).
        `declared_shapes` gives output shapes that ONNX shape inference cannot work out
        (after a Reshape to a computed shape), as the exporter would have declared."""
        for output_name, value in outputs.items():
            self.nodes.append(helper.make_node("Identity", [value], [output_name]))
        output_infos = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
        graph_inputs = list(inputs)
        if initializers_as_inputs:
            graph_inputs += [
                helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                for t in self.initializers
            ]
        graph = helper.make_graph(
            self.nodes, name, graph_inputs, output_infos, initializer=self.initializers
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="zoo-style"
        )
        model.ir_version = ir_version
        # Fill in output shapes the way a real exporter would have written them, but
        # keep no intermediate value_info: zoo files rarely carry it, so the importer
        # must infer every type itself.
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
        model.graph.ClearField("output")
        for info in inferred.graph.output:
            if info.name in (declared_shapes or {}):
                shape = (declared_shapes or {})[info.name]
                info = helper.make_tensor_value_info(info.name, TensorProto.FLOAT, shape)
            model.graph.output.append(info)
        onnx.checker.check_model(model)
        return model


def image_input(name: str, batch: int, size: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, 3, size, size])


# -- ResNet v2 (MXNet export, opset 8, IR 3) ------------------------------------------


def resnet_v2_opset8(batch: int = 1) -> onnx.ModelProto:
    """Pre-activation ResNet as MXNet exported it: a BatchNorm on the data, BN with
    `spatial=1`, residual adds as Sum, Flatten + Gemm(transB=1), initializers repeated
    as graph inputs."""
    g = ZooGraph(seed=8)

    def bn(x: str, channels: int) -> str:
        return g.batch_norm(x, channels, epsilon=2e-5, momentum=0.9, spatial=1)

    def unit(x: str, cin: int, cout: int, stride: int) -> str:
        activated = g.op("Relu", [bn(x, cin)])
        body = g.conv(activated, cin, cout, 3, stride, bias=False)
        body = g.conv(g.op("Relu", [bn(body, cout)]), cout, cout, 3, bias=False)
        shortcut = x
        if stride != 1 or cin != cout:
            shortcut = g.op(
                "Conv",
                [activated, g.weight((cout, cin, 1, 1))],
                kernel_shape=[1, 1],
                strides=[stride, stride],
            )
        return g.op("Sum", [body, shortcut])

    x = g.conv(bn("data", 3), 3, 8, 3, bias=False)
    x = unit(unit(x, 8, 8, 1), 8, 16, 2)
    pooled = g.op("GlobalAveragePool", [g.op("Relu", [bn(x, 16)])])
    flat = g.op("Flatten", [pooled], axis=1)
    logits = g.op("Gemm", [flat, g.weight((10, 16)), g.weight((10,), 0.1)], transB=1, alpha=1.0)
    return g.model(
        "resnet_v2",
        [image_input("data", batch, 32)],
        {"resnetv2_dense0_fwd": logits},
        opset=8,
        ir_version=3,
        initializers_as_inputs=True,
    )


# -- SqueezeNet 1.1 (opset 9) ---------------------------------------------------------


def squeezenet_opset9(batch: int = 1) -> onnx.ModelProto:
    """SqueezeNet 1.1: fire modules (Concat of 1x1 and 3x3 expands), Dropout with a
    ratio attribute, GlobalAveragePool, and two opset-9 Softmaxes: over the classes of
    the pooled scores, and over a 4-D score map, where axis=1 coerces the input to 2-D
    so the normalisation runs over classes x height x width together."""
    g = ZooGraph(seed=9)

    def fire(x: str, cin: int, squeeze: int, expand: int) -> str:
        squeezed = g.op("Relu", [g.conv(x, cin, squeeze, 1)])
        left = g.op("Relu", [g.conv(squeezed, squeeze, expand, 1)])
        right = g.op("Relu", [g.conv(squeezed, squeeze, expand, 3)])
        return g.op("Concat", [left, right], axis=1)

    x = g.op("Relu", [g.conv("data", 3, 16, 3, stride=2)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])
    x = fire(fire(x, 16, 4, 8), 16, 4, 8)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])
    x = fire(x, 16, 8, 16)
    x = g.op("Dropout", [x], ratio=0.5)
    # Large classifier weights so that the softmaxes are far from uniform.
    scores = g.op("Relu", [g.conv(x, 32, 10, 1, scale=8.0)])
    pooled = g.op("GlobalAveragePool", [scores])
    probabilities = g.op("Softmax", [g.op("Flatten", [pooled])], axis=1)
    score_map = g.op("Softmax", [scores], axis=1)
    return g.model(
        "squeezenet1.1",
        [image_input("data", batch, 32)],
        {"softmaxout_1": probabilities, "score_map": score_map},
        opset=9,
        ir_version=4,
    )


# -- MobileNet v2 (PyTorch 1.x export, opset 10) --------------------------------------


def mobilenet_v2_opset10(batch: int = 1) -> onnx.ModelProto:
    """MobileNet v2 as PyTorch 1.x and tf2onnx exported it: Clip(min, max) attributes
    for ReLU6, BatchNormalization, a residual Add, TensorFlow SAME padding (Conv's
    auto_pad, Pad with a pads attribute), and `x.view(x.size(0), -1)` spelled
    Shape->Gather->Unsqueeze->Concat->Reshape; a second output flattened with
    Reshape [0, -1] (0 copies the input's dimension)."""
    g = ZooGraph(seed=10)

    def conv_bn(
        x: str,
        cin: int,
        cout: int,
        kernel: int,
        stride: int = 1,
        group: int = 1,
        relu6: bool = True,
        pads: list[int] | None = None,
        auto_pad: str | None = None,
    ) -> str:
        conv = g.conv(x, cin, cout, kernel, stride, group, False, pads=pads, auto_pad=auto_pad)
        y = g.batch_norm(conv, cout)
        return g.op("Clip", [y], min=0.0, max=6.0) if relu6 else y

    def inverted_residual(x: str, cin: int, cout: int, stride: int, expand: int) -> str:
        hidden = cin * expand
        y = conv_bn(x, cin, hidden, 1)
        if stride == 1:
            y = conv_bn(y, hidden, hidden, 3, group=hidden)
        else:
            # TensorFlow's SAME padding for a strided 3x3 pads only after (bottom/right);
            # tf2onnx spelled it as an explicit Pad with a pads attribute.
            y = g.op("Pad", [y], mode="constant", pads=[0, 0, 0, 0, 0, 0, 1, 1], value=0.0)
            y = conv_bn(y, hidden, hidden, 3, stride, group=hidden, pads=[0, 0, 0, 0])
        y = conv_bn(y, hidden, cout, 1, relu6=False)
        return g.op("Add", [x, y]) if stride == 1 and cin == cout else y

    x = conv_bn("input.1", 3, 8, 3, stride=2, auto_pad="SAME_UPPER")
    x = inverted_residual(x, 8, 12, 2, 4)
    x = inverted_residual(x, 12, 12, 1, 4)
    x = conv_bn(x, 12, 32, 1)
    pooled = g.op("GlobalAveragePool", [x])
    batch_size = g.op("Gather", [g.op("Shape", [pooled]), g.constant(np.array(0))], axis=0)
    new_shape = g.op(
        "Concat",
        [g.op("Unsqueeze", [batch_size], axes=[0]), g.constant(np.array([-1]))],
        axis=0,
    )
    flat = g.op("Reshape", [pooled, new_shape])
    logits = g.op("Gemm", [flat, g.weight((10, 32)), g.weight((10,), 0.1)], transB=1)
    features = g.op("Reshape", [pooled, g.constant(np.array([0, -1]))])
    return g.model(
        "mobilenetv2",
        [image_input("input.1", batch, 32)],
        {"logits": logits, "features": features},
        opset=10,
        ir_version=5,
        declared_shapes={"logits": [batch, 10]},
    )


# -- Inception v1 style (Caffe2 export, opset 7 / 9) ----------------------------------


def inception_lrn_upsample(opset: int, mode: str = "nearest", batch: int = 1) -> onnx.ModelProto:
    """GoogLeNet-style stem with LRN, one inception module (1x1, 3x3, 5x5, pool
    branches), then a segmentation-style head upsampled x2 by Upsample (`scales` is an
    attribute at opset 7 and an input at opset 9) and cropped by Slice attributes."""
    assert opset in (7, 9), "Upsample exists at opsets 7-9 only"
    g = ZooGraph(seed=opset)

    def lrn(x: str) -> str:
        return g.op("LRN", [x], size=5, alpha=1e-4, beta=0.75, bias=1.0)

    def conv_relu(x: str, cin: int, cout: int, kernel: int, stride: int = 1) -> str:
        return g.op("Relu", [g.conv(x, cin, cout, kernel, stride)])

    x = conv_relu("data_0", 3, 16, 7, stride=2)
    x = lrn(g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]))
    x = lrn(conv_relu(x, 16, 24, 3))
    pooled_branch = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1] * 4)
    branches = [
        conv_relu(x, 24, 8, 1),
        conv_relu(conv_relu(x, 24, 8, 1), 8, 12, 3),
        conv_relu(conv_relu(x, 24, 4, 1), 4, 6, 5),
        conv_relu(pooled_branch, 24, 6, 1),
    ]
    x = g.op("Concat", branches, axis=1)
    x = g.op(
        "AveragePool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1] * 4, count_include_pad=0
    )
    scales = [1.0, 1.0, 2.0, 2.0]
    if opset == 7:
        upsampled = g.op("Upsample", [x], mode=mode, scales=scales)
    else:
        upsampled = g.op("Upsample", [x, g.constant(np.array(scales, np.float32))], mode=mode)
    # Caffe's Crop layer (FCN heads) became Slice, with starts/ends attributes before opset 10.
    cropped = g.op("Slice", [upsampled], starts=[1, 1], ends=[15, 15], axes=[2, 3])
    segmentation = g.conv(cropped, 32, 5, 1)
    pooled = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    logits = g.op("Gemm", [pooled, g.weight((32, 10)), g.weight((10,), 0.1)])
    return g.model(
        f"inception_v1_opset{opset}",
        [image_input("data_0", batch, 32)],
        {"prob_1": g.op("Softmax", [logits]), "segmentation": segmentation},
        opset=opset,
        ir_version=3 if opset == 7 else 4,
        initializers_as_inputs=opset == 7,
        # ONNX shape inference gives up on this opset-7 graph (Upsample-7, LRN).
        declared_shapes={"prob_1": [batch, 10], "segmentation": [batch, 5, 14, 14]},
    )


# -- BERT (HuggingFace / keras2onnx-era export, opset 11 / 12) ------------------------


def bert_opset11(opset: int = 11, batch: int = 2, length: int = 16) -> onnx.ModelProto:
    """One BERT encoder layer and pooler as opset 11/12 exports spelled them: Gather
    embeddings, positions sliced from a buffer with Slice's starts/ends inputs computed
    from Shape, LayerNorm from ReduceMean/Sub/Pow/Sqrt/Div, attention masks from
    Unsqueeze/Cast/Sub/Mul and from Equal/Where, Erf GELU, 3-D x 2-D MatMuls, Softmax
    over the last axis, and the pooler's first token taken by Slice + Squeeze."""
    g = ZooGraph(seed=opset)
    hidden, heads, vocab, max_positions = 32, 4, 100, 32
    head_dim = hidden // heads

    def scalar(value: float) -> str:
        return g.constant(np.array(value, np.float32))

    def layer_norm(x: str) -> str:
        mean = g.op("ReduceMean", [x], axes=[-1])
        centred = g.op("Sub", [x, mean])
        variance = g.op("ReduceMean", [g.op("Pow", [centred, scalar(2.0)])], axes=[-1])
        std = g.op("Sqrt", [g.op("Add", [variance, scalar(1e-12)])])
        normed = g.op("Div", [centred, std])
        gamma = g.weight((hidden,), 0.3, offset=1.0)
        return g.op("Add", [g.op("Mul", [normed, gamma]), g.weight((hidden,), 0.3)])

    def dense(x: str, fan_in: int, fan_out: int) -> str:
        product = g.op("MatMul", [x, g.weight((fan_in, fan_out))])
        return g.op("Add", [product, g.weight((fan_out,), 0.1)])

    def split_heads(x: str, perm: list[int]) -> str:
        shape = g.constant(np.array([0, 0, heads, head_dim]))
        return g.op("Transpose", [g.op("Reshape", [x, shape])], perm=perm)

    # Embeddings: word ids gathered, positions sliced to the input's length.
    ids, mask = "input_ids", "attention_mask"
    words = g.op("Gather", [g.weight((vocab, hidden), 1.0), ids], axis=0)
    length_value = g.op("Gather", [g.op("Shape", [ids]), g.constant(np.array(1))], axis=0)
    position_ids = g.op(
        "Slice",
        [
            g.constant(np.arange(max_positions, dtype=np.int64)[None, :]),
            g.constant(np.array([0])),
            g.op("Unsqueeze", [length_value], axes=[0]),
            g.constant(np.array([1])),
        ],
    )
    positions = g.op("Gather", [g.weight((max_positions, hidden), 1.0), position_ids], axis=0)
    x = layer_norm(g.op("Add", [words, positions]))

    # Masks: (1 - mask) * -10000 added to the scores, and Where on padding positions.
    mask4 = g.op("Unsqueeze", [mask], axes=[1, 2])
    additive = g.op(
        "Mul",
        [
            g.op("Sub", [scalar(1.0), g.op("Cast", [mask4], to=TensorProto.FLOAT)]),
            scalar(-10000.0),
        ],
    )
    padding = g.op("Equal", [mask4, g.constant(np.array(0, np.int64))])

    # Self-attention.
    # One fused QKV projection split in three (Split's sizes an attribute until opset 13).
    qkv = g.op_multi("Split", [dense(x, hidden, 3 * hidden)], 3, axis=-1, split=[hidden] * 3)
    query = split_heads(qkv[0], [0, 2, 1, 3])
    key = split_heads(qkv[1], [0, 2, 3, 1])
    value = split_heads(qkv[2], [0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [query, key]), scalar(math.sqrt(head_dim))])
    scores = g.op("Add", [scores, additive])
    scores = g.op("Where", [padding, scalar(-10000.0), scores])
    attention = g.op("Softmax", [scores], axis=3)
    context = g.op("Transpose", [g.op("MatMul", [attention, value])], perm=[0, 2, 1, 3])
    context = g.op("Reshape", [context, g.constant(np.array([0, 0, hidden]))])
    x = layer_norm(g.op("Add", [x, dense(context, hidden, hidden)]))

    # Feed-forward with GELU(x) = x * 0.5 * (1 + erf(x / sqrt(2))).
    inner = dense(x, hidden, 4 * hidden)
    erf = g.op("Erf", [g.op("Div", [inner, scalar(math.sqrt(2.0))])])
    gelu = g.op("Mul", [g.op("Mul", [inner, g.op("Add", [erf, scalar(1.0)])]), scalar(0.5)])
    sequence = layer_norm(g.op("Add", [x, dense(gelu, 4 * hidden, hidden)]))

    # Pooler: the first token, dense, tanh.
    first = g.op(
        "Slice",
        [sequence, g.constant(np.array([0])), g.constant(np.array([1])), g.constant(np.array([1]))],
    )
    pooled = g.op("Tanh", [dense(g.op("Squeeze", [first], axes=[1]), hidden, hidden)])
    return g.model(
        f"bert_opset{opset}",
        [
            helper.make_tensor_value_info(ids, TensorProto.INT64, [batch, length]),
            helper.make_tensor_value_info(mask, TensorProto.INT64, [batch, length]),
        ],
        {"last_hidden_state": sequence, "pooler_output": pooled},
        opset=opset,
        ir_version=6 if opset == 11 else 7,
    )


def bert_inputs(batch: int = 2, length: int = 16, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, length), np.int64)
    mask[-1, length - 5 :] = 0
    return {
        "input_ids": rng.integers(0, 100, (batch, length), dtype=np.int64),
        "attention_mask": mask,
    }


def image_batch(name: str, batch: int = 1, size: int = 32, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal((batch, 3, size, size)).astype(np.float32)}

"""End-to-end import of network families as PyTorch exports them (TorchScript exporter,
opset 17; a few families also at opsets 11-21): each model is exported, imported with
`from_onnx`, verified, interpreted, and compared with ONNX Runtime and with PyTorch.

The models live in `torch_models.py` and `torch_transformers.py`; this file says how
to feed each one and how closely it must agree.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np
import onnx
import pytest
import torch
import torch_models as tm
from torch import nn
from torch_transformers import BertEncoder, ConvNeXt, ViT

from ember.errors import EmberError
from ember.frontend import from_onnx
from ember.graph import interpret, verify
from ember.testing.oracle import (
    ATOL,
    RTOL,
    assert_allclose,
    check_against_onnxruntime,
    run_onnxruntime,
)


@dataclass(frozen=True)
class TorchCase:
    """How to build, feed and check one exported model."""

    build: Callable[[], nn.Module]
    make_inputs: Callable[[int, np.random.Generator], dict[str, np.ndarray]]
    batches: tuple[int, ...] = (1, 2)
    outputs: tuple[str, ...] = ("output",)


def image_inputs(size: int) -> Callable[[int, np.random.Generator], dict[str, np.ndarray]]:
    def make(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        shape = (batch, 3, size, size)
        return {tm.IMAGE_INPUT: rng.standard_normal(shape).astype(np.float32)}

    return make


def bert_inputs(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    ids = rng.integers(0, 100, size=(batch, 16), dtype=np.int64)
    mask = np.ones((batch, 16), dtype=np.int64)
    mask[-1, 11:] = 0  # padding at the end of the last sequence
    return {"input_ids": ids, "attention_mask": mask}


CASES: dict[str, TorchCase] = {
    "resnet_v1_basic": TorchCase(lambda: tm.ResNetV1(bottleneck=False), image_inputs(32)),
    "resnet_v1_bottleneck": TorchCase(lambda: tm.ResNetV1(bottleneck=True), image_inputs(32)),
    "resnet_v2": TorchCase(tm.ResNetV2, image_inputs(32)),
    "mobilenet_v1": TorchCase(tm.MobileNetV1, image_inputs(32)),
    "mobilenet_v2": TorchCase(tm.MobileNetV2, image_inputs(32)),
    "mobilenet_v3": TorchCase(tm.MobileNetV3, image_inputs(32)),
    "squeezenet": TorchCase(tm.SqueezeNet, image_inputs(34)),
    "inception_v3": TorchCase(tm.InceptionV3, image_inputs(48)),
    "efficientnet": TorchCase(tm.EfficientNet, image_inputs(32)),
    "densenet": TorchCase(tm.DenseNet, image_inputs(32)),
    "shufflenet_v2": TorchCase(tm.ShuffleNetV2, image_inputs(32)),
    "regnet": TorchCase(tm.RegNet, image_inputs(32)),
    "convnext": TorchCase(ConvNeXt, image_inputs(32)),
    "vgg": TorchCase(tm.VGG, image_inputs(32), batches=(2,)),
    "vit": TorchCase(ViT, image_inputs(32)),
    "bert": TorchCase(BertEncoder, bert_inputs, outputs=("sequence", "pooled")),
}


@cache
def build_model(name: str) -> nn.Module:
    """The model with seeded weights and non-trivial BatchNorm statistics, in eval mode."""
    torch.manual_seed(0)
    model = CASES[name].build()
    tm.randomize_norm_stats(model, torch.Generator().manual_seed(1))
    return model.eval()


def case_inputs(name: str, batch: int) -> dict[str, np.ndarray]:
    return CASES[name].make_inputs(batch, np.random.default_rng(batch))


def export(
    model: nn.Module,
    inputs: dict[str, np.ndarray],
    outputs: tuple[str, ...] = ("output",),
    dynamic_axes: dict[str, dict[int, str]] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    """`torch.onnx.export` with the TorchScript exporter, into memory."""
    buffer = io.BytesIO()
    args = tuple(torch.from_numpy(array) for array in inputs.values())
    with warnings.catch_warnings():
        # The TorchScript exporter is deprecated but still what most ONNX files came from.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            args,
            buffer,
            opset_version=opset,
            dynamo=False,
            input_names=list(inputs),
            output_names=list(outputs),
            dynamic_axes=dynamic_axes,
        )
    return onnx.load_from_string(buffer.getvalue())


@cache
def exported(name: str, batch: int) -> onnx.ModelProto:
    return export(build_model(name), case_inputs(name, batch), CASES[name].outputs)


def opset_of(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def run_torch(model: nn.Module, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    with torch.no_grad():
        result = model(*(torch.from_numpy(array) for array in inputs.values()))
    results = result if isinstance(result, tuple) else (result,)
    return [r.numpy() for r in results]


PARAMS = [(name, batch) for name, case in CASES.items() for batch in case.batches]


@pytest.mark.parametrize(("name", "batch"), PARAMS, ids=[f"{n}-b{b}" for n, b in PARAMS])
def test_torch_export_matches_onnxruntime_and_torch(name: str, batch: int) -> None:
    case = CASES[name]
    inputs = case_inputs(name, batch)
    expected = run_torch(build_model(name), inputs)
    # The default fp32 tolerances hold: the models are small enough that summation
    # order differences stay far below them.
    ours = check_against_onnxruntime(exported(name, batch), inputs)
    assert list(ours) == list(case.outputs)
    for (output_name, got), want in zip(ours.items(), expected, strict=True):
        assert got.shape == want.shape, f"{output_name}: {got.shape} != {want.shape}"
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=output_name)


def dynamic_batch_model(name: str) -> onnx.ModelProto:
    inputs = case_inputs(name, 1)
    return export(build_model(name), inputs, dynamic_axes={"input": {0: "batch"}})


# MobileNet v1 reshapes with x.shape[0] and ShuffleNet's channel shuffle views with
# x.size(): with a dynamic batch both export Shape->Gather->...->Reshape subgraphs that
# only fold once the batch size is given.
DYNAMIC = ["resnet_v1_basic", "mobilenet_v1", "shufflenet_v2"]


@pytest.mark.parametrize("name", DYNAMIC)
def test_dynamic_batch_imports_with_given_shape(name: str) -> None:
    model = dynamic_batch_model(name)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    graph, params = from_onnx(model, shapes={"input": (2, 3, 32, 32)})
    verify(graph, params)
    assert graph.inputs[0].shape == (2, 3, 32, 32)
    inputs = case_inputs(name, 2)
    ours = interpret(graph, params, inputs)
    theirs = run_onnxruntime(model, inputs)
    assert list(ours) == list(theirs)
    for output_name, want in theirs.items():
        assert ours[output_name].shape == (2, 10)
        np.testing.assert_allclose(ours[output_name], want, rtol=RTOL, atol=ATOL)


def test_dynamic_batch_without_shapes_names_the_input() -> None:
    with pytest.raises(EmberError) as raised:
        from_onnx(dynamic_batch_model("resnet_v1_basic"))
    message = str(raised.value)
    # The user must learn which input and dimension are unknown, and how to fix it.
    assert "'input'" in message
    assert "batch" in message
    assert "shapes=" in message


# The exporter spells the same module differently across opsets: Split/Squeeze/
# Unsqueeze/ReduceMean take attributes or inputs, LayerNormalization and HardSwish are
# decomposed before opsets 17 and 14. Exported with a dynamic batch and imported with it
# fixed, so the shape subgraphs fold too.
SWEEP_MODELS = ["shufflenet_v2", "mobilenet_v3", "convnext", "vit", "bert"]
SWEEP = [(name, opset) for opset in (11, 13, 18, 21) for name in SWEEP_MODELS]


@pytest.mark.parametrize(("name", "opset"), SWEEP, ids=[f"{n}-opset{o}" for n, o in SWEEP])
def test_torch_export_across_opsets(name: str, opset: int) -> None:
    inputs = case_inputs(name, 2)
    dynamic = {input_name: {0: "batch"} for input_name in inputs}
    model = export(build_model(name), inputs, CASES[name].outputs, dynamic, opset=opset)
    assert opset_of(model) == opset
    graph, params = from_onnx(model, shapes={k: v.shape for k, v in inputs.items()})
    verify(graph, params)
    ours = interpret(graph, params, inputs)
    assert_allclose(ours, run_onnxruntime(model, inputs))


def test_every_exported_op_type_imports() -> None:
    """Collect the ONNX op types across all the exported families; each must import."""
    op_types: dict[str, list[str]] = {}
    for name, batch in PARAMS:
        for node in exported(name, batch).graph.node:
            op_types.setdefault(node.op_type, [])
            if name not in op_types[node.op_type]:
                op_types[node.op_type].append(name)
    print(f"{len(op_types)} ONNX op types across {len(CASES)} exported families:")
    for op_type in sorted(op_types):
        print(f"  {op_type:22s} {', '.join(op_types[op_type])}")
    failures = []
    for name, batch in PARAMS:
        try:
            graph, params = from_onnx(exported(name, batch))
            verify(graph, params)
        except EmberError as error:
            failures.append(f"{name}-b{batch}: {error}")
    assert not failures, "\n".join(failures)

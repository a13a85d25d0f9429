"""Import of ONNX model zoo-style models (opsets 7-12, old exporter patterns), each
compared with ONNX Runtime. The models are built node by node in `zoo_models.py`."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import zoo_models as zoo

from ember.errors import UnsupportedOperatorError
from ember.frontend import from_onnx
from ember.frontend.onnx.registry import CONVERTERS
from ember.graph import verify
from ember.testing.oracle import check_against_onnxruntime


def opset_of(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def test_resnet_v2_opset8_with_initializers_as_inputs() -> None:
    model = zoo.resnet_v2_opset8()
    assert opset_of(model) == 8 and model.ir_version == 3
    check_against_onnxruntime(model, zoo.image_batch("data"))
    # Initializers that are also listed as graph inputs are weights, not user inputs.
    graph, params = from_onnx(model)
    assert [value.name for value in graph.inputs] == ["data"]
    assert params, "the weights should have become params"


@pytest.mark.parametrize("batch", [1, 2])
def test_squeezenet_opset9(batch: int) -> None:
    model = zoo.squeezenet_opset9(batch)
    ours = check_against_onnxruntime(model, zoo.image_batch("data", batch))
    # Opset-9 Softmax on the 4-D score map normalises over classes x height x width.
    totals = ours["score_map"].reshape(batch, -1).sum(axis=1)
    np.testing.assert_allclose(totals, np.ones(batch), rtol=1e-5)


@pytest.mark.parametrize("batch", [1, 2])
def test_mobilenet_v2_opset10(batch: int) -> None:
    model = zoo.mobilenet_v2_opset10(batch)
    ours = check_against_onnxruntime(model, zoo.image_batch("input.1", batch))
    assert ours["logits"].shape == (batch, 10)
    assert ours["features"].shape == (batch, 32)


def test_mobilenet_v2_opset10_folds_the_shape_subgraph() -> None:
    """Shape->Gather->Unsqueeze->Concat computes a constant from static shapes; none of
    it should survive as run-time work."""
    graph, params = from_onnx(zoo.mobilenet_v2_opset10(2))
    verify(graph, params)
    run_time_ops = {node.op for node in graph.nodes}
    assert "reshape" in run_time_ops
    assert not run_time_ops & {"gather", "concat"}, run_time_ops


@pytest.mark.parametrize(
    ("opset", "mode"), [(7, "nearest"), (7, "linear"), (9, "nearest"), (9, "linear")]
)
def test_inception_with_lrn_and_upsample(opset: int, mode: str) -> None:
    model = zoo.inception_lrn_upsample(opset, mode)
    inputs = zoo.image_batch("data_0")
    if "LRN" not in CONVERTERS:
        # Until LRN lands the user must be told which op is missing.
        with pytest.raises(UnsupportedOperatorError, match="LRN"):
            from_onnx(model)
        return
    ours = check_against_onnxruntime(model, inputs)
    assert ours["segmentation"].shape == (1, 5, 14, 14)


@pytest.mark.parametrize("opset", [11, 12])
def test_bert_block(opset: int) -> None:
    model = zoo.bert_opset11(opset)
    assert opset_of(model) == opset
    inputs = zoo.bert_inputs()
    ours = check_against_onnxruntime(model, inputs)
    # The padded positions of the last sequence must not change its first token: the
    # masks have to reach the attention scores.
    unpadded = {name: array[-1:, :11].copy() for name, array in inputs.items()}
    short_model = zoo.bert_opset11(opset, batch=1, length=11)
    short = check_against_onnxruntime(short_model, unpadded)
    np.testing.assert_allclose(
        short["pooler_output"][0], ours["pooler_output"][-1], rtol=1e-4, atol=1e-5
    )

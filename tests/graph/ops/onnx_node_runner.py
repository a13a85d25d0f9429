"""Shared by the nn op tests: run one ONNX op in ONNX Runtime, compare, count MACs,
and move between channels-first and channels-last."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from onnx import helper
from onnx_models import graph_model, value_info

from ember.errors import ShapeError
from ember.graph.builder import GraphBuilder
from ember.graph.ir import TensorType
from ember.graph.ops import infer_types, node_macs
from ember.testing.oracle import ATOL, RTOL, run_onnxruntime

RNG = np.random.default_rng(7)
F32 = "float32"


def random_array(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def run_onnx_node(
    op_type: str,
    inputs: Mapping[str, np.ndarray],
    opset: int = 19,
    node_inputs: Sequence[str] | None = None,
    **attributes: object,
) -> np.ndarray:
    """Run one ONNX op in ONNX Runtime; every input is a graph input. `node_inputs`
    names the node's inputs in order ("" for an absent optional one) when they are
    not simply the keys of `inputs`."""
    names = list(inputs) if node_inputs is None else list(node_inputs)
    node = helper.make_node(op_type, names, ["y"], **attributes)
    # These ops keep the dtype of their first input; the shape is left to ORT.
    dtype = helper.np_dtype_to_tensor_dtype(next(iter(inputs.values())).dtype)
    model = graph_model(
        [node],
        [value_info(name, array) for name, array in inputs.items()],
        [helper.make_tensor_value_info("y", dtype, None)],
        opset=opset,
    )
    return run_onnxruntime(model, dict(inputs))["y"]


def spatial_axes(rank: int) -> str:
    """The letters of `rank` spatial axes in a layout string: W, HW or DHW."""
    return "DHW"[3 - rank :]


def channels_last(array: np.ndarray) -> np.ndarray:
    """A channels-first array (N, C, spatial...) as a contiguous (N, spatial..., C)."""
    return np.ascontiguousarray(np.moveaxis(array, 1, -1))


def assert_close(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape, f"{actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)


def type_error(op: str, types: list[TensorType], attrs: object) -> str:
    with pytest.raises(ShapeError) as info:
        infer_types(op, types, attrs)  # type: ignore[arg-type]
    return str(info.value)


def count_macs(op: str, inputs: list[TensorType], attrs: object) -> int:
    builder = GraphBuilder()
    values = [builder.input(f"x{i}", t.shape, t.dtype) for i, t in enumerate(inputs)]
    out = builder.add(op, values, attrs)  # type: ignore[arg-type]
    graph, _ = builder.build([out])
    return node_macs(graph.nodes[0])

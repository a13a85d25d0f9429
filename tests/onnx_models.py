"""Small ONNX models for the tests: a graph of nodes around typed inputs and outputs,
and the one-node check against ONNX Runtime that the converter tests share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ember.testing.oracle import check_against_onnxruntime

# A graph output's declared element type (onnx.TensorProto.FLOAT, ...) and shape.
Declared = tuple[int, Sequence[int] | None]


def value_info(name: str, array: np.ndarray) -> onnx.ValueInfoProto:
    """A graph input or output typed like the example `array`."""
    return helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape
    )


def graph_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto] = (),
    opset: int = 13,
) -> onnx.ModelProto:
    """A model of one graph at `opset` of the default domain, in the oldest IR version
    that opset allows (which any ONNX Runtime accepts)."""
    opsets = [helper.make_opsetid("", opset)]
    ir_version = helper.find_min_ir_version_for(opsets)
    if ir_version < 4:
        # Before IR version 4 every initializer was also listed as a graph input.
        inputs = [
            *inputs,
            *(helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in initializers),
        ]
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = ir_version
    return model


def onnx_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, np.ndarray],
    outputs: Sequence[str] | Mapping[str, Declared],
    opset: int,
    constants: Mapping[str, np.ndarray] | None = None,
) -> onnx.ModelProto:
    """A model of `nodes` with graph inputs typed from example arrays and `constants` as
    initializers. Outputs given by name are typed by ONNX's shape inference, as an
    exporter would, and it must succeed; a mapping declares each output's (element type,
    shape) instead, for a model that inference rejects or to state the type, and
    inference then only adds what it can."""
    declared = outputs if isinstance(outputs, Mapping) else {}
    model = graph_model(
        nodes,
        [value_info(name, array) for name, array in inputs.items()],
        [
            helper.make_tensor_value_info(name, *declared[name])
            if name in declared
            else helper.make_value_info(name, onnx.TypeProto())
            for name in outputs
        ],
        [numpy_helper.from_array(np.asarray(a), name) for name, a in (constants or {}).items()],
        opset,
    )
    return onnx.shape_inference.infer_shapes(model, strict_mode=not declared, data_prop=True)


def one_node_model(
    op_type: str,
    x: np.ndarray,
    opset: int,
    constants: Mapping[str, np.ndarray] | None = None,
    outputs: int = 1,
    input_names: Sequence[str] | None = None,
    **attributes: object,
) -> onnx.ModelProto:
    """A model of one `op_type` node reading graph input `x` then the constants in order
    (or `input_names`, where "" skips an optional input), with outputs y0, y1, ...
    `attributes` may include the node's `name`."""
    names = [f"y{i}" for i in range(outputs)]
    node_inputs = input_names if input_names is not None else ["x", *(constants or {})]
    node = helper.make_node(op_type, node_inputs, names, **attributes)
    return onnx_model([node], {"x": x}, names, opset, constants)


def check_one_node(
    op_type: str,
    x: np.ndarray,
    opset: int,
    constants: Mapping[str, np.ndarray] | None = None,
    outputs: int = 1,
    input_names: Sequence[str] | None = None,
    **attributes: object,
) -> dict[str, np.ndarray]:
    """Compare Ember with ONNX Runtime on `one_node_model` of these arguments."""
    model = one_node_model(op_type, x, opset, constants, outputs, input_names, **attributes)
    return check_against_onnxruntime(model, {"x": x})

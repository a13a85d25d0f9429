"""Export an Ember graph to ONNX, so that ONNX Runtime can run the very same network.

This is how the built-in workloads (and any graph a pass produced) are compared with
ONNX Runtime, and how they are handed to tools that read ONNX. Every graph op has one
small exporter function in `EXPORTERS`, defined in `onnx_exporters` and
`onnx_exporters_nn`. Channels-last ops (NHWC conv, pooling, ...) become Transpose ->
ONNX op -> Transpose, with constant weights transposed once into the initializers.
Value names carry over unchanged, and every Ember value gets an ONNX value_info with
its static type, so ONNX's shape inference cross-checks the export.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ember.errors import EmberError, GraphError, UnsupportedOperatorError
from ember.graph.ir import Graph, Node, Value
from ember.graph.ops.layout import parse_data_layout
from ember.names import NameSupply

# Opsets the exporter can target: 13 moved Split/Squeeze/ReduceSum axes to inputs and
# settled Softmax's single-axis meaning, which the exporters rely on.
MIN_OPSET = 13
MAX_OPSET = 21


def onnx_dtype(dtype: str) -> int:
    """The TensorProto element type of a NumPy dtype name."""
    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


class Exporter:
    """The state of one export: the ONNX nodes and initializers emitted so far.

    Exporter functions read Ember names through `name(value)` (which also brings a
    param's initializer in) and add nodes with `emit`; helper values get fresh names
    that cannot clash with the graph's own.
    """

    def __init__(self, graph: Graph, params: Mapping[str, np.ndarray], opset: int) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, onnx.TensorProto] = {}
        self._params = params
        self._param_values = {v.name: v for v in graph.params}
        self._value_names = NameSupply(v.name for v in graph.values())
        self._node_names = NameSupply()
        self._transposed: dict[tuple[str, tuple[int, ...]], str] = {}

    # -- names and constants --------------------------------------------------------

    def fresh(self, hint: str) -> str:
        """A value name no other value has."""
        return self._value_names.fresh(hint)

    def name(self, value: Value) -> str:
        """The ONNX name of an Ember value; params become initializers on first use."""
        if value.name in self._param_values and value.name not in self.initializers:
            array = np.asarray(self._params[value.name])
            self.initializers[value.name] = numpy_helper.from_array(array, value.name)
        return value.name

    def constant(self, array: np.ndarray, hint: str) -> str:
        """A new initializer holding `array`."""
        name = self.fresh(hint)
        self.initializers[name] = numpy_helper.from_array(np.asarray(array, order="C"), name)
        return name

    def ints(self, values: Sequence[int], hint: str) -> str:
        """An int64 vector initializer (shapes, axes, pads)."""
        return self.constant(np.asarray(values, dtype=np.int64), hint)

    def scalar(self, value: float, dtype: str, hint: str) -> str:
        return self.constant(np.asarray(value, dtype=dtype), hint)

    def param_array(self, value: Value) -> np.ndarray | None:
        """The array of a param, or None for a computed value."""
        if value.name not in self._param_values:
            return None
        return np.asarray(self._params[value.name])

    # -- nodes -----------------------------------------------------------------------

    def emit(
        self,
        op_type: str,
        inputs: Sequence[str],
        outputs: Sequence[str] | None = None,
        hint: str = "",
        **attributes: Any,
    ) -> list[str]:
        """Add an ONNX node; outputs default to one fresh name. Returns the outputs."""
        outputs = list(outputs) if outputs is not None else [self.fresh(hint or op_type)]
        node_name = self._node_names.fresh(hint or outputs[0])
        self.nodes.append(
            helper.make_node(op_type, list(inputs), outputs, name=node_name, **attributes)
        )
        return outputs

    def emit_one(self, op_type: str, inputs: Sequence[str], hint: str, **attributes: Any) -> str:
        """`emit` for a single fresh output."""
        return self.emit(op_type, inputs, hint=hint, **attributes)[0]

    def transposed(self, value: Value, perm: Sequence[int], hint: str) -> str:
        """`value` transposed by `perm`: a pre-transposed initializer for a param (made
        once per param and permutation), a Transpose node otherwise."""
        perm = tuple(perm)
        if perm == tuple(range(len(perm))):
            return self.name(value)
        array = self.param_array(value)
        if array is None:
            return self.emit_one("Transpose", [self.name(value)], hint, perm=list(perm))
        key = (value.name, perm)
        if key not in self._transposed:
            self._transposed[key] = self.constant(np.transpose(array, perm), hint)
        return self._transposed[key]

    # -- channels-last wrapping --------------------------------------------------------

    def in_channels_first(
        self,
        node: Node,
        layout: str,
        core: Callable[[str, str], object],
        data: str | None = None,
    ) -> None:
        """Run `core(data, output)`, which emits a channels-first ONNX op, on the node's
        first input (or `data`, an ONNX value of its shape) and output; for a
        channels-last layout, transpose around it."""
        data = self.name(node.inputs[0]) if data is None else data
        output = node.outputs[0].name
        parsed = parse_data_layout(layout, node.op, node.inputs[0].type.ndim)
        if not parsed.channels_last:
            core(data, output)
            return
        to_first = list(parsed.to_channels_first)
        data_first = self.emit_one("Transpose", [data], f"{node.name}/to_nc", perm=to_first)
        output_first = self.fresh(f"{node.name}/nc")
        core(data_first, output_first)
        back = [int(axis) for axis in np.argsort(to_first)]
        self.emit("Transpose", [output_first], [output], f"{node.name}/from_nc", perm=back)


ExportFn = Callable[[Exporter, Node], None]

# Filled by `onnx_exporters` and `onnx_exporters_nn`, one entry per graph op.
EXPORTERS: dict[str, ExportFn] = {}


def exporter(*ops: str) -> Callable[[ExportFn], ExportFn]:
    """Register a function as the ONNX exporter of the given graph ops."""

    def register(fn: ExportFn) -> ExportFn:
        for op in ops:
            if op in EXPORTERS:
                raise ValueError(f"graph op {op!r} has two ONNX exporters")
            EXPORTERS[op] = fn
        return fn

    return register


def _value_info(value: Value) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(
        value.name, onnx_dtype(value.dtype), list(value.type.shape)
    )


def to_onnx(
    graph: Graph,
    params: Mapping[str, np.ndarray],
    path: str | Path | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    """Export `graph` with `params` as an ONNX model of the default domain at `opset`
    (13..21); writes it to `path` when given. Raises UnsupportedOperatorError naming
    the ops that have no ONNX form."""
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise EmberError(f"cannot export to ONNX opset {opset}; use {MIN_OPSET}..{MAX_OPSET}")
    missing = sorted({node.op for node in graph.nodes if node.op not in EXPORTERS})
    if missing:
        raise UnsupportedOperatorError(
            f"graph ops with no ONNX export: {', '.join(missing)}; rewrite them into other "
            "ops before exporting, or add exporters in ember/testing/onnx_exporters*.py"
        )
    absent = [v.name for v in graph.params if v.name not in params]
    if absent:
        raise GraphError(f"params {', '.join(absent)} have no arrays; pass the graph's params")
    export = Exporter(graph, params, opset)
    for node in graph.nodes:
        EXPORTERS[node.op](export, node)
    model = _assemble(graph, export)
    if path is not None:
        onnx.save(model, str(path))
    return model


def _assemble(graph: Graph, export: Exporter) -> onnx.ModelProto:
    """The model around the exported nodes, with a value_info for every Ember value."""
    for value in graph.outputs:
        export.name(value)  # an output may be a param: its initializer must exist
    boundary = {v.name for v in (*graph.inputs, *graph.outputs)}
    intermediate = [
        _value_info(v) for node in graph.nodes for v in node.outputs if v.name not in boundary
    ]
    onnx_graph = helper.make_graph(
        export.nodes,
        graph.name,
        [_value_info(v) for v in graph.inputs],
        [_value_info(v) for v in graph.outputs],
        initializer=list(export.initializers.values()),
        value_info=intermediate,
    )
    opset_import = [helper.make_opsetid("", export.opset)]
    model = helper.make_model(onnx_graph, opset_imports=opset_import, producer_name="ember")
    # The oldest IR version that can hold this opset, so older runtimes load it too.
    model.ir_version = helper.find_min_ir_version_for(opset_import)
    return model


__all__ = ["EXPORTERS", "MAX_OPSET", "MIN_OPSET", "Exporter", "exporter", "onnx_dtype", "to_onnx"]

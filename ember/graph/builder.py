"""`GraphBuilder`: construct a graph op by op, with types inferred as you go.

Frontends, built-in workloads and passes all build graphs this way, so every node
that exists has passed type inference.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from ember.errors import GraphError
from ember.graph.ir import (
    Attrs,
    Graph,
    NameSupply,
    NoAttrs,
    Node,
    Params,
    TensorType,
    Value,
    prune_params,
    remove_dead_nodes,
)
from ember.graph.ops import evaluate, infer_types
from ember.graph.passes.fold_constants import worth_folding


class GraphBuilder:
    """Accumulates inputs, params and nodes; `build` returns `(graph, params)`.

    With `fold_constants=True`, a node whose inputs are all params is evaluated with the
    reference implementation right away and becomes a param itself (how the ONNX
    frontend folds shape-computing subgraphs).
    """

    def __init__(self, name: str = "main", fold_constants: bool = False) -> None:
        self.name = name
        self.fold_constants = fold_constants
        self._inputs: list[Value] = []
        self._params: dict[str, Value] = {}
        self._arrays: Params = {}
        self._nodes: list[Node] = []
        self._names = NameSupply()

    # -- names -------------------------------------------------------------------

    def fresh_name(self, hint: str) -> str:
        """A value or node name based on `hint` not used yet in this graph."""
        return self._names.fresh(hint)

    # -- values ------------------------------------------------------------------

    def input(self, name: str, shape: tuple[int, ...], dtype: str = "float32") -> Value:
        if not self._names.take(name):
            raise GraphError(f"graph input name {name!r} is already used")
        value = Value(name, TensorType(tuple(int(d) for d in shape), dtype))
        self._inputs.append(value)
        return value

    def param(self, name: str, array: np.ndarray) -> Value:
        """A named weight; the name is made unique if needed."""
        # Not np.ascontiguousarray: it turns a 0-d array (a scalar constant) into 1-d.
        array = np.asarray(array, order="C")
        value = Value(self.fresh_name(name), TensorType.of(array))
        self._params[value.name] = value
        self._arrays[value.name] = array
        return value

    def constant(self, array: np.ndarray | float | int, dtype: str | None = None) -> Value:
        """An anonymous constant, stored as a param named `const`."""
        data = np.asarray(array, dtype=dtype)
        return self.param("const", data)

    def is_constant(self, value: Value) -> bool:
        return value.name in self._arrays

    def constant_value(self, value: Value) -> np.ndarray | None:
        """The array of a param/constant value, or None for a computed value."""
        return self._arrays.get(value.name)

    @contextmanager
    def folding(self, enabled: bool) -> Iterator[None]:
        """Within the block, fold constants only if `enabled` (and the builder folds at
        all): the ONNX frontend keeps a quantized weight's dequantization as nodes, for
        the `quantized_ops` pass to find the integers."""
        saved = self.fold_constants
        self.fold_constants = saved and enabled
        try:
            yield
        finally:
            self.fold_constants = saved

    # -- nodes -------------------------------------------------------------------

    def add(
        self, op: str, inputs: list[Value], attrs: Attrs | None = None, name: str = ""
    ) -> Value:
        """Apply a single-output op; returns its output value."""
        outputs = self.add_multi(op, inputs, attrs, name)
        if len(outputs) != 1:
            raise GraphError(f"op {op!r} has {len(outputs)} outputs; use add_multi")
        return outputs[0]

    def add_multi(
        self, op: str, inputs: list[Value], attrs: Attrs | None = None, name: str = ""
    ) -> tuple[Value, ...]:
        """Apply an op; returns all its outputs."""
        attrs = attrs if attrs is not None else NoAttrs()
        out_types = infer_types(op, [v.type for v in inputs], attrs)
        node_name = self.fresh_name(name or op)
        constants = [self._arrays[v.name] for v in inputs if self.is_constant(v)]
        if (
            self.fold_constants
            and inputs
            and len(constants) == len(inputs)
            and worth_folding(constants, out_types)
        ):
            results = evaluate(op, constants, attrs)
            return tuple(
                self.param(node_name if len(results) == 1 else f"{node_name}:{i}", r)
                for i, r in enumerate(results)
            )
        outputs = tuple(
            Value(node_name if len(out_types) == 1 else self.fresh_name(f"{node_name}:{i}"), t)
            for i, t in enumerate(out_types)
        )
        self._nodes.append(Node(op, tuple(inputs), outputs, attrs, node_name))
        return outputs

    # -- result ------------------------------------------------------------------

    def build(self, outputs: list[Value]) -> tuple[Graph, Params]:
        """The graph computing `outputs`; nodes and params they do not need are dropped."""
        graph = Graph(
            inputs=tuple(self._inputs),
            outputs=tuple(outputs),
            nodes=tuple(self._nodes),
            params=tuple(self._params.values()),
            name=self.name,
        )
        return prune_params(remove_dead_nodes(graph), self._arrays)

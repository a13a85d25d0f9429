"""The graph IR: statically typed values, nodes in topological order, params as arrays.

A `Graph` is immutable. Passes build new graphs (usually through `GraphBuilder` or
`Graph.replace`). Parameter arrays live beside the graph in a plain `dict[str,
np.ndarray]` keyed by value name, so that the same graph structure can be paired with
different weights; `Graph.params` lists the values that such a dict must provide.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeAlias

import numpy as np

from ember import names
from ember.errors import ShapeError

Shape: TypeAlias = tuple[int, ...]
Params: TypeAlias = dict[str, np.ndarray]

DTYPES = (
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
)
FLOAT_DTYPES = ("float16", "float32", "float64")


# The largest rank a tensor may have: NumPy (the reference interpreter, constant
# folding) broadcasts up to 32 axes.
MAX_RANK = 32


@dataclass(frozen=True, slots=True)
class TensorType:
    """A static tensor type: every dimension is a known non-negative integer."""

    shape: Shape
    dtype: str

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ShapeError(f"unknown dtype {self.dtype!r}; Ember supports {', '.join(DTYPES)}")
        if any((not isinstance(d, int)) or d < 0 for d in self.shape):
            raise ShapeError(f"shape {self.shape} must be a tuple of non-negative integers")
        if len(self.shape) > MAX_RANK:
            raise ShapeError(
                f"a tensor of rank {len(self.shape)} ({self.dtype}[{self.shape[0]}, ...]); "
                f"Ember supports ranks up to {MAX_RANK}: merge axes with a Reshape"
            )

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements, a Python int (an int64 product wraps: [4, 2**62] gave 0)."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    @staticmethod
    def of(array: np.ndarray) -> TensorType:
        return TensorType(tuple(int(d) for d in array.shape), str(array.dtype))

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


@dataclass(frozen=True, slots=True)
class Value:
    """A named tensor: a graph input, a param, or a node output. Names are unique."""

    name: str
    type: TensorType

    @property
    def shape(self) -> Shape:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def __str__(self) -> str:
        return f"%{self.name}"


@dataclass(frozen=True, slots=True)
class Attrs:
    """Base of every op's attribute record. Subclasses are frozen dataclasses whose
    fields are ints, floats, strings, bools or tuples of them, so attrs hash and
    compare structurally and print readably."""

    def items(self) -> Iterator[tuple[str, object]]:
        for name in self.__dataclass_fields__:
            yield name, getattr(self, name)


@dataclass(frozen=True, slots=True)
class NoAttrs(Attrs):
    """For ops without attributes."""


@dataclass(frozen=True, slots=True)
class Node:
    """One op application. `op` names an entry of the op registry (`ember.graph.ops`);
    `name` identifies the node and is unique in its graph, like value names."""

    op: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    attrs: Attrs = field(default_factory=NoAttrs)
    name: str = ""

    @property
    def output(self) -> Value:
        """The only output of a single-output node."""
        assert len(self.outputs) == 1, f"{self.op} has {len(self.outputs)} outputs"
        return self.outputs[0]


@dataclass(frozen=True, slots=True)
class Graph:
    """A dataflow graph with static shapes; `nodes` are in topological order."""

    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    nodes: tuple[Node, ...]
    params: tuple[Value, ...] = ()
    name: str = "main"

    def replace(self, **changes: object) -> Graph:
        return replace(self, **changes)  # type: ignore[arg-type]

    def values(self) -> Iterator[Value]:
        """Every value: inputs, params, then node outputs in order."""
        yield from self.inputs
        yield from self.params
        for node in self.nodes:
            yield from node.outputs

    def producers(self) -> dict[str, Node]:
        """Map from a value name to the node that produces it."""
        return {out.name: node for node in self.nodes for out in node.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        """Map from a value name to the nodes that read it (in order, with repeats)."""
        users: dict[str, list[Node]] = {v.name: [] for v in self.values()}
        for node in self.nodes:
            for value in node.inputs:
                users[value.name].append(node)
        return users

    def op_histogram(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.op] = counts.get(node.op, 0) + 1
        return counts

    def __str__(self) -> str:
        from ember.graph.printer import format_graph

        return format_graph(self)


class NameSupply(names.NameSupply):
    """Names for a graph's values and nodes (`ember.names.NameSupply`): the hint
    itself, else `hint_1`, `hint_2`, ... Hints are cleaned to letters, digits and
    `_.:/-`, so names print unambiguously."""

    def __init__(self, taken: Iterable[str] = ()) -> None:
        super().__init__(taken, clean=_graph_name)

    @classmethod
    def for_graph(cls, graph: Graph) -> NameSupply:
        """Names used nowhere in `graph`, neither by a value nor by a node."""
        value_names = [value.name for value in graph.values()]
        return cls([*value_names, *(node.name for node in graph.nodes)])


def _graph_name(hint: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:/-]", "_", hint) or "v"


def param_count(graph: Graph) -> int:
    """Total number of parameter elements."""
    return sum(v.type.size for v in graph.params)


def prune_params(graph: Graph, params: Mapping[str, np.ndarray]) -> tuple[Graph, Params]:
    """Drop params (and their arrays) that no node or output reads any more."""
    used = {v.name for node in graph.nodes for v in node.inputs}
    used |= {v.name for v in graph.outputs}
    kept = tuple(v for v in graph.params if v.name in used)
    return graph.replace(params=kept), {v.name: params[v.name] for v in kept}


def remove_dead_nodes(graph: Graph) -> Graph:
    """Drop nodes none of whose outputs reach a graph output."""
    needed = {v.name for v in graph.outputs}
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if any(v.name in needed for v in node.outputs):
            kept.append(node)
            needed.update(v.name for v in node.inputs)
    return graph.replace(nodes=tuple(reversed(kept)))


def rename_values(graph: Graph, new_names: Mapping[str, str]) -> Graph:
    """Rename values (where defined and where read). The caller makes sure the new
    names are unused; only node outputs may be renamed (inputs and params name
    entries of the user's feeds and the params dict)."""
    if not new_names:
        return graph

    def renamed(value: Value) -> Value:
        name = new_names.get(value.name)
        return value if name is None else Value(name, value.type)

    nodes = tuple(
        Node(
            node.op,
            tuple(renamed(v) for v in node.inputs),
            tuple(renamed(v) for v in node.outputs),
            node.attrs,
            node.name,
        )
        for node in graph.nodes
    )
    return graph.replace(nodes=nodes, outputs=tuple(renamed(v) for v in graph.outputs))

"""The bookkeeping of `convert_layout`: which way it converts, and where each value of
the original graph sits in the new one.

A value is *placed* as a new value plus a permutation `perm` with
`new == numpy.transpose(old, perm)`; `LayoutRewriter` keeps those placements, emits
the new graph's nodes and params, and makes any value available in any layout (a
re-laid-out param array, or a transpose composed with the one that produced it). The
rules that decide how each op is rewritten are in `convert_layout.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.errors import ShapeError
from ember.graph.ir import Attrs, Graph, NameSupply, Node, Params, TensorType, Value
from ember.graph.ops.attrs import BatchNormAttrs, ReshapeAttrs, TransposeAttrs
from ember.graph.ops.layout import SPATIAL_LETTERS, channels_first, channels_last
from ember.graph.passes.rewrite import make_node

Perm = tuple[int, ...]

CHANNELS_LAST_NAMES = ("NWC", "NHWC", "NDHWC")
CHANNELS_FIRST_NAMES = ("NCW", "NCHW", "NCDHW")

# Ops whose `layout` attr names their data layout; all data is input 0.
SPATIAL_OPS = frozenset(
    {
        "conv",
        "qconv",
        "max_pool",
        "avg_pool",
        "global_avg_pool",
        "global_max_pool",
        "instance_norm",
        "depth_to_space",
        "space_to_depth",
    }
)


def identity(rank: int) -> Perm:
    return tuple(range(rank))


def permute(values: Sequence[Any], perm: Perm) -> tuple[Any, ...]:
    """`values` re-ordered like the axes of `numpy.transpose(x, perm)`."""
    return tuple(values[axis] for axis in perm)


@dataclass(frozen=True, slots=True)
class Direction:
    """Which layout the pass converts from and to, per tensor rank (3, 4 or 5)."""

    to_channels_last: bool

    def _layout(self, rank: int, channels_last_wanted: bool) -> str | None:
        spatial_rank = rank - 2
        if spatial_rank not in SPATIAL_LETTERS:
            return None
        return channels_last(spatial_rank) if channels_last_wanted else channels_first(spatial_rank)

    def source(self, rank: int) -> str | None:
        return self._layout(rank, not self.to_channels_last)

    def target(self, rank: int) -> str | None:
        return self._layout(rank, self.to_channels_last)

    def data_perm(self, rank: int) -> Perm | None:
        source, target = self.source(rank), self.target(rank)
        if source is None or target is None:
            return None
        return tuple(source.index(axis) for axis in target)

    def kernel_layout(self, rank: int) -> str:
        letters = SPATIAL_LETTERS[rank - 2]
        return letters + "IO" if self.to_channels_last else "OI" + letters

    def label(self, perm: Perm) -> str:
        """How a value placed with `perm` is named: its layout's letters, lower case."""
        source = self.source(len(perm))
        if source is None:
            return "t" + "".join(str(axis) for axis in perm)
        return "".join(source[axis] for axis in perm).lower()

    def converts(self, node: Node) -> bool:
        """Whether `node` is a spatial op in the source layout (one this pass rewrites)."""
        rank = node.inputs[0].type.ndim if node.inputs else 0
        source = self.source(rank)
        if source is None:
            return False
        if node.op in SPATIAL_OPS:
            return getattr(node.attrs, "layout", None) == source
        if node.op == "batch_norm" and isinstance(node.attrs, BatchNormAttrs):
            return node.attrs.axis == source.index("C")
        return False


def direction_for(layout: str) -> Direction:
    if layout in CHANNELS_LAST_NAMES:
        return Direction(to_channels_last=True)
    if layout in CHANNELS_FIRST_NAMES:
        return Direction(to_channels_last=False)
    raise ShapeError(
        f"convert_layout: unknown target layout {layout!r}; use a channels-last layout "
        f"({', '.join(CHANNELS_LAST_NAMES)}) or a channels-first one "
        f"({', '.join(CHANNELS_FIRST_NAMES)})"
    )


class LayoutRewriter:
    """The state of one convert_layout run: placements, new nodes, new params."""

    def __init__(self, graph: Graph, params: Mapping[str, np.ndarray], direction: Direction):
        self.direction = direction
        self.names = NameSupply.for_graph(graph)
        self.arrays: Params = dict(params)
        self.original_params = {value.name for value in graph.params}
        self.param_values: list[Value] = list(graph.params)
        self.nodes: list[Node] = []
        self.placements: dict[str, tuple[Value, Perm]] = {
            value.name: (value, identity(value.type.ndim)) for value in graph.params
        }
        # (original value name, perm) -> the value holding it in that layout.
        self.variants: dict[tuple[str, Perm], Value] = {}
        # New transpose outputs -> (their input, their perm), for composing transposes.
        self.transposed_from: dict[str, tuple[Value, Perm]] = {}

    # -- placements ----------------------------------------------------------------

    def place(self, old: Value, new: Value, perm: Perm) -> None:
        self.placements[old.name] = (new, perm)

    def perm_of(self, value: Value) -> Perm:
        return self.placements[value.name][1]

    def is_param(self, value: Value) -> bool:
        return value.name in self.original_params

    def followed_perm(self, values: Sequence[Value], rank: int) -> Perm | None:
        """The placement of the first rank-`rank` value that is permuted, if any."""
        for value in values:
            perm = self.perm_of(value)
            if value.type.ndim == rank and perm != identity(rank):
                return perm
        return None

    def in_layout(self, value: Value, perm: Perm, label: str | None = None) -> Value:
        """`value` (of the original graph) as `numpy.transpose(value, perm)` in the new
        graph: a permuted param array, a cached or new transpose, or the value itself."""
        current, current_perm = self.placements[value.name]
        if current_perm == perm:
            return current
        key = (value.name, perm)
        if key not in self.variants:
            name = f"{value.name}_{label or self.direction.label(perm)}"
            if self.is_param(value):
                array = np.ascontiguousarray(np.transpose(self.arrays[value.name], perm))
                self.variants[key] = self.new_param(name, array)
            else:
                relative = tuple(current_perm.index(axis) for axis in perm)
                self.variants[key] = self.transpose(current, relative, name)
        return self.variants[key]

    # -- emitting ------------------------------------------------------------------

    def new_param(self, hint: str, array: np.ndarray) -> Value:
        value = Value(self.names.fresh(hint), TensorType.of(array))
        self.arrays[value.name] = array
        self.param_values.append(value)
        return value

    def emit(
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: Attrs,
        name: str,
        output_names: Sequence[str] | None = None,
    ) -> tuple[Value, ...]:
        node = make_node(op, inputs, attrs, name=name, output_names=output_names)
        self.nodes.append(node)
        if op == "transpose" and isinstance(attrs, TransposeAttrs):
            self.transposed_from[node.output.name] = (inputs[0], attrs.perm)
        return node.outputs

    def transpose(self, value: Value, perm: Perm, hint: str) -> Value:
        """`numpy.transpose(value, perm)` of a new-graph value, folded into the
        transpose that produced `value` if there is one."""
        source, applied = self.transposed_from.get(value.name, (value, identity(len(perm))))
        combined = permute(applied, perm)
        if combined == identity(len(perm)):
            return source
        name = self.names.fresh(hint)
        (result,) = self.emit("transpose", [source], TransposeAttrs(combined), name)
        return result

    def reshape(self, value: Value, shape: tuple[int, ...], hint: str) -> Value:
        (result,) = self.emit("reshape", [value], ReshapeAttrs(shape), self.names.fresh(hint))
        return result

    def emit_like(
        self, node: Node, inputs: Sequence[Value], attrs: Attrs, perms: Sequence[Perm]
    ) -> None:
        """Re-emit `node` (same name, same output names) and place its outputs."""
        names = [value.name for value in node.outputs]
        outputs = self.emit(node.op, inputs, attrs, node.name, names)
        for old, new, perm in zip(node.outputs, outputs, perms, strict=True):
            self.place(old, new, perm)

    def emit_border(self, node: Node) -> None:
        """`node` as it was, reading every input in its original layout."""
        inputs = [self.in_layout(value, identity(value.type.ndim)) for value in node.inputs]
        perms = [identity(value.type.ndim) for value in node.outputs]
        self.emit_like(node, inputs, node.attrs, perms)

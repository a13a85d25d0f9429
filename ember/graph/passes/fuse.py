"""fuse: partition a graph into fused groups, the units that code generation compiles.

Each group becomes one ComputeDAG (one kernel) later, so a group is a self-contained
subgraph: `FusedGroup.as_graph()` turns it into a `Graph` whose inputs are the values
it reads from outside (graph inputs and other groups' outputs) and whose params are the
params it reads.

Nodes are visited in topological order. A node joins the group of one of its inputs'
producers when the table allows it, else it starts a group of its own:

| node's OpPattern    | joins an input producer's group if it is   | otherwise starts     |
| ------------------- | ------------------------------------------ | -------------------- |
| ELEMWISE, BROADCAST | an anchor group (as epilogue) or injective | an injective group   |
| INJECTIVE           | an injective group                         | an injective group   |
| REDUCTION, ANCHOR   | never                                      | an anchor group      |
| OPAQUE              | never                                      | an opaque group of 1 |

and only along a single-consumer chain:
- the value linking them is produced by the group's last node (its tail), is read by
  no other node and is not a graph output (a fused intermediate is never stored);
- in an anchor group the node's output has the linked value's shape (an epilogue runs
  in the anchor's iteration space; a broadcast may not enlarge it);
- the node's other operands are params, graph inputs or outputs of groups that do not
  depend on this group (so the groups stay acyclic): conv -> add(bias) ->
  add(residual) -> relu is one group.

A gather never joins the group computing its indices: they are stored, and the entry
point checks them in range before the gather's group runs (`ember.build`). A Winograd
input transform joins no group (`OWN_GROUP_OPS`): it reads each input element into
several tiles' sums, so inlined after an epilogue it would compute the epilogue's
expression (and an output transform's sums) once per read: 16 times over. A Winograd
output transform's group takes only an elementwise epilogue, as an anchor's
(`EPILOGUE_ONLY_OPS`): a transpose after it would read its tiles across the vectors.

Beside chains, elementwise diamonds: a value `x` read by several elementwise or
broadcast nodes whose paths meet again in one node (`x * sigmoid(x)`, GELU's
`0.5 * x * (1 + erf(x / sqrt 2))`, `x * hardsigmoid(x)`) fuses as one region into
the group whose tail produces `x`, when every reader of `x` and of the region's
intermediate values is in the region (so none of them is stored), the region's nodes
keep `x`'s shape and read nothing else that depends on `x` (`_find_regions`). The
region's last node becomes the group's tail, and the chain goes on from there.

A group's elementwise and injective nodes are inlined into one expression per output
element, in which a value read twice (a diamond's `x`) is written out twice. Chains and
diamonds therefore stop growing a group when that expression would exceed
`MAX_INLINED_SIZE` nodes: 20 swish blocks in a row would otherwise inline 2**20 reads of
the first input, and a chain of a few hundred activations would nest deeper than the
code generator's walks may recurse. Networks' real epilogues are a few nodes; a longer
chain continues in a new group, through one stored intermediate.

Prologues: a constant-mode `pad` whose only reader is a conv or pool (as its data)
joins that anchor's group (a conv's ComputeDAG pads its input anyway); a chain of
reshapes, transposes and slices that makes an operand of a `matmul` (of two
activations) or a dense's rows for it alone joins that group, as long as each keeps
the innermost axis contiguous (attention's split of the channels into heads, the slice
of q, k or v out of one projection, and the swap of the head and sequence axes: the
kernel reads the projection's output where it lies, loading whole vectors as before,
and no copy is made; `read_through` makes such chains single-reader). A transpose that
moves the innermost axis (Kᵀ) stays its own group, since read through, a vector load
would become a gather, except in front of a matmul's right operand whose columns the
kernel pads (`ember.topi.linalg.pads_columns`: ViT's 197 tokens): the kernel copies
that operand into its padded buffer anyway, and the copy reads K where the projection
wrote it, one gathered element per element copied (ViT-B/16, Zen 4: Kᵀ copy and
Q·Kᵀ 0.50 -> 0.45 ms a layer). Other producers of an anchor (a transpose before a
dense that moves its last axis, say) stay in their own groups, and nothing injective
follows an anchor but one: the `slice` cutting off the output channels
`pack_weights` padded to whole vectors (a crop of the last axis, right after a
`conv_pack` or `dense_pack`). So each anchor group is one anchor computation with a
pointwise epilogue.

Pre: `graph` verifies. Post: every node is in exactly one group; each group has at most
one anchor; `groups` is in a valid execution order; running the groups' subgraphs in
order (`interpret_fused`) computes what the graph computes.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ember.errors import GraphError
from ember.graph.interpret import interpret
from ember.graph.ir import Graph, Node, Params, Value
from ember.graph.ops import OpPattern, get_op
from ember.graph.ops.attrs import PadAttrs, SliceAttrs, TransposeAttrs
from ember.graph.printer import format_node
from ember.graph.verify import verify
from ember.topi.linalg import pads_columns

# Anchors that take a constant pad of their data input as a prologue.
PROLOGUE_ANCHORS = frozenset({"conv", "conv_pack", "max_pool", "avg_pool"})
# Anchors that read their operands through a chain of reshapes, transposes and slices
# that keep each operand's innermost axis contiguous (`_keeps_inner_axis`).
READ_THROUGH_ANCHORS = frozenset({"matmul", "dense", "dense_pack"})
# The ops such a chain is made of: each output element is one input element.
READ_THROUGH_OPS = frozenset({"reshape", "transpose", "slice"})

# A group's name lists its ops; longer chains are abbreviated after this many.
NAME_OPS = 5
# The most nodes an elementwise diamond may hold (GELU's erf form has four).
MAX_REGION_NODES = 16


class GroupKind(enum.Enum):
    ANCHOR = "anchor"  # one anchor or reduction op plus its prologue and epilogue
    INJECTIVE = "injective"  # elementwise, broadcast and injective ops only
    OPAQUE = "opaque"  # a single op that never fuses


@dataclass(frozen=True, slots=True)
class FusedGroup:
    """One fused group: nodes in topological order and the values crossing its edge.

    `inputs` are read from outside, in order of first use (graph inputs, params, other
    groups' outputs); `params` is the subset of them that are graph params. `outputs`
    are the values the group produces that other groups or the graph outputs read."""

    name: str
    kind: GroupKind
    anchor: Node | None
    nodes: tuple[Node, ...]
    inputs: tuple[Value, ...]
    params: tuple[Value, ...]
    outputs: tuple[Value, ...]

    @property
    def data_inputs(self) -> tuple[Value, ...]:
        """The inputs that are not params: what the group's kernel receives at run time."""
        param_names = {value.name for value in self.params}
        return tuple(value for value in self.inputs if value.name not in param_names)

    def as_graph(self) -> Graph:
        """The group as a standalone graph (inputs = data inputs, params = param inputs)."""
        return Graph(
            inputs=self.data_inputs,
            outputs=self.outputs,
            nodes=self.nodes,
            params=self.params,
            name=self.name,
        )

    def describe(self) -> str:
        """`NAME (anchor OP): %in, ... -> %out, ...` for printouts."""
        kind = f"anchor {self.anchor.op}" if self.anchor is not None else self.kind.value
        reads = ", ".join(str(value) for value in self.inputs) or "nothing"
        writes = ", ".join(str(value) for value in self.outputs) or "nothing"
        return f"{self.name} ({kind}): {reads} -> {writes}"


@dataclass(frozen=True, slots=True)
class FusedGraph:
    """A graph split into fused groups, listed in a valid execution order."""

    graph: Graph
    params: Params = field(compare=False, repr=False)
    groups: tuple[FusedGroup, ...]

    def group_params(self, group: FusedGroup) -> Params:
        """The param arrays that `group.as_graph()` needs."""
        return {value.name: self.params[value.name] for value in group.params}

    def group_of(self, node_name: str) -> FusedGroup:
        """The group holding the node named `node_name`."""
        for group in self.groups:
            if any(node.name == node_name for node in group.nodes):
                return group
        raise GraphError(f"no node named {node_name!r} in fused graph {self.graph.name!r}")

    def __str__(self) -> str:
        lines = [
            f"fused graph {self.graph.name}: {len(self.graph.nodes)} nodes "
            f"in {len(self.groups)} groups"
        ]
        for index, group in enumerate(self.groups):
            lines.append(f"group {index} {group.describe()}")
            lines.extend(f"  {format_node(node)}" for node in group.nodes)
        return "\n".join(lines)


def fuse(graph: Graph, params: Mapping[str, np.ndarray]) -> FusedGraph:
    """Partition `graph` into fused groups (rules in the module docstring)."""
    partition = _Partition(graph)
    prologues = _find_prologues(graph, partition)
    prologue_nodes = {name for names in prologues.values() for name in names}
    regions = _find_regions(graph, partition)
    for index, node in enumerate(graph.nodes):
        if node.name in prologue_nodes:
            continue  # joins its anchor's group when the anchor is visited
        pattern = get_op(node.op).pattern
        if pattern == OpPattern.OPAQUE:
            partition.start(index, GroupKind.OPAQUE)
        elif node.op in OWN_GROUP_OPS:
            partition.start(index, GroupKind.INJECTIVE)
        elif pattern >= OpPattern.REDUCTION:
            prologue = [partition.node_index[name] for name in prologues.get(node.name, ())]
            partition.start(index, GroupKind.ANCHOR, prologue)
        else:
            target = partition.joinable_group(index, pattern, regions.get(node.name))
            if target is None:
                partition.start(index, GroupKind.INJECTIVE)
            else:
                partition.join(target, index)
    return FusedGraph(graph, dict(params), partition.groups())


def _find_prologues(graph: Graph, partition: _Partition) -> dict[str, tuple[str, ...]]:
    """anchor node name -> the nodes that fuse into it as a prologue (module docstring):
    a constant pad before a conv or pool, the reshapes and transposes before a matmul's
    operands."""
    prologues: dict[str, tuple[str, ...]] = {}
    for node in graph.nodes:
        if node.op in PROLOGUE_ANCHORS and node.inputs:
            producer = partition.producers.get(node.inputs[0].name)
            if (
                producer is not None
                and producer.op == "pad"
                and isinstance(producer.attrs, PadAttrs)
                and producer.attrs.mode == "constant"
                and partition.only_reader(producer.output, node)
            ):
                prologues[node.name] = (producer.name,)
        elif node.op in READ_THROUGH_ANCHORS:
            chain = _read_through(node, partition)
            if chain:
                prologues[node.name] = chain
    return prologues


def _read_through(anchor: Node, partition: _Partition) -> tuple[str, ...]:
    """The reshapes and transposes that make `anchor`'s operands for it alone, back
    from each, while each keeps the innermost axis of its input contiguous in its
    output; each once (`x @ x` reads one chain twice)."""
    chain: dict[str, None] = {}
    for position, operand in enumerate(dict.fromkeys(anchor.inputs)):
        # The right operand of a matmul whose columns the kernel pads is copied into
        # the padded buffer anyway: that copy may gather (Kᵀ transposed on the way).
        copied = position == 1 and anchor.op == "matmul" and pads_columns(operand.shape)
        value, reader = operand, anchor
        while (
            (producer := partition.producers.get(value.name)) is not None
            and producer.op in READ_THROUGH_OPS
            and partition.only_reader(value, reader)
            and (copied or _keeps_inner_axis(producer))
        ):
            chain[producer.name] = None
            value, reader = producer.inputs[0], producer
    return tuple(chain)


def _keeps_inner_axis(node: Node) -> bool:
    """Whether consecutive elements of `node`'s output's last axis are consecutive in
    its input: a transpose that leaves the last axis last, a reshape whose output's
    last axis splits its input's (as attention splits 768 channels into 12 heads of
    64). Read through such nodes, a kernel still loads whole vectors along that axis."""
    if isinstance(node.attrs, TransposeAttrs):
        return node.attrs.perm[-1] == len(node.attrs.perm) - 1
    if isinstance(node.attrs, SliceAttrs):
        return bool(node.attrs.steps) and node.attrs.steps[-1] == 1
    before, after = node.inputs[0].shape, node.output.shape
    return bool(before) and bool(after) and after[-1] > 0 and before[-1] % after[-1] == 0


def _find_regions(graph: Graph, partition: _Partition) -> dict[str, str]:
    """node name -> the value `x` whose elementwise diamond it belongs to (module
    docstring): for each value read by two or more nodes, the readers and their
    readers, added until one value alone leaves the region."""
    regions: dict[str, str] = {}
    for node in graph.nodes:
        for value in node.outputs:
            if len(partition.readers[value.name]) < 2 or value.name in partition.graph_outputs:
                continue
            region = _closed_region(value, partition)
            if region is not None and not any(name in regions for name in region):
                regions.update(dict.fromkeys(region, value.name))
    return regions


def _closed_region(source: Value, partition: _Partition) -> list[str] | None:
    """The nodes of `source`'s diamond in graph order, or None when its readers do not
    close into one elementwise region of `source`'s shape. Readers are added one at a
    time in graph order, the earliest first, until one value alone leaves the region:
    the smallest such region (a merge node comes before anything that reads it)."""
    order = partition.node_index
    region: dict[str, Node] = {}
    inside = {source.name}  # source and the region's outputs
    while True:
        leaving = [
            name
            for name in inside
            if name in partition.graph_outputs
            or any(reader.name not in region for reader in partition.readers[name])
        ]
        if len(leaving) == 1 and leaving[0] != source.name and region:
            break
        candidates = [
            reader
            for name in leaving
            for reader in partition.readers[name]
            if reader.name not in region
        ]
        if not candidates or len(region) == MAX_REGION_NODES:
            return None
        reader = min(candidates, key=lambda node: order[node.name])
        if not _fits_region(reader, source):
            return None
        region[reader.name] = reader
        inside.update(value.name for value in reader.outputs)
    # The region's other operands must not depend on `source`: they come from outside
    # the group the region joins, which must not wait for it.
    for node in region.values():
        for value in node.inputs:
            if value.name not in inside and _depends_on(value, source, partition):
                return None
    return sorted(region, key=order.__getitem__)


def _fits_region(node: Node, source: Value) -> bool:
    pattern = get_op(node.op).pattern
    return pattern <= OpPattern.BROADCAST and all(out.shape == source.shape for out in node.outputs)


def _depends_on(value: Value, source: Value, partition: _Partition) -> bool:
    """Whether `value` is computed from `source` (walking producers back)."""
    stack, seen = [value.name], {value.name}
    while stack:
        name = stack.pop()
        if name == source.name:
            return True
        producer = partition.producers.get(name)
        for operand in producer.inputs if producer is not None else ():
            if operand.name not in seen:
                seen.add(operand.name)
                stack.append(operand.name)
    return False


# Injective ops that start a group of their own (module docstring).
OWN_GROUP_OPS = frozenset({"winograd_input"})
# Injective ops whose group, like an anchor's, takes only an elementwise epilogue.
EPILOGUE_ONLY_OPS = frozenset({"winograd_output"})

# Ops reading at data-dependent indices (their second input), which the entry point
# checks in range before the group runs (ember.build): the indices must be stored.
_INDEXED_READS = frozenset({"gather", "gather_elements"})

# The largest expression (in graph nodes, a value read twice counted twice) a group's
# inlined elementwise and injective nodes may form; see the module docstring.
MAX_INLINED_SIZE = 64


class _Partition:
    """Groups under construction: node indices, kinds, tails and group dependencies."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.producers = graph.producers()
        self.readers = graph.consumers()
        self.graph_outputs = {value.name for value in graph.outputs}
        self.node_index = {node.name: i for i, node in enumerate(graph.nodes)}
        self.region_group: dict[str, int] = {}  # diamond source value -> the group it joined
        self.members: list[list[int]] = []
        self.kinds: list[GroupKind] = []
        self.anchors: list[int | None] = []
        self.tails: list[int] = []
        self.depends_on: list[set[int]] = []
        self.group_of_value: dict[str, int] = {}
        # Size of the expression a value inlines to within its group (1: stored or read).
        self.inlined_size: dict[str, int] = {}

    def only_reader(self, value: Value, node: Node) -> bool:
        """Whether `node` is the only reader of `value` and the graph does not output it."""
        readers = {reader.name for reader in self.readers[value.name]}
        return readers == {node.name} and value.name not in self.graph_outputs

    def start(self, index: int, kind: GroupKind, prologue: Sequence[int] = ()) -> None:
        group = len(self.members)
        self.members.append([])
        self.kinds.append(kind)
        self.anchors.append(index if kind == GroupKind.ANCHOR else None)
        self.tails.append(index)
        self.depends_on.append(set())
        for node in sorted(prologue):
            self._add(group, node)
        self._add(group, index)

    def join(self, group: int, index: int) -> None:
        self._add(group, index)
        self.tails[group] = index

    def _add(self, group: int, index: int) -> None:
        node = self.graph.nodes[index]
        size = 1 if index == self.anchors[group] else self._size_in(group, node)
        self.members[group].append(index)
        for value in node.inputs:
            source = self.group_of_value.get(value.name)
            if source is not None and source != group:
                self.depends_on[group].add(source)
        for value in node.outputs:
            self.group_of_value[value.name] = group
            self.inlined_size[value.name] = size

    def _size_in(self, group: int, node: Node) -> int:
        """The size of `node`'s expression were it inlined into `group`: its operands
        produced in the group count their own size, the others (loads) one each."""
        return 1 + sum(
            self.inlined_size[value.name] if self.group_of_value.get(value.name) == group else 1
            for value in node.inputs
        )

    def joinable_group(
        self, index: int, pattern: OpPattern, region_source: str | None = None
    ) -> int | None:
        """The group the elementwise/broadcast/injective node `index` may join, if any;
        `region_source`: the value whose diamond the node belongs to (`_find_regions`)."""
        node = self.graph.nodes[index]
        if region_source is not None:
            group = self._region_group(node, region_source)
            if group is not None and self._size_in(group, node) <= MAX_INLINED_SIZE:
                return group
        for value in node.inputs:
            group = self.group_of_value.get(value.name)
            if (
                group is not None
                and self._may_join(group, node, value, pattern)
                and self._size_in(group, node) <= MAX_INLINED_SIZE
            ):
                return group
        return None

    def _region_group(self, node: Node, source: str) -> int | None:
        """The group a diamond's node joins: the first node visited takes the region
        into the group whose tail produces `source` (when that group takes elementwise
        nodes); the others follow it there."""
        if source in self.region_group:
            return self.region_group[source]
        group = self.group_of_value.get(source)
        if group is None or self.kinds[group] == GroupKind.OPAQUE:
            return None
        tail = self.graph.nodes[self.tails[group]]
        if not any(value.name == source for value in tail.outputs):
            return None
        if self._would_cycle(group, node):
            return None
        self.region_group[source] = group
        return group

    def _may_join(self, group: int, node: Node, link: Value, pattern: OpPattern) -> bool:
        kind = self.kinds[group]
        tail = self.graph.nodes[self.tails[group]]
        if link not in tail.outputs or not self.only_reader(link, node):
            return False
        if node.op in _INDEXED_READS and link is node.inputs[1]:
            return False  # the indices are stored, so the run can check them first
        if kind == GroupKind.ANCHOR and tail.op in _PADDED_ANCHORS and _is_crop(node):
            return not self._would_cycle(group, node)  # cuts the padding off, see below
        if kind == GroupKind.OPAQUE or (kind == GroupKind.ANCHOR and pattern > OpPattern.BROADCAST):
            return False
        if pattern > OpPattern.BROADCAST and self.graph.nodes[self.members[group][0]].op in (
            EPILOGUE_ONLY_OPS
        ):
            return False
        if kind == GroupKind.ANCHOR and any(out.shape != link.shape for out in node.outputs):
            return False
        return not self._would_cycle(group, node)

    def _would_cycle(self, group: int, node: Node) -> bool:
        """Whether `node` joining `group` would make the groups cyclic: another group
        it reads depends on `group`."""
        others = {self.group_of_value.get(value.name) for value in node.inputs}
        return any(
            other is not None and other != group and self._reaches(other, group) for other in others
        )

    def _reaches(self, start: int, goal: int) -> bool:
        """Whether group `start` depends on group `goal`, directly or transitively."""
        stack, seen = [start], {start}
        while stack:
            current = stack.pop()
            if current == goal:
                return True
            for previous in self.depends_on[current] - seen:
                seen.add(previous)
                stack.append(previous)
        return False

    def groups(self) -> tuple[FusedGroup, ...]:
        """The finished groups in a valid execution order, named after their ops."""
        order = self._execution_order()
        taken: dict[str, int] = {}
        result = []
        for group in order:
            nodes = tuple(self.graph.nodes[i] for i in sorted(self.members[group]))
            name = _group_name(nodes, taken)
            result.append(self._finish(group, name, nodes))
        return tuple(result)

    def _execution_order(self) -> list[int]:
        """Groups sorted topologically by dependency, earliest-created first among
        those ready (creation follows the graph's node order, so the order is stable)."""
        waiting = [len(deps) for deps in self.depends_on]
        dependents: list[list[int]] = [[] for _ in self.members]
        for group, deps in enumerate(self.depends_on):
            for dep in deps:
                dependents[dep].append(group)
        ready = [group for group, count in enumerate(waiting) if count == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            group = heapq.heappop(ready)
            order.append(group)
            for dependent in dependents[group]:
                waiting[dependent] -= 1
                if waiting[dependent] == 0:
                    heapq.heappush(ready, dependent)
        assert len(order) == len(self.members), "fused groups depend on each other in a cycle"
        return order

    def _finish(self, group: int, name: str, nodes: tuple[Node, ...]) -> FusedGroup:
        produced = {value.name for node in nodes for value in node.outputs}
        node_names = {node.name for node in nodes}
        inputs: dict[str, Value] = {}
        for node in nodes:
            for value in node.inputs:
                if value.name not in produced:
                    inputs.setdefault(value.name, value)
        param_names = {value.name for value in self.graph.params}
        outputs = tuple(
            value
            for node in nodes
            for value in node.outputs
            if value.name in self.graph_outputs
            or any(reader.name not in node_names for reader in self.readers[value.name])
        )
        anchor_index = self.anchors[group]
        return FusedGroup(
            name=name,
            kind=self.kinds[group],
            anchor=None if anchor_index is None else self.graph.nodes[anchor_index],
            nodes=nodes,
            inputs=tuple(inputs.values()),
            params=tuple(value for value in inputs.values() if value.name in param_names),
            outputs=outputs,
        )


def _group_name(nodes: tuple[Node, ...], taken: dict[str, int]) -> str:
    """The ops joined by `_` (abbreviated after NAME_OPS), unique within the graph."""
    ops = [node.op for node in nodes]
    base = "_".join(ops[:NAME_OPS])
    if len(ops) > NAME_OPS:
        base += f"_and_{len(ops) - NAME_OPS}_more"
    count = taken.get(base, 0)
    taken[base] = count + 1
    return base if count == 0 else f"{base}_{count}"


def interpret_fused(fused: FusedGraph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run each group's subgraph in order with the reference interpreter; returns the
    graph's outputs by name, like `interpret` on the original graph."""
    graph = fused.graph
    env: dict[str, np.ndarray] = {value.name: fused.params[value.name] for value in graph.params}
    for value in graph.inputs:
        if value.name not in inputs:
            raise GraphError(f"input {value.name!r} was not given")
        env[value.name] = np.asarray(inputs[value.name])
    for group in fused.groups:
        feeds = {value.name: env[value.name] for value in group.data_inputs}
        env.update(interpret(group.as_graph(), fused.group_params(group), feeds))
    return {value.name: env[value.name] for value in graph.outputs}


def check_fused(fused: FusedGraph) -> None:
    """Raise `GraphError` unless the partition is sound: each node of the graph in
    exactly one group, at most one anchor per group, every group self-contained (its
    subgraph verifies) and reading only values computed by earlier groups."""
    graph = fused.graph
    seen: dict[str, str] = {}
    available = {value.name for value in (*graph.inputs, *graph.params)}
    for group in fused.groups:
        anchors = [node for node in group.nodes if get_op(node.op).pattern >= OpPattern.REDUCTION]
        if len(anchors) > 1 or (group.anchor is not None and anchors != [group.anchor]):
            raise GraphError(f"group {group.name!r} has anchors {[n.name for n in anchors]}")
        for node in group.nodes:
            if node.name in seen:
                raise GraphError(
                    f"node {node.name!r} is in groups {seen[node.name]!r} and {group.name!r}"
                )
            seen[node.name] = group.name
        missing = [value.name for value in group.inputs if value.name not in available]
        if missing:
            raise GraphError(f"group {group.name!r} reads {missing} before they are computed")
        verify(group.as_graph())
        available.update(value.name for value in group.outputs)
    left_out = [node.name for node in graph.nodes if node.name not in seen]
    if left_out:
        raise GraphError(f"nodes {left_out} are in no group")
    unproduced = [value.name for value in graph.outputs if value.name not in available]
    if unproduced:
        raise GraphError(f"graph outputs {unproduced} are produced by no group")


# Products whose weights `pack_weights` pads to whole vectors, with a `slice` after them
# cutting the padding off: the slice joins the anchor's group as its first epilogue
# node (the kernel keeps the padded columns in registers and stores only the others).
_PADDED_ANCHORS = frozenset({"conv_pack", "dense_pack"})


def _is_crop(node: Node) -> bool:
    """Whether `node` is a `slice` keeping the start of its input's last axis, whole
    along the others: it reads each element at its own indices."""
    attrs = node.attrs
    if node.op != "slice" or not isinstance(attrs, SliceAttrs):
        return False
    shape, kept = node.inputs[0].shape, node.outputs[0].shape
    return (
        all(begin == 0 for begin in attrs.begins)
        and all(step == 1 for step in attrs.steps)
        and tuple(kept[:-1]) == tuple(shape[:-1])
    )

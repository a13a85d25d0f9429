"""Algebraic simplification: a table of local rewrite rules run to a fixed point.

Each rule looks at one node (and, through the context, at the nodes producing its
inputs and at constant operands) and either forwards an existing value in place of the
node's output, or proposes a cheaper node computing the same output. Rules never
change a value's type, so the rest of the graph is unaffected by a rewrite.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ember.graph.ir import (
    Attrs,
    Graph,
    Node,
    Params,
    Value,
    prune_params,
    remove_dead_nodes,
    rename_values,
)
from ember.graph.ops.attrs import ReshapeAttrs, TransposeAttrs
from ember.graph.passes.rewrite import keeps_element_order, make_node


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A replacement node: `op(inputs)` with `attrs`, computing the same output."""

    op: str
    inputs: tuple[Value, ...]
    attrs: Attrs


@dataclass(frozen=True, slots=True)
class Context:
    """What a rule may look at beyond its node: producers of the values of the graph
    being rebuilt, and the arrays of constant values."""

    producers: Mapping[str, Node]
    constants: Mapping[str, np.ndarray]

    def producer(self, value: Value, op: str) -> Node | None:
        """The node producing `value`, if it is an `op` node."""
        node = self.producers.get(value.name)
        return node if node is not None and node.op == op else None

    def constant(self, value: Value) -> np.ndarray | None:
        return self.constants.get(value.name)


# A rule returns the value that replaces the node's output, a cheaper node, or None.
RuleFn = Callable[[Node, Context], Value | Rewrite | None]


def _operand(node: Node, context: Context) -> Value | None:
    return node.inputs[0]


def _operand_if_type_kept(node: Node, context: Context) -> Value | None:
    (operand,) = node.inputs
    return operand if operand.type == node.output.type else None


def _merge_reshapes(node: Node, context: Context) -> Rewrite | None:
    inner = context.producer(node.inputs[0], "reshape")
    return Rewrite("reshape", inner.inputs, node.attrs) if inner else None


def _identity_transpose(node: Node, context: Context) -> Value | None:
    attrs = node.attrs
    assert isinstance(attrs, TransposeAttrs)
    return node.inputs[0] if attrs.perm == tuple(range(len(attrs.perm))) else None


def _merge_transposes(node: Node, context: Context) -> Rewrite | None:
    inner = context.producer(node.inputs[0], "transpose")
    if inner is None:
        return None
    first, second = inner.attrs, node.attrs
    assert isinstance(first, TransposeAttrs) and isinstance(second, TransposeAttrs)
    # Output axis i of the second reads its input axis second[i], which the first read
    # from x's axis first[second[i]].
    perm = tuple(first.perm[axis] for axis in second.perm)
    return Rewrite("transpose", inner.inputs, TransposeAttrs(perm))


def _transpose_of_unit_axes(node: Node, context: Context) -> Rewrite | None:
    attrs = node.attrs
    assert isinstance(attrs, TransposeAttrs)
    if not keeps_element_order(node.inputs[0].shape, attrs.perm):
        return None
    return Rewrite("reshape", node.inputs, ReshapeAttrs(node.output.shape))


def _neutral_operand(neutral: int, sides: tuple[int, ...]) -> RuleFn:
    """x op c -> x where c is a constant of `neutral`s that does not broadcast x."""

    def rule(node: Node, context: Context) -> Value | None:
        for side in sides:
            array, other = context.constant(node.inputs[side]), node.inputs[1 - side]
            if array is not None and other.type == node.output.type and np.all(array == neutral):
                return other
        return None

    return rule


@dataclass(frozen=True, slots=True)
class Rule:
    """A rewrite `apply` tried on every node of `op`."""

    op: str
    apply: RuleFn


RULES: tuple[Rule, ...] = (
    Rule("identity", _operand),  # identity(x) -> x
    Rule("cast", _operand_if_type_kept),  # cast(x: T, T) -> x
    Rule("reshape", _operand_if_type_kept),  # reshape(x, shape(x)) -> x
    Rule("reshape", _merge_reshapes),  # reshape(reshape(x, s), t) -> reshape(x, t)
    Rule("transpose", _identity_transpose),  # transpose(x, (0, 1, ..., n-1)) -> x
    Rule("transpose", _merge_transposes),  # transpose(transpose(x, p), q) -> transpose(x, p∘q)
    Rule("transpose", _transpose_of_unit_axes),  # transpose moving only 1-axes -> reshape
    Rule("add", _neutral_operand(0, sides=(0, 1))),  # x + 0 -> x, 0 + x -> x
    Rule("subtract", _neutral_operand(0, sides=(1,))),  # x - 0 -> x
    Rule("multiply", _neutral_operand(1, sides=(0, 1))),  # x * 1 -> x, 1 * x -> x
    Rule("divide", _neutral_operand(1, sides=(1,))),  # x / 1 -> x
)

_RULES_BY_OP: dict[str, tuple[RuleFn, ...]] = {
    op: tuple(rule.apply for rule in RULES if rule.op == op) for op in {r.op for r in RULES}
}

# Every rule shrinks the graph or shortens a chain, so a fixed point comes quickly;
# running into this bound means two rules undo each other.
_MAX_SWEEPS = 100


def simplify(graph: Graph, params: Mapping[str, np.ndarray]) -> tuple[Graph, Params]:
    """Apply `RULES` until none fires, then drop dead nodes and unused params.

    Pre: `graph` verifies; `params` holds the arrays of its params (constant operands
    are read from it).
    Post: no rule of `RULES` applies to any node; no node is dead; graph outputs keep
    their names (an `identity` stays only where an output would otherwise be another
    output, a graph input or a param under a different name); every value computes
    what it did before. The inputs are not modified.
    """
    constants = {v.name: np.asarray(params[v.name]) for v in graph.params if v.name in params}
    current = graph
    for _ in range(_MAX_SWEEPS):
        simplified = _sweep(current, constants)
        if simplified == current:
            return prune_params(current, params)
        current = simplified
    raise AssertionError(f"simplify did not reach a fixed point in {_MAX_SWEEPS} sweeps")


def _sweep(graph: Graph, constants: Mapping[str, np.ndarray]) -> Graph:
    """One pass over the nodes in order, rewriting each node as far as the rules go."""
    forwarded: dict[str, Value] = {}
    producers: dict[str, Node] = {}
    nodes: list[Node] = []
    context = Context(producers, constants)
    for original in graph.nodes:
        node = _substitute_inputs(original, forwarded)
        result = _rewrite_node(node, context)
        if isinstance(result, Value):
            forwarded[node.output.name] = result
            continue
        nodes.append(result)
        producers.update((value.name, result) for value in result.outputs)
    rebuilt = graph.replace(
        nodes=tuple(nodes), outputs=tuple(forwarded.get(v.name, v) for v in graph.outputs)
    )
    return remove_dead_nodes(_restore_output_names(rebuilt, graph))


def _substitute_inputs(node: Node, forwarded: Mapping[str, Value]) -> Node:
    if not any(value.name in forwarded for value in node.inputs):
        return node
    inputs = tuple(forwarded.get(value.name, value) for value in node.inputs)
    return Node(node.op, inputs, node.outputs, node.attrs, node.name)


def _rewrite_node(node: Node, context: Context) -> Node | Value:
    """Apply the rules to `node` until one forwards a value or none fires."""
    rules = _RULES_BY_OP.get(node.op, ())
    fired = True
    while fired:
        fired = False
        for rule in rules:
            result = rule(node, context)
            if isinstance(result, Value):
                return result
            if isinstance(result, Rewrite):
                node = make_node(
                    result.op,
                    result.inputs,
                    result.attrs,
                    name=node.name,
                    output_names=[node.output.name],
                )
                rules, fired = _RULES_BY_OP.get(node.op, ()), True
                break
    return node


def _restore_output_names(rebuilt: Graph, original: Graph) -> Graph:
    """Give graph outputs their original names back after values were forwarded.

    A forwarded value made by a node is renamed to the output's name; one that is a
    graph input, a param, or already another output keeps its name, and an identity
    node (named as the original producer) recreates the output.
    """
    fixed_names = {v.name for v in rebuilt.inputs} | {v.name for v in rebuilt.params}
    for new, old in zip(rebuilt.outputs, original.outputs, strict=True):
        if new.name == old.name:
            fixed_names.add(new.name)
    original_producers = original.producers()
    new_names: dict[str, str] = {}
    identities: list[Node] = []
    for new, old in zip(rebuilt.outputs, original.outputs, strict=True):
        if new.name == old.name or new_names.get(new.name) == old.name:
            continue
        if new.name not in fixed_names and new.name not in new_names:
            new_names[new.name] = old.name
            continue
        name = original_producers[old.name].name
        identities.append(make_node("identity", [new], name=name, output_names=[old.name]))
    with_identities = rebuilt.replace(nodes=rebuilt.nodes + tuple(identities))
    renamed = rename_values(with_identities, new_names)
    return renamed.replace(outputs=tuple(Value(v.name, v.type) for v in original.outputs))

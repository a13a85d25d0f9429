"""Algebraic simplification: a table of local rewrite rules run to a fixed point.

Each rule looks at one node (and, through the context, at the nodes producing its
inputs and at constant operands) and either forwards an existing value in place of the
node's output, or proposes cheaper nodes computing the same output (a replacement node
whose operands may themselves be new nodes: `x ** 3` becomes `(x * x) * x`). Rules
never change a value's type, so the rest of the graph is unaffected by a rewrite.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ember.graph.ir import (
    Attrs,
    Graph,
    NoAttrs,
    Node,
    Params,
    Value,
    prune_params,
    remove_dead_nodes,
    rename_values,
)
from ember.graph.ops.attrs import AxisAttrs, ClipAttrs, ReshapeAttrs, SliceAttrs, TransposeAttrs
from ember.graph.passes.rewrite import keeps_element_order, make_node


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A replacement node: `op(inputs)` with `attrs`, computing the same output. An
    input that is itself a `Rewrite` becomes a new node in front of this one."""

    op: str
    inputs: tuple[Value | Rewrite, ...]
    attrs: Attrs = field(default_factory=NoAttrs)


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


def _drop_empty_pieces(node: Node, context: Context) -> Value | Rewrite | None:
    """A concat's empty inputs add nothing (and a kernel would have nothing to read)."""
    pieces = tuple(value for value in node.inputs if value.type.size > 0)
    if not pieces or len(pieces) == len(node.inputs):
        return None
    return pieces[0] if len(pieces) == 1 else Rewrite("concat", pieces, node.attrs)


def _power_of_constant_exponent(node: Node, context: Context) -> Value | Rewrite | None:
    """x ** c for a float x and a constant c of one value that does not broadcast x, by
    multiplies, a reciprocal or a square root, which are vector instructions, where
    `pow` is a call per element. x ** 2 and x ** -1 are as exact as `pow` (one
    rounding); x ** 3, x ** 4 and x ** -2 round twice or three times (1-2 ulp). x ** 0.5
    differs from C's `pow` only at -0 (sqrt keeps the sign) and -inf (NaN, not +inf)."""
    base, exponent = node.inputs
    array = context.constant(exponent)
    if array is None or array.size == 0 or base.type != node.output.type:
        return None
    if not np.issubdtype(np.dtype(base.dtype), np.floating) or np.any(array != array.flat[0]):
        return None
    square = Rewrite("multiply", (base, base))
    match float(array.flat[0]):
        case 1.0:
            return base
        case 2.0:
            return square
        case 3.0:
            return Rewrite("multiply", (square, base))
        case 4.0:
            return Rewrite("multiply", (square, square))
        case 0.5:
            return Rewrite("sqrt", (base,))
        case -1.0:
            return Rewrite("reciprocal", (base,))
        case -2.0:
            return Rewrite("reciprocal", (square,))
    return None


def _integer_round_trip(node: Node, context: Context) -> Value | None:
    """cast(cast(x, integer type), type of x) -> x where x is a float that is already an
    integer within the integer type's range: a clip to integer bounds inside the range,
    of a value built from round / floor / ceil / sign and integer constants. This is a
    quantize followed by a dequantize (`ember.frontend.quantization`); without the
    round trip through uint8 the whole chain stays float and fuses into the epilogue of
    the operator before it. (A NaN stays NaN, where the casts would have made it 0.)"""
    inner = context.producer(node.inputs[0], "cast")
    if inner is None:
        return None
    (x,) = inner.inputs
    integer = np.dtype(inner.output.dtype)
    if x.type != node.output.type or not np.issubdtype(integer, np.integer):
        return None
    clip = context.producer(x, "clip")
    if clip is None or not isinstance(clip.attrs, ClipAttrs):
        return None
    low, high = clip.attrs.low, clip.attrs.high
    info = np.iinfo(integer)
    if low is None or high is None or not (info.min <= low <= high <= info.max):
        return None
    if low != int(low) or high != int(high):
        return None
    return x if _is_integral(clip.inputs[0], context, depth=4) else None


def _gather_of_constant_run(node: Node, context: Context) -> Rewrite | None:
    """gather(x, c, axis) -> reshape(slice(x)) for constant indices `c` that step
    evenly through the axis (one index, or i, i + s, i + 2s, ...; attention's split of a
    projection into q, k and v takes index 0, 1 and 2): a slice is a pure index map that
    kernels read through (`fuse`'s prologues), where a gather reads its index at run
    time. Indices out of range are left to the gather's run-time check."""
    data, indices = node.inputs
    array = context.constant(indices)
    attrs = node.attrs
    assert isinstance(attrs, AxisAttrs)
    if array is None or array.size == 0:
        return None
    axis = attrs.axis if attrs.axis >= 0 else attrs.axis + data.type.ndim
    extent = data.shape[axis]
    flat = array.reshape(-1).astype(np.int64)
    if flat.min() < -extent or flat.max() >= extent:
        return None
    flat = np.where(flat < 0, flat + extent, flat)
    step = int(flat[1] - flat[0]) if flat.size > 1 else 1
    if step < 1 or np.any(np.diff(flat) != step):
        return None
    begin = int(flat[0])
    end = begin + (flat.size - 1) * step + 1
    window = Rewrite("slice", (data,), SliceAttrs.along(data.shape, axis, begin, end, step))
    return Rewrite("reshape", (window,), ReshapeAttrs(node.output.shape))


def _scalar_factor_after_matmul(node: Node, context: Context) -> Rewrite | None:
    """matmul(a * s, b) -> matmul(a, b) * s (and the same for b) for a constant `s` of
    one element that does not broadcast `a`: the scale moves from an operand, where it
    is a stored product or a multiply per loaded element, to the matmul's output, where
    it joins the epilogue. Attention scales both q and k by sqrt(1/sqrt(d)) (torch's
    scaled_dot_product_attention as ONNX exports it). The rounding moves: products of
    scaled operands against a scaled sum (a few ulp of each output)."""
    for side in (0, 1):
        scaled = context.producer(node.inputs[side], "multiply")
        if scaled is None:
            continue
        for factor_side in (0, 1):
            factor, operand = scaled.inputs[factor_side], scaled.inputs[1 - factor_side]
            array = context.constant(factor)
            if (
                array is None
                or not np.issubdtype(array.dtype, np.floating)
                or array.size != 1
                or array.ndim > node.output.type.ndim
                or operand.type != scaled.output.type
            ):
                continue
            operands = list(node.inputs)
            operands[side] = operand
            return Rewrite("multiply", (Rewrite("matmul", tuple(operands)), factor))
    return None


# Ops whose float result is an integer whenever their operands are.
_INTEGRAL_ALWAYS = ("round", "floor", "ceil", "sign")
_INTEGRAL_IF_OPERANDS = ("add", "subtract", "multiply", "negative", "abs", "clip")


def _is_integral(value: Value, context: Context, depth: int) -> bool:
    """Whether `value` holds integers (as floats): a finite integral constant, or a few
    steps of integer-preserving ops from round / floor / ceil / sign."""
    array = context.constant(value)
    if array is not None:
        return bool(np.all(np.isfinite(array)) and np.all(array == np.round(array)))
    node = context.producers.get(value.name)
    if node is None or depth == 0:
        return False
    if node.op in _INTEGRAL_ALWAYS:
        return True
    if node.op == "clip" and isinstance(node.attrs, ClipAttrs):
        bounds = [b for b in (node.attrs.low, node.attrs.high) if b is not None]
        if any(b != int(b) for b in bounds):
            return False
    return node.op in _INTEGRAL_IF_OPERANDS and all(
        _is_integral(operand, context, depth - 1) for operand in node.inputs
    )


@dataclass(frozen=True, slots=True)
class Rule:
    """A rewrite `apply` tried on every node of `op`."""

    op: str
    apply: RuleFn


RULES: tuple[Rule, ...] = (
    Rule("identity", _operand),  # identity(x) -> x
    Rule("cast", _operand_if_type_kept),  # cast(x: T, T) -> x
    Rule("cast", _integer_round_trip),  # cast(cast(clip(round(x)), int8), float32) -> ...
    Rule("reshape", _operand_if_type_kept),  # reshape(x, shape(x)) -> x
    Rule("reshape", _merge_reshapes),  # reshape(reshape(x, s), t) -> reshape(x, t)
    Rule("transpose", _identity_transpose),  # transpose(x, (0, 1, ..., n-1)) -> x
    Rule("transpose", _merge_transposes),  # transpose(transpose(x, p), q) -> transpose(x, p∘q)
    Rule("transpose", _transpose_of_unit_axes),  # transpose moving only 1-axes -> reshape
    Rule("add", _neutral_operand(0, sides=(0, 1))),  # x + 0 -> x, 0 + x -> x
    Rule("subtract", _neutral_operand(0, sides=(1,))),  # x - 0 -> x
    Rule("multiply", _neutral_operand(1, sides=(0, 1))),  # x * 1 -> x, 1 * x -> x
    Rule("divide", _neutral_operand(1, sides=(1,))),  # x / 1 -> x
    Rule("power", _power_of_constant_exponent),  # x ** 2 -> x * x, x ** 0.5 -> sqrt(x), ...
    Rule("concat", _drop_empty_pieces),  # concat(x, empty, y) -> concat(x, y)
    Rule("gather", _gather_of_constant_run),  # gather(x, [i, i+s, ...]) -> slice(x)
    Rule("matmul", _scalar_factor_after_matmul),  # matmul(a * s, b) -> matmul(a, b) * s
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
    names = _FreshNames(graph)
    for original in graph.nodes:
        node = _substitute_inputs(original, forwarded)
        new_nodes, forward = _rewrite_node(node, context, names)
        nodes.extend(new_nodes)
        producers.update((value.name, new) for new in new_nodes for value in new.outputs)
        if forward is not None:
            forwarded[node.output.name] = forward
    rebuilt = graph.replace(
        nodes=tuple(nodes), outputs=tuple(forwarded.get(v.name, v) for v in graph.outputs)
    )
    return remove_dead_nodes(_restore_output_names(rebuilt, graph))


def _substitute_inputs(node: Node, forwarded: Mapping[str, Value]) -> Node:
    if not any(value.name in forwarded for value in node.inputs):
        return node
    inputs = tuple(forwarded.get(value.name, value) for value in node.inputs)
    return Node(node.op, inputs, node.outputs, node.attrs, node.name)


class _FreshNames:
    """Fresh names for the nodes a rewrite adds in front of a node (each node and its
    value share one), clear of every value and node name of the graph."""

    def __init__(self, graph: Graph) -> None:
        self.taken = {v.name for v in (*graph.inputs, *graph.params)}
        self.taken.update(v.name for node in graph.nodes for v in node.outputs)
        self.taken.update(node.name for node in graph.nodes)

    def fresh(self, base: str) -> str:
        index = 0
        while f"{base}.{index}" in self.taken:
            index += 1
        self.taken.add(name := f"{base}.{index}")
        return name


def _rewrite_node(
    node: Node, context: Context, names: _FreshNames
) -> tuple[list[Node], Value | None]:
    """Apply the rules to `node` until one forwards a value or none fires: the nodes
    to keep, and the value standing for the node's output (None: the last node
    computes it). Nodes a rewrite added stay when a later rule forwards a value (x ** 3
    of a constant x of ones: (x * x) * x, then x * 1 -> x * x)."""
    added: list[Node] = []
    rules = _RULES_BY_OP.get(node.op, ())
    fired = True
    while fired:
        fired = False
        for rule in rules:
            result = rule(node, context)
            if isinstance(result, Value):
                return added, result
            if isinstance(result, Rewrite):
                inputs = tuple(_materialize(x, node, names, added) for x in result.inputs)
                node = make_node(
                    result.op, inputs, result.attrs, name=node.name, output_names=[node.output.name]
                )
                rules, fired = _RULES_BY_OP.get(node.op, ()), True
                break
    return [*added, node], None


def _materialize(
    operand: Value | Rewrite, node: Node, names: _FreshNames, added: list[Node]
) -> Value:
    """`operand` as a value: a nested `Rewrite` becomes a node appended to `added` (once
    per distinct rewrite, so `square * square` squares once), named after `node`."""
    if isinstance(operand, Value):
        return operand
    inputs = tuple(_materialize(inner, node, names, added) for inner in operand.inputs)
    for existing in added:
        if (existing.op, existing.inputs, existing.attrs) == (operand.op, inputs, operand.attrs):
            return existing.output
    name = names.fresh(node.output.name)
    added.append(make_node(operand.op, inputs, operand.attrs, name=name, output_names=[name]))
    return added[-1].output


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

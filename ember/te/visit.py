"""Generic traversal of scalar expressions: children, rebuild, substitute, collect.

Every pass over expressions (printing aside) is written with `map_expr`, a bottom-up
rewrite that rebuilds a node only when a child changed, so unchanged subtrees keep
their identity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from ember.te.expr import (
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Reduce,
    Select,
    TensorRead,
    Unary,
    Var,
)
from ember.te.tensor import Tensor


def children(expr: Expr) -> tuple[Expr, ...]:
    """Direct sub-expressions, in a fixed order that `rebuild` accepts back."""
    match expr:
        case Binary(_, a, b):
            return (a, b)
        case Unary(_, a):
            return (a,)
        case Select(condition, true_value, false_value):
            return (condition, true_value, false_value)
        case Cast(_, value):
            return (value,)
        case Call(_, args):
            return args
        case TensorRead(_, indices):
            return indices
        case Reduce(_, source, _):
            return (source,)
        case Var() | Const():
            return ()
    # Loop-IR expression nodes (Load, Ramp, Broadcast) extend this through their own
    # `children`/`rebuild` methods, so this module needs no import of loop IR.
    own = getattr(expr, "expr_children", None)
    if own is None:
        raise TypeError(f"unknown expression node {type(expr).__name__}")
    return tuple(own())


def rebuild(expr: Expr, new_children: tuple[Expr, ...]) -> Expr:
    """`expr` with its children replaced (same order as `children`)."""
    match expr:
        case Binary(op, _, _):
            return Binary(op, new_children[0], new_children[1])
        case Unary(op, _):
            return Unary(op, new_children[0])
        case Select():
            return Select(new_children[0], new_children[1], new_children[2])
        case Cast(dtype, _):
            return Cast(dtype, new_children[0])
        case Call(name, _):
            return Call(name, new_children)
        case TensorRead(tensor, _):
            return TensorRead(tensor, new_children)
        case Reduce(combiner, _, axes):
            return Reduce(combiner, new_children[0], axes)
        case Var() | Const():
            return expr
    return expr.with_expr_children(new_children)  # type: ignore[attr-defined]


def map_expr(expr: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Bottom-up rewrite: children first, then `fn(node)`; None keeps the node."""
    old = children(expr)
    new = tuple(map_expr(child, fn) for child in old)
    node = expr if all(a is b for a, b in zip(old, new, strict=True)) else rebuild(expr, new)
    replaced = fn(node)
    return node if replaced is None else replaced


def walk(expr: Expr) -> Iterator[Expr]:
    """Pre-order traversal of every node."""
    yield expr
    for child in children(expr):
        yield from walk(child)


def substitute(expr: Expr, mapping: Mapping[Var, Expr]) -> Expr:
    """Replace variables by expressions."""
    if not mapping:
        return expr
    return map_expr(expr, lambda node: mapping.get(node) if isinstance(node, Var) else None)


def free_vars(expr: Expr) -> set[Var]:
    return {node for node in walk(expr) if isinstance(node, Var)}


def tensors_read(expr: Expr) -> tuple[Tensor, ...]:
    """Tensors read by `expr`, in first-read order, each once (by identity)."""
    seen: dict[int, Tensor] = {}
    for node in walk(expr):
        if isinstance(node, TensorRead) and id(node.tensor) not in seen:
            seen[id(node.tensor)] = node.tensor
    return tuple(seen.values())


# Math functions that C and NumPy both compute correctly rounded (the same result bit
# for bit), and of them those that round a float to an integer value.
ROUNDING_CALLS = frozenset({"round", "floor", "ceil"})
EXACT_CALLS = ROUNDING_CALLS | {"abs", "sqrt", "fmod"}


def float_rounding(exprs: Iterable[Expr]) -> tuple[bool, bool]:
    """(rounds, inexact) over `exprs`: whether they round a float to an integer value
    (a rounding call, or a cast of a float, scalar or vector, to an integer type), and
    whether they call a math function outside EXACT_CALLS (exp, tanh, ...), which
    generated code and NumPy may round differently in the last bit. Quantized kernels
    requantize this way (ember.codegen.c, ember.autoschedule.reference)."""
    rounds = inexact = False
    for expr in exprs:
        for node in walk(expr):
            match node:
                case Call(name, _):
                    rounds |= name in ROUNDING_CALLS
                    inexact |= name not in EXACT_CALLS
                case Cast(dtype, value) if value.dtype.startswith(("float", "bfloat")):
                    rounds |= dtype.startswith(("int", "uint"))
    return rounds, inexact

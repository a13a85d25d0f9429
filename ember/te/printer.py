"""Text form of expressions and compute DAGs, in the form users know from the seed:

conv2d_nhwc(nn, yy, xx, ff) += (pad_temp[nn, (yy + ry), (xx + rx), rc]*placeholder[ry, rx, rc, ff])
"""

from __future__ import annotations

from ember.te.expr import (
    Binary,
    BinaryOp,
    Call,
    Cast,
    Combiner,
    Const,
    Expr,
    Reduce,
    Select,
    TensorRead,
    Unary,
    UnaryOp,
    Var,
)
from ember.te.tensor import ComputeOp, Operation, PlaceholderOp

# Operators printed as functions rather than infix.
_FUNCTION_STYLE = {
    BinaryOp.FLOOR_DIV: "floordiv",
    BinaryOp.FLOOR_MOD: "floormod",
    BinaryOp.MIN: "min",
    BinaryOp.MAX: "max",
}
# Infix operators printed without surrounding spaces (as the seed prints products).
_TIGHT = {BinaryOp.MUL, BinaryOp.DIV}

REDUCE_ASSIGN = {
    Combiner.SUM: "+=",
    Combiner.MAX: "max=",
    Combiner.MIN: "min=",
    Combiner.PROD: "*=",
}


def format_const(value: Const) -> str:
    if value.dtype == "bool":
        return "True" if value.value else "False"
    if value.dtype.startswith("float"):
        number = float(value.value)
        text = repr(number)
        if text.endswith(".0"):
            text = text[:-2]
        return (
            f"{text}f"
            if value.dtype == "float32"
            else f"{text}{'h' if value.dtype == 'float16' else ''}"
        )
    return str(int(value.value))


def format_expr(expr: Expr) -> str:
    match expr:
        case Var(name):
            return name
        case Const():
            return format_const(expr)
        case Binary(op, a, b) if op in _FUNCTION_STYLE:
            return f"{_FUNCTION_STYLE[op]}({format_expr(a)}, {format_expr(b)})"
        case Binary(op, a, b):
            space = "" if op in _TIGHT else " "
            return f"({format_expr(a)}{space}{op.value}{space}{format_expr(b)})"
        case Unary(UnaryOp.NEG, a):
            return f"(-{format_expr(a)})"
        case Unary(UnaryOp.NOT, a):
            return f"!{format_expr(a)}"
        case Select(condition, true_value, false_value):
            return (
                f"tir.if_then_else({format_expr(condition)}, {format_expr(true_value)}, "
                f"{format_expr(false_value)})"
            )
        case Cast(dtype, value):
            return f"{dtype}({format_expr(value)})"
        case Call(name, args):
            return f"tir.{name}({', '.join(format_expr(a) for a in args)})"
        case TensorRead(tensor, indices):
            return f"{tensor.name}[{', '.join(format_expr(i) for i in indices)}]"
        case Reduce(combiner, source, axes):
            names = ", ".join(axis.name for axis in axes)
            return f"reduce_{combiner.value}({format_expr(source)}, axis=[{names}])"
    own = getattr(expr, "format", None)
    if own is None:
        raise TypeError(f"cannot print {type(expr).__name__}")
    return str(own(format_expr))


def format_operation(op: Operation) -> str:
    """One line of a ComputeDAG printout."""
    if isinstance(op, PlaceholderOp):
        return f"{op.name} = PLACEHOLDER [{', '.join(str(d) for d in op.shape)}]"
    assert isinstance(op, ComputeOp)
    axes = ", ".join(axis.name for axis in op.axes)
    if isinstance(op.body, Reduce):
        return f"{op.name}({axes}) {REDUCE_ASSIGN[op.body.combiner]} {format_expr(op.body.source)}"
    return f"{op.name}({axes}) = {format_expr(op.body)}"

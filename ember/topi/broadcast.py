"""Broadcasting ops: the binary ops of `ember.graph.ops.math`, `where` and
`broadcast_to`. Operands are read with NumPy broadcasting, so a bias of shape
[1, 1, 1, C] added to an NHWC tensor prints as

    T_add(ax0, ax1, ax2, ax3) = (conv2d_nhwc[ax0, ax1, ax2, ax3] + placeholder[ax0, 0, 0, ax3])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ember.graph.ir import Attrs, TensorType
from ember.te import (
    Expr,
    Tensor,
    call,
    cast,
    compute,
    equal,
    logical_and,
    logical_or,
    maximum,
    minimum,
    not_equal,
    select,
)
from ember.topi.common import BROADCAST, Declaration, axis_names, broadcast_read, is_float, typed

BinaryFn = Callable[[Expr, Expr], Expr]


def _power(base: Expr, exponent: Expr) -> Expr:
    """The base's dtype (ONNX Pow); integers go through float64 like C's pow."""
    if is_float(base.dtype):
        return call("pow", base, cast(base.dtype, exponent))
    return cast(base.dtype, call("pow", cast("float64", base), cast("float64", exponent)))


def _fmod(a: Expr, b: Expr) -> Expr:
    """C's fmod: the remainder of truncating division, with the dividend's sign."""
    if is_float(a.dtype):
        return call("fmod", a, b)
    return a - b * (a / b)  # integer `/` truncates toward zero


BINARY: dict[str, BinaryFn] = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b,  # truncating for integers, as ONNX Div
    "power": _power,
    "maximum": maximum,
    "minimum": minimum,
    "mod": _fmod,
    "floor_mod": lambda a, b: a % b,
    "equal": equal,
    "less": lambda a, b: a < b,
    "less_equal": lambda a, b: a <= b,
    "greater": lambda a, b: a > b,
    "greater_equal": lambda a, b: a >= b,
    "logical_and": logical_and,
    "logical_or": logical_or,
    "logical_xor": not_equal,
    "prelu": lambda x, slope: select(x < typed(0, x.dtype), slope * x, x),
}


def broadcast_compute(
    name: str, operands: Sequence[Tensor], shape: Sequence[int], fn: Callable[..., Expr]
) -> Tensor:
    """`T_<name>(ax...) = fn(operand reads...)`, each operand broadcast to `shape`."""

    def element(*ax: Expr) -> Expr:
        return fn(*(broadcast_read(t, shape, ax) for t in operands))

    return compute(
        shape, element, name=f"T_{name}", tag=BROADCAST, axis_names=axis_names(len(shape))
    )


def _binary(name: str) -> Declaration:
    def declare(
        inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
    ) -> list[Tensor]:
        return [broadcast_compute(name, inputs, outputs[0].shape, BINARY[name])]

    return declare


def _where(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    return [broadcast_compute("where", inputs, outputs[0].shape, select)]


def _broadcast_to(
    inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
) -> list[Tensor]:
    return [broadcast_compute("broadcast_to", inputs, outputs[0].shape, lambda x: x)]


DECLARATIONS: dict[str, Declaration] = {
    **{name: _binary(name) for name in BINARY},
    "where": _where,
    "broadcast_to": _broadcast_to,
}

"""Scalar expressions: the one expression language of tensor expressions and loop IR.

Nodes are frozen dataclasses with structural equality and hashing. Python operators
build arithmetic (`a + b`, `a * 2`, `a // b` is floor division, `a % b` floor modulo,
`-a`, and `<`, `<=`, `>`, `>=` build comparisons); equality and logic have named
constructors (`equal`, `not_equal`, `logical_and`, ...) because `==` is structural
equality of expressions.

Integer index arithmetic uses dtype "int64"; data uses the tensor's dtype.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from ember.te.tensor import IterVar, Tensor

INDEX_DTYPE = "int64"

ExprLike = Union["Expr", "IterVar", int, float, bool]


def _bool_like(dtype: str) -> str:
    """The dtype of a comparison of `dtype` values: "bool", or "boolx8" for 8 lanes."""
    _, separator, lanes = dtype.partition("x")
    return f"boolx{lanes}" if separator else "bool"


class Expr:
    """Base of every scalar expression; subclasses define `dtype`."""

    __slots__ = ()

    @property
    def dtype(self) -> str:
        raise NotImplementedError

    # Arithmetic and ordering build expressions; `==` stays structural equality.
    def __add__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.ADD, self, other)

    def __radd__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.ADD, other, self)

    def __sub__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.SUB, self, other)

    def __rsub__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.SUB, other, self)

    def __mul__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.MUL, self, other)

    def __rmul__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.MUL, other, self)

    def __truediv__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.DIV, self, other)

    def __rtruediv__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.DIV, other, self)

    def __floordiv__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.FLOOR_DIV, self, other)

    def __rfloordiv__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.FLOOR_DIV, other, self)

    def __mod__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.FLOOR_MOD, self, other)

    def __rmod__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.FLOOR_MOD, other, self)

    def __neg__(self) -> Expr:
        return Unary(UnaryOp.NEG, self)

    def __lt__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.LT, self, other)

    def __le__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.LE, self, other)

    def __gt__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.GT, self, other)

    def __ge__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.GE, self, other)

    def __str__(self) -> str:
        from ember.te.printer import format_expr

        return format_expr(self)


@dataclass(frozen=True, slots=True)
class Var(Expr):
    """A loop or index variable; variables with the same name and dtype are the same."""

    name: str
    var_dtype: str = INDEX_DTYPE

    @property
    def dtype(self) -> str:
        return self.var_dtype


@dataclass(frozen=True, slots=True)
class Const(Expr):
    """A literal: int, float or bool, with its dtype."""

    value: int | float | bool
    const_dtype: str = INDEX_DTYPE

    @property
    def dtype(self) -> str:
        return self.const_dtype


class BinaryOp(enum.Enum):
    """Binary operators, grouped: arithmetic, then comparisons, then logic."""

    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"  # true division for floats; C division (truncating) for ints is not used
    FLOOR_DIV = "//"
    FLOOR_MOD = "%"
    MIN = "min"
    MAX = "max"
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    AND = "&&"
    OR = "||"

    @property
    def is_comparison(self) -> bool:
        return self in COMPARISONS

    @property
    def is_logical(self) -> bool:
        return self in (BinaryOp.AND, BinaryOp.OR)


COMPARISONS = frozenset(
    {BinaryOp.EQ, BinaryOp.NE, BinaryOp.LT, BinaryOp.LE, BinaryOp.GT, BinaryOp.GE}
)


_BOOLEAN_RESULTS = COMPARISONS | {BinaryOp.AND, BinaryOp.OR}


@dataclass(frozen=True, slots=True)
class Binary(Expr):
    op: BinaryOp
    a: Expr
    b: Expr
    # Computed once: index arithmetic nests Binary nodes deep, and the backends ask
    # each node's dtype many times (27% of a candidate's lowering when recomputed).
    _dtype: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        dtype = self.a.dtype
        if self.op in _BOOLEAN_RESULTS:
            dtype = _bool_like(dtype)
        object.__setattr__(self, "_dtype", dtype)

    @property
    def dtype(self) -> str:
        return self._dtype


class UnaryOp(enum.Enum):
    NEG = "-"
    NOT = "!"


@dataclass(frozen=True, slots=True)
class Unary(Expr):
    op: UnaryOp
    a: Expr

    @property
    def dtype(self) -> str:
        return _bool_like(self.a.dtype) if self.op is UnaryOp.NOT else self.a.dtype


@dataclass(frozen=True, slots=True)
class Select(Expr):
    """`condition ? true_value : false_value`, evaluating only the branch taken (so a
    padded read may guard an out-of-bounds index; vectorised code must keep that)."""

    condition: Expr
    true_value: Expr
    false_value: Expr

    @property
    def dtype(self) -> str:
        return self.true_value.dtype


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    target_dtype: str
    value: Expr

    @property
    def dtype(self) -> str:
        return self.target_dtype


# Math functions a Call may name, with their arity. Codegen maps each to C.
MATH_FUNCTIONS = {
    "exp": 1,
    "log": 1,
    "sqrt": 1,
    "tanh": 1,
    "erf": 1,
    "sigmoid": 1,
    "abs": 1,
    "floor": 1,
    "ceil": 1,
    "round": 1,  # half to even, like NumPy and ONNX
    "sin": 1,
    "cos": 1,
    "log1p": 1,
    "expm1": 1,
    "pow": 2,
    "fmod": 2,
}


@dataclass(frozen=True, slots=True)
class Call(Expr):
    """A math function from MATH_FUNCTIONS applied to floating-point arguments."""

    name: str
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        if MATH_FUNCTIONS.get(self.name) != len(self.args):
            raise ValueError(f"unknown math function {self.name}/{len(self.args)}")

    @property
    def dtype(self) -> str:
        return self.args[0].dtype


@dataclass(frozen=True, slots=True)
class TensorRead(Expr):
    """`tensor[indices]` inside a tensor expression (a Load in loop IR)."""

    tensor: Tensor
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> str:
        return self.tensor.dtype


class Combiner(enum.Enum):
    """How a reduction combines values, with its identity element."""

    SUM = "sum"
    MAX = "max"
    MIN = "min"
    PROD = "prod"


@dataclass(frozen=True, slots=True)
class Reduce(Expr):
    """A reduction over `axes` (reduce IterVars); only valid as a compute's body."""

    combiner: Combiner
    source: Expr
    axes: tuple[IterVar, ...]

    @property
    def dtype(self) -> str:
        return self.source.dtype


# -- constructors ---------------------------------------------------------------------


def as_expr(value: ExprLike, dtype: str | None = None) -> Expr:
    """Wrap Python numbers as constants (ints as index dtype, floats as float32)."""
    if isinstance(value, Expr):
        return value
    to_expr = getattr(value, "as_expr", None)  # IterVar: its variable
    if to_expr is not None:
        return to_expr()
    if isinstance(value, bool):
        return Const(value, "bool")
    if isinstance(value, int):
        return Const(value, dtype or INDEX_DTYPE)
    if isinstance(value, float):
        return Const(value, dtype or "float32")
    raise TypeError(f"cannot use {value!r} ({type(value).__name__}) as an expression")


def binary(op: BinaryOp, a: ExprLike, b: ExprLike) -> Expr:
    """A binary expression; a Python number takes the other operand's dtype."""
    if isinstance(a, Expr) and not isinstance(b, Expr):
        return Binary(op, a, as_expr(b, a.dtype))
    if isinstance(b, Expr) and not isinstance(a, Expr):
        return Binary(op, as_expr(a, b.dtype), b)
    return Binary(op, as_expr(a), as_expr(b))


def equal(a: ExprLike, b: ExprLike) -> Expr:
    return binary(BinaryOp.EQ, a, b)


def not_equal(a: ExprLike, b: ExprLike) -> Expr:
    return binary(BinaryOp.NE, a, b)


def logical_and(a: ExprLike, b: ExprLike) -> Expr:
    return binary(BinaryOp.AND, a, b)


def logical_or(a: ExprLike, b: ExprLike) -> Expr:
    return binary(BinaryOp.OR, a, b)


def logical_not(a: Expr) -> Expr:
    return Unary(UnaryOp.NOT, a)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    return binary(BinaryOp.MIN, a, b)


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    return binary(BinaryOp.MAX, a, b)


def select(condition: Expr, true_value: ExprLike, false_value: ExprLike) -> Expr:
    if isinstance(true_value, Expr):
        return Select(condition, true_value, as_expr(false_value, true_value.dtype))
    if isinstance(false_value, Expr):
        return Select(condition, as_expr(true_value, false_value.dtype), false_value)
    return Select(condition, as_expr(true_value), as_expr(false_value))


def cast(dtype: str, value: ExprLike) -> Expr:
    expr = as_expr(value)
    return expr if expr.dtype == dtype else Cast(dtype, expr)


def call(name: str, *args: ExprLike) -> Expr:
    first = next((a for a in args if isinstance(a, Expr)), None)
    dtype = first.dtype if first is not None else "float32"
    return Call(name, tuple(as_expr(a, dtype) for a in args))


def const(value: int | float | bool, dtype: str) -> Const:
    return Const(value, dtype)

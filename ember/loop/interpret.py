"""A reference interpreter for loop IR: runs a PrimFunc on NumPy arrays, element by
element, with the scalar semantics the C code generator must reproduce.

It is the test oracle for lowering and code generation, so it is strict rather than
fast: every Load and Store is bounds-checked (an error names the buffer and index),
allocations start as NaN (floats) or a 0xA5 byte pattern (integers) so reading before
writing shows, and float32 arithmetic stays in float32 (NumPy scalars). Loops of every
kind run serially, which is what a legal parallel, vectorized or unrolled loop computes.
A vector expression runs lane by lane (so a vector Select stays lazy per lane), and all
lanes of a vector Store are computed before any is written, as with a vector register.

Values: int64 scalars are Python ints (exact; FLOOR_DIV/FLOOR_MOD are Python's `//` and
`%`, integer DIV truncates like C); bools are Python or NumPy bools; every other dtype is
a NumPy scalar of that dtype; a vector value is a tuple of its lanes.

Expressions and statements are compiled once into closures over a flat frame (one slot
per variable binding and per buffer), which is several times faster than walking the
tree for every element.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ember.errors import LoopIRError, ShapeError
from ember.loop.ir import (
    Allocate,
    Broadcast,
    Buffer,
    For,
    IfThenElse,
    LetStmt,
    Load,
    PrimFunc,
    Ramp,
    Seq,
    Stmt,
    Store,
    split_dtype,
)
from ember.te.expr import (
    INDEX_DTYPE,
    Binary,
    BinaryOp,
    Call,
    Cast,
    Const,
    Expr,
    Select,
    Unary,
    UnaryOp,
    Var,
)

Frame = list[Any]
Evaluate = Callable[[Frame], Any]
Execute = Callable[[Frame], None]

UNINITIALISED_BYTE = 0xA5


# -- scalar semantics -------------------------------------------------------------------


def is_integer_dtype(dtype: str) -> bool:
    base = split_dtype(dtype)[0]
    return base.startswith(("int", "uint"))


def is_float_dtype(dtype: str) -> bool:
    return split_dtype(dtype)[0].startswith(("float", "bfloat"))


def converter(dtype: str) -> Callable[[Any], Any]:
    """The function turning a number into this interpreter's value of scalar `dtype`
    (C conversion semantics: floats truncate toward zero, integers wrap)."""
    base = split_dtype(dtype)[0]
    if base == INDEX_DTYPE:
        return int
    if base == "bool":
        return bool
    numpy_dtype = np.dtype(base)
    if numpy_dtype.kind in "iu":
        return lambda value: np.array(value).astype(numpy_dtype)[()]
    return numpy_dtype.type


def _truncating_div(a: Any, b: Any) -> Any:
    quotient = a // b
    if quotient < 0 and quotient * b != a:
        quotient += 1
    return quotient


def _minimum(a: Any, b: Any) -> Any:
    return b if b < a else a


def _maximum(a: Any, b: Any) -> Any:
    return b if b > a else a


_BINARY: dict[BinaryOp, Callable[[Any, Any], Any]] = {
    BinaryOp.ADD: operator.add,
    BinaryOp.SUB: operator.sub,
    BinaryOp.MUL: operator.mul,
    BinaryOp.DIV: operator.truediv,
    BinaryOp.FLOOR_DIV: operator.floordiv,
    BinaryOp.FLOOR_MOD: operator.mod,
    BinaryOp.MIN: _minimum,
    BinaryOp.MAX: _maximum,
    BinaryOp.EQ: operator.eq,
    BinaryOp.NE: operator.ne,
    BinaryOp.LT: operator.lt,
    BinaryOp.LE: operator.le,
    BinaryOp.GT: operator.gt,
    BinaryOp.GE: operator.ge,
}
_DIVISIONS = (BinaryOp.DIV, BinaryOp.FLOOR_DIV, BinaryOp.FLOOR_MOD)


def _erf(x: Any) -> float:
    return math.erf(float(x))


def _sigmoid(x: Any) -> Any:
    one = type(x)(1)
    return one / (one + np.exp(-x))


_MATH: dict[str, Callable[..., Any]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "erf": _erf,
    "sigmoid": _sigmoid,
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.rint,  # half to even
    "sin": np.sin,
    "cos": np.cos,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "pow": np.power,
    "fmod": np.fmod,
}


def lanes_of(expr: Expr) -> int:
    """The lanes of `expr`. A comparison's dtype is plain "bool" even on vectors, so its
    lanes are its operands'."""
    match expr:
        case Binary(op, a, _) if op.is_comparison or op.is_logical:
            return lanes_of(a)
        case Unary(UnaryOp.NOT, a):
            return lanes_of(a)
    return split_dtype(expr.dtype)[1]


def uninitialised(buffer: Buffer) -> np.ndarray:
    """A fresh array for an Allocate: NaN for floats, a byte pattern otherwise."""
    array = np.empty(buffer.shape, dtype=buffer.dtype)
    if is_float_dtype(buffer.dtype):
        array.fill(np.nan)
    else:
        array.reshape(-1).view(np.uint8).fill(UNINITIALISED_BYTE)
    return array


def _out_of_bounds(access: str, buffer: Buffer, index: tuple[Any, ...]) -> LoopIRError:
    shown = ", ".join(str(int(i)) for i in index)
    return LoopIRError(
        f"out-of-bounds {access} buffer '{buffer.name}' at index [{shown}]; its shape is "
        f"{list(buffer.shape)}: the schedule or its lowering computed a wrong index"
    )


# -- compilation to closures ------------------------------------------------------------


class _Compiler:
    """Turns loop IR into closures over a frame; tracks which slot holds each variable
    and buffer in the current scope."""

    def __init__(self) -> None:
        self.var_slots: dict[Var, int] = {}
        self.buffer_slots: dict[Buffer, int] = {}
        self.frame_size = 0

    def new_slot(self) -> int:
        self.frame_size += 1
        return self.frame_size - 1

    # expressions

    def value(self, expr: Expr) -> Evaluate:
        """The whole value of `expr`: a scalar, or a tuple of lanes for a vector."""
        lanes = lanes_of(expr)
        if lanes == 1:
            return self.lane(expr, 0)
        parts = tuple(self.lane(expr, lane) for lane in range(lanes))
        return lambda frame: tuple(part(frame) for part in parts)

    def lane(self, expr: Expr, lane: int) -> Evaluate:
        """Lane `lane` of `expr` (a scalar expression ignores `lane`)."""
        match expr:
            case Var():
                return self._var(expr, lane)
            case Const(value, dtype):
                constant = converter(dtype)(value)
                return lambda frame: constant
            case Ramp(base, stride, _):
                base_fn, offset = self.lane(base, lane), stride * lane
                return lambda frame: base_fn(frame) + offset
            case Broadcast(value, _):
                return self.lane(value, lane)
            case Load():
                return self._load(expr, lane)
            case Binary():
                return self._binary(expr, lane)
            case Unary(UnaryOp.NEG, a):
                operand = self.lane(a, lane)
                return lambda frame: -operand(frame)
            case Unary(UnaryOp.NOT, a):
                operand = self.lane(a, lane)
                return lambda frame: not operand(frame)
            case Select(condition, true_value, false_value):
                test = self.lane(condition, lane)
                if_true, if_false = self.lane(true_value, lane), self.lane(false_value, lane)
                return lambda frame: if_true(frame) if test(frame) else if_false(frame)
            case Cast(dtype, value):
                convert, operand = converter(dtype), self.lane(value, lane)
                return lambda frame: convert(operand(frame))
            case Call(name, args):
                return self._call(name, args, expr.dtype, lane)
        raise LoopIRError(f"the interpreter cannot run expression {type(expr).__name__}: {expr}")

    def _var(self, var: Var, lane: int) -> Evaluate:
        slot = self.var_slots.get(var)
        if slot is None:
            raise LoopIRError(
                f"variable '{var.name}' is used outside the loop or let that binds it"
            )
        if split_dtype(var.dtype)[1] > 1:
            return lambda frame: frame[slot][lane]
        return lambda frame: frame[slot]

    def _binary(self, expr: Binary, lane: int) -> Evaluate:
        a, b = self.lane(expr.a, lane), self.lane(expr.b, lane)
        if expr.op is BinaryOp.AND:
            return lambda frame: a(frame) and b(frame)
        if expr.op is BinaryOp.OR:
            return lambda frame: a(frame) or b(frame)
        integer = is_integer_dtype(expr.a.dtype)
        function = _truncating_div if integer and expr.op is BinaryOp.DIV else _BINARY[expr.op]
        if not (integer and expr.op in _DIVISIONS):
            return lambda frame: function(a(frame), b(frame))
        shown = str(expr)

        def checked_division(frame: Frame) -> Any:
            divisor = b(frame)
            if divisor == 0:
                raise LoopIRError(f"integer division by zero in {shown}")
            return function(a(frame), divisor)

        return checked_division

    def _call(self, name: str, args: tuple[Expr, ...], dtype: str, lane: int) -> Evaluate:
        function, convert = _MATH[name], converter(dtype)
        operands = tuple(self.lane(arg, lane) for arg in args)
        if len(operands) == 1:
            (x,) = operands
            return lambda frame: convert(function(x(frame)))
        x, y = operands
        return lambda frame: convert(function(x(frame), y(frame)))

    def _buffer(self, buffer: Buffer) -> int:
        slot = self.buffer_slots.get(buffer)
        if slot is None:
            raise LoopIRError(
                f"buffer '{buffer.name}' is neither an argument of the kernel nor allocated "
                "around its use"
            )
        return slot

    def _indices(self, buffer: Buffer, indices: tuple[Expr, ...], lane: int) -> Evaluate:
        """A closure computing the bounds-checked index tuple of one lane."""
        if len(indices) != len(buffer.shape):
            raise LoopIRError(
                f"buffer '{buffer.name}' has {len(buffer.shape)} dimensions but is indexed "
                f"with {len(indices)} indices"
            )
        parts = tuple(self.lane(index, lane) for index in indices)
        shape = buffer.shape

        def index(frame: Frame) -> tuple[Any, ...]:
            position = tuple([part(frame) for part in parts])
            for i, extent in zip(position, shape, strict=True):
                if i < 0 or i >= extent:
                    raise _out_of_bounds("access of", buffer, position)
            return position

        return index

    def _load(self, load: Load, lane: int) -> Evaluate:
        slot, index = self._buffer(load.buffer), self._indices(load.buffer, load.indices, lane)
        convert = converter(load.buffer.dtype)
        if load.predicate is not None:  # a lane outside it is zero, and not read
            test, zero = self.lane(load.predicate, lane), convert(0)
            return lambda frame: convert(frame[slot][index(frame)]) if test(frame) else zero
        if load.buffer.dtype in (INDEX_DTYPE, "bool"):
            return lambda frame: convert(frame[slot][index(frame)])
        return lambda frame: frame[slot][index(frame)]

    # statements

    def stmt(self, stmt: Stmt) -> Execute:
        match stmt:
            case For(var, extent, _, body):
                return self._for(var, extent, body)
            case Store():
                return self._store(stmt)
            case Seq(stmts):
                parts = tuple(self.stmt(s) for s in stmts)

                def run_all(frame: Frame) -> None:
                    for part in parts:
                        part(frame)

                return run_all
            case IfThenElse(condition, then_body, else_body):
                return self._if(condition, then_body, else_body)
            case Allocate(buffer, body):
                return self._allocate(buffer, body)
            case LetStmt(var, value, body):
                evaluate = self.value(value)
                slot, run_body = self._bound(var, body)

                def let(frame: Frame) -> None:
                    frame[slot] = evaluate(frame)
                    run_body(frame)

                return let
        raise LoopIRError(f"the interpreter cannot run statement {type(stmt).__name__}")

    def _bound(self, var: Var, body: Stmt) -> tuple[int, Execute]:
        """Compile `body` with `var` bound to a fresh slot (shadowing any outer one)."""
        outer, slot = self.var_slots.get(var), self.new_slot()
        self.var_slots[var] = slot
        try:
            return slot, self.stmt(body)
        finally:
            if outer is None:
                del self.var_slots[var]
            else:
                self.var_slots[var] = outer

    def _for(self, var: Var, extent: Expr, body: Stmt) -> Execute:
        count = self.lane(extent, 0)
        slot, run_body = self._bound(var, body)

        def loop(frame: Frame) -> None:
            for i in range(count(frame)):
                frame[slot] = i
                run_body(frame)

        return loop

    def _if(self, condition: Expr, then_body: Stmt, else_body: Stmt | None) -> Execute:
        test, run_then = self.lane(condition, 0), self.stmt(then_body)
        run_else = self.stmt(else_body) if else_body is not None else None

        def branch(frame: Frame) -> None:
            if test(frame):
                run_then(frame)
            elif run_else is not None:
                run_else(frame)

        return branch

    def _allocate(self, buffer: Buffer, body: Stmt) -> Execute:
        slot = self.new_slot()
        self.buffer_slots[buffer] = slot
        try:
            run_body = self.stmt(body)
        finally:
            del self.buffer_slots[buffer]

        def allocate(frame: Frame) -> None:
            frame[slot] = uninitialised(buffer)
            run_body(frame)
            frame[slot] = None

        return allocate

    def _store(self, store: Store) -> Execute:
        slot = self._buffer(store.buffer)
        lanes = max(lanes_of(e) for e in (store.value, *store.indices))
        values = tuple(self.lane(store.value, lane) for lane in range(lanes))
        indices = tuple(self._indices(store.buffer, store.indices, lane) for lane in range(lanes))
        if lanes == 1:
            (value,), (index,) = values, indices

            def store_scalar(frame: Frame) -> None:
                frame[slot][index(frame)] = value(frame)

            return store_scalar

        predicate = store.predicate
        masks = None if predicate is None else tuple(self.lane(predicate, n) for n in range(lanes))

        def store_vector(frame: Frame) -> None:
            # Every lane is computed before any is written, like a vector register.
            computed = [value(frame) for value in values]
            written = [True] * lanes if masks is None else [bool(m(frame)) for m in masks]
            array = frame[slot]
            for index, element, write in zip(indices, computed, written, strict=True):
                if write:  # a lane the predicate skips is not even addressed
                    array[index(frame)] = element

        return store_vector


# -- public entry points ----------------------------------------------------------------


def evaluate_expr(
    expr: Expr,
    env: Mapping[Var, Any] | None = None,
    buffers: Mapping[Buffer, np.ndarray] | None = None,
) -> Any:
    """The value of `expr` with variables from `env` and Loads reading `buffers`."""
    compiler = _Compiler()
    frame: Frame = []
    for var, value in (env or {}).items():
        compiler.var_slots[var] = compiler.new_slot()
        frame.append(int(value) if var.dtype == INDEX_DTYPE else value)
    for buffer, array in (buffers or {}).items():
        compiler.buffer_slots[buffer] = compiler.new_slot()
        frame.append(array)
    evaluate = compiler.value(expr)
    with np.errstate(all="ignore"):
        return evaluate(frame)


def compile_func(func: PrimFunc) -> Callable[[Sequence[np.ndarray]], None]:
    """Compile once, run many times: the returned function behaves like `run_func`."""
    compiler = _Compiler()
    for buffer in func.args:
        compiler.buffer_slots[buffer] = compiler.new_slot()
    body = compiler.stmt(func.body)
    size = compiler.frame_size

    def run(args: Sequence[np.ndarray]) -> None:
        _check_args(func, args)
        frame: Frame = [*args, *([None] * (size - len(args)))]
        with np.errstate(all="ignore"):
            body(frame)

    return run


def run_func(func: PrimFunc, args: Sequence[np.ndarray]) -> None:
    """Execute `func` on `args` (one array per buffer argument, in order); outputs are
    written into the given arrays in place."""
    compile_func(func)(args)


def _check_args(func: PrimFunc, args: Sequence[np.ndarray]) -> None:
    if len(args) != len(func.args):
        raise ShapeError(
            f"kernel '{func.name}' takes {len(func.args)} arrays "
            f"({', '.join(b.name for b in func.args)}) but was given {len(args)}"
        )
    for buffer, array in zip(func.args, args, strict=True):
        if not isinstance(array, np.ndarray):
            raise ShapeError(
                f"argument '{buffer.name}' of kernel '{func.name}' must be a NumPy array, "
                f"not {type(array).__name__}"
            )
        if array.shape != buffer.shape or array.dtype != np.dtype(buffer.dtype):
            raise ShapeError(
                f"argument '{buffer.name}' of kernel '{func.name}' must be "
                f"{buffer.dtype}{list(buffer.shape)}, not {array.dtype}{list(array.shape)}"
            )

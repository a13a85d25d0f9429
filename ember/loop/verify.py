"""Structural checks of loop IR, run after lowering and before code generation.

`verify(func)` raises LoopIRError naming the kernel, the offending node and what to fix
for: a variable used outside the loop or let that binds it (or bound again inside its
own scope), a Load or Store of a buffer that is neither an argument nor allocated around
it, a wrong number of indices, a Store whose value's dtype (lanes included) is not the
buffer's, vector lanes that disagree (a Ramp of 4 lanes indexing a store of 8, operands
of different widths), mismatched operand dtypes, non-boolean conditions, and a parallel
loop nested inside another (OpenMP would run it on one thread or oversubscribe).
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.errors import LoopIRError
from ember.loop.ir import (
    Allocate,
    Broadcast,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    PrimFunc,
    Ramp,
    Seq,
    Stmt,
    Store,
    split_dtype,
    vector_dtype,
)
from ember.te.expr import Binary, Call, Cast, Const, Expr, Select, Unary, UnaryOp, Var
from ember.te.printer import format_expr


@dataclass(frozen=True, slots=True)
class _Scope:
    """What is visible at a point of the kernel."""

    variables: frozenset[Var]
    buffers: frozenset[Buffer]
    parallel_loop: Var | None = None


def verify(func: PrimFunc) -> None:
    """Raise LoopIRError if `func` is not well-formed loop IR (see the module doc)."""
    names = [buffer.name for buffer in func.args]
    if len(set(func.args)) != len(func.args):
        raise LoopIRError(f"kernel '{func.name}' lists a buffer twice among its arguments {names}")
    _Verifier(func.name).stmt(func.body, _Scope(frozenset(), frozenset(func.args)))


def _is_integer(dtype: str) -> bool:
    return split_dtype(dtype)[0].startswith(("int", "uint"))


class _Verifier:
    def __init__(self, kernel: str) -> None:
        self.kernel = kernel

    def fail(self, message: str) -> LoopIRError:
        return LoopIRError(f"invalid loop IR in kernel '{self.kernel}': {message}")

    # statements

    def stmt(self, stmt: Stmt, scope: _Scope) -> None:
        match stmt:
            case For():
                self._for(stmt, scope)
            case Store(buffer, indices, value, predicate):
                self._store(buffer, indices, value, scope)
                if predicate is not None:
                    self._predicate(buffer, predicate, self.expr(value, scope), scope)
            case Seq(stmts):
                for part in stmts:
                    self.stmt(part, scope)
            case IfThenElse(condition, then_body, else_body):
                self._condition(condition, scope, "if")
                self.stmt(then_body, scope)
                if else_body is not None:
                    self.stmt(else_body, scope)
            case Allocate(buffer, body):
                if buffer in scope.buffers:
                    raise self.fail(f"buffer '{buffer.name}' is allocated again inside its scope")
                self.stmt(
                    body, _Scope(scope.variables, scope.buffers | {buffer}, scope.parallel_loop)
                )
            case LetStmt(var, value, body):
                lanes = self.expr(value, scope)
                if value.dtype != var.dtype or lanes != split_dtype(var.dtype)[1]:
                    raise self.fail(
                        f"let {var.name}: {var.dtype} is bound to a {value.dtype} value "
                        f"{format_expr(value)}"
                    )
                self.stmt(body, self._bind(var, scope, "let"))
            case _:
                raise self.fail(f"unknown statement {type(stmt).__name__}")

    def _bind(self, var: Var, scope: _Scope, binder: str) -> _Scope:
        if var in scope.variables:
            raise self.fail(
                f"variable '{var.name}' is bound by a {binder} inside its own scope; "
                "give the inner binding a new variable"
            )
        return _Scope(scope.variables | {var}, scope.buffers, scope.parallel_loop)

    def _for(self, loop: For, scope: _Scope) -> None:
        if self.expr(loop.extent, scope) != 1 or not _is_integer(loop.extent.dtype):
            raise self.fail(
                f"loop '{loop.var.name}' has extent {format_expr(loop.extent)} of dtype "
                f"{loop.extent.dtype}; an extent must be a scalar integer"
            )
        inner = self._bind(loop.var, scope, "loop")
        if loop.kind is ForKind.PARALLEL:
            if scope.parallel_loop is not None:
                raise self.fail(
                    f"parallel loop '{loop.var.name}' is nested inside parallel loop "
                    f"'{scope.parallel_loop.name}'; fuse them or make one serial"
                )
            inner = _Scope(inner.variables, inner.buffers, loop.var)
        self.stmt(loop.body, inner)

    def _store(self, buffer: Buffer, indices: tuple[Expr, ...], value: Expr, scope: _Scope) -> None:
        index_lanes = self._access(buffer, indices, scope, "store to")
        value_lanes = self.expr(value, scope)
        if index_lanes not in (1, value_lanes):
            raise self.fail(
                f"store to '{buffer.name}' has {index_lanes}-lane indices but a "
                f"{value_lanes}-lane value {format_expr(value)}; a Ramp must have as many "
                "lanes as the vector it indexes"
            )
        expected = vector_dtype(buffer.dtype, index_lanes)
        # A vector comparison's dtype is plain "bool", so lanes are compared separately.
        if split_dtype(value.dtype)[0] != buffer.dtype or value_lanes != index_lanes:
            raise self.fail(
                f"store to '{buffer.name}' ({buffer.dtype}, indices addressing {index_lanes} "
                f"lanes) writes a {value.dtype} value {format_expr(value)}; it must be "
                f"{expected}"
            )

    def _predicate(self, buffer: Buffer, predicate: Expr, lanes: int, scope: _Scope) -> None:
        mask_lanes = self.expr(predicate, scope)
        if split_dtype(predicate.dtype)[0] != "bool" or mask_lanes != lanes or lanes == 1:
            raise self.fail(
                f"store to '{buffer.name}' has the predicate {format_expr(predicate)}; it "
                f"must be a bool vector of the value's {lanes} lanes"
            )

    def _access(self, buffer: Buffer, indices: tuple[Expr, ...], scope: _Scope, access: str) -> int:
        """Check a Load's or Store's buffer and indices; the lanes the indices address."""
        if buffer not in scope.buffers:
            raise self.fail(
                f"{access} buffer '{buffer.name}', which is neither an argument of the "
                "kernel nor allocated around this use"
            )
        if len(indices) != len(buffer.shape):
            raise self.fail(
                f"{access} '{buffer.name}' uses {len(indices)} indices but the buffer has "
                f"{len(buffer.shape)} dimensions {list(buffer.shape)}"
            )
        lanes = {self.expr(index, scope) for index in indices} - {1}
        if len(lanes) > 1:
            raise self.fail(
                f"{access} '{buffer.name}' mixes vector indices of {sorted(lanes)} lanes"
            )
        for index in indices:
            if not _is_integer(index.dtype):
                raise self.fail(
                    f"{access} '{buffer.name}' has index {format_expr(index)} of dtype "
                    f"{index.dtype}; indices must be integers"
                )
        return lanes.pop() if lanes else 1

    def _condition(self, condition: Expr, scope: _Scope, where: str) -> int:
        lanes = self.expr(condition, scope)
        if split_dtype(condition.dtype)[0] != "bool":
            raise self.fail(
                f"{where} condition {format_expr(condition)} has dtype {condition.dtype}, "
                "not bool; compare it with something"
            )
        if where == "if" and lanes != 1:
            raise self.fail(f"if condition {format_expr(condition)} is a vector")
        return lanes

    # expressions: each returns its lanes

    def expr(self, expr: Expr, scope: _Scope) -> int:
        match expr:
            case Var():
                if expr not in scope.variables:
                    raise self.fail(
                        f"variable '{expr.name}' is used outside the loop or let that binds "
                        "it; lowering must bind it around every use"
                    )
                return split_dtype(expr.dtype)[1]
            case Const():
                return 1
            case Load(buffer, indices, predicate):
                lanes = self._access(buffer, indices, scope, "load from")
                if predicate is not None and self._condition(predicate, scope, "load") != lanes:
                    raise self.fail(
                        f"load from '{buffer.name}' has a predicate of other lanes than its "
                        f"{lanes}: {format_expr(predicate)}"
                    )
                return lanes
            case Ramp(base, _, lanes):
                self._scalar_operand(base, scope, expr)
                return lanes
            case Broadcast(value, lanes):
                self._scalar_operand(value, scope, expr)
                return lanes
            case Binary():
                return self._binary(expr, scope)
            case Unary(op, a):
                if op is UnaryOp.NOT:
                    return self._condition(a, scope, "logical-not")
                return self.expr(a, scope)
            case Select(condition, true_value, false_value):
                return self._select(expr, condition, true_value, false_value, scope)
            case Cast(dtype, value):
                lanes = self.expr(value, scope)
                if split_dtype(dtype)[1] != lanes:
                    raise self.fail(f"cast {format_expr(expr)} changes the number of lanes")
                return lanes
            case Call(_, args):
                return self._same_lanes(expr, args, scope)
        raise self.fail(
            f"{type(expr).__name__} {format_expr(expr)} cannot appear in loop IR; lowering "
            "must turn tensor reads into Loads and reductions into loops"
        )

    def _scalar_operand(self, operand: Expr, scope: _Scope, vector: Expr) -> None:
        if self.expr(operand, scope) != 1:
            raise self.fail(f"{format_expr(vector)} must be built from a scalar")

    def _binary(self, expr: Binary, scope: _Scope) -> int:
        lanes = self._same_lanes(expr, (expr.a, expr.b), scope)
        if expr.a.dtype != expr.b.dtype:
            raise self.fail(
                f"operands of {format_expr(expr)} have dtypes {expr.a.dtype} and "
                f"{expr.b.dtype}; cast one of them"
            )
        if expr.op.is_logical and split_dtype(expr.a.dtype)[0] != "bool":
            raise self.fail(f"operands of {format_expr(expr)} must be bool, not {expr.a.dtype}")
        return lanes

    def _select(
        self, expr: Expr, condition: Expr, true_value: Expr, false_value: Expr, scope: _Scope
    ) -> int:
        condition_lanes = self._condition(condition, scope, "select")
        lanes = self._same_lanes(expr, (true_value, false_value), scope)
        if true_value.dtype != false_value.dtype:
            raise self.fail(
                f"branches of {format_expr(expr)} have dtypes {true_value.dtype} and "
                f"{false_value.dtype}"
            )
        if condition_lanes not in (1, lanes):
            raise self.fail(
                f"select condition has {condition_lanes} lanes but its values have {lanes}"
            )
        return lanes

    def _same_lanes(self, expr: Expr, operands: tuple[Expr, ...], scope: _Scope) -> int:
        lanes = {self.expr(operand, scope) for operand in operands}
        if len(lanes) > 1:
            raise self.fail(
                f"operands of {format_expr(expr)} have {sorted(lanes)} lanes; broadcast the "
                "scalar or use Ramps of one width"
            )
        return lanes.pop() if lanes else 1

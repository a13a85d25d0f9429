"""A NumPy evaluator of compute DAGs: the tensor-expression level's oracle.

Every ComputeOp is evaluated as a whole, vectorised over its index grid: each axis
variable becomes an `np.arange` placed on its own grid dimension, so an expression
over the axes evaluates by broadcasting, and a reduction evaluates its source over the
spatial x reduce grid and reduces the reduce dimensions. Nothing here depends on loops
or schedules, so it checks declarations (against the graph references) and lowered
code (against it) independently.

Semantics it pins down, which generated code must match:

- Each node's result has the node's dtype (float32 stays float32); sums and products
  of floating-point values accumulate in float64 and are rounded once, as the graph
  references do, so the oracle does not depend on a summation order.
- `Select` is lazy: a branch is evaluated under a mask of the lanes that take it, and
  a tensor read that is out of bounds on a live lane is an error (a declaration bug:
  the compiled kernel would read invalid memory there); dead lanes are clamped.
- Integer `/` truncates toward zero (C); `//` and `%` floor (Python).
- Grids larger than `block_elements` are evaluated in blocks along spatial axes
  (concatenated) or reduce axes (partial reductions combined).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ember.errors import ShapeError
from ember.te.dag import ComputeDAG
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
from ember.te.tensor import ComputeOp, IterVar, PlaceholderOp, Tensor

# Elements of one evaluated block. Index arrays and intermediates of a block are
# int64/float64, so this bounds each temporary to ~32 MB on a shared test machine.
DEFAULT_BLOCK_ELEMENTS = 1 << 22

Mask = np.ndarray | None


def evaluate_dag(
    dag: ComputeDAG,
    inputs: Sequence[np.ndarray],
    block_elements: int = DEFAULT_BLOCK_ELEMENTS,
) -> list[np.ndarray]:
    """The values of `dag.outputs`, given one array per `dag.inputs` (same order)."""
    values = evaluate_stages(dag, inputs, block_elements)
    return [values[tensor] for tensor in dag.outputs]


def evaluate_stages(
    dag: ComputeDAG,
    inputs: Sequence[np.ndarray],
    block_elements: int = DEFAULT_BLOCK_ELEMENTS,
) -> dict[Tensor, np.ndarray]:
    """The value of every tensor of `dag` (placeholders and stages), keyed by tensor."""
    if len(inputs) != len(dag.inputs):
        raise ShapeError(f"the compute DAG takes {len(dag.inputs)} inputs, got {len(inputs)}")
    given: dict[Tensor, np.ndarray] = {}
    for tensor, array in zip(dag.inputs, inputs, strict=True):
        array = np.asarray(array)
        if array.shape != tensor.shape or array.dtype != np.dtype(tensor.dtype):
            raise ShapeError(
                f"input {tensor.name} must be {tensor.dtype}{list(tensor.shape)}, got "
                f"{array.dtype}{list(array.shape)}"
            )
        given[tensor] = array
    values: dict[Tensor, np.ndarray] = {}  # in the DAG's (topological) order
    for tensor in dag.tensors:
        op = tensor.op
        if isinstance(op, PlaceholderOp):
            values[tensor] = given[tensor]
        else:
            values[tensor] = evaluate_compute(op, values, block_elements)
    return values


def evaluate_compute(
    op: ComputeOp,
    values: Mapping[Tensor, np.ndarray],
    block_elements: int = DEFAULT_BLOCK_ELEMENTS,
) -> np.ndarray:
    """One stage's value, given the values of the tensors it reads."""
    ranges = [(0, axis.extent) for axis in (*op.axes, *op.reduce_axes)]
    with np.errstate(all="ignore"):  # dead select lanes may divide by zero, overflow...
        result = _evaluate_block(op, values, ranges, max(1, block_elements))
    return np.asarray(result).astype(op.dtype, copy=False)


# -- blocks ------------------------------------------------------------------------


def _evaluate_block(
    op: ComputeOp,
    values: Mapping[Tensor, np.ndarray],
    ranges: list[tuple[int, int]],
    limit: int,
) -> np.ndarray:
    """The stage over the sub-grid `ranges` (spatial then reduce axes); a reduction's
    result is still in its accumulation dtype."""
    sizes = [stop - start for start, stop in ranges]
    total = math.prod(sizes)
    axis = next((k for k, size in enumerate(sizes) if size > 1), None)
    if total <= limit or axis is None:
        return _evaluate_direct(op, values, ranges)
    pieces = -(-total // limit)
    chunk = max(1, -(-sizes[axis] // pieces))
    start, stop = ranges[axis]
    parts = []
    for begin in range(start, stop, chunk):
        sub = list(ranges)
        sub[axis] = (begin, min(begin + chunk, stop))
        parts.append(_evaluate_block(op, values, sub, limit))
    if axis < len(op.axes):
        return np.concatenate(parts, axis=axis)
    assert isinstance(op.body, Reduce)
    combine = _COMBINE[op.body.combiner]
    result = parts[0]
    for part in parts[1:]:
        result = combine(result, part)
    return result


def _evaluate_direct(
    op: ComputeOp, values: Mapping[Tensor, np.ndarray], ranges: list[tuple[int, int]]
) -> np.ndarray:
    axes: tuple[IterVar, ...] = (*op.axes, *op.reduce_axes)
    rank = len(axes)
    env: dict[Var, np.ndarray] = {}
    for position, (axis, (start, stop)) in enumerate(zip(axes, ranges, strict=True)):
        shape = [1] * rank
        shape[position] = stop - start
        env[axis.var] = np.arange(start, stop, dtype=np.int64).reshape(shape)
    grid = tuple(stop - start for start, stop in ranges)
    spatial = grid[: len(op.axes)]
    evaluator = _Evaluator(env, values)
    body = op.body
    if not isinstance(body, Reduce):
        return np.broadcast_to(evaluator.eval(body, None), spatial)
    source = np.broadcast_to(evaluator.eval(body.source, None), grid)
    reduce_dims = tuple(range(len(op.axes), rank))
    return _REDUCE[body.combiner](source, reduce_dims)


def _accumulate(source: np.ndarray) -> np.ndarray:
    """float64 for floating-point sums and products (one rounding at the end)."""
    return source.astype(np.float64) if source.dtype.kind == "f" else source


def _identity(dtype: np.dtype, combiner: Combiner) -> float | bool:
    """The identity of max / min, for empty reductions."""
    if dtype.kind == "f":
        return -np.inf if combiner is Combiner.MAX else np.inf
    if dtype.kind == "b":
        return combiner is not Combiner.MAX
    info = np.iinfo(dtype)
    return info.min if combiner is Combiner.MAX else info.max


def _sum(source: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    wide = _accumulate(source)
    # Integers keep their own dtype (NumPy would widen an int32 sum to int64), so they
    # wrap on overflow as C does.
    return np.sum(wide, axis=dims, dtype=wide.dtype)


def _prod(source: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    wide = _accumulate(source)
    return np.prod(wide, axis=dims, dtype=wide.dtype)


def _max(source: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    return np.max(source, axis=dims, initial=_identity(source.dtype, Combiner.MAX))


def _min(source: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    return np.min(source, axis=dims, initial=_identity(source.dtype, Combiner.MIN))


_REDUCE: dict[Combiner, Callable[[np.ndarray, tuple[int, ...]], np.ndarray]] = {
    Combiner.SUM: _sum,
    Combiner.PROD: _prod,
    Combiner.MAX: _max,
    Combiner.MIN: _min,
}

_COMBINE: dict[Combiner, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    Combiner.SUM: np.add,
    Combiner.PROD: np.multiply,
    Combiner.MAX: np.maximum,
    Combiner.MIN: np.minimum,
}


# -- expressions ---------------------------------------------------------------------


def _truncating_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.asarray(a).dtype.kind in "iu":
        quotient = np.floor_divide(a, b)
        inexact = np.not_equal(np.mod(a, b), 0) & np.not_equal(a < 0, b < 0)
        return np.where(inexact, quotient + 1, quotient)
    return np.true_divide(a, b)


_BINARY: dict[BinaryOp, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    BinaryOp.ADD: np.add,
    BinaryOp.SUB: np.subtract,
    BinaryOp.MUL: np.multiply,
    BinaryOp.DIV: _truncating_divide,
    BinaryOp.FLOOR_DIV: np.floor_divide,
    BinaryOp.FLOOR_MOD: np.mod,
    BinaryOp.MIN: np.minimum,
    BinaryOp.MAX: np.maximum,
    BinaryOp.EQ: np.equal,
    BinaryOp.NE: np.not_equal,
    BinaryOp.LT: np.less,
    BinaryOp.LE: np.less_equal,
    BinaryOp.GT: np.greater,
    BinaryOp.GE: np.greater_equal,
    BinaryOp.AND: np.logical_and,
    BinaryOp.OR: np.logical_or,
}


_erf_float64 = np.vectorize(math.erf, otypes=[np.float64])


def _erf(x: np.ndarray) -> np.ndarray:
    """erf in double precision, rounded to x's dtype (NumPy has no erf; the tensor
    level does not depend on the graph level's helpers)."""
    return _erf_float64(x).astype(x.dtype) if x.size else x.copy()


def _sigmoid(x: np.ndarray) -> np.ndarray:
    one = np.ones((), x.dtype)
    return one / (one + np.exp(-x))


_MATH: dict[str, Callable[..., np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "erf": lambda x: _erf(np.asarray(x)),
    "sigmoid": _sigmoid,
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,  # half to even
    "sin": np.sin,
    "cos": np.cos,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "pow": np.power,
    "fmod": np.fmod,
}


class _Evaluator:
    """Evaluates expressions over one block's grid. `mask` (broadcastable to the
    grid, or None for all lanes) marks the lanes whose value is used."""

    def __init__(self, env: Mapping[Var, np.ndarray], values: Mapping[Tensor, np.ndarray]):
        self.env = env
        self.values = values

    def eval(self, expr: Expr, mask: Mask) -> np.ndarray:
        result = self._eval(expr, mask)
        return np.asarray(result).astype(expr.dtype, copy=False)

    def _eval(self, expr: Expr, mask: Mask) -> np.ndarray:
        match expr:
            case Var():
                if expr not in self.env:
                    raise ValueError(f"variable {expr.name} is not an axis of this stage")
                return self.env[expr]
            case Const(value, dtype):
                return np.asarray(value, dtype=dtype)
            case Binary(op, a, b):
                return _BINARY[op](self.eval(a, mask), self.eval(b, mask))
            case Unary(UnaryOp.NEG, a):
                return np.negative(self.eval(a, mask))
            case Unary(UnaryOp.NOT, a):
                return np.logical_not(self.eval(a, mask))
            case Select():
                return self._select(expr, mask)
            case Cast(dtype, value):
                return self.eval(value, mask).astype(dtype)
            case Call(name, args):
                return _MATH[name](*(self.eval(arg, mask) for arg in args))
            case TensorRead():
                return self._read(expr, mask)
            case Reduce():
                raise ValueError("a reduction may only be the whole body of a compute")
        raise TypeError(f"cannot evaluate a {type(expr).__name__} in a compute DAG")

    def _select(self, expr: Select, mask: Mask) -> np.ndarray:
        condition = self.eval(expr.condition, mask)
        if condition.ndim == 0:  # a uniform condition evaluates one branch only
            return self.eval(expr.true_value if condition else expr.false_value, mask)
        taken = condition if mask is None else mask & condition
        skipped = ~condition if mask is None else mask & ~condition
        true_value = self.eval(expr.true_value, taken)
        false_value = self.eval(expr.false_value, skipped)
        return np.where(condition, true_value, false_value)

    def _read(self, expr: TensorRead, mask: Mask) -> np.ndarray:
        array = self.values.get(expr.tensor)
        if array is None:
            raise ValueError(f"{expr.tensor.name} is read before it is computed")
        indices = []
        for dim, (index_expr, extent) in enumerate(
            zip(expr.indices, expr.tensor.shape, strict=True)
        ):
            index = self.eval(index_expr, mask).astype(np.int64, copy=False)
            outside = (index < 0) | (index >= extent)
            if mask is not None:
                outside = outside & mask
            if np.any(outside):
                bad = int(np.broadcast_to(index, outside.shape)[outside].flat[0])
                raise IndexError(
                    f"{expr} reads index {bad} of dimension {dim} (extent {extent}) of "
                    f"{expr.tensor.name} on a lane no select guards"
                )
            indices.append(np.clip(index, 0, max(extent - 1, 0)))
        return array[tuple(indices)]

"""Tensors and the operations that define them: `placeholder`, `compute`, `reduce_axis`.

A tensor is the single output of one operation: a `PlaceholderOp` (an input of the
kernel: data or a weight) or a `ComputeOp` (one element expression over its spatial
axes, optionally a reduction over reduce axes). Operations compare by identity: two
`compute` calls are two stages even if they look alike; structural comparison of
whole DAGs goes through `ComputeDAG`'s canonical form.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ember.te.expr import (
    INDEX_DTYPE,
    Combiner,
    Expr,
    ExprLike,
    Reduce,
    TensorRead,
    Var,
    as_expr,
)


class IterKind(enum.Enum):
    SPATIAL = "spatial"
    REDUCE = "reduce"


@dataclass(frozen=True, slots=True)
class IterVar:
    """An axis of a compute: a variable ranging over `0 <= var < extent`."""

    var: Var
    extent: int
    kind: IterKind = IterKind.SPATIAL

    @property
    def name(self) -> str:
        return self.var.name

    def as_expr(self) -> Var:
        """An IterVar stands for its variable in expressions (`yy + ry`)."""
        return self.var


@dataclass(frozen=True, slots=True, eq=False)
class PlaceholderOp:
    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, slots=True, eq=False)
class ComputeOp:
    """`name(axes) = body` (or `+=`, `max=`, ... when the body is a Reduce)."""

    name: str
    axes: tuple[IterVar, ...]
    body: Expr
    tag: str = ""
    # `input_tensors`, walked once: the search asks every stage's readers thousands of
    # times a round (ResNet-18, 400 trials: 61,000 walks, 3.4 s of its 34 s search).
    _inputs: tuple[Tensor, ...] | None = field(default=None, init=False, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(axis.extent for axis in self.axes)

    @property
    def dtype(self) -> str:
        return self.body.dtype

    @property
    def reduce_axes(self) -> tuple[IterVar, ...]:
        return self.body.axes if isinstance(self.body, Reduce) else ()

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        """Tensors read by the body, in first-read order, each once."""
        if self._inputs is None:
            from ember.te.visit import tensors_read

            object.__setattr__(self, "_inputs", tensors_read(self.body))
        assert self._inputs is not None
        return self._inputs


Operation = PlaceholderOp | ComputeOp


@dataclass(frozen=True, slots=True, eq=False)
class Tensor:
    """The output of an operation. `tensor[i, j]` reads an element in an expression."""

    op: Operation

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def shape(self) -> tuple[int, ...]:
        return self.op.shape

    @property
    def dtype(self) -> str:
        return self.op.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices: ExprLike | tuple[ExprLike, ...]) -> TensorRead:
        index_tuple = indices if isinstance(indices, tuple) else (indices,)
        if len(index_tuple) != self.ndim:
            raise IndexError(f"{self.name} has {self.ndim} dims, indexed with {len(index_tuple)}")
        return TensorRead(self, tuple(as_expr(i) for i in index_tuple))

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {list(self.shape)}, {self.dtype})"


def placeholder(shape: Sequence[int], dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """A kernel input."""
    return Tensor(PlaceholderOp(name, tuple(int(d) for d in shape), dtype))


def compute(
    shape: Sequence[int],
    fcompute: Callable[..., Expr],
    name: str = "compute",
    tag: str = "",
    axis_names: Sequence[str] | None = None,
) -> Tensor:
    """A stage computing every element of `shape` with `fcompute(*axis_vars)`.

    Axis variables are named after `fcompute`'s parameters (`lambda n, h, w, c: ...`),
    or `axis_names`, or `i0, i1, ...`."""
    names = list(axis_names) if axis_names is not None else _parameter_names(fcompute, len(shape))
    axes = tuple(
        IterVar(Var(n, INDEX_DTYPE), int(extent)) for n, extent in zip(names, shape, strict=True)
    )
    body = as_expr(fcompute(*(axis.var for axis in axes)))
    return Tensor(ComputeOp(name, axes, body, tag))


def _parameter_names(fcompute: Callable[..., Expr], rank: int) -> list[str]:
    try:
        parameters = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    positional = [
        p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) == rank:
        return positional
    return [f"i{k}" for k in range(rank)]


def reduce_axis(extent: int, name: str) -> IterVar:
    """A reduction axis `0 <= name < extent` for `reduce_sum` / `reduce_max` / ..."""
    return IterVar(Var(name, INDEX_DTYPE), int(extent), IterKind.REDUCE)


def _reduce(combiner: Combiner, source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
    if not axes or any(a.kind is not IterKind.REDUCE for a in axes):
        raise ValueError("a reduction needs one or more reduce_axis IterVars")
    return Reduce(combiner, as_expr(source), axes)


def reduce_sum(source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return _reduce(Combiner.SUM, source, axis)


def reduce_max(source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return _reduce(Combiner.MAX, source, axis)


def reduce_min(source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return _reduce(Combiner.MIN, source, axis)


def reduce_prod(source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return _reduce(Combiner.PROD, source, axis)

"""`ComputeDAG`: the stages of one fused group, in topological order.

A DAG is what a search task optimises. Its canonical text (stage and variable names
replaced by their position) gives a structural hash that is stable across processes
and machines; the workload key adds the shapes of the inputs and outputs:
`["<hash>", [1, 56, 56, 64], [3, 3, 64, 64], [1, 56, 56, 64]]`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from functools import cached_property

from ember.te.expr import Expr, Reduce, TensorRead, Var
from ember.te.printer import format_operation
from ember.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor
from ember.te.visit import map_expr, walk


class ComputeDAG:
    """The operations computing `outputs`, inputs first, each after its producers.

    `inputs` are the placeholders in the order the kernel receives them; by default
    the order in which a depth-first walk from the outputs first meets them."""

    def __init__(self, outputs: Sequence[Tensor], inputs: Sequence[Tensor] | None = None) -> None:
        self.outputs: tuple[Tensor, ...] = tuple(outputs)
        self.tensors: tuple[Tensor, ...] = _topological_order(self.outputs)
        found = tuple(t for t in self.tensors if isinstance(t.op, PlaceholderOp))
        if inputs is not None:
            missing = [t.name for t in found if not any(t is i for i in inputs)]
            if missing:
                raise ValueError(f"placeholders {missing} are read but not listed as inputs")
            found = tuple(inputs)
        self.inputs: tuple[Tensor, ...] = found

    @property
    def ops(self) -> tuple[Operation, ...]:
        return tuple(t.op for t in self.tensors)

    @property
    def compute_tensors(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if isinstance(t.op, ComputeOp))

    def __str__(self) -> str:
        return "\n".join(format_operation(t.op) for t in self.tensors)

    # -- cost --------------------------------------------------------------------

    @cached_property
    def flop_count(self) -> int:
        """Floating-point operations of one run: per element of each compute stage, the
        arithmetic and math calls of its body (a reduction counts its combine too),
        times the stage's iteration count (spatial times reduce extents)."""
        total = 0
        for tensor in self.compute_tensors:
            op = tensor.op
            assert isinstance(op, ComputeOp)
            iterations = 1
            for axis in op.axes + op.reduce_axes:
                iterations *= axis.extent
            per_element = _float_ops(op.body)
            total += iterations * per_element
        return total

    # -- identity ----------------------------------------------------------------

    @cached_property
    def canonical_text(self) -> str:
        """The printout with stages renamed `T0, T1, ...` and variables `v0, v1, ...`
        in order of appearance, so that the same computation built twice (with other
        names) prints the same."""
        stage_names = {id(t): f"T{i}" for i, t in enumerate(self.tensors)}
        lines = []
        for tensor in self.tensors:
            op = tensor.op
            name = stage_names[id(tensor)]
            if isinstance(op, PlaceholderOp):
                lines.append(f"{name} = PLACEHOLDER {list(op.shape)} {op.dtype}")
                continue
            renamed = _rename(op, name, stage_names)
            lines.append(f"{format_operation(renamed)} {op.dtype}")
        order = [stage_names[id(t)] for t in self.inputs] + ["->"]
        order += [stage_names[id(t)] for t in self.outputs]
        lines.append(" ".join(order))
        return "\n".join(lines)

    @cached_property
    def structural_hash(self) -> str:
        return hashlib.md5(self.canonical_text.encode(), usedforsecurity=False).hexdigest()

    @property
    def workload_key(self) -> str:
        """JSON list: the structural hash, then every input's and output's shape."""
        shapes = [list(t.shape) for t in self.inputs + self.outputs]
        return json.dumps([self.structural_hash, *shapes])


def _topological_order(outputs: Sequence[Tensor]) -> tuple[Tensor, ...]:
    order: list[Tensor] = []
    visited: set[int] = set()

    def visit(tensor: Tensor) -> None:
        if id(tensor) in visited:
            return
        visited.add(id(tensor))
        if isinstance(tensor.op, ComputeOp):
            for producer in tensor.op.input_tensors:
                visit(producer)
        order.append(tensor)

    for output in outputs:
        visit(output)
    return tuple(order)


def _rename(op: ComputeOp, name: str, stage_names: dict[int, str]) -> ComputeOp:
    """`op` with its name, its reads' tensor names and its variables canonical."""
    variables: dict[Var, Var] = {}
    for axis in op.axes + op.reduce_axes:
        variables[axis.var] = Var(f"v{len(variables)}", axis.var.dtype)

    renamed_tensors: dict[int, Tensor] = {}

    def rename(node: Expr) -> Expr | None:
        if isinstance(node, Var):
            return variables.get(node)
        if isinstance(node, TensorRead):
            key = id(node.tensor)
            if key not in renamed_tensors:
                source = node.tensor.op
                renamed_tensors[key] = Tensor(
                    PlaceholderOp(stage_names[key], source.shape, source.dtype)
                )
            return TensorRead(renamed_tensors[key], node.indices)
        return None

    body = map_expr(op.body, rename)
    axes = tuple(type(a)(variables[a.var], a.extent, a.kind) for a in op.axes)
    if isinstance(body, Reduce):
        reduce_axes = tuple(type(a)(variables[a.var], a.extent, a.kind) for a in op.reduce_axes)
        body = Reduce(body.combiner, body.source, reduce_axes)
    return ComputeOp(name, axes, body, op.tag)


def _float_ops(body: Expr) -> int:
    """Arithmetic operations on floating-point values in one evaluation of `body`."""
    from ember.te.expr import Binary, Call

    count = 1 if isinstance(body, Reduce) else 0  # the combine step
    for node in walk(body):
        if isinstance(node, Binary | Call) and node.dtype.startswith("float"):
            count += 1
    return count

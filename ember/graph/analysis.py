"""Model statistics for `ember info`: op histogram, parameter count, FLOPs per op type."""

from __future__ import annotations

from dataclasses import dataclass

from ember.graph.ir import Graph, Value, param_count
from ember.graph.ops import get_op, node_macs


@dataclass(frozen=True, slots=True)
class OpTypeCost:
    """Totals over every node of one op type.

    `macs` counts multiply-accumulates for ops that are made of them (conv, dense,
    matmul) and is 0 otherwise; `flops` counts 2 per multiply-accumulate and one per
    elementary operation for everything else (one per output element for elementwise
    ops, one per input element for reductions and pools, as the op's cost function
    says)."""

    op: str
    count: int
    macs: int
    flops: int


@dataclass(frozen=True, slots=True)
class ModelSummary:
    name: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    num_nodes: int
    num_params: int
    param_bytes: int
    ops: tuple[OpTypeCost, ...]  # sorted by FLOPs, largest first

    @property
    def total_macs(self) -> int:
        return sum(op.macs for op in self.ops)

    @property
    def total_flops(self) -> int:
        return sum(op.flops for op in self.ops)

    def to_json(self) -> dict[str, object]:
        def tensor(value: Value) -> dict[str, object]:
            return {"name": value.name, "shape": list(value.shape), "dtype": value.dtype}

        return {
            "name": self.name,
            "inputs": [tensor(v) for v in self.inputs],
            "outputs": [tensor(v) for v in self.outputs],
            "nodes": self.num_nodes,
            "params": self.num_params,
            "param_bytes": self.param_bytes,
            "total_macs": self.total_macs,
            "total_flops": self.total_flops,
            "ops": [
                {"op": op.op, "count": op.count, "macs": op.macs, "flops": op.flops}
                for op in self.ops
            ],
        }


def summarize(graph: Graph) -> ModelSummary:
    """Count nodes, params and costs of `graph`."""
    totals: dict[str, list[int]] = {}
    for node in graph.nodes:
        opdef = get_op(node.op)
        cost = node_macs(node)
        macs, flops = (cost, 2 * cost) if opdef.counts_macs else (0, cost)
        entry = totals.setdefault(node.op, [0, 0, 0])
        entry[0] += 1
        entry[1] += macs
        entry[2] += flops
    ops = sorted(
        (OpTypeCost(op, count, macs, flops) for op, (count, macs, flops) in totals.items()),
        key=lambda item: (-item.flops, -item.count, item.op),
    )
    return ModelSummary(
        name=graph.name,
        inputs=graph.inputs,
        outputs=graph.outputs,
        num_nodes=len(graph.nodes),
        num_params=param_count(graph),
        param_bytes=sum(v.type.nbytes for v in graph.params),
        ops=tuple(ops),
    )

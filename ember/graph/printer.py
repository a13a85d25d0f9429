"""A readable text form of graphs, for users (`print(graph)`) and golden tests."""

from __future__ import annotations

from ember.graph.ir import Attrs, Graph, Node, Value


def format_attrs(attrs: Attrs) -> str:
    fields = [f"{name}={_format_attr(value)}" for name, value in attrs.items()]
    return "{" + ", ".join(fields) + "}" if fields else ""


def _format_attr(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_format_attr(v) for v in value) + "]"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _typed(value: Value) -> str:
    return f"%{value.name}: {value.type}"


def format_node(node: Node) -> str:
    outputs = ", ".join(f"%{v.name}" for v in node.outputs)
    arguments = ", ".join(f"%{v.name}" for v in node.inputs)
    attrs = format_attrs(node.attrs)
    types = ", ".join(str(v.type) for v in node.outputs)
    return f"{outputs} = {node.op}({arguments}){' ' + attrs if attrs else ''} : {types}"


def format_graph(graph: Graph) -> str:
    """`graph NAME(inputs) -> (outputs) { params; nodes }`, one node a line."""
    lines = [
        f"graph {graph.name}({', '.join(_typed(v) for v in graph.inputs)})"
        f" -> ({', '.join(_typed(v) for v in graph.outputs)}) {{"
    ]
    for value in graph.params:
        lines.append(f"  param {_typed(value)}")
    for node in graph.nodes:
        lines.append(f"  {format_node(node)}")
    lines.append("}")
    return "\n".join(lines)

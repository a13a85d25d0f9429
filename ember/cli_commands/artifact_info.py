"""`ember info net.tar`: what a compiled artifact holds, read from its mod.json
without loading its code, so it works on artifacts built for other machines too."""

from __future__ import annotations

import json
import math
import tarfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ember.cli_commands.common import format_bytes, format_count
from ember.runtime.abi import TensorSpec
from ember.runtime.artifact import read_metadata
from ember.runtime.module import ModuleInfo


def is_artifact(model: str) -> bool:
    """Whether `ember info` was given an artifact rather than a model."""
    return model.endswith(".tar") or (Path(model).is_file() and tarfile.is_tarfile(model))


def _entry(metadata: dict[str, Any], key: str, kind: type) -> Any:
    """An optional entry of mod.json (`kind()` if absent or of another type: `ember
    info` shows what it can of an artifact whose extras are damaged)."""
    value = metadata.get(key)
    return value if isinstance(value, kind) else kind()


def _int(table: dict[str, Any], key: str) -> int:
    value = table.get(key, 0)
    return int(value) if isinstance(value, int | float) and math.isfinite(value) else 0


def artifact_summary(path: Path) -> dict[str, Any]:
    """The facts `ember info` shows about an artifact, as plain JSON data."""
    metadata = read_metadata(path)
    info = ModuleInfo.from_metadata(metadata, str(path))
    plan = _entry(metadata, "memory_plan", dict)
    graph = _entry(metadata, "graph", dict)
    groups = [group for group in _entry(metadata, "groups", list) if isinstance(group, dict)]

    def tensor(spec: TensorSpec) -> dict[str, Any]:
        return {"name": spec.name, "shape": list(spec.shape), "dtype": spec.dtype}

    return {
        "artifact": str(path),
        "name": str(metadata.get("name", path.stem)),
        "target": info.target,
        "inputs": [tensor(spec) for spec in info.inputs],
        # `ember run -o` saves output i under output_i.
        "outputs": [{"key": f"output_{i}", **tensor(s)} for i, s in enumerate(info.outputs)],
        "groups": len(groups),
        "kernels": len({str(group.get("kernel")) for group in groups}),
        "arena_bytes": _int(plan, "arena_bytes"),
        "params": sum(math.prod(spec.shape) for spec in info.params),
        "param_bytes": sum(spec.nbytes for spec in info.params),
        "total_macs": _int(graph, "total_macs"),
        "total_flops": _int(graph, "total_flops"),
        "format_version": metadata.get("format_version"),
        "versions": _entry(metadata, "versions", dict),
    }


def print_artifact_info(model: str, as_json: bool) -> int:
    summary = artifact_summary(Path(model))
    if as_json:
        print(json.dumps(summary, indent=2))
        return 0
    console = Console()
    io = Table(title=f"{model}: inputs and outputs", title_justify="left")
    for column in ("", "key", "name", "shape", "dtype"):
        io.add_column(column)
    for kind in ("inputs", "outputs"):
        for entry in summary[kind]:
            key = entry.get("key", "")
            io.add_row(kind[:-1], key, entry["name"], str(entry["shape"]), entry["dtype"])
    console.print(io)
    lines = [
        f"target: {summary['target']}",
        f"fused groups: {summary['groups']}   kernels: {summary['kernels']}   "
        f"arena: {format_bytes(summary['arena_bytes'])}",
        f"params: {summary['params']:,} ({format_bytes(summary['param_bytes'])})",
        f"MACs: {format_count(summary['total_macs'])}   "
        f"FLOPs: {format_count(summary['total_flops'])}",
        f"artifact format {summary['format_version']}, built by Ember "
        f"{summary['versions'].get('ember', 'unknown')}",
    ]
    for line in lines:
        console.print(line, highlight=False)
    return 0

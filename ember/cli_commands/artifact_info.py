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
from ember.errors import ArtifactError
from ember.runtime.artifact import METADATA_FILE
from ember.runtime.module import REBUILD_HINT, ModuleInfo, TensorSpec


def is_artifact(model: str) -> bool:
    """Whether `ember info` was given an artifact rather than a model."""
    return model.endswith(".tar") or (Path(model).is_file() and tarfile.is_tarfile(model))


def read_artifact_metadata(path: Path) -> dict[str, Any]:
    """mod.json of the artifact at `path`, read straight from the tar."""
    if not path.is_file():
        raise ArtifactError(
            f"no artifact at {path}: build one with `ember compile MODEL -o {path}`"
        )
    try:
        with tarfile.open(path, "r:*") as tar:
            member = tar.getmember(METADATA_FILE)
            contents = tar.extractfile(member)
            if contents is None:
                raise KeyError(METADATA_FILE)
            metadata = json.loads(contents.read())
    except KeyError:
        raise ArtifactError(f"{path} has no {METADATA_FILE}: {REBUILD_HINT}") from None
    except (tarfile.TarError, EOFError, OSError, ValueError) as error:
        raise ArtifactError(
            f"{path} is not a readable Ember artifact ({error}): {REBUILD_HINT}"
        ) from None
    if not isinstance(metadata, dict):
        raise ArtifactError(f"{path}: {METADATA_FILE} is not a JSON object: {REBUILD_HINT}")
    return metadata


def artifact_summary(path: Path) -> dict[str, Any]:
    """The facts `ember info` shows about an artifact, as plain JSON data."""
    metadata = read_artifact_metadata(path)
    info = ModuleInfo.from_metadata(metadata, str(path))
    plan = metadata.get("memory_plan") or {}
    graph = metadata.get("graph") or {}
    groups = metadata.get("groups") or []

    def tensor(spec: TensorSpec) -> dict[str, Any]:
        return {"name": spec.name, "shape": list(spec.shape), "dtype": spec.dtype}

    return {
        "artifact": str(path),
        "name": metadata.get("name", path.stem),
        "target": info.target,
        "inputs": [tensor(spec) for spec in info.inputs],
        # `ember run -o` saves output i under output_i.
        "outputs": [{"key": f"output_{i}", **tensor(s)} for i, s in enumerate(info.outputs)],
        "groups": len(groups),
        "kernels": len({group.get("kernel") for group in groups}),
        "arena_bytes": int(plan.get("arena_bytes", 0)),
        "params": sum(math.prod(spec.shape) for spec in info.params),
        "param_bytes": sum(spec.nbytes for spec in info.params),
        "total_macs": int(graph.get("total_macs", 0)),
        "total_flops": int(graph.get("total_flops", 0)),
        "format_version": metadata.get("format_version"),
        "versions": metadata.get("versions", {}),
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

"""`make demo`: the main job on a built-in model, as far as Ember goes today.

Builds ResNet-18 with seeded random weights, exports it to ONNX and imports it back
(the path a user's model takes), runs the graph passes that prepare it for code
generation, and runs it with the reference interpreter, printing the time and the
top-5 classes. Native code generation and tuning arrive with the next issues; until
then the timing is the NumPy reference interpreter's, not compiled code's.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from ember.frontend import from_onnx
from ember.graph import interpret, verify
from ember.graph.passes import convert_layout, fold_batch_norm, fold_constants, fuse, simplify
from ember.testing import get_workload, to_onnx


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet-18")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    console = Console()

    graph, params = get_workload(args.model, batch_size=1, layout="NCHW")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{args.model}.onnx"
        to_onnx(graph, params, path)
        console.print(f"exported {args.model} to ONNX ({path.stat().st_size / 2**20:.1f} MiB)")
        graph, params = from_onnx(path)
    console.print(f"imported: {len(graph.nodes)} nodes")

    # Order matters: batch norms fold into conv weights before the layout change
    # re-lays those weights out; simplify then removes the transposes that cancel.
    for graph_pass in (fold_constants, fold_batch_norm, convert_layout, simplify):
        graph, params = graph_pass(graph, params)
        verify(graph, params)
        console.print(f"{graph_pass.__name__:>16}: {len(graph.nodes)} nodes")
    fused = fuse(graph, params)
    console.print(f"{'fuse':>16}: {len(fused.groups)} fused groups")

    rng = np.random.default_rng(0)
    image = rng.uniform(0, 1, size=graph.inputs[0].shape).astype(graph.inputs[0].dtype)
    inputs = {graph.inputs[0].name: image}
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        outputs = interpret(graph, params, inputs)
        times.append(time.perf_counter() - start)
    scores = next(iter(outputs.values()))[0]
    console.print(
        f"reference interpreter: median {1000 * float(np.median(times)):.1f} ms "
        f"over {args.repeat} runs (NumPy; compiled code comes with code generation)"
    )
    console.print("top-5 classes (random weights):")
    for rank, index in enumerate(np.argsort(scores)[::-1][:5], start=1):
        console.print(f"  {rank}. class {int(index):4d}  score {float(scores[index]):.5f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

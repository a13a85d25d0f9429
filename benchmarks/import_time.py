"""How long a model file takes to become an Ember graph, per format:

    python benchmarks/torch_models.py mobilenet_v2 -o mobilenet_v2.pt2
    python benchmarks/import_time.py mobilenet_v2.pt2 [model.tflite model.onnx ...]

For each file: in a fresh process, the import of the frontend's library (torch for
.pt2) and the first conversion, timed apart (a fresh process pays each library's
first-use costs once); then in the same process, the median of 5 more conversions,
with the frontend's own share (Ember's converters, against reading and decomposing,
which are torch's) for .pt2.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

_PROBE = r"""
import json, statistics, sys, time, warnings
warnings.simplefilter("ignore")
path = sys.argv[1]
start = time.perf_counter()
if path.endswith(".pt2"):
    import torch
    from ember.frontend.pytorch import loader
elif path.endswith(".tflite"):
    from ember.frontend import from_tflite
else:
    import onnx
    from ember.frontend import from_onnx
imported = time.perf_counter()

def convert():
    if path.endswith(".pt2"):
        begin = time.perf_counter()
        program = loader.decomposed(loader.load_program(path))
        middle = time.perf_counter()
        loader.convert_program(program)
        return time.perf_counter() - middle, middle - begin
    if path.endswith(".tflite"):
        from_tflite(path)
    else:
        from_onnx(path)
    return None, None

begin = time.perf_counter()
convert()
first = time.perf_counter() - begin
warm, ours, theirs = [], [], []
for _ in range(5):
    begin = time.perf_counter()
    own, library = convert()
    warm.append(time.perf_counter() - begin)
    if own is not None:
        ours.append(own)
        theirs.append(library)
print(json.dumps({
    "library_import": imported - start, "first": first, "warm": statistics.median(warm),
    "ember": statistics.median(ours) if ours else None,
    "library": statistics.median(theirs) if theirs else None,
}))
"""


def measure(path: Path) -> dict[str, float | None]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    args = parser.parse_args(argv)
    print(f"{'model':32s} {'lib import s':>12s} {'first s':>8s} {'warm s':>7s} "
          f"{'of which Ember s':>16s}")  # fmt: skip
    for path in args.models:
        times = measure(path)
        ours = "-" if times["ember"] is None else f"{times['ember']:.3f}"
        print(f"{path.name:32s} {times['library_import']:12.2f} {times['first']:8.2f} "
              f"{times['warm']:7.2f} {ours:>16s}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

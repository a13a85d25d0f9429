"""Compiled artifacts of one network, timed side by side with ONNX Runtime: did a
change to the compiler make the network faster? Build the artifact with each version
(`ember compile MODEL.onnx -o old.tar` in a checkout of the old commit, `-o new.tar`
in the new one), then time them together in one process:

    python benchmarks/compare_artifacts.py MODEL.onnx ARTIFACT [ARTIFACT ...]
        [--threads 2] [--repeat 20]

Every artifact and an ONNX Runtime session of MODEL.onnx run on the same seeded input
in alternating blocks (benchmarks/compare.py's method: the machine's drift over
minutes falls on all of them alike), and the script prints each one's median, its
ratio to the first artifact and to ONNX Runtime, and its largest difference from ONNX
Runtime's outputs. Separate runs of compare.py, minutes apart, differed by 5% on the
same code on this shared machine; side by side, a 2% change shows.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from compare import add_alternation_arguments, fed_beside_ort, time_alternately


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="the .onnx file the artifacts were built from")
    parser.add_argument("artifacts", nargs="+", type=Path, metavar="ARTIFACT")
    add_alternation_arguments(parser)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from ember.runtime import load

    modules = [load(path) for path in args.artifacts]
    session, feed = fed_beside_ort(modules, args.model, args.threads)
    expected = session.run(None, feed)
    differences = []
    for module in modules:
        module.run()
        got = [module.get_output(i) for i in range(module.get_num_outputs())]
        differences.append(
            max(float(np.max(np.abs(g - e))) for g, e in zip(got, expected, strict=True))
        )
    runners = [module.run for module in modules] + [lambda: session.run(None, feed)]
    *ember_ms, ort_ms = time_alternately(runners, args)
    for path, ms, difference in zip(args.artifacts, ember_ms, differences, strict=True):
        print(
            f"{path}: {ms:.3f} ms, / first {ms / ember_ms[0]:.3f}, / ORT {ms / ort_ms:.3f}, "
            f"max |diff| from ORT {difference:.2e}"
        )
    print(f"ONNX Runtime: {ort_ms:.3f} ms")


if __name__ == "__main__":
    main()

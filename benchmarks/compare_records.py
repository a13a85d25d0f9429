"""Several tuning logs of one network, timed side by side: which records make the
faster network? (E.g. 200 trials warm-started against 2,000 from scratch.)

    python benchmarks/compare_records.py MODEL LOG [LOG ...] [--threads 2] [--repeat 20]
        [--compilers gcc,clang-14]

Compiles MODEL (an .onnx file or a built-in workload, exported to ONNX as
benchmarks/compare.py does) once per log and once untuned, then times every artifact
and an ONNX Runtime session in alternating blocks in one process (tune_network.py's
method: the machine's drift over minutes cancels out), and prints each one's median
and its ratio to the untuned network and to ONNX Runtime. With `--compilers`, each
artifact is built once per compiler (`$CC` for `ember compile`): the same schedules
compiled by GCC and by clang, timed side by side.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from compare import (
    _compile,
    _onnx_file,
    add_alternation_arguments,
    fed_beside_ort,
    time_alternately,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("logs", nargs="+", metavar="LOG")
    add_alternation_arguments(parser)
    parser.add_argument("--compilers", help="comma-separated $CC values to build each with")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from ember.runtime import load

    compilers = args.compilers.split(",") if args.compilers else [os.environ.get("CC", "")]
    logs = [None, *args.logs]
    names = [
        f"{log or 'untuned'}" + (f" [{cc}]" if args.compilers else "")
        for log in logs
        for cc in compilers
    ]
    with tempfile.TemporaryDirectory(prefix="ember-records-") as scratch:
        work = Path(scratch)
        onnx_path = _onnx_file(args.model, args, work)
        modules = []
        for index, (log, cc) in enumerate((log, cc) for log in logs for cc in compilers):
            artifact = work / f"{index}.tar"
            options = argparse.Namespace(
                target=args.target, input_shapes=args.input_shapes, tuning_records=log
            )
            if cc:
                os.environ["CC"] = cc
            _compile(onnx_path, artifact, options, None)
            modules.append(load(artifact))
        session, feed = fed_beside_ort(modules, onnx_path, args.threads)
        runners = [module.run for module in modules] + [lambda: session.run(None, feed)]
        *ember_ms, ort_ms = time_alternately(runners, args)
    for name, ms in zip(names, ember_ms, strict=True):
        print(f"{name}: {ms:.3f} ms, / untuned {ms / ember_ms[0]:.3f}, / ORT {ms / ort_ms:.3f}")
    print(f"ONNX Runtime: {ort_ms:.3f} ms")


if __name__ == "__main__":
    main()

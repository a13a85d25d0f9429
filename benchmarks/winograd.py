"""3x3 convs as Winograd's F(2x2, 3x3) against the direct convs and ONNX Runtime: each
network compiled twice (`EMBER_WINOGRAD=1` and `0`), the two artifacts and an ONNX
Runtime session timed in alternating blocks in one process, and how far each Ember
output is from ONNX Runtime's.

    python benchmarks/winograd.py [MODEL ...] [--threads 2] [--repeat 20] [--block 5]

MODEL is an .onnx file or a built-in workload (default: resnet-18, resnet-50). Prints
per network the three medians, Winograd / direct, each / ONNX Runtime, and the largest
difference of each Ember output from ONNX Runtime's, relative to its largest value.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

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
    parser.add_argument("models", nargs="*", default=["resnet-18", "resnet-50"])
    add_alternation_arguments(parser)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from ember.runtime import load

    print(f"{'model':<22}{'direct ms':>10}{'wino ms':>10}{'ORT ms':>10}{'wino/dir':>9}"
          f"{'dir/ORT':>9}{'wino/ORT':>9}{'dir diff':>10}{'wino diff':>10}")  # fmt: skip
    for model in args.models:
        with tempfile.TemporaryDirectory(prefix="ember-winograd-") as scratch:
            work = Path(scratch)
            onnx_path = _onnx_file(model, args, work)
            options = argparse.Namespace(
                target=args.target, input_shapes=args.input_shapes, tuning_records=None
            )
            modules = []
            for switch in ("0", "1"):
                os.environ["EMBER_WINOGRAD"] = switch
                artifact = work / f"winograd{switch}.tar"
                _compile(onnx_path, artifact, options, None)
                modules.append(load(artifact))
            os.environ.pop("EMBER_WINOGRAD")
            session, feed = fed_beside_ort(modules, onnx_path, args.threads)
            want = session.run(None, feed)[0]
            diffs = []
            for module in modules:
                module.run()
                got = module.get_output(0)
                diffs.append(float(np.abs(got - want).max() / np.abs(want).max()))
            ort_run = functools.partial(session.run, None, feed)
            runners = [module.run for module in modules] + [ort_run]
            direct, winograd, ort = time_alternately(runners, args)
        print(f"{model:<22}{direct:>10.3f}{winograd:>10.3f}{ort:>10.3f}"
              f"{winograd / direct:>9.3f}{direct / ort:>9.3f}{winograd / ort:>9.3f}"
              f"{diffs[0]:>10.1e}{diffs[1]:>10.1e}")  # fmt: skip


if __name__ == "__main__":
    main()

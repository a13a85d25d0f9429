"""How close a quantized model's outputs are, compiled by Ember, to ONNX Runtime's.

    python benchmarks/int8_accuracy.py model.int8.onnx [--samples 8] [--seed 0]

Both run the model on the same random inputs (standard normal, the calibration's
distribution in `ember quantize`'s docs); every output element's difference is counted
in steps of the output's quantization (the scale of the last DequantizeLinear before
the output; a float output that is not dequantized is compared in absolute terms). It
prints the distribution: how many elements are equal, within one step, within two, and
the largest difference, and whether the top-1 class agrees per sample.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

import ember
from ember.frontend import from_onnx


def output_step(model: onnx.ModelProto) -> float | None:
    """The scale of the DequantizeLinear that makes the first graph output, if any."""
    output = model.graph.output[0].name
    producers = {out: node for node in model.graph.node for out in node.output}
    initializers = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    node = producers.get(output)
    if node is None or node.op_type != "DequantizeLinear" or node.input[1] not in initializers:
        return None
    scale = initializers[node.input[1]]
    return float(scale.reshape(-1)[0]) if scale.size == 1 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    model = onnx.load(args.model)
    graph, params = from_onnx(model)
    module = ember.build(graph, "llvm", params).load()
    session = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    step = output_step(model) or 1.0
    rng = np.random.default_rng(args.seed)
    counts: Counter[int] = Counter()
    total, largest, same_top1 = 0, 0.0, 0
    for _ in range(args.samples):
        inputs = {
            value.name: rng.standard_normal(value.shape).astype(np.float32)
            for value in graph.inputs
        }
        ours = next(iter(module(**inputs).values()))
        theirs = session.run(None, inputs)[0]
        steps = np.rint(np.abs(ours - theirs) / step).astype(np.int64)
        counts.update(steps.reshape(-1).tolist())
        total += steps.size
        largest = max(largest, float(np.abs(ours - theirs).max()))
        same_top1 += int(np.argmax(ours) == np.argmax(theirs))
    print(f"{args.model}: {args.samples} samples, {total} elements, output step {step:.4g}")
    within = 0
    for distance in sorted(counts):
        within += counts[distance]
        share, cumulative = counts[distance] / total, within / total
        print(f"  {distance} steps: {share:8.4%}   (within: {cumulative:8.4%})")
    print(f"  largest difference {largest:.4g}; top-1 agrees on {same_top1}/{args.samples}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

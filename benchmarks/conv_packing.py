"""Conv weight layouts side by side: HWIO against packed `[O/b][KH][KW][I][b]`
(`conv_pack`, what `pack_weights` makes), each conv compiled with its default schedule
and timed with warm caches and with the weights evicted before every run (the input
touched again, as the previous kernel of a network leaves it).

    python benchmarks/conv_packing.py [--threads 2] [--repeat 15]

The shapes are ResNet-18's 3x3 convs (56x56x64 ... 7x7x512, the strided 14x14x256 ->
512) and ResNet-50's last 1x1 conv. Both layouts run the same input and weights (the
outputs are compared), alternately, one run at a time; medians of `--repeat` runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from ember import Target
from ember.backend import Kernel, compile_kernel
from ember.device import device_model
from ember.graph.ir import TensorType
from ember.graph.ops.attrs import ConvAttrs
from ember.graph.ops.packed import pack_conv_weight
from ember.graph.ops.registry import get_op
from ember.schedule.default import default_schedule
from ember.te import ComputeDAG, placeholder
from ember.topi import declare

SHAPES = (  # size, input channels, output channels, kernel, stride
    (56, 64, 64, 3, 1),
    (28, 128, 128, 3, 1),
    (14, 256, 256, 3, 1),
    (7, 512, 512, 3, 1),
    (14, 256, 512, 3, 2),
    (7, 512, 2048, 1, 1),
)
EVICT_BYTES = 64 << 20  # more than this machine's last-level cache


def build(
    size: int, inputs: int, outputs: int, kernel: int, stride: int, packed: bool
) -> tuple[Kernel, tuple[int, ...], int]:
    """The conv (NHWC, padding kernel // 2) as a compiled kernel, weight HWIO or packed."""
    target = Target("llvm")
    block = device_model(target).lanes("float32")
    pad = kernel // 2
    attrs = ConvAttrs((stride, stride), (pad,) * 4, (1, 1), 1, "NHWC", "HWIO")
    data_type = TensorType((1, size, size, inputs), "float32")
    shape = (
        (outputs // block, kernel, kernel, inputs, block)
        if packed
        else (kernel, kernel, inputs, outputs)
    )
    op = "conv_pack" if packed else "conv"
    (out_type,) = get_op(op).infer([data_type, TensorType(shape, "float32")], attrs)
    data = placeholder(data_type.shape, "float32", "data")
    weight = placeholder(shape, "float32", "weight")
    (out,) = declare(op, [data, weight], attrs, [out_type])
    dag = ComputeDAG([out], [data, weight])
    name = f"conv_{'packed' if packed else 'hwio'}"
    compiled = compile_kernel(default_schedule(dag, target), target, name)
    return compiled.load(), out_type.shape, block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before the first kernel loads

    rng = np.random.default_rng(0)
    evict = np.ones(EVICT_BYTES // 4, dtype=np.float32)
    print(f"{args.threads} threads, medians of {args.repeat} single runs, default schedules")
    print(f"{'conv':<24} {'timing':<13} {'HWIO ms':>8} {'packed ms':>10} {'packed/HWIO':>12}")
    for size, inputs, outputs, kernel, stride in SHAPES:
        x = rng.standard_normal((1, size, size, inputs), dtype=np.float32)
        hwio = rng.standard_normal((kernel, kernel, inputs, outputs), dtype=np.float32)
        runs = {}
        for packed in (False, True):
            compiled, out_shape, block = build(size, inputs, outputs, kernel, stride, packed)
            weight = pack_conv_weight(hwio, block) if packed else hwio
            out = np.empty(out_shape, np.float32)
            runs[packed] = (compiled, weight, out)
            compiled(x, weight, out)
        np.testing.assert_allclose(runs[True][2], runs[False][2], rtol=1e-4, atol=1e-4)
        name = f"{size}x{size}x{inputs}->{outputs} {kernel}x{kernel}/{stride}"
        for cold in (False, True):
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.repeat):
                for packed in (False, True):
                    compiled, weight, out = runs[packed]
                    if cold:
                        evict += 1.0  # evicts everything; then the input is read again
                        float(x.sum())
                    else:
                        compiled(x, weight, out)
                    start = time.perf_counter()
                    compiled(x, weight, out)
                    times[packed].append(time.perf_counter() - start)
            hwio_ms, packed_ms = (statistics.median(times[p]) * 1e3 for p in (False, True))
            timing = "weights cold" if cold else "warm"
            ratio = packed_ms / hwio_ms
            print(f"{name:<24} {timing:<13} {hwio_ms:8.3f} {packed_ms:10.3f} {ratio:12.2f}")


if __name__ == "__main__":
    main()

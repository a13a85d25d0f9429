"""The arrays candidates run on, and how their outputs are compared with the DAG's
reference evaluation. Shared by the tuner's process and the measure worker, so both
see the same inputs for the same arguments.

Input values (deterministic per seed and argument position, so two inputs of the same
shape differ and swapped arguments show up as wrong answers):

- floats: uniform in [-1, 1], products and sums stay far from overflow;
- 8-bit integers (quantized data, never indices): uniform in [-8, 8] ([0, 16] unsigned);
- wider integers: 0. They may be indices into another input: gather/take wrap with a
  floor modulo (any value is safe) but `sparse_dense` reads at its `indptr`/`indices`
  with only the row-range guard; 0 is in bounds on every axis and makes every
  `indptr` row empty. A zero divisor is no trap either: generated code and NumPy both
  define integer division by 0 as 0;
- bools: random.

Tolerance of a floating-point output (`output_tolerance`): schedules reorder fp32
reductions (tiling splits a sum into partial sums, FMA contraction rounds once
instead of twice) while the reference sums in float64 and rounds once. The error of an
fp32 sum of K terms grows like sqrt(K) * eps * (magnitude of the partial sums), and
the partial sums are bounded by about the largest output, so an element passes when

    |out - ref| <= 1024 * eps * |ref| + 32 * eps * sqrt(K) * max|ref|

(eps of the output's dtype: rtol ~1.2e-4 for fp32 also covers a few ulps of libm
differences in exp/tanh/erf). For resnet-18's tasks with their default schedules the
worst error seen is 100-500 times below this atol (a 3x3x256 conv: 3e-5 against 6e-3),
while a dropped or doubled reduction term, ~0.25 in magnitude, is still far outside.
NaN or inf must appear exactly where the reference has them (so must an output
element the kernel never writes: check runs poison outputs with NaN); integers and
bools must be equal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ember.autoschedule.measure import ArgSpec
from ember.runtime.module import aligned_empty
from ember.te.dag import ComputeDAG
from ember.te.tensor import ComputeOp
from ember.te.visit import float_rounding


def reference_arguments(args: Sequence[ArgSpec], seed: int = 0) -> list[np.ndarray]:
    """One array per argument: inputs filled as the module docstring says, outputs
    zeroed. The same `args` and `seed` give the same values in every process."""
    arrays = []
    for position, spec in enumerate(args):
        array = aligned_empty(spec.shape, spec.dtype)
        if spec.is_output:
            array[...] = 0
        else:
            array[...] = _input_values(spec, np.random.default_rng([seed, position]))
        arrays.append(array)
    return arrays


def _input_values(spec: ArgSpec, rng: np.random.Generator) -> np.ndarray:
    dtype = np.dtype(spec.dtype)
    if dtype.kind == "f":
        return rng.uniform(-1.0, 1.0, spec.shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, spec.shape).astype(dtype)
    if dtype.kind in "iu" and dtype.itemsize == 1:
        low = -8 if dtype.kind == "i" else 0
        return rng.integers(low, low + 17, spec.shape).astype(dtype)
    return np.zeros(spec.shape, dtype)


def poison_outputs(arrays: Sequence[np.ndarray], args: Sequence[ArgSpec]) -> None:
    """Fill the outputs with values no correct kernel leaves (NaN, the largest
    integer), so an element a candidate never writes is a wrong answer."""
    for array, spec in zip(arrays, args, strict=True):
        if spec.is_output:
            kind = array.dtype.kind
            array[...] = np.nan if kind == "f" else np.iinfo(array.dtype).max if kind in "iu" else 1


def reduction_length(dag: ComputeDAG) -> int:
    """The most terms any stage of `dag` reduces over (1 without reductions)."""
    lengths = [
        math.prod(axis.extent for axis in tensor.op.reduce_axes)
        for tensor in dag.compute_tensors
        if isinstance(tensor.op, ComputeOp)
    ]
    return max([1, *lengths])


@dataclass(frozen=True, slots=True)
class Tolerance:
    """|out - ref| <= rtol * |ref| + atol, elementwise."""

    rtol: float
    atol: float


def output_tolerance(reference: np.ndarray, reduction: int) -> Tolerance:
    """The tolerance for a floating-point output; see the module docstring for why."""
    eps = float(np.finfo(reference.dtype).eps)
    finite = reference[np.isfinite(reference)]
    scale = float(np.max(np.abs(finite))) if finite.size else 0.0
    return Tolerance(1024 * eps, 32 * eps * math.sqrt(reduction) * scale)


def rounds_inexact_floats(dag: ComputeDAG) -> bool:
    """Whether `dag` rounds to integers (a rounding call or a float-to-integer cast)
    values computed with a transcendental function (exp, tanh, erf, ...): generated code
    computes those within an ulp or two of NumPy, so a value on the edge of a rounding
    step may round the other way (a quantized swish, sigmoid or GELU)."""
    bodies = (t.op.body for t in dag.compute_tensors if isinstance(t.op, ComputeOp))
    rounds, inexact = float_rounding(bodies)
    return rounds and inexact


def compare_outputs(
    outputs: Sequence[np.ndarray],
    references: Sequence[np.ndarray],
    reduction: int,
    step_flips: bool = False,
) -> str:
    """ "" when every output matches its reference, else what is wrong and where. With
    `step_flips` (`rounds_inexact_floats`), an integer output may differ by one in at
    most one element per thousand (at least one)."""
    for position, (output, reference) in enumerate(zip(outputs, references, strict=True)):
        if output.shape != reference.shape or output.dtype != reference.dtype:
            return (
                f"output {position} is a {output.dtype} array of shape {output.shape}, the "
                f"reference a {reference.dtype} array of shape {reference.shape}"
            )
        problem = _compare_one(output, reference, reduction, step_flips)
        if problem:
            return f"output {position}: {problem}"
    return ""


def _compare_one(
    output: np.ndarray, reference: np.ndarray, reduction: int, step_flips: bool = False
) -> str:
    if reference.dtype.kind != "f":
        wrong = output != reference
        if not wrong.any():
            return ""
        if step_flips and reference.dtype.kind in "iu":
            apart = np.abs(output.astype(np.int64) - reference.astype(np.int64))
            if apart.max() <= 1 and int(wrong.sum()) <= max(1, output.size // 1000):
                return ""
        where = _argmax_index(wrong)  # the first True
        return (
            f"{int(wrong.sum())} of {output.size} elements differ; first at {where}: got "
            f"{output[where]}, expected {reference[where]}"
        )
    tolerance = output_tolerance(reference, reduction)
    close = np.isclose(output, reference, tolerance.rtol, tolerance.atol, equal_nan=True)
    if close.all():
        return ""
    error = np.abs(output.astype(np.float64) - reference.astype(np.float64))
    error[close] = 0.0
    error = np.where(np.isnan(error), np.inf, error)  # a NaN where a number belongs
    where = _argmax_index(error)
    relative = float(error[where]) / max(abs(float(reference[where])), 1e-30)
    return (
        f"{int((~close).sum())} of {output.size} elements outside the tolerance "
        f"(rtol {tolerance.rtol:.2g}, atol {tolerance.atol:.2g}); worst at {where}: "
        f"got {output[where]}, expected {reference[where]} (abs error {float(error[where]):.3g}, "
        f"rel error {relative:.3g})"
    )


def _argmax_index(values: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(values)), values.shape))

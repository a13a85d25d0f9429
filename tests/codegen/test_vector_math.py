"""The vectorised float32 math of the C backend (`ember.codegen.c_helpers`: exp, log,
sigmoid, tanh, erf in GCC vector types; sqrt, a lane loop GCC makes one instruction)
against float64 NumPy, on dense samples of every float32 range that matters, for 4-,
8- and 16-lane vectors (SSE, AVX2, the host's widest). Measured over all float32
inputs once (2026-12-02): exp 1.02 ulp at most where the result is a normal float; log
0.83 ulp over every positive float (subnormals included); sigmoid and tanh 1.3e-7
relative at most. erf (a rational fit whose float rounding dominates), over every
31st float32 below 5 (2026-12-03): 3.2e-7 relative and absolute, 5.3 ulp. The bounds
asserted leave a little room for other compilers' contractions."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable

import numpy as np
import pytest

import ember
from ember.graph import GraphBuilder
from ember.graph.ops.math import erf

TARGETS = ["llvm -mcpu=x86-64-v2", "llvm -mcpu=x86-64-v3", "llvm"]
FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "erf": erf,
    "exp": np.exp,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
}
TINY = float(np.finfo(np.float32).tiny)


def dense_samples() -> np.ndarray:
    """Every 61st float32 bit pattern of [0, 104] and of [-104, 0], and the ends."""
    top = np.float32(104).view(np.int32)
    positive = np.arange(0, top, 61, dtype=np.int32).view(np.float32)
    samples = np.concatenate([positive, -positive, np.float32([88.7228, -87.3365, -103.9])])
    return samples[: samples.size // 64 * 64]  # whole vectors of every width


def run(function: str, target: str, x: np.ndarray) -> np.ndarray:
    builder = GraphBuilder()
    y = builder.add(function, [builder.input("x", x.shape)])
    graph, params = builder.build([y])
    try:
        module = ember.build(graph, target, params=params).load()
    except ember.EmberError as error:
        pytest.skip(f"{target} does not build or run here: {error}")
    module.set_input("x", x)
    module.run()
    return module.get_output(0)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_accuracy_over_dense_samples(function: str, target: str) -> None:
    x = dense_samples()
    actual = run(function, target, x).astype(np.float64)
    expected = FUNCTIONS[function](x.astype(np.float64))
    finite = np.abs(expected) <= np.finfo(np.float32).max
    normal = finite & (np.abs(expected) >= TINY)
    if function == "exp":
        ulps = np.abs(actual - expected)[normal] / np.spacing(
            expected[normal].astype(np.float32)
        ).astype(np.float64)
        assert ulps.max() <= 1.5, x[normal][ulps.argmax()]
        assert np.all(np.isinf(actual[~finite])) and np.all(actual[~finite] > 0)
    else:
        relative_bound, absolute_bound = (5e-7, 5e-7) if function == "erf" else (3e-7, 2e-7)
        relative = np.abs(actual - expected)[normal] / np.abs(expected[normal])
        assert relative.max() <= relative_bound, x[normal][relative.argmax()]
        assert np.abs(actual - expected).max() <= absolute_bound


def ulps(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """|actual - expected| in units of the last place of float32 `expected`."""
    spacing = np.spacing(np.abs(expected).astype(np.float32)).astype(np.float64)
    return np.abs(actual.astype(np.float64) - expected) / spacing


@pytest.mark.parametrize("target", TARGETS)
def test_log_over_every_1021st_positive_float(target: str) -> None:
    """log's argument reduction reads the exponent bits, so every binade is sampled,
    subnormals included; log is 0 at 1, so the neighbours of 1 are all taken."""
    bits = np.arange(1, 0x7F800000, 1021, dtype=np.int32)
    near_one = np.float32(1).view(np.int32) + np.arange(-2048, 2048, dtype=np.int32)
    x = np.concatenate([bits, near_one]).view(np.float32)
    x = x[: x.size // 64 * 64]
    expected = np.log(x.astype(np.float64))
    error = ulps(run("log", target, x), expected)
    assert error[expected != 0].max() <= 1.0, x[expected != 0][error[expected != 0].argmax()]
    assert np.all(run("log", target, np.ones(64, np.float32)) == 0)


@pytest.mark.parametrize("target", TARGETS)
def test_sqrt_is_correctly_rounded(target: str) -> None:
    x = np.arange(0, 0x7F800000, 4099, dtype=np.int32).view(np.float32)[: 520192 // 64 * 64]
    np.testing.assert_array_equal(run("sqrt", target, x), np.sqrt(x))


@pytest.mark.parametrize("function", [*sorted(FUNCTIONS), "log", "sqrt"])
def test_special_values(function: str) -> None:
    x = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0, 89.0, -104.0, 1e-30, -1e-30, 20, -20])
    x = np.tile(x, 16)[:160]
    actual = run(function, "llvm", x)[:11]
    reference = {**FUNCTIONS, "log": np.log, "sqrt": np.sqrt}[function]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        expected = reference(x[:11].astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    np.testing.assert_allclose(actual, expected, rtol=3e-7, atol=0)


def test_the_vector_path_is_taken() -> None:
    """The kernel's C calls the vector helper, not expf lane by lane (and the machine
    code of a square root is one instruction a vector: test_sqrt_is_one_instruction)."""
    from ember.backend import compile_kernel
    from ember.graph.passes import fuse
    from ember.schedule.default import default_schedule
    from ember.topi import group_to_dag

    builder = GraphBuilder()
    y = builder.add("sigmoid", [builder.input("x", (4096,))])
    graph, params = builder.build([y])
    dag, _ = group_to_dag(fuse(graph, params).groups[0])
    source = compile_kernel(default_schedule(dag, ember.Target("llvm")), "llvm", "k").source
    assert "ember_vsigmoid_float32x" in source and "expf(" not in source


@pytest.mark.parametrize(
    ("target", "objdump", "instruction"),
    [
        ("llvm -mcpu=x86-64-v3", "objdump", "vsqrtps"),
        ("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72", "aarch64-linux-gnu-objdump", "fsqrt"),
    ],
)
def test_sqrt_is_one_instruction(target: str, objdump: str, instruction: str) -> None:
    """A lane loop of sqrtf compiles to the vector square root, not a call per lane
    (`-fno-math-errno`: sqrtf may no longer have to set errno)."""
    from ember.backend import compile_kernel
    from ember.graph.passes import fuse
    from ember.schedule.default import default_schedule
    from ember.topi import group_to_dag

    if shutil.which(objdump) is None:
        pytest.skip(f"{objdump} is not installed")
    builder = GraphBuilder()
    y = builder.add("sqrt", [builder.input("x", (4096,))])
    graph, params = builder.build([y])
    dag, _ = group_to_dag(fuse(graph, params).groups[0])
    try:
        compiled = compile_kernel(default_schedule(dag, ember.Target(target)), target, "k")
    except ember.EmberError as error:
        pytest.skip(f"{target} does not compile here: {error}")
    listing = subprocess.run(
        [objdump, "-d", "--no-show-raw-insn", str(compiled.path)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    assert instruction in listing and "sqrtf" not in listing
    if instruction == "fsqrt":
        assert re.search(r"fsqrt\s+v\d+\.4s", listing), "no vector fsqrt"

"""The vectorised float32 math of the C backend (`ember.codegen.c_helpers`: exp,
sigmoid, tanh, erf in GCC vector types) against float64 NumPy, on dense samples of every
float32 range that matters, for 4-, 8- and 16-lane vectors (SSE, AVX2, the host's
widest). Measured over all float32 inputs once (2026-12-02): exp 1.02 ulp at most
where the result is a normal float; sigmoid and tanh 1.3e-7 relative at most; erf
1.9e-7 relative below 1 (the fit's error), 9e-8 absolute above. The
bounds asserted leave a little room for other compilers' contractions."""

from __future__ import annotations

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
        relative = np.abs(actual - expected)[normal] / np.abs(expected[normal])
        assert relative.max() <= 3e-7, x[normal][relative.argmax()]
        assert np.abs(actual - expected).max() <= 2e-7


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_special_values(function: str) -> None:
    x = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0, 89.0, -104.0, 1e-30, -1e-30, 20, -20])
    x = np.tile(x, 16)[:160]
    actual = run(function, "llvm", x)[:11]
    with np.errstate(over="ignore"):
        expected = FUNCTIONS[function](x[:11].astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    np.testing.assert_allclose(actual, expected, rtol=3e-7, atol=0)


def test_the_vector_path_is_taken() -> None:
    """The kernel's C calls the vector helper, not expf lane by lane."""
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

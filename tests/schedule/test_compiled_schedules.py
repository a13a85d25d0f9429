"""Random legal schedules, compiled: lower -> simplify -> vectorize -> C -> gcc or clang -> run.

The interpreter-based property test in test_lower.py checks lowering; this one checks
that what the C code generator and the compiler make of the same random schedules
(parallel, vectorized and unrolled loops included) still computes the DAG.
"""

from __future__ import annotations

import numpy as np
import pytest
from compilers import compiling_with, host_compilers
from hypothesis import HealthCheck, given, note, settings
from schedule_cases import (
    PROPERTY_DAGS,
    WIDE_PROPERTY_DAGS,
    has_guarded_vector_loop,
    has_register_tile,
    random_inputs,
    random_schedule,
    random_tiled_schedule,
)

from ember.backend import build_kernel
from ember.loop.ir import PrimFunc
from ember.schedule import State, lower
from ember.te.evaluate import evaluate_dag


@pytest.mark.parametrize(
    ("examples", "derandomize"),
    [(40, True), pytest.param(400, False, marks=pytest.mark.slow)],
    ids=["fast", "explore"],
)
@pytest.mark.parametrize("workload", sorted(PROPERTY_DAGS))
@pytest.mark.parametrize("compiler", host_compilers())
def test_random_legal_schedules_compile_to_the_same_result(
    compiler: str, workload: str, examples: int, derandomize: bool
) -> None:
    """`make test` checks the same 40 schedules every run (a landing never depends on
    which examples were drawn); the slow tier explores new ones each run. Under each
    host compiler (tests/compilers.py): GCC 12's loop vectorizer miscompiled one of
    these (toolchain.BASE_FLAGS), and clang's flags are not GCC's."""
    dag = PROPERTY_DAGS[workload]()
    inputs = random_inputs(dag)
    expected = evaluate_dag(dag, inputs)

    # Each example runs the compiler once (a warm kernel cache makes reruns fast).
    @settings(
        max_examples=examples,
        derandomize=derandomize,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(random_schedule(dag))
    def property_holds(state: State) -> None:
        compile_and_compare(state, inputs, expected)

    with compiling_with(compiler):
        property_holds()


def compile_and_compare(
    state: State, inputs: list[np.ndarray], expected: list[np.ndarray]
) -> tuple[PrimFunc, str]:
    """Compile `state` for this machine, run it on `inputs` (outputs start as NaN, so
    an element never written shows) and compare with `expected` at fp32 tolerance
    (reductions here are at most 72 terms long); returns the loop IR and the C."""
    note(str([step.to_json() for step in state.steps]))  # type: ignore[attr-defined]
    func = lower(state)
    kernel = build_kernel(func, "llvm")
    outputs = [np.full(t.shape, np.nan, t.dtype) for t in state.dag.outputs]
    kernel(*inputs, *outputs)
    for got, want in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=kernel.source)
    return func, kernel.source or ""


# What each larger case is there for, shown by at least one of its examples (else the
# case tests less than it claims): a register tile of 16-lane vectors (an unrolled loop
# around a vectorized one, rendered as 64-byte GCC vectors whatever the host), or
# 16-lane vectors beside a vectorized loop that holds the guard of the tail.
TILE = "16-lane register tile"
TAIL = "16-lane vectors and a guarded tail"
WIDE_CASE_EXERCISES = {
    "conv2d_k32": TILE,
    "conv2d_k20": TAIL,
    "dense_n36": TAIL,
    "conv_pack_k48": TILE,
    "dense_pack_n32": TILE,
}


@pytest.mark.parametrize(
    "examples", [25, pytest.param(200, marks=pytest.mark.slow)], ids=["fast", "sweep"]
)
@pytest.mark.parametrize("workload", sorted(WIDE_PROPERTY_DAGS))
def test_random_register_tiles_compile_to_the_same_result(workload: str, examples: int) -> None:
    """Random schedules built around a vector register tile, on DAGs with 16-lane
    channel vectors, vector tails and packed weights. Derandomized (the same examples
    every run), so the check of what the examples exercised cannot flake."""
    dag = WIDE_PROPERTY_DAGS[workload]()
    inputs = random_inputs(dag)
    expected = evaluate_dag(dag, inputs)
    exercised: set[str] = set()

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(random_tiled_schedule(dag))
    def property_holds(state: State) -> None:
        func, source = compile_and_compare(state, inputs, expected)
        if "vector_size(64)" in source and has_register_tile(func):
            exercised.add(TILE)
        if "vector_size(64)" in source and has_guarded_vector_loop(func):
            exercised.add(TAIL)

    property_holds()
    assert WIDE_CASE_EXERCISES[workload] in exercised, exercised

"""Random legal schedules, compiled: lower -> simplify -> vectorize -> C -> gcc -> run.

The interpreter-based property test in test_lower.py checks lowering; this one checks
that what the C code generator and the compiler make of the same random schedules
(parallel, vectorized and unrolled loops included) still computes the DAG.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from schedule_cases import PROPERTY_DAGS, random_inputs, random_schedule

from ember.schedule import State, lower
from ember.te.evaluate import evaluate_dag
from ember.toolchain import build_kernel


@pytest.mark.parametrize("workload", sorted(PROPERTY_DAGS))
def test_random_legal_schedules_compile_to_the_same_result(workload: str) -> None:
    dag = PROPERTY_DAGS[workload]()
    inputs = random_inputs(dag)
    expected = evaluate_dag(dag, inputs)

    # Each example runs gcc once (a warm kernel cache makes reruns fast).
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(random_schedule(dag))
    def property_holds(state: State) -> None:
        note(str([step.to_json() for step in state.steps]))  # type: ignore[attr-defined]
        kernel = build_kernel(lower(state), "llvm")
        outputs = [np.full(t.shape, np.nan, t.dtype) for t in dag.outputs]
        kernel(*inputs, *outputs)
        for got, want in zip(outputs, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=kernel.source)

    property_holds()

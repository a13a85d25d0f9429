"""Differential-testing helpers: run ONNX Runtime on a model and compare with Ember.

ONNX Runtime is a test extra (`pip install -e '.[test]'`), imported only when used.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx

from ember.errors import EmberError

# fp32 tolerances used across the test suite. Reductions over thousands of terms
# (convs, dense layers) accumulate in a different order in ONNX Runtime than in NumPy,
# so comparisons of whole networks state their own, justified, looser bounds.
RTOL = 1e-4
ATOL = 1e-5


def run_onnxruntime(
    model: onnx.ModelProto | bytes, inputs: Mapping[str, np.ndarray], threads: int = 1
) -> dict[str, np.ndarray]:
    """Run `model` on the CPU with ONNX Runtime; returns outputs by name."""
    try:
        import onnxruntime
    except ImportError as error:
        raise EmberError(
            "onnxruntime is needed as the test oracle: pip install -e '.[test]'"
        ) from error
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Disable graph optimisations so ORT computes what the model says (fused kernels
    # may use approximations, e.g. for Gelu), which is what the interpreter computes.
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = model if isinstance(model, bytes) else model.SerializeToString()
    session = onnxruntime.InferenceSession(
        data, sess_options=options, providers=["CPUExecutionProvider"]
    )
    names = [out.name for out in session.get_outputs()]
    results = session.run(names, dict(inputs))
    return dict(zip(names, (np.asarray(r) for r in results), strict=True))


def assert_allclose(
    actual: Mapping[str, np.ndarray],
    expected: Mapping[str, np.ndarray],
    rtol: float = RTOL,
    atol: float = ATOL,
) -> None:
    """Same output names, shapes and dtypes, and values within tolerance."""
    assert list(actual) == list(expected), f"outputs {list(actual)} != {list(expected)}"
    for name, want in expected.items():
        got = actual[name]
        assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
        assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)


def check_against_onnxruntime(
    model: onnx.ModelProto,
    inputs: Mapping[str, np.ndarray],
    rtol: float = RTOL,
    atol: float = ATOL,
) -> dict[str, np.ndarray]:
    """Import `model` with Ember, verify the graph, run the reference interpreter and
    ONNX Runtime on the same inputs, and assert they agree. Returns Ember's outputs."""
    from ember.frontend import from_onnx
    from ember.graph import interpret, verify

    graph, params = from_onnx(model)
    verify(graph, params)
    ours = interpret(graph, params, inputs)
    theirs = run_onnxruntime(model, inputs)
    assert_allclose(ours, theirs, rtol=rtol, atol=atol)
    return ours

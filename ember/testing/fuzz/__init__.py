"""Ember's model fuzzer: mutated ONNX models in, findings out.

    python -m ember.testing.fuzz --minutes 10 --seed 1 --out /tmp/fuzz1
    python -m ember.testing.fuzz --cases 200 --seed 7          # a fixed amount of work
    python -m ember.testing.fuzz --replay /tmp/fuzz1/001-bug-KeyError.onnx --feed-seed 5

The contract it checks: for ANY model bytes, Ember gives either a correct answer or an
`EmberError` that says what is wrong; never another exception type, never a hang, never
a crash, and never a disagreement between the reference interpreter and the compiled
module, nor between the interpreter and ONNX Runtime where ONNX Runtime accepts the model.

Each case starts from one of the small seed models below (each imports, interprets like
ONNX Runtime and compiles like the interpreter today; tests/testing/test_fuzz.py checks
that), applies 1 to 3 mutations (structure-aware edits of the ModelProto: attribute
values and types, node inputs and outputs, input shapes and element types, initializers,
opsets, op types, nodes and graph outputs; or byte-level edits of the serialized model),
and runs the checks in a helper process (`ember.autoschedule.worker`, so a crash or a
hang costs a restart of the helper, never the fuzzer): `from_onnx` (symbolic input
dimensions fixed to 2 by `shapes=` in most cases), `verify`, the interpreter on random
inputs, ONNX Runtime on the same inputs, then `ember.build` and the compiled module on
the same inputs (for every case by default; --build-fraction builds fewer). Graphs with
a value over 64 MiB are imported and built but not run. A case is deterministic in
(seed, case index): `make_case(seed, index)` rebuilds it.

Outcomes: "ok"; "rejected" (an `EmberError` while importing or building: fine);
"bug" (any other exception); "internal_error" (an `EmberError` that only Ember's own
mistakes raise: a `GraphError` from a converter's graph, `LoopIRError`, `CompileError`,
or any `EmberError` after the import accepted the model: interpreting, loading or running
it); "mismatch_ort", "mismatch_compiled"; "hang" (no answer within --timeout) and "crash"
(the helper died: a signal or an exit). A hang or crash inside ONNX Runtime is counted
as "oracle_failure", not a finding. Findings are deduplicated by (outcome, exception
type, innermost `ember/` frame, or the op whose output disagrees); `--out DIR` keeps each
distinct finding's first model (`.onnx`) and a text file with its mutations, its
traceback (for a hang or a crash, the helper's faulthandler stack) and the `--replay`
command that checks the model again in this process, where the exception propagates
and a debugger can follow it (`python -m pdb -m ember.testing.fuzz --replay ...`).
The exit status is 1 when there is any finding.
"""

from __future__ import annotations

from ember.testing.fuzz.campaign import FuzzResult, fuzz, summary
from ember.testing.fuzz.check import (
    CheckFunction,
    StageLog,
    Verdict,
    check_case,
    difference,
    fixed_shapes,
)
from ember.testing.fuzz.mutations import MUTATIONS, Case, Mutation, make_case, mutate_bytes
from ember.testing.fuzz.seeds import SEED_GRAPHS, seed_model

__all__ = [
    "MUTATIONS",
    "SEED_GRAPHS",
    "Case",
    "CheckFunction",
    "FuzzResult",
    "Mutation",
    "StageLog",
    "Verdict",
    "check_case",
    "difference",
    "fixed_shapes",
    "fuzz",
    "make_case",
    "mutate_bytes",
    "seed_model",
    "summary",
]

"""Elementwise and broadcasting math references at the edges of their dtypes (the ONNX
converter tests in tests/frontend/test_onnx_math.py cover the ordinary cases)."""

from __future__ import annotations

import numpy as np
import pytest

from ember.graph.ir import NoAttrs
from ember.graph.ops import evaluate


@pytest.mark.parametrize("dtype", ["int64", "uint64"])
def test_integer_division_is_exact_beyond_float_precision(dtype: str) -> None:
    # 2**53 + 1 and up have no exact float64; C's integer division has no rounding.
    numerators = [2**53 + 1, 2**62 + 3, 9, 2**63 - 1]
    denominators = [1, 2, 4, 3]
    a, b = np.array(numerators, dtype), np.array(denominators, dtype)
    (quotient,) = evaluate("divide", [a, b], NoAttrs())
    assert quotient.dtype == np.dtype(dtype)
    assert quotient.tolist() == [n // d for n, d in zip(numerators, denominators, strict=True)]


def test_integer_division_truncates_toward_zero_for_every_sign() -> None:
    a = np.array([-(2**62) - 1, 2**62 + 1, -7, 7], np.int64)
    b = np.array([2, -2, 2, -2], np.int64)
    (quotient,) = evaluate("divide", [a, b], NoAttrs())
    assert quotient.tolist() == [-(2**61), -(2**61), -3, -3]


def test_integer_power_with_an_exponent_the_base_type_cannot_hold() -> None:
    # Found by atheris: an int64 exponent of 2**63 - 1 cast to the int16 base's type
    # wrapped negative, and NumPy refuses negative integer powers. It goes the way of
    # the compiled code instead (float64 pow, cast back); small exponents stay exact.
    base = np.asarray([2, 3, -1], np.int16)
    (small,) = evaluate("power", [base, np.asarray([3, 2, 5], np.int64)], NoAttrs())
    np.testing.assert_array_equal(small, [8, 9, -1])
    (huge,) = evaluate("power", [base, np.asarray([2, 2**63 - 1, 2**40], np.int64)], NoAttrs())
    assert huge.dtype == np.int16 and huge[0] == 4 and huge[2] == 1

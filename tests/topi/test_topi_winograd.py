"""The Winograd transforms' declarations against the graph references: tiles of 2 and
4, outputs that are not whole tiles, asymmetric padding, a batch of two."""

from __future__ import annotations

import numpy as np
import pytest
from topi_check import random, run_check

from ember.graph.ops.winograd import (
    WinogradInputAttrs,
    WinogradOutputAttrs,
    transform_weight,
    transforms,
)
from ember.topi.common import WINOGRAD_INPUT, WINOGRAD_OUTPUT


def _input_case(shape: tuple[int, ...], tile: int, padding: tuple[int, ...], case_id: str):
    attrs = WinogradInputAttrs(tile, padding)
    return pytest.param("winograd_input", [random(shape, seed=1)], attrs, id=case_id)


def _output_case(tiles: int, channels: int, tile: int, height: int, width: int, case_id: str):
    points = transforms(tile).points
    attrs = WinogradOutputAttrs(tile, height, width)
    product = random((points * points, tiles, channels), seed=2)
    return pytest.param("winograd_output", [product], attrs, id=case_id)


CASES = [
    _input_case((1, 6, 6, 5), 2, (1, 1, 1, 1), "input-f2"),
    _input_case((2, 7, 5, 3), 2, (1, 1, 1, 1), "input-f2-odd"),
    _input_case((1, 6, 7, 4), 2, (2, 0, 1, 2), "input-f2-asymmetric"),
    _input_case((1, 9, 8, 3), 4, (1, 1, 1, 1), "input-f4"),
    _output_case(9, 5, 2, 6, 6, "output-f2"),
    _output_case(2 * 12, 3, 2, 7, 5, "output-f2-odd"),
    _output_case(6, 4, 4, 9, 8, "output-f4"),
]


@pytest.mark.parametrize(("op", "inputs", "attrs"), CASES)
def test_matches_reference(op, inputs, attrs) -> None:
    # The transforms add and subtract a few terms (integers up to 8 for F(4x4)): the
    # same sums in float32 in another order than the reference's float64.
    run_check(op, inputs, attrs)


def test_transforms_are_tagged_for_their_schedules() -> None:
    dag = run_check(
        "winograd_input", [random((1, 6, 6, 4), seed=1)], WinogradInputAttrs(2, (1,) * 4)
    )
    assert dag.outputs[0].op.tag == WINOGRAD_INPUT
    dag = run_check("winograd_output", [random((16, 9, 4), seed=1)], WinogradOutputAttrs(2, 6, 6))
    assert dag.outputs[0].op.tag == WINOGRAD_OUTPUT


@pytest.mark.parametrize("tile", [2, 4])
def test_transforms_compose_to_the_convolution(tile: int) -> None:
    """Lavin and Gray's identity, on the references: Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A is the
    3x3 correlation of each tile's patch."""
    rng = np.random.default_rng(3)
    patch = rng.standard_normal((tile + 2, tile + 2))
    kernel = rng.standard_normal((3, 3))
    t = transforms(tile)
    transformed = (t.weight @ kernel @ t.weight.T) * (t.input @ patch @ t.input.T)
    got = t.output @ transformed @ t.output.T
    want = np.array(
        [[np.sum(patch[i : i + 3, j : j + 3] * kernel) for j in range(tile)] for i in range(tile)]
    )
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    weight = kernel.reshape(3, 3, 1, 1).astype(np.float32)
    np.testing.assert_allclose(
        transform_weight(weight, tile).reshape(tile + 2, tile + 2),
        t.weight @ kernel.astype(np.float32) @ t.weight.T,
        rtol=1e-6,
    )

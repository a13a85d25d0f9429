"""qconv and qconv_pack against a brute-force int64 sum: layouts, strides, dilations,
padding with the zero point, uint8 and int8 data, packed blocks and odd channel counts."""

from __future__ import annotations

import numpy as np
import pytest

from ember.errors import ShapeError
from ember.graph.ir import TensorType
from ember.graph.ops import evaluate, infer_types
from ember.graph.ops.attrs import QConvAttrs
from ember.graph.ops.quantized import (
    pack_qconv_weight,
    qconv_correction,
    unpack_qconv_weight,
)


def _brute_force(x: np.ndarray, w: np.ndarray, attrs: QConvAttrs) -> np.ndarray:
    """NHWC data, HWIO weight: the sum of (x - zero point) * w over taps and channels."""
    (top, left, bottom, right), (sh, sw), (dh, dw) = attrs.padding, attrs.strides, attrs.dilations
    centred = x.astype(np.int64) - attrs.data_zero_point
    padded = np.pad(centred, ((0, 0), (top, bottom), (left, right), (0, 0)))
    kh, kw, _, outputs = w.shape
    rows = (padded.shape[1] - dh * (kh - 1) - 1) // sh + 1
    cols = (padded.shape[2] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((x.shape[0], rows, cols, outputs), np.int64)
    for i in range(kh):
        for j in range(kw):
            window = padded[:, i * dh : i * dh + sh * rows : sh, j * dw : j * dw + sw * cols : sw]
            out += np.einsum("nhwc,co->nhwo", window, w[i, j].astype(np.int64))
    return out


def _case(dtype: str, channels: int, outputs: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    low, high = (0, 256) if dtype == "uint8" else (-128, 128)
    x = rng.integers(low, high, (2, 7, 9, channels)).astype(dtype)
    w = rng.integers(-128, 128, (3, 3, channels, outputs)).astype(np.int8)
    return x, w


ATTRS = [
    QConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO", data_zero_point=131),
    QConvAttrs((2, 1), (0, 2, 1, 0), (1, 2), 1, "NHWC", "HWIO", data_zero_point=7),
]


@pytest.mark.parametrize("attrs", ATTRS, ids=["same", "strided_dilated"])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qconv_is_the_exact_integer_sum(attrs: QConvAttrs, dtype: str) -> None:
    if dtype == "int8":
        attrs = QConvAttrs(**{**_fields(attrs), "data_zero_point": -5})
    x, w = _case(dtype, 5, 12)
    (out,) = evaluate("qconv", [x, w], attrs)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, _brute_force(x, w, attrs))


def test_qconv_channels_first_matches_channels_last() -> None:
    x, w = _case("uint8", 6, 8)
    attrs = ATTRS[0]
    (nhwc,) = evaluate("qconv", [x, w], attrs)
    first = QConvAttrs(**{**_fields(attrs), "layout": "NCHW", "kernel_layout": "OIHW"})
    (nchw,) = evaluate("qconv", [x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1)], first)
    np.testing.assert_array_equal(nchw.transpose(0, 2, 3, 1), nhwc)


@pytest.mark.parametrize("channels", [3, 4, 7, 16])
@pytest.mark.parametrize("block", [4, 8, 16])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qconv_pack_equals_qconv(channels: int, block: int, dtype: str) -> None:
    x, w = _case(dtype, channels, 16, seed=channels)
    attrs = QConvAttrs(**{**_fields(ATTRS[1]), "data_zero_point": 9 if dtype == "uint8" else -3})
    packed = pack_qconv_weight(w, block)
    assert packed.shape == (16 // block, 3, 3, -(-channels // 4), block, 4)
    np.testing.assert_array_equal(unpack_qconv_weight(packed, channels), w)
    correction = qconv_correction(w, attrs.data_zero_point, dtype)
    (expected,) = evaluate("qconv", [x, w], attrs)
    (out,) = evaluate("qconv_pack", [x, packed, correction], attrs)
    np.testing.assert_array_equal(out, expected)


def test_integer_operands_are_required() -> None:
    attrs = ATTRS[0]
    with pytest.raises(ShapeError, match="uint8 or int8 data and an int8 weight"):
        infer_types("qconv", [TensorType((1, 4, 4, 4), "float32"),
                              TensorType((3, 3, 4, 8), "int8")], attrs)  # fmt: skip
    with pytest.raises(ShapeError, match="correction must be int32"):
        infer_types("qconv_pack", [TensorType((1, 4, 4, 4), "uint8"),
                                   TensorType((1, 3, 3, 1, 8, 4), "int8"),
                                   TensorType((4,), "int32")], attrs)  # fmt: skip


def _fields(attrs: QConvAttrs) -> dict[str, object]:
    return {name: getattr(attrs, name) for name in QConvAttrs.__dataclass_fields__}

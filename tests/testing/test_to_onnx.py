"""ONNX export: every graph op, the built-in workloads, and the round trip back in.

Each case builds a small graph, exports it, checks the model with ONNX's full checker
(which also runs shape inference against the exported value types) and compares ONNX
Runtime's result with the reference interpreter's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from ember.errors import EmberError, UnsupportedOperatorError
from ember.graph import Graph, GraphBuilder, interpret, verify
from ember.graph.ir import Attrs, NoAttrs, Node, Params, TensorType, Value
from ember.graph.ops import all_ops
from ember.graph.ops.attrs import (
    AlphaAttrs,
    ArgReduceAttrs,
    AxisAttrs,
    BatchNormAttrs,
    BlockAttrs,
    CastAttrs,
    ClipAttrs,
    ConvAttrs,
    ConvTransposeAttrs,
    GeluAttrs,
    HardSigmoidAttrs,
    InstanceNormAttrs,
    LayerNormAttrs,
    LayoutAttrs,
    LrnAttrs,
    PadAttrs,
    PoolAttrs,
    QConvAttrs,
    ReduceAttrs,
    ReshapeAttrs,
    ResizeAttrs,
    SeluAttrs,
    ShapeAttrs,
    SliceAttrs,
    SplitAttrs,
    TileAttrs,
    TopKAttrs,
    TransposeAttrs,
)
from ember.graph.ops.sparse import SparseDenseAttrs, bsr_from_dense
from ember.graph.ops.winograd import WinogradInputAttrs, WinogradOutputAttrs
from ember.testing import get_workload, to_onnx
from ember.testing.oracle import assert_allclose, run_onnxruntime
from ember.testing.to_onnx import EXPORTERS, MAX_OPSET, MIN_OPSET

RNG = np.random.default_rng(0)


def normal(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def integers(*shape: int, dtype: str = "int8") -> np.ndarray:
    low, high = {"uint8": (0, 256), "int8": (-128, 128), "int32": (-5000, 5000)}[dtype]
    return RNG.integers(low, high, shape).astype(dtype)


def positive(*shape: int) -> np.ndarray:
    return RNG.uniform(0.5, 2.0, shape).astype(np.float32)


@dataclass(frozen=True)
class Param:
    """A case operand stored as a param (initializer) rather than a graph input."""

    array: np.ndarray


@dataclass
class Case:
    """One graph op applied to operands; graph inputs are fed, Params are weights."""

    op: str
    operands: list[np.ndarray | Param]
    attrs: Attrs = field(default_factory=NoAttrs)
    opset: int = 17
    label: str = ""
    # The oldest opset that can express the case at all.
    needs_opset: int = 13

    @property
    def id(self) -> str:
        return f"{self.op}-{self.label}" if self.label else self.op

    def build(self) -> tuple[Graph, Params, dict[str, np.ndarray]]:
        builder = GraphBuilder(self.op)
        feeds: dict[str, np.ndarray] = {}
        values: list[Value] = []
        for index, operand in enumerate(self.operands):
            if isinstance(operand, Param):
                values.append(builder.param(f"w{index}", operand.array))
            else:
                value = builder.input(f"x{index}", operand.shape, str(operand.dtype))
                feeds[value.name] = operand
                values.append(value)
        outputs = builder.add_multi(self.op, values, self.attrs, name=self.op)
        graph, params = builder.build(list(outputs))
        return graph, params, feeds


def conv_attrs(layout: str, kernel_layout: str, rank: int = 2, **changes: object) -> ConvAttrs:
    fields: dict[str, object] = {
        "strides": (1,) * rank,
        "padding": (1,) * 2 * rank,
        "dilations": (1,) * rank,
        "groups": 1,
    }
    fields.update(changes)
    return ConvAttrs(layout=layout, kernel_layout=kernel_layout, **fields)  # type: ignore[arg-type]


def pool_attrs(layout: str = "NCHW", **changes: object) -> PoolAttrs:
    fields: dict[str, object] = {
        "kernel": (3, 3),
        "strides": (2, 2),
        "padding": (1, 1, 1, 1),
        "dilations": (1, 1),
    }
    fields.update(changes)
    return PoolAttrs(layout=layout, **fields)  # type: ignore[arg-type]


def unary_cases() -> list[Case]:
    inputs: dict[str, np.ndarray] = {
        "log": positive(2, 3, 4),
        "sqrt": positive(2, 3, 4),
        "reciprocal": positive(2, 3, 4),
        "logical_not": normal(2, 3) > 0,
        "round": np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.2, -0.7], np.float32),
    }
    names = [
        "identity", "relu", "sigmoid", "tanh", "erf", "exp", "log", "sqrt", "reciprocal",
        "negative", "abs", "floor", "ceil", "round", "sign", "sin", "cos", "softplus",
        "softsign", "logical_not",
    ]  # fmt: skip
    cases = [Case(name, [inputs.get(name, 3 * normal(2, 3, 4))]) for name in names]
    x = 3 * normal(2, 3, 4)
    cases += [
        Case("leaky_relu", [x], AlphaAttrs(0.1)),
        Case("elu", [x], AlphaAttrs(0.7)),
        Case("selu", [x], SeluAttrs(1.67, 1.05)),
        Case("hard_sigmoid", [x], HardSigmoidAttrs(0.2, 0.5)),
        Case("clip", [x], ClipAttrs(-1.0, 2.0), label="both"),
        Case("clip", [x], ClipAttrs(None, 2.0), label="high"),
        Case("clip", [x], ClipAttrs(-1.0, None), label="low"),
        Case("clip", [np.arange(-5, 5, dtype=np.int32)], ClipAttrs(-2, 3), label="int"),
        Case("cast", [x], CastAttrs("int64"), label="to-int"),
        Case("cast", [np.arange(6, dtype=np.int32)], CastAttrs("float16"), label="to-half"),
        Case("gelu", [x], GeluAttrs("none"), label="erf-opset17"),
        Case("gelu", [x], GeluAttrs("tanh"), label="tanh-opset17"),
        Case("gelu", [x], GeluAttrs("none"), opset=20, label="erf-opset20"),
        Case("gelu", [x], GeluAttrs("tanh"), opset=20, label="tanh-opset20"),
        Case("hard_swish", [x], opset=13, label="opset13"),
        Case("hard_swish", [x], label="opset17"),
        Case("mish", [x], label="opset17"),
        Case("mish", [x], opset=18, label="opset18"),
    ]
    return cases


def binary_cases() -> list[Case]:
    a, b = normal(2, 3, 4), normal(3, 1)
    ints = RNG.integers(-9, 9, (3, 4)).astype(np.int32)
    nonzero = np.where(ints == 0, 3, ints).astype(np.int32)
    names = ["add", "subtract", "multiply", "maximum", "minimum", "equal", "less",
             "less_equal", "greater", "greater_equal"]  # fmt: skip
    cases = [Case(name, [a, b]) for name in names]
    cases += [Case(name, [ints, nonzero], label="int") for name in ("equal", "greater")]
    truth, other = normal(3, 4) > 0, normal(4) > 0
    cases += [Case(f"logical_{name}", [truth, other]) for name in ("and", "or", "xor")]
    cases += [
        Case("divide", [a, positive(3, 1)]),
        Case("divide", [ints, nonzero], label="int-truncates"),
        Case("power", [positive(2, 3), normal(2, 3)]),
        Case("power", [positive(2, 3), np.array(2, np.int32)], label="int-exponent"),
        Case("mod", [3 * a, positive(4)]),
        Case("mod", [ints, nonzero], label="int"),
        Case("floor_mod", [3 * a, np.array([-1.5, 2.0, -0.75, 1.0], np.float32)]),
        Case("floor_mod", [ints, nonzero], label="int"),
        Case("prelu", [a, Param(positive(3, 1))], label="slope"),
        Case("prelu", [normal(3, 4), Param(positive(2, 1, 4))], label="widening"),
        Case("where", [normal(3, 4) > 0, normal(3, 4), normal(4)]),
    ]
    return cases


def tensor_cases() -> list[Case]:
    x = normal(2, 3, 4, 5)
    indices = Param(np.array([[0, -1], [2, 1]], np.int64))
    return [
        Case("reshape", [x], ReshapeAttrs((6, 20))),
        Case("transpose", [x], TransposeAttrs((0, 2, 3, 1))),
        Case("concat", [x, normal(2, 1, 4, 5), normal(2, 2, 4, 5)], AxisAttrs(1)),
        Case("split", [x], SplitAttrs(3, (1, 4))),
        Case("slice", [x], SliceAttrs((0, 1, 0, 1), (2, 3, 4, 5), (1, 1, 2, 3)), label="up"),
        Case(
            "slice", [x], SliceAttrs((1, 2, 3, 4), (-1, -1, 0, 0), (-1, -1, -2, -3)), label="down"
        ),
        Case("gather", [x, indices], AxisAttrs(2)),
        Case("gather_elements", [x, Param(RNG.integers(-3, 3, (2, 3, 2, 5)))], AxisAttrs(2)),
        Case("pad", [x], PadAttrs((0, 1, 2, 0, 1, 0, 1, 2), "constant", 1.5), label="constant"),
        Case("pad", [x], PadAttrs((0, 1, 2, 0, 1, 0, 1, 2), "reflect"), label="reflect"),
        Case("pad", [x], PadAttrs((0, 1, 2, 0, 1, 0, 1, 2), "edge"), label="edge"),
        Case("broadcast_to", [normal(3, 1)], ShapeAttrs((2, 3, 4))),
        Case("tile", [normal(2, 3)], TileAttrs((2, 1))),
        Case("depth_to_space", [normal(1, 8, 2, 3)], BlockAttrs(2, "DCR"), label="dcr"),
        Case("depth_to_space", [normal(1, 8, 2, 3)], BlockAttrs(2, "CRD"), label="crd"),
        Case("depth_to_space", [normal(1, 2, 3, 8)], BlockAttrs(2, "DCR", "NHWC"), label="nhwc"),
        Case("space_to_depth", [normal(1, 2, 4, 6)], BlockAttrs(2)),
        Case("space_to_depth", [normal(1, 4, 6, 2)], BlockAttrs(2, layout="NHWC"), label="nhwc"),
        Case("space_to_depth", [normal(1, 2, 4, 6)], BlockAttrs(2, "CRD"), label="crd"),
        Case(
            "space_to_depth",
            [normal(1, 4, 6, 2)],
            BlockAttrs(2, "CRD", "NHWC"),
            label="crd_nhwc",
        ),
    ]


REDUCE_OPS = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
              "reduce_sum_square", "reduce_l1", "reduce_l2", "reduce_log_sum_exp"]  # fmt: skip


def reduce_cases() -> list[Case]:
    x = normal(2, 3, 4)
    cases = [Case(op, [x], ReduceAttrs((0, 2), keepdims=False)) for op in REDUCE_OPS]
    cases += [Case(op, [x], ReduceAttrs((1,)), opset=18, label="opset18") for op in REDUCE_OPS]
    cases += [Case(op, [x], ReduceAttrs(()), label="all") for op in ("reduce_sum", "reduce_max")]
    ties = np.array([[1, 3, 3, 0], [2, 2, 1, 2]], np.float32)
    cases += [
        Case("argmax", [ties], ArgReduceAttrs(1, keepdims=False)),
        Case("argmin", [ties], ArgReduceAttrs(1, select_last_index=True), label="last"),
        Case("topk", [x], TopKAttrs(2, 2)),
        Case("topk", [x], TopKAttrs(2, 1, largest=False), label="smallest"),
    ]
    return cases


def spatial_cases() -> list[Case]:
    nchw, nhwc = normal(2, 4, 7, 6), normal(2, 7, 6, 4)
    oihw = Param(normal(6, 2, 3, 3))
    hwio = Param(normal(3, 3, 2, 6))
    return [
        Case("conv", [nchw, oihw], conv_attrs("NCHW", "OIHW", groups=2, strides=(2, 1))),
        Case("conv", [nhwc, hwio], conv_attrs("NHWC", "HWIO", groups=2), label="nhwc"),
        Case("conv", [nhwc, normal(3, 3, 2, 6)], conv_attrs("NHWC", "HWIO", groups=2),
             label="computed-weight"),
        Case("conv", [nchw, Param(normal(4, 4, 3, 3))],
             conv_attrs("NCHW", "OIHW", dilations=(2, 1), padding=(2, 0, 1, 1)), label="dilated"),
        Case("conv", [normal(1, 3, 9), Param(normal(5, 3, 3))],
             conv_attrs("NCW", "OIW", rank=1), label="1d"),
        Case("conv", [normal(1, 4, 5, 6, 3), Param(normal(3, 3, 3, 3, 2))],
             conv_attrs("NDHWC", "DHWIO", rank=3, strides=(2, 2, 1)), label="3d-ndhwc"),
        Case("conv_transpose", [nchw, Param(normal(4, 3, 3, 3))],
             ConvTransposeAttrs((2, 2), (1, 1, 1, 1), (1, 0), (1, 1), 1)),
        Case("conv_transpose", [nhwc, Param(normal(4, 1, 2, 2))],
             ConvTransposeAttrs((2, 2), (0, 0, 0, 0), (0, 0), (1, 1), 2, "NHWC"), label="nhwc"),
        Case("max_pool", [nchw], pool_attrs(ceil_mode=True)),
        Case("max_pool", [nhwc], pool_attrs("NHWC", dilations=(2, 1)), label="nhwc-dilated"),
        Case("avg_pool", [nchw], pool_attrs(count_include_pad=True), label="with-pad"),
        Case("avg_pool", [nhwc], pool_attrs("NHWC", ceil_mode=True), label="nhwc-ceil"),
        Case("avg_pool", [nchw], pool_attrs(dilations=(2, 2)), opset=19, label="dilated",
             needs_opset=19),
        Case("global_avg_pool", [nchw], LayoutAttrs("NCHW")),
        Case("global_max_pool", [nhwc], LayoutAttrs("NHWC"), label="nhwc"),
    ]  # fmt: skip


def nn_cases() -> list[Case]:
    nchw, nhwc = normal(2, 4, 3, 5), normal(2, 3, 5, 4)
    vectors = [Param(normal(4)), Param(normal(4)), Param(normal(4)), Param(positive(4))]
    dense_weight = normal(5, 6)
    data, indices, indptr = bsr_from_dense(
        np.kron(RNG.random((2, 3)) > 0.5, np.ones((2, 2))).astype(np.float32) * normal(4, 6),
        (2, 2),
    )
    return [
        Case("batch_norm", [nchw, *vectors], BatchNormAttrs(1e-3)),
        Case("batch_norm", [nhwc, *vectors], BatchNormAttrs(1e-3, axis=3), label="nhwc"),
        Case("instance_norm", [nchw, *vectors[:2]], InstanceNormAttrs(1e-5)),
        Case("instance_norm", [nhwc, *vectors[:2]], InstanceNormAttrs(1e-5, "NHWC"),
             label="nhwc"),
        Case("layer_norm", [nchw, Param(normal(3, 5)), Param(normal(5))], LayerNormAttrs(2, 1e-5)),
        Case("layer_norm", [nchw, normal(5), normal(3, 5)], LayerNormAttrs(2, 1e-5), opset=13,
             label="opset13"),
        Case("dense", [normal(3, 6), Param(dense_weight)]),
        Case("dense", [normal(2, 3, 6), dense_weight], label="computed-weight"),
        Case("dense_pack", [normal(3, 6), Param(normal(2, 6, 4))]),
        Case("dense_pack", [normal(2, 3, 6), normal(1, 6, 8)], label="computed-weight"),
        Case("conv_pack", [normal(1, 5, 6, 3), Param(normal(2, 3, 2, 3, 4))],
             ConvAttrs((1, 2), (1, 0, 1, 1), (1, 1), 1, "NHWC", "HWIO")),
        Case("conv_pack", [normal(2, 7, 3), normal(1, 3, 3, 8)],
             ConvAttrs((1,), (1, 1), (1,), 1, "NWC", "WIO"), label="1d-computed-weight"),
        Case("qconv", [integers(1, 4, 6, 7, dtype="uint8"), Param(integers(8, 4, 3, 3))],
             QConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, data_zero_point=131)),
        Case("qconv", [integers(2, 5, 6, 3, dtype="int8"), integers(2, 2, 3, 8)],
             QConvAttrs((2, 1), (0, 1, 1, 0), (1, 2), 1, "NHWC", "HWIO", data_zero_point=-7),
             label="nhwc-computed-weight"),
        Case("qconv_pack", [integers(1, 5, 6, 7, dtype="uint8"), Param(integers(2, 3, 3, 2, 8, 4)),
                            Param(integers(16, dtype="int32"))],
             QConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO", data_zero_point=9)),
        Case("qconv_pack", [integers(2, 7, 3, dtype="int8"), integers(1, 3, 1, 4, 4),
                            integers(4, dtype="int32")],
             QConvAttrs((1,), (1, 1), (1,), 1, "NWC", "WIO", data_zero_point=-3),
             label="1d-int8-computed"),
        Case("winograd_input", [normal(2, 7, 5, 3)], WinogradInputAttrs(2, (1, 1, 1, 1))),
        Case("winograd_input", [normal(1, 9, 8, 3)], WinogradInputAttrs(4, (2, 0, 1, 2)),
             label="f4-asymmetric"),
        Case("winograd_output", [normal(16, 2 * 12, 3)], WinogradOutputAttrs(2, 7, 5)),
        Case("winograd_output", [normal(36, 6, 4)], WinogradOutputAttrs(4, 9, 8), label="f4"),
        Case("matmul", [normal(2, 3, 4), normal(4, 5)]),
        Case("matmul", [normal(4), normal(2, 4, 3)], label="vector"),
        Case("softmax", [normal(2, 3, 4)], AxisAttrs(1)),
        Case("log_softmax", [normal(2, 3, 4)], AxisAttrs(2)),
        Case("lrn", [positive(1, 6, 3, 3)], LrnAttrs(3, alpha=0.01, beta=0.75, bias=1.5)),
        Case("sparse_dense", [normal(3, 6), Param(data), Param(indices), Param(indptr)],
             SparseDenseAttrs((4, 6), (2, 2))),
    ]  # fmt: skip


def resize_cases() -> list[Case]:
    x = normal(1, 2, 4, 5)

    def attrs(sizes: tuple[int, ...], mode: str, transform: str, **extra: object) -> ResizeAttrs:
        scales = tuple(out / size for out, size in zip(sizes, x.shape, strict=True))
        return ResizeAttrs(sizes, scales, mode, transform, **extra)  # type: ignore[arg-type]

    return [
        Case("resize", [x], attrs((1, 2, 8, 10), "nearest", "asymmetric", nearest_mode="floor")),
        Case("resize", [x], attrs((1, 2, 7, 3), "linear", "half_pixel"), label="linear"),
        Case("resize", [x], attrs((1, 2, 6, 7), "linear", "align_corners"), label="corners"),
        Case("resize", [x], attrs((1, 2, 8, 9), "cubic", "half_pixel"), label="cubic"),
        Case(
            "resize",
            [x],
            ResizeAttrs((1, 2, 2, 3), (1.0, 1.0, 0.6, 0.7), "linear", "pytorch_half_pixel"),
            label="explicit-scales",
        ),
    ]


CASES = [
    *unary_cases(),
    *binary_cases(),
    *tensor_cases(),
    *reduce_cases(),
    *spatial_cases(),
    *nn_cases(),
    *resize_cases(),
]


def check_export(graph: Graph, params: Params, feeds: dict[str, np.ndarray], opset: int) -> None:
    model = to_onnx(graph, params, opset=opset)
    onnx.checker.check_model(model, full_check=True)
    assert_allclose(run_onnxruntime(model, feeds), interpret(graph, params, feeds))


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_op_export_matches_interpreter(case: Case) -> None:
    graph, params, feeds = case.build()
    verify(graph, params)
    check_export(graph, params, feeds, case.opset)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_op_round_trip_through_the_onnx_frontend(case: Case) -> None:
    from ember.frontend import from_onnx

    graph, params, feeds = case.build()
    imported, imported_params = from_onnx(to_onnx(graph, params, opset=case.opset))
    verify(imported, imported_params)
    assert_allclose(interpret(imported, imported_params, feeds), interpret(graph, params, feeds))


@pytest.mark.parametrize("opset", [MIN_OPSET, MAX_OPSET])
def test_every_case_exports_at_the_oldest_and_newest_opset(opset: int) -> None:
    # The exporters branch on the opset (axes as inputs, Gelu, Mish, HardSwish, ...).
    for case in CASES:
        if case.needs_opset > opset:
            continue  # refused with a message, see test_avg_pool_dilations_need_opset_19
        graph, params, feeds = replace(case, opset=opset).build()
        check_export(graph, params, feeds, opset)


def test_every_registered_op_has_an_exporter_and_a_case() -> None:
    registered = set(all_ops())
    assert registered <= set(EXPORTERS), sorted(registered - set(EXPORTERS))
    assert registered <= {case.op for case in CASES}


def test_channels_last_weights_are_transposed_once_into_initializers() -> None:
    graph, params = get_workload("mobilenet", layout="NHWC", image_shape=(32, 32, 3))
    model = to_onnx(graph, params)
    conv_weights = [
        n.input[1] for n in model.graph.node if n.op_type == "Conv"
    ]  # every Conv reads an initializer, not a Transpose of one
    initializers = {t.name: t for t in model.graph.initializer}
    assert len(conv_weights) == 27 and all(name in initializers for name in conv_weights)
    first = onnx.numpy_helper.to_array(initializers[conv_weights[0]])
    stem = params[graph.nodes[0].inputs[1].name]
    np.testing.assert_array_equal(first, stem.transpose(3, 2, 0, 1))
    transposes = [n for n in model.graph.node if n.op_type == "Transpose"]
    assert len(transposes) == 2 * (27 + 1)  # around every conv and the global pool


def test_unknown_op_is_named() -> None:
    x = Value("x", TensorType((2,), "float32"))
    y = Value("y", TensorType((2,), "float32"))
    graph = Graph((x,), (y,), (Node("fancy_op", (x,), (y,), NoAttrs(), "n"),))
    with pytest.raises(UnsupportedOperatorError, match="no ONNX export: fancy_op"):
        to_onnx(graph, {})


def test_missing_param_arrays_are_named() -> None:
    graph, params = get_workload("mlp", image_shape=(1, 4, 4))
    del params["fc2_weight"]
    with pytest.raises(EmberError, match="params fc2_weight have no arrays"):
        to_onnx(graph, params)


@pytest.mark.parametrize("opset", [12, 22])
def test_opset_out_of_range(opset: int) -> None:
    graph, params = get_workload("mlp", image_shape=(1, 4, 4))
    with pytest.raises(EmberError, match=f"opset {opset}; use 13..21"):
        to_onnx(graph, params, opset=opset)


def test_avg_pool_dilations_need_opset_19() -> None:
    case = Case("avg_pool", [normal(1, 2, 6, 6)], pool_attrs(dilations=(2, 2)))
    graph, params, _ = case.build()
    with pytest.raises(UnsupportedOperatorError, match="from opset 19"):
        to_onnx(graph, params, opset=18)


def test_writes_the_model_to_a_path(tmp_path: Path) -> None:
    graph, params = get_workload("mlp", image_shape=(1, 4, 4))
    path = tmp_path / "mlp.onnx"
    model = to_onnx(graph, params, path=path)
    loaded = onnx.load(path)
    assert loaded.SerializeToString() == model.SerializeToString()
    assert [i.name for i in loaded.graph.input] == ["data"]
    assert loaded.opset_import[0].version == 17


# Whole networks at reduced sizes (channels first) and the layout each is checked in.
NETWORKS = [
    ("resnet-18", (3, 64, 64), "NCHW"),
    ("resnet-18", (3, 64, 64), "NHWC"),
    ("mobilenet", (3, 64, 64), "NHWC"),
    ("mobilenet_v2", (3, 64, 64), "NCHW"),
    ("squeezenet_v1.1", (3, 66, 66), "NCHW"),
    ("mlp", (3, 16, 16), "NHWC"),
    ("resnet3d-18", (3, 8, 32, 32), "NDHWC"),
]

# The interpreter sums convs and dense layers in float64 and rounds once per op; ONNX
# Runtime sums in float32 in its own order. Each layer then differs by a few float32
# ulps times sqrt(terms) (~1e-6 relative); through ~50 layers and a softmax (which
# turns absolute logit error into relative probability error) the observed worst case
# is ~3e-5 relative. 1e-3 keeps a margin over that while still catching any real
# mistake (a wrong pad, stride or transposition changes outputs by order 1); atol
# covers probabilities too small to carry relative precision.
NETWORK_RTOL = 1e-3
NETWORK_ATOL = 1e-6


def check_network(name: str, image: tuple[int, ...] | None, layout: str) -> None:
    channels_last = layout.endswith("C")
    shape = None if image is None else (*image[1:], image[0]) if channels_last else image
    graph, params = get_workload(name, batch_size=2, layout=layout, image_shape=shape)
    model = to_onnx(graph, params)
    onnx.checker.check_model(model, full_check=True)
    data = RNG.standard_normal(graph.inputs[0].shape, dtype=np.float32)
    ours = interpret(graph, params, {"data": data})
    assert_allclose(
        run_onnxruntime(model, {"data": data}), ours, rtol=NETWORK_RTOL, atol=NETWORK_ATOL
    )


@pytest.mark.parametrize(("name", "image", "layout"), NETWORKS)
def test_network_export_matches_interpreter(name: str, image: tuple[int, ...], layout: str) -> None:
    check_network(name, image, layout)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "layout"), [("resnet-50", "NCHW"), ("inception_v3", "NHWC")])
def test_full_size_network_export_matches_interpreter(name: str, layout: str) -> None:
    check_network(name, None, layout)


@pytest.mark.parametrize(
    ("name", "layout", "image"),
    [("resnet-18", "NHWC", (32, 32, 3)), ("mobilenet_v2", "NCHW", (3, 32, 32))],
)
def test_round_trip_through_the_onnx_frontend(
    name: str, layout: str, image: tuple[int, ...]
) -> None:
    from ember.frontend import from_onnx

    graph, params = get_workload(name, layout=layout or "NCHW", image_shape=image or (3, 32, 32))
    imported, imported_params = from_onnx(to_onnx(graph, params))
    verify(imported, imported_params)
    data = RNG.standard_normal(graph.inputs[0].shape, dtype=np.float32)
    expected = interpret(graph, params, {"data": data})
    actual = interpret(imported, imported_params, {"data": data})
    # The imported graph computes the same ops with the same references (NHWC ones
    # now between transposes), so only the summation order within a conv may differ.
    assert_allclose(actual, expected, rtol=1e-5, atol=1e-7)

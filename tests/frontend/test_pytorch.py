"""The PyTorch frontend: programs from `torch.export` converted by `from_pytorch`,
interpreted, and compared with torch eager on the same inputs.

One small program per converter (the operators in `OPS`, each checked to reach the
converter it is meant for), the test zoo's networks (`test_torch_export.CASES`), and the
errors a user can meet: unsupported operators, dynamic shapes, training mode, bad
files, and torch missing.
"""

from __future__ import annotations

import builtins
import warnings
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import test_torch_export as zoo
import torch
from torch import nn
from torch.nn import functional as F

from ember.errors import EmberError, ModelLoadError, UnsupportedOperatorError
from ember.frontend import from_pytorch
from ember.frontend.pytorch import decomposed, exported_program
from ember.frontend.pytorch.registry import CONVERTERS
from ember.graph import interpret
from ember.testing.oracle import ATOL, RTOL

# torch.export's own deprecation chatter (pytree internals) is not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


Maker = Callable[[np.random.Generator], np.ndarray]


class Lambda(nn.Module):
    """A module whose forward is `function` (what a one-operator program needs)."""

    def __init__(self, function: Callable[..., object], *layers: nn.Module) -> None:
        super().__init__()
        self.function = function
        self.layers = nn.ModuleList(layers)

    def forward(self, *inputs: torch.Tensor) -> object:
        return self.function(*self.layers, *inputs)


def _image(*shape: int) -> Maker:
    return lambda rng: rng.standard_normal(shape).astype(np.float32)


def _positive(*shape: int) -> Maker:
    return lambda rng: rng.uniform(0.1, 2.0, shape).astype(np.float32)


def _ints(high: int, *shape: int) -> Maker:
    return lambda rng: rng.integers(0, high, shape).astype(np.int64)


X = _image(2, 3, 8, 8)


def X_3D(x: torch.Tensor) -> torch.Tensor:
    """An image batch as 5-d data (N, C, D, H, W) for the 3-d operators."""
    return x.view(2, 3, 2, 4, 8)


V = _image(2, 5, 6)

# name -> (module, input makers, ATen overloads the exported program must contain)
OPS: dict[str, tuple[nn.Module, tuple[Maker, ...], tuple[str, ...]]] = {
    "conv2d": (
        Lambda(lambda c, x: c(x), nn.Conv2d(3, 4, 3, 2, 1)),
        (X,),
        ("aten.convolution.default",),
    ),
    "conv2d_groups_dilation": (
        Lambda(lambda c, x: c(x), nn.Conv2d(4, 4, 3, 1, 2, dilation=2, groups=2, bias=False)),
        (_image(1, 4, 9, 9),),
        ("aten.convolution.default",),
    ),
    "conv1d": (
        Lambda(lambda c, x: c(x), nn.Conv1d(5, 3, 3, padding=1)),
        (V,),
        ("aten.convolution.default",),
    ),
    "conv_transpose2d": (
        Lambda(lambda c, x: c(x), nn.ConvTranspose2d(3, 2, 3, 2, 1, output_padding=1)),
        (X,),
        ("aten.convolution.default",),
    ),
    "max_pool2d": (
        Lambda(lambda x: F.max_pool2d(x, 3, 2, 1)),
        (X,),
        ("aten.max_pool2d_with_indices.default",),
    ),
    "max_pool2d_ceil": (
        Lambda(lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True)),
        (X,),
        ("aten.max_pool2d_with_indices.default",),
    ),
    "avg_pool2d": (Lambda(lambda x: F.avg_pool2d(x, 3, 2, 1)), (X,), ("aten.avg_pool2d.default",)),
    "avg_pool2d_exclude_pad": (
        Lambda(lambda x: F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)),
        (X,),
        ("aten.avg_pool2d.default",),
    ),
    "adaptive_avg_pool_global": (
        Lambda(lambda x: F.adaptive_avg_pool2d(x, 1)),
        (X,),
        ("aten.mean.dim",),
    ),
    "adaptive_avg_pool_2x2": (
        Lambda(lambda x: F.adaptive_avg_pool2d(x, 2)),
        (X,),
        ("aten._adaptive_avg_pool2d.default",),
    ),
    "batch_norm": (
        Lambda(lambda b, x: b(x), nn.BatchNorm2d(3)),
        (X,),
        ("aten._native_batch_norm_legit_no_training.default",),
    ),
    "layer_norm": (
        Lambda(lambda n, x: n(x), nn.LayerNorm(6)),
        (V,),
        ("aten.native_layer_norm.default",),
    ),
    "group_norm": (
        Lambda(lambda n, x: n(x), nn.GroupNorm(2, 4)),
        (_image(2, 4, 3, 3),),
        ("aten.native_group_norm.default",),
    ),
    "linear_2d": (
        Lambda(lambda f, x: f(x), nn.Linear(6, 4)),
        (_image(3, 6),),
        ("aten.addmm.default",),
    ),
    "linear_3d": (Lambda(lambda f, x: f(x), nn.Linear(6, 4)), (V,), ("aten.addmm.default",)),
    "matmul_activations": (
        Lambda(lambda a, b: a @ b),
        (_image(2, 3, 4), _image(2, 4, 5)),
        ("aten.bmm.default",),
    ),
    "mm": (Lambda(lambda a, b: torch.mm(a, b)), (_image(3, 4), _image(4, 5)), ("aten.mm.default",)),
    "attention": (
        Lambda(lambda q, k, v: F.scaled_dot_product_attention(q, k, v)),
        (_image(1, 2, 5, 4), _image(1, 2, 5, 4), _image(1, 2, 5, 4)),
        ("aten._softmax.default",),
    ),
    "multihead_attention": (
        Lambda(lambda m, x: m(x, x, x)[0], nn.MultiheadAttention(6, 2, batch_first=True)),
        (V,),
        ("aten.addmm.default",),
    ),
    "softmax": (Lambda(lambda x: x.softmax(1)), (V,), ("aten._softmax.default",)),
    "log_softmax": (Lambda(lambda x: F.log_softmax(x, -1)), (V,), ("aten._log_softmax.default",)),
    "embedding": (
        Lambda(lambda e, i: e(i), nn.Embedding(10, 4)),
        (_ints(10, 2, 5),),
        ("aten.embedding.default",),
    ),
    "interpolate_nearest": (
        Lambda(lambda x: F.interpolate(x, scale_factor=2, mode="nearest")),
        (X,),
        ("aten.upsample_nearest2d.vec",),
    ),
    "interpolate_nearest_size": (
        Lambda(lambda x: F.interpolate(x, size=(5, 11), mode="nearest")),
        (X,),
        ("aten.upsample_nearest2d.vec",),
    ),
    "interpolate_bilinear": (
        Lambda(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear")),
        (X,),
        ("aten.upsample_bilinear2d.vec",),
    ),
    "interpolate_bilinear_aligned": (
        Lambda(lambda x: F.interpolate(x, size=(5, 13), mode="bilinear", align_corners=True)),
        (X,),
        ("aten.upsample_bilinear2d.vec",),
    ),
    "relu_sigmoid_tanh": (
        Lambda(lambda x: torch.relu(x) + torch.sigmoid(x) * torch.tanh(x)),
        (X,),
        ("aten.relu.default",),
    ),
    "gelu": (Lambda(lambda x: F.gelu(x)), (X,), ("aten.gelu.default",)),
    "gelu_tanh": (Lambda(lambda x: F.gelu(x, approximate="tanh")), (X,), ("aten.gelu.default",)),
    "silu": (Lambda(lambda x: F.silu(x)), (X,), ("aten.sigmoid.default",)),
    "hardswish_hardsigmoid": (
        Lambda(lambda x: F.hardswish(x) + F.hardsigmoid(x)),
        (X,),
        ("aten.clamp.default",),
    ),
    "relu6": (Lambda(lambda x: F.relu6(x)), (X,), ("aten.hardtanh.default",)),
    "hardtanh": (Lambda(lambda x: F.hardtanh(x, -0.5, 0.5)), (X,), ("aten.hardtanh.default",)),
    "leaky_relu_elu": (
        Lambda(
            lambda x: F.leaky_relu(x, 0.1) + F.elu(x) + F.elu(x, 0.5) + F.selu(x) + torch.expm1(x)
        ),
        (X,),
        ("aten.leaky_relu.default", "aten.elu.default", "aten.expm1.default"),
    ),
    "mish_softplus": (Lambda(lambda x: F.mish(x) + F.softplus(x)), (X,), ("aten.log1p.default",)),
    "exp_log_sqrt_rsqrt": (
        Lambda(lambda x: torch.exp(x) + torch.log(x) + torch.sqrt(x) + torch.rsqrt(x)),
        (_positive(2, 3, 4),),
        ("aten.rsqrt.default",),
    ),
    "pow": (
        Lambda(lambda x: x**2 + x**0.5 + x**3 + x**-0.5),
        (_positive(2, 3, 4),),
        ("aten.pow.Tensor_Scalar",),
    ),
    "erf_abs_neg": (Lambda(lambda x: torch.erf(x) - torch.abs(x)), (X,), ("aten.erf.default",)),
    "arithmetic_scalars": (
        Lambda(lambda x: (x + 1) * 2 - 3 / (x * x + 1) + (1 - x)),
        (X,),
        ("aten.reciprocal.default",),
    ),
    "add_alpha": (
        Lambda(lambda a, b: torch.add(a, b, alpha=2) - torch.sub(a, b, alpha=3)),
        (X, X),
        ("aten.add.Tensor",),
    ),
    "broadcast_binary": (
        Lambda(lambda a, b: a * b + torch.maximum(a, b)),
        (X, _image(3, 1, 8)),
        ("aten.maximum.default",),
    ),
    "compare_where": (
        Lambda(
            lambda a, b: torch.where(a > b, a, b) + torch.where(a <= 0, 1.0, a) + (a != b).float()
        ),
        (X, X),
        ("aten.where.self",),
    ),
    "masked_fill": (
        Lambda(lambda x, m: x.masked_fill(m == 0, -1e4)),
        (V, _ints(2, 2, 1, 6)),
        ("aten.where.self",),
    ),
    "int_mask_arithmetic": (
        Lambda(lambda x, m: x + (1.0 - m[:, None, :].to(torch.float32)) * -10000.0),
        (V, _ints(2, 2, 6)),
        ("aten._to_copy.default",),
    ),
    "clamp_tensor": (
        Lambda(lambda x, lo: torch.clamp(x, min=lo)),
        (X, _image(1, 3, 1, 1)),
        ("aten.clamp.Tensor",),
    ),
    "floor_divide": (
        Lambda(lambda x: torch.div(x, 0.7, rounding_mode="floor")),
        (X,),
        ("aten.div.Tensor_mode",),
    ),
    "reductions": (
        Lambda(lambda x: x.sum((1, 2)) + x.mean(-1).sum(1) + x.amax(2).amin(1) + x.prod(1).sum(1)),
        (V,),
        ("aten.sum.dim_IntList", "aten.amax.default", "aten.prod.dim_int"),
    ),
    "reduce_all": (Lambda(lambda x: x.sum() + x.mean()), (V,), ("aten.mean.default",)),
    "var_std": (
        Lambda(lambda x: x.var(-1).sum(1) + x.std(1, keepdim=True).sum((1, 2))),
        (V,),
        ("aten.var.correction",),
    ),
    "argmax_max": (
        Lambda(lambda x: (x.argmax(1), x.max(2).values, x.argmin())),
        (V,),
        ("aten.argmax.default",),
    ),
    "any_all": (Lambda(lambda x: ((x > 1).any(1), (x > -3).all())), (V,), ("aten.any.dim",)),
    "norm": (
        Lambda(lambda x: torch.linalg.vector_norm(x, dim=-1)),
        (V,),
        ("aten.linalg_vector_norm.default",),
    ),
    "view_permute_flatten": (
        Lambda(lambda x: x.view(2, 3, 4, 16).permute(0, 2, 3, 1).flatten(1)),
        (X,),
        ("aten.permute.default",),
    ),
    "transpose_t": (
        Lambda(lambda x, w: x @ w.t()),
        (_image(3, 4), _image(5, 4)),
        ("aten.permute.default",),
    ),
    "squeeze_unsqueeze": (
        Lambda(lambda x: x[:, :1].squeeze(1).unsqueeze(-1)),
        (V,),
        ("aten.squeeze.dims",),
    ),
    "expand_repeat": (
        Lambda(lambda x: x[:, :1].expand(2, 4, 6) + x.repeat(1, 1, 2)[:, 1:5, :6]),
        (V,),
        ("aten.expand.default",),
    ),
    "cat_slice_select": (
        Lambda(lambda a, b: torch.cat([a, b], 1)[:, 1:8:2, -3:] + a[:, 2, -3:].unsqueeze(1)),
        (V, V),
        ("aten.cat.default", "aten.select.int"),
    ),
    "split_chunk": (
        Lambda(lambda x: sum(x.chunk(3, 1)) + x.split([2, 4], 1)[1].sum(1, keepdim=True)),
        (_image(2, 6, 4),),
        ("aten.split_with_sizes.default",),
    ),
    "channel_shuffle": (
        Lambda(lambda x: x.view(2, 3, 2, 4, 5).transpose(1, 2).reshape(2, 6, 4, 5)),
        (_image(2, 6, 4, 5),),
        ("aten.permute.default",),
    ),
    "index_select_gather": (
        Lambda(
            lambda x, i: x.index_select(1, i[0]) + torch.gather(x, 1, i[:, :, None].expand(2, 3, 6))
        ),
        (_image(2, 5, 6), _ints(5, 2, 3)),
        ("aten.index_select.default", "aten.gather.default"),
    ),
    "index_tensor": (Lambda(lambda x, i: x[:, i[0]]), (V, _ints(5, 1, 3)), ("aten.index.Tensor",)),
    "pad": (
        Lambda(lambda x: F.pad(x, (1, 2, 0, 1), value=0.5)),
        (X,),
        ("aten.constant_pad_nd.default",),
    ),
    "flip": (Lambda(lambda x: torch.flip(x, (1, 2))), (V,), ("aten.flip.default",)),
    "arange_full": (
        Lambda(lambda x: x + torch.arange(6, dtype=torch.float32) + torch.full((5, 6), 2.0)),
        (V,),
        ("aten.arange.start_step",),
    ),
    "pool_1d": (
        Lambda(
            lambda x: (
                F.max_pool1d(x, 3, 2, 1)
                + F.avg_pool1d(x, 2, 2, 0)[..., :3]
                + F.adaptive_avg_pool1d(x, 3)
            )
        ),
        (V,),
        (
            "aten.max_pool2d_with_indices.default",
            "aten.avg_pool2d.default",
            "aten._adaptive_avg_pool2d.default",
        ),
    ),
    "pool_3d": (
        Lambda(lambda x: F.max_pool3d(x, 2) + F.avg_pool3d(x, 2) + F.adaptive_avg_pool3d(x, 2)),
        (_image(1, 2, 4, 4, 4),),
        (
            "aten.max_pool3d_with_indices.default",
            "aten.avg_pool3d.default",
            "aten._adaptive_avg_pool3d.default",
        ),
    ),
    "interpolate_1d_3d": (
        Lambda(
            lambda a, b: (
                F.interpolate(a, scale_factor=2, mode="linear"),
                F.interpolate(a, size=9),
                F.interpolate(b, scale_factor=2, mode="trilinear"),
                F.interpolate(b, scale_factor=2),
            )
        ),
        (V, _image(1, 2, 3, 3, 3)),
        (
            "aten.upsample_linear1d.vec",
            "aten.upsample_nearest1d.vec",
            "aten.upsample_trilinear3d.vec",
            "aten.upsample_nearest3d.vec",
        ),
    ),
    "interpolate_nearest_exact": (
        Lambda(
            lambda a, b: (
                F.interpolate(a, size=7, mode="nearest-exact"),
                F.interpolate(b, scale_factor=1.5, mode="nearest-exact"),
                F.interpolate(X_3D(b), size=(3, 5, 4), mode="nearest-exact"),
            )
        ),
        (V, X),
        (
            "aten._upsample_nearest_exact1d.vec",
            "aten._upsample_nearest_exact2d.vec",
            "aten._upsample_nearest_exact3d.vec",
        ),
    ),
    "interpolate_bicubic": (
        Lambda(lambda x: F.interpolate(x, scale_factor=2, mode="bicubic")),
        (X,),
        ("aten.upsample_bicubic2d.vec",),
    ),
    "comparisons_logic": (
        Lambda(
            lambda a, b: (
                ((a < b) & (a >= 0)) | ((a == b) ^ (a < 0.5)) | (b >= a) & ~(b <= a) | (a != 0.25)
            )
        ),
        (X, X),
        (
            "aten.lt.Tensor",
            "aten.ge.Scalar",
            "aten.eq.Tensor",
            "aten.lt.Scalar",
            "aten.ge.Tensor",
            "aten.le.Tensor",
            "aten.ne.Scalar",
            "aten.bitwise_and.Tensor",
            "aten.bitwise_or.Tensor",
            "aten.bitwise_xor.Tensor",
            "aten.bitwise_not.default",
        ),
    ),
    "logical_ops": (
        Lambda(
            lambda a, b: torch.logical_xor(
                torch.logical_and(a > 0, b > 0), torch.logical_or(a > 1, b < 0)
            )
        ),
        (X, X),
        ("aten.logical_and.default", "aten.logical_or.default", "aten.logical_xor.default"),
    ),
    "rounding_trig": (
        Lambda(
            lambda x: (
                -x
                + torch.sin(x) * torch.cos(x)
                + torch.floor(x)
                + torch.ceil(x)
                + torch.round(x * 3)
                + torch.sign(x)
            )
        ),
        (X,),
        (
            "aten.neg.default",
            "aten.sin.default",
            "aten.cos.default",
            "aten.floor.default",
            "aten.ceil.default",
            "aten.round.default",
            "aten.sign.default",
        ),
    ),
    "remainders": (
        Lambda(
            lambda a, b: (
                torch.fmod(a, 0.7)
                + torch.remainder(a, 0.7)
                + torch.fmod(a, b)
                + torch.remainder(a, b)
            )
        ),
        (X, _positive(2, 3, 8, 8)),
        ("aten.fmod.Scalar", "aten.remainder.Scalar", "aten.fmod.Tensor", "aten.remainder.Tensor"),
    ),
    "min_pow_clamps": (
        Lambda(
            lambda a, b: (
                a.min(1).values
                + torch.minimum(a, b).sum(1)
                + torch.pow(b, a).sum(1)
                + a.clamp(min=0.1).sum(1)
                + a.clamp(max=0.2).sum(1),
                a.min(1).indices,
            )
        ),
        (X, _positive(2, 3, 8, 8)),
        ("aten.min.dim", "aten.minimum.default", "aten.pow.Tensor_Tensor", "aten.clamp.default"),
    ),
    "all_any": (
        Lambda(
            lambda x: (
                (x > 0).all(),
                (x > 0).any(),
                (x > -2).all(1),
                (x > 1).any((1, 2)),
                (x > -2).all((0, 2)),
            )
        ),
        (V,),
        ("aten.any.default", "aten.any.dims", "aten.logical_not.default"),
    ),
    "cast_round_trip": (
        Lambda(lambda x: (x * 4).to(torch.int64).to(torch.float32)),
        (X,),
        ("aten._to_copy.default",),
    ),
}


def _inputs(
    makers: tuple[Callable[[np.random.Generator], np.ndarray], ...],
) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    return tuple(make(rng) for make in makers)


def _torch_results(module: nn.Module, inputs: tuple[np.ndarray, ...]) -> list[np.ndarray]:
    with torch.no_grad():
        result = module(*(torch.from_numpy(a) for a in inputs))
    results = result if isinstance(result, tuple | list) else (result,)
    return [r.numpy() for r in results]


def check_against_torch(module: nn.Module, inputs: tuple[np.ndarray, ...]) -> None:
    """from_pytorch, then the interpreter, against torch eager: same outputs, shapes
    and dtypes, at the suite's fp32 tolerances."""
    module = module.eval()
    graph, params = from_pytorch(module, tuple(torch.from_numpy(a) for a in inputs))
    feeds = {value.name: array for value, array in zip(graph.inputs, inputs, strict=True)}
    ours = list(interpret(graph, params, feeds).values())
    theirs = _torch_results(module, inputs)
    assert len(ours) == len(theirs)
    for got, want in zip(ours, theirs, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@cache
def _program_targets(name: str) -> frozenset[str]:
    """The overloads in case `name`'s program, decomposed as `from_pytorch` does."""
    module, makers, _ = OPS[name]
    inputs = _inputs(makers)
    program = exported_program(module.eval(), tuple(torch.from_numpy(a) for a in inputs))
    return frozenset(str(n.target) for n in decomposed(program).graph.nodes)


@pytest.mark.parametrize("name", list(OPS))
def test_operator_matches_torch(name: str) -> None:
    torch.manual_seed(0)
    module, makers, overloads = OPS[name]
    # The program holds the overloads this case is meant to exercise (a torch upgrade
    # that decomposes differently would otherwise leave a converter untested).
    assert set(overloads) <= _program_targets(name), sorted(_program_targets(name))
    check_against_torch(module, _inputs(makers))


# Converters that exist to refuse, each with a test below.
REFUSING = {
    "aten._native_batch_norm_legit_functional.default",
    "aten._native_batch_norm_legit.no_stats",
}


def test_every_converter_is_exercised() -> None:
    """Every converter meets its overload in some case's program: none is dead code
    that core ATen's decompositions never let through."""
    reached = set().union(*(_program_targets(name) for name in OPS))
    assert set(CONVERTERS) - reached - REFUSING == set()


ZOO = [(name, batch) for name, batch in zoo.PARAMS if batch == 1 or name == "vgg"]


@pytest.mark.parametrize(("name", "batch"), ZOO, ids=[f"{n}-b{b}" for n, b in ZOO])
def test_zoo_model_matches_torch(name: str, batch: int) -> None:
    inputs = tuple(zoo.case_inputs(name, batch).values())
    check_against_torch(zoo.build_model(name), inputs)


def test_names_come_from_the_signature() -> None:
    model = zoo.build_model("bert")
    inputs = zoo.case_inputs("bert", 1)
    graph, _ = from_pytorch(model, tuple(torch.from_numpy(a) for a in inputs.values()))
    assert [v.name for v in graph.inputs] == ["input_ids", "attention_mask"]
    assert [v.name for v in graph.outputs] == ["output_0", "output_1"]
    assert graph.inputs[0].dtype == "int64" and graph.inputs[0].shape == (1, 16)


def test_parameters_become_params_under_their_names() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).eval()
    graph, params = from_pytorch(model, torch.zeros(1, 3, 8, 8))
    assert [v.name for v in graph.outputs] == ["output"]
    assert any(name.startswith("0.weight") for name in params)
    assert any(name.startswith("1.running_var") for name in params)
    # No tensor was lost to a zero-size copy: the conv weight is the module's.
    weight = next(array for name, array in params.items() if name.startswith("0.weight"))
    np.testing.assert_array_equal(weight, model[0].weight.detach().numpy())


def test_saved_program_reads_back(tmp_path: Path) -> None:
    model = zoo.build_model("mobilenet_v3")
    inputs = tuple(zoo.case_inputs("mobilenet_v3", 1).values())
    path = tmp_path / "model.pt2"
    torch.export.save(
        torch.export.export(model, tuple(torch.from_numpy(a) for a in inputs)), str(path)
    )
    graph, params = from_pytorch(path)
    got = interpret(graph, params, {graph.inputs[0].name: inputs[0]})["output"]
    np.testing.assert_allclose(got, _torch_results(model, inputs)[0], rtol=RTOL, atol=ATOL)


# -- errors -------------------------------------------------------------------------------


def test_unsupported_operators_are_listed_with_counts() -> None:
    module = Lambda(lambda x: torch.cumsum(x, 1) + torch.cumsum(x, 2) + torch.sort(x, 1).values)
    with pytest.raises(UnsupportedOperatorError) as raised:
        from_pytorch(module, torch.zeros(2, 3, 4))
    message = str(raised.value)
    assert "2 operators" in message
    assert "aten.cumsum.default (x2" in message
    assert "aten.sort.default (x1" in message


def test_dynamic_dimension_is_named_with_the_fix() -> None:
    model = nn.Linear(4, 2).eval()
    batch = torch.export.Dim("batch", min=2, max=64)
    program = torch.export.export(model, (torch.zeros(3, 4),), dynamic_shapes=({0: batch},))
    with pytest.raises(UnsupportedOperatorError) as raised:
        from_pytorch(program)
    message = str(raised.value)
    assert "dimension 0" in message and "'input'" in message
    assert "dynamic_shapes" in message


def test_training_mode_batch_norm_is_refused() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    with pytest.raises(UnsupportedOperatorError, match=r"model\.eval\(\)"):
        from_pytorch(model, torch.zeros(2, 3, 8, 8))


def test_batch_norm_without_running_statistics_is_refused() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, track_running_stats=False))
    with pytest.raises(UnsupportedOperatorError, match="track_running_stats"):
        from_pytorch(model.eval(), torch.zeros(2, 3, 8, 8))


def test_module_without_example_inputs() -> None:
    with pytest.raises(EmberError, match="example_inputs"):
        from_pytorch(nn.Linear(2, 2))


def test_not_a_program() -> None:
    with pytest.raises(EmberError, match=r"nn\.Module"):
        from_pytorch(42)


def test_bad_pt2_files(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no such file"):
        from_pytorch(tmp_path / "missing.pt2")
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"not a zip archive at all")
    with pytest.raises(ModelLoadError, match=r"torch\.export\.save"):
        from_pytorch(junk)


def test_without_torch_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_torch(name: str, *args: object, **kwargs: object) -> object:
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with warnings.catch_warnings(), pytest.raises(EmberError, match=r"ember\[torch\]"):
        from_pytorch("model.pt2")


def test_bfloat16_weights_are_refused_with_the_fix() -> None:
    model = nn.Linear(4, 2).eval().to(torch.bfloat16)
    with pytest.raises(UnsupportedOperatorError, match=r"bfloat16.*model\.float\(\)"):
        from_pytorch(model, torch.zeros(1, 4, dtype=torch.bfloat16))

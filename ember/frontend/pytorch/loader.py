"""`from_pytorch`: a PyTorch program, through `torch.export`, into an Ember graph.

The steps, in order, each failing with an `EmberError` that says what to fix:

1. get an `ExportedProgram`: export an `nn.Module` with its example inputs
   (`torch.export.export`, in the module's current mode: eval mode is the caller's
   call, as for any inference export), take one as given, or read a `.pt2` file saved
   by `torch.export.save`;
2. decompose it to the core ATen operator set (`run_decompositions()`), the stable
   set of about 180 operators every exporter target is written against, except for
   interpolation (`KEPT_WHOLE`): its decomposition is index arithmetic and multi-axis
   gathers where Ember has one `resize` op;
3. check that every operator has a converter, reporting all unsupported ones in one
   error, and that every user input has a static shape (a dynamic dimension is named,
   with the two ways to fix it);
4. parameters, buffers and lifted constants become params under their state-dict
   names; user inputs become graph inputs under the names `forward` gives them;
5. convert the nodes in order through one `GraphBuilder` with constant folding on (a
   weight's transpose becomes a transposed param);
6. name the outputs `output` (one) or `output_0`, `output_1`, ... and verify.

torch is an optional dependency (`pip install ember[torch]`); it is imported only
here, when a PyTorch model is converted.
"""

from __future__ import annotations

import importlib
import operator
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import EmberError, ModelLoadError, UnsupportedOperatorError
from ember.frontend.naming import build_with_output_names
from ember.frontend.pytorch.registry import CONVERTERS, ConversionContext, TorchNode
from ember.graph.builder import GraphBuilder
from ember.graph.ir import DTYPES, Graph, Params, Value
from ember.graph.verify import verify

# Converter families register themselves on import.
for _family in ("nn", "tensor", "math"):
    importlib.import_module(f"ember.frontend.pytorch.{_family}")

# Operators the core decompositions would break up that Ember converts whole.
KEPT_WHOLE = (
    "upsample_nearest1d.vec",
    "upsample_nearest3d.vec",
    "_upsample_nearest_exact1d.vec",
    "_upsample_nearest_exact2d.vec",
    "_upsample_nearest_exact3d.vec",
    "upsample_linear1d.vec",
    "upsample_trilinear3d.vec",
    "upsample_bicubic2d.vec",
)

# Checks torch's export inserts (of dtypes, devices, shapes); they compute nothing and
# hold for the static shapes Ember compiles.
_ASSERTIONS = {
    "aten._assert_tensor_metadata.default",
    "aten._assert_async.msg",
    "aten._assert_scalar.default",
    "aten.sym_constrain_range_for_size.default",
}
# Nodes that carry no computation of their own.
_PASS_THROUGH = {
    "aten.alias.default",
    "aten.clone.default",
    "aten.lift_fresh_copy.default",
    "aten.detach.default",
    "aten.contiguous.default",
}


def require_torch() -> Any:
    """The torch module, or an error saying how to install it."""
    try:
        import torch
    except ImportError as error:
        raise EmberError(
            "reading PyTorch programs needs torch, which is not installed: "
            "pip install 'ember[torch]' (or pip install torch)"
        ) from error
    return torch


def from_pytorch(model: Any, example_inputs: Sequence[Any] | Any = None) -> tuple[Graph, Params]:
    """Convert a PyTorch program into `(graph, params)`.

    `model` is an `nn.Module` (exported with `example_inputs`, a tensor or a tuple of
    tensors or NumPy arrays: their shapes and dtypes become the graph's), a
    `torch.export.ExportedProgram`, or the path of a `.pt2` file written by
    `torch.export.save`. Export a module in eval mode (`model.eval()`): Ember compiles
    inference graphs."""
    program = exported_program(model, example_inputs)
    return convert_program(decomposed(program))


def decomposed(program: Any) -> Any:
    """`program` in the core ATen operator set, but for the operators in `KEPT_WHOLE`."""
    torch = require_torch()
    table = torch.export.default_decompositions()
    for name in KEPT_WHOLE:
        packet, overload = name.rsplit(".", 1)
        table.pop(getattr(getattr(torch.ops.aten, packet), overload), None)
    try:
        return program.run_decompositions(table)
    except Exception as error:  # torch raises many types; the message is what helps
        raise ModelLoadError(
            f"torch could not decompose the program to core ATen: {error}"
        ) from error


def exported_program(model: Any, example_inputs: Sequence[Any] | Any = None) -> Any:
    """The `ExportedProgram` behind a module (exported here), a program, or a path."""
    torch = require_torch()
    if isinstance(model, str | os.PathLike):
        return load_program(model)
    if isinstance(model, torch.export.ExportedProgram):
        return model
    if not isinstance(model, torch.nn.Module):
        raise EmberError(
            f"from_pytorch takes an nn.Module, a torch.export.ExportedProgram or a .pt2 "
            f"path; got {type(model).__name__}"
        )
    if example_inputs is None:
        raise EmberError(
            "from_pytorch needs example_inputs to export an nn.Module: a tensor or a tuple "
            "of tensors with the shapes and dtypes the compiled model will take"
        )
    if not isinstance(example_inputs, tuple | list):
        example_inputs = (example_inputs,)
    args = tuple(
        torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a
        for a in example_inputs
    )
    try:
        return torch.export.export(model, args)
    except Exception as error:  # torch's export errors carry the useful explanation
        raise ModelLoadError(
            f"torch.export could not export {type(model).__name__}: {error}"
        ) from error


def load_program(path: str | os.PathLike[str]) -> Any:
    """Read a `.pt2` file written by `torch.export.save`."""
    torch = require_torch()
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"{path}: no such file")
    try:
        return torch.export.load(str(path))
    except Exception as error:
        raise ModelLoadError(
            f"{path}: not a program saved by torch.export.save ({type(error).__name__}: {error})"
        ) from error


# -- conversion -----------------------------------------------------------------------


def convert_program(program: Any) -> tuple[Graph, Params]:
    """Convert an `ExportedProgram` already in core ATen form (`decomposed`)."""
    torch = require_torch()
    graph_module = program.graph_module
    _check_supported(graph_module.graph)
    builder = GraphBuilder(name=type(graph_module).__name__.lower(), fold_constants=True)
    ctx = ConversionContext(builder)
    env: dict[str, object] = {}
    input_names = _import_placeholders(program, builder, env)
    output_nodes = _user_outputs(program)
    names = (
        ["output"] if len(output_nodes) == 1 else [f"output_{i}" for i in range(len(output_nodes))]
    )
    for name in names:
        builder.fresh_name(name)  # reserved: no intermediate value may take it
    for fx_node in graph_module.graph.nodes:
        if fx_node.op == "call_function":
            env[fx_node.name] = _convert_node(torch, ctx, fx_node, env)
    outputs = []
    for name, fx_node in zip(names, output_nodes, strict=True):
        value = _lookup(env, fx_node, "is an output")
        outputs.append((name, value))
    graph, params = build_with_output_names(builder, outputs, input_names)
    verify(graph, params)
    return graph, params


def _target_name(target: object) -> str:
    """`aten.convolution.default` for an ATen overload; the Python name otherwise."""
    if target is operator.getitem:
        return "getitem"
    return str(target) if hasattr(target, "_schema") else getattr(target, "__name__", str(target))


def _check_supported(graph: Any) -> None:
    """One `UnsupportedOperatorError` listing every operator without a converter, with
    its count and one example node."""
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for fx_node in graph.nodes:
        if fx_node.op != "call_function":
            continue
        target = _target_name(fx_node.target)
        if target in CONVERTERS or target in _PASS_THROUGH or target in _ASSERTIONS:
            continue
        if target == "getitem":
            continue
        counts[target] += 1
        examples.setdefault(target, fx_node.name)
    if counts:
        listing = ", ".join(
            f"{target} (x{count}, e.g. node '{examples[target]}')"
            for target, count in counts.items()
        )
        noun = "operator" if len(counts) == 1 else "operators"
        raise UnsupportedOperatorError(
            f"program uses {len(counts)} {noun} Ember cannot import: {listing}"
        )


def _dtype(torch_dtype: Any, where: str) -> str:
    name = str(torch_dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise UnsupportedOperatorError(
            f"{where} has dtype {name}, which Ember does not support; supported: "
            f"{', '.join(DTYPES)}. Convert the model (e.g. model.float()) before exporting it"
        )
    return name


def _array(tensor: Any, where: str) -> np.ndarray:
    _dtype(tensor.dtype, where)
    return tensor.detach().cpu().contiguous().numpy()


def _import_placeholders(program: Any, builder: GraphBuilder, env: dict[str, object]) -> set[str]:
    """Params for parameters, buffers and constants; inputs for the user inputs.
    Returns the input names."""
    from torch.export.graph_signature import InputKind, TensorArgument

    placeholders = {n.name: n for n in program.graph_module.graph.nodes if n.op == "placeholder"}
    input_names: set[str] = set()
    for spec in program.graph_signature.input_specs:
        if not isinstance(spec.arg, TensorArgument):
            raise UnsupportedOperatorError(
                f"program input {spec.arg} is not a tensor; Ember compiles programs whose "
                "inputs are all tensors (bake other arguments in before exporting)"
            )
        name = spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            env[name] = _user_input(builder, placeholders[name])
            input_names.add(name)
            continue
        if (
            spec.kind in (InputKind.PARAMETER, InputKind.BUFFER)
            and spec.target in program.state_dict
        ):
            tensor = program.state_dict[spec.target]
        elif (
            spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
            and spec.target in program.constants
        ):
            tensor = program.constants[spec.target]
        else:
            raise UnsupportedOperatorError(
                f"program input {name!r} ({spec.kind.name}) is not a tensor Ember can read"
            )
        env[name] = builder.param(spec.target or name, _array(tensor, f"{spec.target!r}"))
    return input_names


def _user_input(builder: GraphBuilder, placeholder: Any) -> Value:
    name = placeholder.name
    fake = placeholder.meta.get("val")
    if fake is None or not hasattr(fake, "shape"):
        raise UnsupportedOperatorError(f"program input {name!r} is not a tensor")
    shape = []
    for axis, dim in enumerate(fake.shape):
        if not isinstance(dim, int):
            raise UnsupportedOperatorError(
                f"program input {name!r} has a dynamic dimension {axis} ({dim}); Ember "
                "compiles static shapes: export without dynamic_shapes (the example input's "
                "size is then fixed), or give that Dim a single value (min == max)"
            )
        shape.append(dim)
    return builder.input(name, tuple(shape), _dtype(fake.dtype, f"program input {name!r}"))


def _user_outputs(program: Any) -> list[Any]:
    from torch.export.graph_signature import OutputKind

    output_node = next(n for n in program.graph_module.graph.nodes if n.op == "output")
    results = output_node.args[0]
    specs = program.graph_signature.output_specs
    chosen = [
        r for r, spec in zip(results, specs, strict=True) if spec.kind == OutputKind.USER_OUTPUT
    ]
    for result in chosen:
        if not hasattr(result, "name"):
            raise UnsupportedOperatorError(
                f"program output {result!r} is not a tensor; Ember compiles programs whose "
                "outputs are all tensors"
            )
    return chosen


class _NotProduced:
    """What an output Ember's converter does not compute maps to."""

    def __init__(self, where: str, position: int) -> None:
        self.where, self.position = where, position


def _lookup(env: dict[str, object], fx_node: Any, use: str) -> Value:
    value = env[fx_node.name]
    if isinstance(value, _NotProduced):
        raise UnsupportedOperatorError(
            f"{value.where}: Ember's converter does not produce output #{value.position}, "
            f"which {use}"
        )
    if not isinstance(value, Value):
        raise UnsupportedOperatorError(f"node {fx_node.name!r} is not a tensor but {use}")
    return value


def _convert_node(
    torch: Any, ctx: ConversionContext, fx_node: Any, env: dict[str, object]
) -> object:
    target = _target_name(fx_node.target)
    if target == "getitem":
        source, index = fx_node.args
        results = env[source.name]
        if not isinstance(results, tuple):
            raise ModelLoadError(
                f"node {fx_node.name!r} indexes {source.name!r}, which is one tensor"
            )
        return results[index]

    def resolve(argument: object) -> object:
        if isinstance(argument, torch.fx.Node):
            return _lookup(env, argument, f"node {fx_node.name!r} ({target}) reads")
        if isinstance(argument, torch.dtype):
            return _dtype(argument, f"node {fx_node.name!r} ({target})")
        return argument

    args = torch.fx.node.map_aggregate(fx_node.args, resolve)
    kwargs = torch.fx.node.map_aggregate(dict(fx_node.kwargs), resolve)
    node = TorchNode(target, fx_node.name, tuple(args), dict(kwargs))
    if target in _PASS_THROUGH:
        return node.value(0, "self")
    if target in _ASSERTIONS:
        return None
    result = CONVERTERS[target](ctx, node)
    if isinstance(result, tuple):
        return tuple(
            _NotProduced(node.where, i) if value is None else value
            for i, value in enumerate(result)
        )
    _check_type(node, fx_node, result)
    return result


def _check_type(node: TorchNode, fx_node: Any, result: object) -> None:
    """The converted value has the shape torch's own shape inference gave the node: a
    converter bug shows up here, at the node, not as a wrong number at the end."""
    fake = fx_node.meta.get("val")
    if not isinstance(result, Value) or fake is None or not hasattr(fake, "shape"):
        return
    expected = tuple(int(d) for d in fake.shape)
    if tuple(result.shape) != expected:
        raise ModelLoadError(
            f"{node.where}: converted to shape {list(result.shape)}, torch says {list(expected)}"
        )

"""`from_onnx`: read an ONNX model and convert it into an Ember graph and its params.

The steps, in order, each failing with an `EmberError` that says what to fix:

1. read the model (a path, bytes or a `ModelProto`) and check that it is ONNX at all;
2. check the default-domain opset (7 through 21; newer ones with a warning);
3. check the graph's structure (every name defined once, before use) and that every
   operator has a converter, reporting all unsupported operators in one error;
4. turn initializers into params and graph inputs into typed inputs, with symbolic
   dimensions filled in from `shapes=`;
5. convert the nodes in order through one `GraphBuilder` with constant folding on, so
   that shape-computing subgraphs (Shape -> Gather -> Concat -> Reshape) become
   constants that converters can read;
6. give the graph outputs the ONNX output names and verify the result.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import numpy as np
import onnx
import onnx.inliner
from google.protobuf.message import DecodeError

from ember.errors import EmberError, ModelLoadError, ShapeError, UnsupportedOperatorError
from ember.frontend.naming import build_with_output_names
from ember.frontend.onnx.registry import (
    CONVERTERS,
    ConversionContext,
    OnnxNode,
    converter_key,
    dtype_from_onnx,
)
from ember.graph.builder import GraphBuilder
from ember.graph.ir import Graph, Params, Value
from ember.graph.verify import verify

# Converter families register themselves on import; one not written yet is absent.
for _family in ("math", "nn", "tensor", "reduce", "quantize"):
    try:
        importlib.import_module(f"ember.frontend.onnx.{_family}")
    except ModuleNotFoundError as _error:
        if _error.name != f"ember.frontend.onnx.{_family}":
            raise

MIN_OPSET = 7
# The newest opset whose changes the converters were written against.
MAX_TESTED_OPSET = 21
DEFAULT_DOMAINS = ("", "ai.onnx")
# Ops that carry subgraphs: Ember compiles straight-line static graphs only.
SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})

ModelSource = str | os.PathLike[str] | bytes | onnx.ModelProto
ShapeOverrides = Mapping[str, Sequence[int]]


def from_onnx(model: ModelSource, shapes: ShapeOverrides | None = None) -> tuple[Graph, Params]:
    """Convert an ONNX model into `(graph, params)`.

    `model` is a file path, the serialised bytes, or a loaded `onnx.ModelProto`.
    `shapes` maps graph input names to complete static shapes; it is needed when the
    model has symbolic dimensions (such as a dynamic batch size) and may also fix them
    to other values than the model's.
    """
    proto = read_model(model)
    try:
        return _convert_model(proto, shapes or {})
    except UnicodeDecodeError as error:
        # Protobuf checks no text on parsing; Python decodes each string when read.
        raise ModelLoadError(
            f"the model holds text that is not UTF-8 ({error.object[:40]!r}...); names, "
            "op types and string attributes must be UTF-8: re-export the model"
        ) from None


def _convert_model(proto: onnx.ModelProto, shapes: ShapeOverrides) -> tuple[Graph, Params]:
    opset = default_opset(proto)
    if proto.functions:
        proto = _inline_functions(proto)
    check_structure(proto.graph)
    check_supported(proto.graph)
    check_nodes(proto)
    builder = GraphBuilder(name=_graph_name(proto.graph), fold_constants=True)
    env = _import_values(builder, proto.graph, shapes)
    ctx = ConversionContext(builder, opset)
    output_names = [out.name for out in proto.graph.output]
    # Reserve the output names so that no intermediate value takes one of them.
    for name in output_names:
        if name not in env:
            builder.fresh_name(name)
    input_names = set(env) - {tensor.name for tensor in proto.graph.initializer}
    for index, node in enumerate(proto.graph.node):
        _convert_node(ctx, node, index, env)
    graph, params = _build_with_output_names(builder, env, input_names, output_names)
    verify(graph, params)
    return graph, params


def _inline_functions(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Model-local functions are plain subgraphs; inlining makes them ordinary nodes."""
    try:
        return onnx.inliner.inline_local_functions(proto)
    except (onnx.checker.ValidationError, RuntimeError) as error:
        # The inliner refuses recursive functions and calls that do not fit a function's
        # signature (more inputs or outputs than it declares).
        text = str(error).strip().splitlines()[0] if str(error).strip() else "invalid"
        reason = text.split("failed: ")[-1].rstrip(".")
        raise ModelLoadError(
            f"the model's local functions cannot be inlined: {reason}. Check the "
            "functions and the nodes calling them (or re-export the model without them)"
        ) from None


# -- reading -------------------------------------------------------------------------


def read_model(model: ModelSource) -> onnx.ModelProto:
    """The `ModelProto` behind a path, bytes or proto, with external data loaded."""
    if isinstance(model, onnx.ModelProto):
        proto, origin, base_dir = model, "the given ModelProto", None
    elif isinstance(model, bytes | bytearray):
        origin, base_dir = "the given data", None
        proto = _parse(bytes(model), origin)
    elif isinstance(model, str | os.PathLike):
        path = Path(model)
        origin, base_dir = f"'{path}'", path.parent
        proto = _parse(_read_file(path), origin)
    else:
        raise ModelLoadError(
            f"from_onnx takes a file path, bytes or an onnx.ModelProto, not {type(model).__name__}"
        )
    if proto.ir_version <= 0 or not proto.HasField("graph"):
        raise ModelLoadError(
            f"{origin} does not look like an ONNX model (it has no IR version or no graph); "
            "check that it is an .onnx file and was written completely"
        )
    if proto.ir_version > onnx.IR_VERSION:
        raise ModelLoadError(
            f"{origin} has IR version {proto.ir_version}; the installed onnx package "
            f"{onnx.__version__} reads up to {onnx.IR_VERSION}: upgrade onnx, or save the "
            "model with an older IR version"
        )
    if base_dir is not None:
        # A no-op unless some tensors live in files beside the model.
        try:
            onnx.external_data_helper.load_external_data_for_model(proto, str(base_dir))
        except (OSError, ValueError, onnx.checker.ValidationError) as error:
            raise ModelLoadError(
                f"{origin} stores weights in external data files that could not be read "
                f"({str(error).strip()}); keep them next to the model file"
            ) from None
    return proto


def _read_file(path: Path) -> bytes:
    if not path.exists():
        raise ModelLoadError(f"model file '{path}' does not exist; check the path")
    if path.is_dir():
        raise ModelLoadError(f"'{path}' is a directory; give the path of the .onnx file")
    try:
        return path.read_bytes()
    except OSError as error:
        raise ModelLoadError(f"cannot read model file '{path}': {error.strerror}") from None


def _parse(data: bytes, origin: str) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        raise ModelLoadError(
            f"{origin} is not a readable ONNX model: the data is not an ONNX protobuf "
            "(is it another format, or was the file truncated while copying?)"
        ) from None
    return proto


def _graph_name(graph: onnx.GraphProto) -> str:
    return graph.name or "main"


# -- checks before converting ---------------------------------------------------------


def default_opset(proto: onnx.ModelProto) -> int:
    """The model's opset for the default ONNX domain, checked against Ember's range,
    after every opset_import entry is checked: each domain once, a version in
    1 .. 2**31 - 1 (ONNX's checker stores them as C ints)."""
    domains = Counter("" if e.domain in DEFAULT_DOMAINS else e.domain for e in proto.opset_import)
    for entry in proto.opset_import:
        if not isinstance(entry.domain, str):  # protobuf hands text that is not UTF-8 as bytes
            raise ModelLoadError(
                f"the model imports an opset of domain {entry.domain!r}, a name that is not "
                "UTF-8 text: re-export the model"
            )
        if not 1 <= entry.version < 2**31:
            raise ModelLoadError(
                f"the model imports opset {entry.version} of domain {entry.domain or 'ai.onnx'!r}; "
                "opset versions are positive 32-bit integers: re-export the model"
            )
    repeated = [domain for domain, count in domains.items() if count > 1 and domain]
    if repeated:
        raise ModelLoadError(
            f"the model imports domain {repeated[0]!r} {domains[repeated[0]]} times; a model "
            "imports each domain once. Keep one opset_import entry for it"
        )
    versions = [entry.version for entry in proto.opset_import if entry.domain in DEFAULT_DOMAINS]
    if not versions:
        raise ModelLoadError(
            "the model imports no opset of the default ONNX domain; it is not a standard "
            "ONNX model (re-export it with a standard opset between "
            f"{MIN_OPSET} and {MAX_TESTED_OPSET})"
        )
    if len(versions) > 1:
        raise ModelLoadError(
            f"the model imports the default ONNX domain {len(versions)} times (opsets "
            f"{', '.join(map(str, versions))}); a model imports each domain once. Keep one "
            "opset_import entry for it"
        )
    opset = versions[0]
    newest_known = onnx.defs.onnx_opset_version()
    if opset < MIN_OPSET or opset > newest_known:
        raise ModelLoadError(
            f"the model uses ONNX opset {opset}; Ember imports opsets {MIN_OPSET} to "
            f"{MAX_TESTED_OPSET}. Convert it with onnx.version_converter.convert_version("
            f"model, {MAX_TESTED_OPSET}) or re-export it"
        )
    if opset > MAX_TESTED_OPSET:
        # Opsets 22 and later mostly widen the accepted element types of existing
        # operators; the operators Ember converts keep their opset-21 semantics.
        warnings.warn(
            f"the model uses ONNX opset {opset}; Ember is tested up to opset "
            f"{MAX_TESTED_OPSET} and converts it with opset-{MAX_TESTED_OPSET} semantics",
            stacklevel=3,
        )
    return opset


def _check_text(graph: onnx.GraphProto) -> None:
    """Every name is text: protobuf hands a string field that is not UTF-8 to Python as
    bytes (or raises when it is read, caught in `from_onnx`)."""
    names = [tensor.name for tensor in graph.initializer]
    names += [value.name for value in (*graph.input, *graph.output)]
    for node in graph.node:
        names += [node.name, node.op_type, node.domain, *node.input, *node.output]
        names += [attribute.name for attribute in node.attribute]
    bad = next((name for name in names if not isinstance(name, str)), None)
    if bad is not None:
        raise ModelLoadError(
            f"the model names something {bad!r}, which is not UTF-8 text; names, op types "
            "and domains must be UTF-8: re-export the model"
        )


def check_structure(graph: onnx.GraphProto) -> None:
    """Every value name is defined once (input, initializer or node output) before any
    node reads it, and every graph output is defined."""
    _check_text(graph)
    defined: dict[str, str] = {}
    initializer_names = {tensor.name for tensor in graph.initializer}
    for tensor in graph.initializer:
        _define(defined, tensor.name, "an initializer")
    for value in graph.input:
        if value.name in initializer_names:
            continue  # old IR versions list initializers among the inputs too
        _define(defined, value.name, "a graph input")
    for index, node in enumerate(graph.node):
        where = _describe_node(node, index)
        for name in node.input:
            if name and name not in defined:
                raise ModelLoadError(
                    f"{where} reads {name!r}, which no graph input, initializer or earlier "
                    "node defines; the model is inconsistent (nodes must be in "
                    "topological order). Re-export the model"
                )
        for name in node.output:
            if name:
                _define(defined, name, where)
    if not graph.output:
        raise ModelLoadError(
            "the model has no graph outputs, so it computes nothing; declare the values "
            "to compute as graph outputs"
        )
    for value in graph.output:
        if value.name not in defined:
            raise ModelLoadError(
                f"graph output {value.name!r} is not produced by any node, input or "
                "initializer; the model is inconsistent. Re-export the model"
            )


def _define(defined: dict[str, str], name: str, where: str) -> None:
    if name in defined:
        raise ModelLoadError(
            f"value {name!r} is defined twice (by {defined[name]} and by {where}); "
            "ONNX names must be unique. Re-export the model"
        )
    defined[name] = where


def _describe_node(node: onnx.NodeProto, index: int) -> str:
    return (
        f"node {node.name!r} ({node.op_type})" if node.name else f"node #{index} ({node.op_type})"
    )


def check_supported(graph: onnx.GraphProto) -> None:
    """Raise one `UnsupportedOperatorError` listing every operator type without a
    converter, with its count and one example node."""
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for index, node in enumerate(graph.node):
        key = _unsupported_key(node)
        if key is None:
            continue
        counts[key] += 1
        examples.setdefault(key, node.name or f"#{index}")
    if not counts:
        return
    listing = ", ".join(
        f"{key} (x{count}, e.g. node '{examples[key]}')" for key, count in counts.items()
    )
    noun = "operator type" if len(counts) == 1 else "operator types"
    raise UnsupportedOperatorError(
        f"model uses {len(counts)} {noun} Ember cannot import: {listing}"
    )


def _unsupported_key(node: onnx.NodeProto) -> str | None:
    """How an unsupported node is listed (domain-qualified outside the default domain),
    or None if Ember can convert it."""
    key = converter_key(node.domain, node.op_type)
    if node.domain not in DEFAULT_DOMAINS:
        return None if key in CONVERTERS else key
    carries_graph = any(
        attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for attr in node.attribute
    )
    if node.op_type in SUBGRAPH_OPS or carries_graph or node.op_type not in CONVERTERS:
        return node.op_type
    return None


def check_nodes(proto: onnx.ModelProto) -> None:
    """ONNX's own checker on each node: attributes and inputs against the operator's
    schema (an unknown or mistyped attribute would otherwise be silently ignored).

    The whole-model checker is not used: it also demands fully declared input and
    output types, which `shapes=` exists to supply."""
    context = onnx.checker.C.CheckerContext()
    context.ir_version = proto.ir_version
    context.opset_imports = {entry.domain: entry.version for entry in proto.opset_import}
    for index, node in enumerate(proto.graph.node):
        if node.domain not in DEFAULT_DOMAINS:
            continue  # ONNX's checker knows only its own domains' schemas
        try:
            onnx.checker.check_node(node, context)
        except (onnx.checker.ValidationError, ValueError) as error:  # ValueError: unparsable
            text = str(error).strip()
            first_line = text.splitlines()[0] if text else "invalid"
            raise ModelLoadError(
                f"{_describe_node(node, index)} fails ONNX's own validity check: "
                f"{first_line.rstrip('.')}. Re-export the model, or run "
                "onnx.checker.check_model(model) for the full report"
            ) from None


# -- inputs and initializers ----------------------------------------------------------


def _import_values(
    builder: GraphBuilder, graph: onnx.GraphProto, shapes: ShapeOverrides
) -> dict[str, Value | _NotProduced]:
    """Params for initializers and typed inputs for the other graph inputs."""
    env: dict[str, Value | _NotProduced] = {}
    for tensor in graph.initializer:
        array = tensor_to_array(tensor, "initializer")
        with _naming(f"initializer {tensor.name!r}"):
            env[tensor.name] = builder.param(tensor.name, array)
    if not isinstance(shapes, Mapping):
        raise ShapeError(
            f"shapes= must map input names to shapes, e.g. {{'input': (1, 3, 224, 224)}}; "
            f"got a {type(shapes).__name__}"
        )
    real_inputs = [value for value in graph.input if value.name not in env]
    known = {value.name for value in real_inputs}
    unknown = [name for name in shapes if name not in known]
    if unknown:
        raise ShapeError(
            f"shapes= names {', '.join(repr(n) for n in unknown)}, which "
            f"{'is not a model input' if len(unknown) == 1 else 'are not model inputs'}; "
            f"the model's inputs are: {', '.join(repr(n) for n in sorted(known)) or 'none'}"
        )
    for value in real_inputs:
        dtype, shape = _input_type(value, shapes.get(value.name))
        with _naming(f"input {value.name!r}"):
            env[value.name] = builder.input(value.name, shape, dtype)
    return env


@contextlib.contextmanager
def _naming(what: str) -> Iterator[None]:
    """ShapeErrors raised inside (an invalid type) name `what` they are about."""
    try:
        yield
    except ShapeError as error:
        raise ShapeError(f"{what}: {error}") from None


def tensor_to_array(tensor: onnx.TensorProto, what: str) -> np.ndarray:
    """A TensorProto as a NumPy array of an Ember dtype."""
    dtype = dtype_from_onnx(tensor.data_type, f"{what} {tensor.name!r}")
    if onnx.external_data_helper.uses_external_data(tensor):
        # Only a ModelProto loaded without its external data gets here (a path has them
        # loaded by `read_model`); to_array would look for the file in the working
        # directory, whichever that is.
        location = {entry.key: entry.value for entry in tensor.external_data}.get("location")
        raise ModelLoadError(
            f"{what} {tensor.name!r} keeps its data in the external file {location!r}, "
            "which was not loaded; pass the model's path instead of a ModelProto, or load "
            "it with onnx.load(path) (which reads external data)"
        )
    try:
        array = onnx.numpy_helper.to_array(tensor)
    except (ValueError, TypeError, OSError) as error:
        raise ModelLoadError(f"cannot read {what} {tensor.name!r}: {error}") from None
    return np.asarray(array, dtype=dtype)


def _input_type(value: onnx.ValueInfoProto, override: object) -> tuple[str, tuple[int, ...]]:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        raise UnsupportedOperatorError(
            f"graph input {value.name!r} is a {kind or 'untyped value'}; Ember imports "
            "models whose inputs are tensors"
        )
    tensor_type = value.type.tensor_type
    dtype = dtype_from_onnx(tensor_type.elem_type, f"graph input {value.name!r}")
    model_dims: list[int | str] | None = None
    if tensor_type.HasField("shape"):
        model_dims = [_dim(d) for d in tensor_type.shape.dim]
    if override is not None:
        return dtype, _checked_override(value.name, model_dims, override)
    if model_dims is None:
        raise ShapeError(
            f"graph input {value.name!r} has no shape in the model; pass its full shape "
            f"with shapes={{'{value.name}': (...)}} (or --shapes '{value.name}:D1,D2,...')"
        )
    symbolic = [d for d in model_dims if isinstance(d, str)]
    if symbolic:
        example = ", ".join(str(d) if isinstance(d, int) else "1" for d in model_dims)
        raise ShapeError(
            f"graph input {value.name!r} has shape {_format_dims(model_dims)} with unknown "
            f"dimensions {', '.join(symbolic)}; Ember compiles static shapes, so pass them, "
            f"e.g. shapes={{'{value.name}': ({example}{',' if len(model_dims) == 1 else ''})}}"
            f" (or --shapes '{value.name}:{example.replace(' ', '')}')"
        )
    return dtype, tuple(int(d) for d in model_dims)


def _dim(dim: onnx.TensorShapeProto.Dimension) -> int | str:
    """A fixed dimension as int; a symbolic one as its name ("?" if anonymous)."""
    if dim.HasField("dim_value"):
        return int(dim.dim_value)
    return dim.dim_param or "?"


def _format_dims(dims: Sequence[int | str]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def _checked_override(
    name: str, model_dims: list[int | str] | None, override: object
) -> tuple[int, ...]:
    given = _override_dims(override)
    if given is None:
        raise ShapeError(
            f"shape override for input {name!r} is {override!r}, not a sequence of "
            f"dimensions; give one non-negative integer per axis, e.g. "
            f"shapes={{'{name}': (1, 3, 224, 224)}}"
        )
    model_text = _format_dims(model_dims) if model_dims is not None else "unknown"
    dims = [d for d in given if _is_dimension(d)]
    problem = ""
    if len(dims) != len(given):
        problem = "dimensions must be non-negative integers"
    elif model_dims is not None and len(model_dims) != len(given):
        problem = f"the model's input has rank {len(model_dims)}, the given shape {len(given)}"
    elif model_dims is not None:
        clashes = [
            str(axis)
            for axis, (fixed, want) in enumerate(zip(model_dims, given, strict=True))
            if isinstance(fixed, int) and fixed != want
        ]
        if clashes:
            problem = f"it contradicts the model's fixed dimension(s) on axis {', '.join(clashes)}"
    if problem:
        raise ShapeError(
            f"shape override for input {name!r} is {list(given)} but the model's shape is "
            f"{model_text}: {problem}"
        )
    return tuple(int(d) for d in dims)


def _override_dims(override: object) -> tuple[object, ...] | None:
    """The entries of a `shapes=` value, or None if it is not a sequence (a string
    is not one here, though Python would iterate over its characters)."""
    if isinstance(override, str | bytes | Mapping) or not isinstance(override, Iterable):
        return None
    try:
        return tuple(override)
    except TypeError:  # a 0-d NumPy array is iterable in type only
        return None


def _is_dimension(value: object) -> TypeGuard[int | np.integer]:
    # bool is an int subclass, but True is no way to write a dimension.
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        return False
    return bool(value >= 0)


# -- converting nodes -----------------------------------------------------------------


def decode_attribute(attr: onnx.AttributeProto) -> object:
    """An attribute as plain Python/NumPy: bytes -> str, tensors -> arrays."""
    if attr.type == onnx.AttributeProto.SPARSE_TENSOR:
        return sparse_to_array(attr.sparse_tensor)
    if attr.type == onnx.AttributeProto.SPARSE_TENSORS:
        return [sparse_to_array(s) for s in attr.sparse_tensors]
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, onnx.TensorProto):
        return tensor_to_array(value, f"attribute {attr.name!r} tensor")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", errors="replace") for v in value]
    if isinstance(value, list) and value and isinstance(value[0], onnx.TensorProto):
        return [tensor_to_array(v, f"attribute {attr.name!r} tensor") for v in value]
    return value


def sparse_to_array(sparse: onnx.SparseTensorProto) -> np.ndarray:
    """The dense array of a sparse tensor (indices either linear or one row per value)."""
    values = tensor_to_array(sparse.values, "sparse tensor values")
    indices = onnx.numpy_helper.to_array(sparse.indices).astype(np.int64)
    shape = tuple(int(d) for d in sparse.dims)
    dense = np.zeros(int(np.prod(shape, dtype=np.int64)), dtype=values.dtype)
    if indices.ndim == 2:
        indices = np.ravel_multi_index(tuple(indices.T), shape)
    dense[indices] = values
    return dense.reshape(shape)


def _convert_node(
    ctx: ConversionContext, proto: onnx.NodeProto, index: int, env: dict[str, Value | _NotProduced]
) -> None:
    name = proto.name or f"{proto.op_type}_{index}"
    node = OnnxNode(
        op_type=proto.op_type,
        name=name,
        inputs=[_lookup(env, i) if i else None for i in proto.input],
        attrs={attr.name: decode_attribute(attr) for attr in proto.attribute},
        num_outputs=len(proto.output),
        domain=proto.domain,
    )
    try:
        results = list(CONVERTERS[converter_key(proto.domain, proto.op_type)](ctx, node))
    except EmberError as error:
        message = str(error)
        if name in message:
            raise
        raise type(error)(f"node {name!r} ({proto.op_type}): {message}") from error
    except Exception as error:
        # A bug in a converter, not the user's fault: keep its type and traceback, and
        # say which node triggered it.
        error.add_note(f"while converting ONNX node {name!r} ({proto.op_type})")
        raise
    for position, output_name in enumerate(proto.output):
        if not output_name:
            continue
        result = results[position] if position < len(results) else None
        # An output the converter does not produce is only an error if something reads
        # it (such as Dropout's mask); `_lookup` reports it then.
        env[output_name] = (
            result if result is not None else _NotProduced(name, proto.op_type, position)
        )


@dataclass(frozen=True, slots=True)
class _NotProduced:
    """Placeholder for a node output that Ember's converter does not compute."""

    node_name: str
    op_type: str
    position: int


def _lookup(env: Mapping[str, Value | _NotProduced], name: str) -> Value:
    value = env[name]
    if isinstance(value, _NotProduced):
        raise UnsupportedOperatorError(
            f"node {value.node_name!r} ({value.op_type}): Ember's converter does not "
            f"produce output #{value.position} ({name!r}), which the model uses"
        )
    return value


# -- outputs --------------------------------------------------------------------------


def _build_with_output_names(
    builder: GraphBuilder,
    env: dict[str, Value | _NotProduced],
    input_names: set[str],
    output_names: list[str],
) -> tuple[Graph, Params]:
    """Build the graph so that its outputs carry the ONNX output names."""
    outputs = [(name, _lookup(env, name)) for name in output_names]
    return build_with_output_names(builder, outputs, input_names)

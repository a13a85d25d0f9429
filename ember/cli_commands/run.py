"""`ember run ARTIFACT`: load a compiled artifact, feed it inputs from an .npz file (or
generated ones), run it, save the outputs, and print timings, a per-kernel profile
(`--profile`) and the top-K classes.

Outputs are saved under tvmc's keys, `output_0`, `output_1`, ..., in the model's
output order (`ember info ARTIFACT` lists which name is which), so the
post-processing scripts written for tvmc read them unchanged.
"""

from __future__ import annotations

import argparse
import math
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.cli_commands.common import add_rpc_arguments, rpc_tracker_address
from ember.errors import InputError, UsageError
from ember.runtime.abi import TensorSpec

if TYPE_CHECKING:
    from ember.rpc.client import RemoteModule, RemoteSession
    from ember.runtime.module import Module

FILL_MODES = ("random", "zeros", "ones")


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an .npz file, by name."""
    if not path.is_file():
        raise InputError(f"inputs file {str(path)!r} does not exist; check the --inputs path")
    try:
        archive = np.load(path, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError("it holds a single array (.npy), not arrays by input name")
        with archive:
            return {name: np.asarray(archive[name]) for name in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise InputError(
            f"cannot read {str(path)!r} as an .npz file ({error}); write the inputs with "
            "numpy.savez(path, input_name=array, ...)"
        ) from None


def generate_input(spec: TensorSpec, fill_mode: str, rng: np.random.Generator) -> np.ndarray:
    """An input array for `spec` that no file gave. Random integers are 0 or 1, so
    they are valid as indices (token ids) and as masks."""
    dtype = np.dtype(spec.dtype)
    if fill_mode == "zeros":
        return np.zeros(spec.shape, dtype)
    if fill_mode == "ones":
        return np.ones(spec.shape, dtype)
    if dtype.kind == "f":
        return rng.uniform(0.0, 1.0, size=spec.shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=spec.shape).astype(dtype)
    return rng.integers(0, 2, size=spec.shape, dtype=dtype)


def _checked(spec: TensorSpec, array: np.ndarray, source: str) -> np.ndarray:
    if array.shape != spec.shape:
        raise InputError(
            f"input {spec.name!r} in {source} has shape {list(array.shape)} but the model "
            f"takes {list(spec.shape)}; reshape the array, or compile again with "
            f"--input-shapes '{spec.name}:[{','.join(map(str, array.shape))}]'"
        )
    if array.dtype == spec.dtype:
        return array
    # Widening (float16 -> float32, int32 -> int64) loses nothing; anything else could
    # change the values, so the user decides.
    if np.can_cast(array.dtype, spec.dtype, casting="safe"):
        return array.astype(spec.dtype)
    raise InputError(
        f"input {spec.name!r} in {source} is {array.dtype} but the model takes {spec.dtype}; "
        f"convert it first, e.g. array.astype('{spec.dtype}')"
    )


def make_inputs(
    specs: Sequence[TensorSpec],
    given: Mapping[str, np.ndarray],
    fill_mode: str,
    source: str = "the inputs file",
    seed: int = 0,
) -> tuple[dict[str, np.ndarray], list[str]]:
    """The arrays to feed, by input name, and the names that were generated with
    `fill_mode` because `given` lacks them. Unknown names, wrong shapes and lossy
    dtype changes are errors that list what the model takes."""
    expected = ", ".join(f"{spec.name} {list(spec.shape)} {spec.dtype}" for spec in specs)
    unknown = [name for name in given if name not in {spec.name for spec in specs}]
    if unknown:
        raise InputError(
            f"{source} has arrays named {unknown} but the model has no such inputs; "
            f"its inputs are: {expected}"
        )
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    generated = []
    for spec in specs:
        if spec.name in given:
            arrays[spec.name] = _checked(spec, given[spec.name], source)
        else:
            arrays[spec.name] = generate_input(spec, fill_mode, rng)
            generated.append(spec.name)
    return arrays, generated


def read_labels(path: Path) -> list[str]:
    """One class label a line (ImageNet's synset.txt form); line i labels class i."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(
            f"cannot read the labels file {str(path)!r} ({error}); --labels takes a text "
            "file with one class label a line"
        ) from None
    return [line.strip() for line in text.splitlines()]


def _rows(scores: np.ndarray) -> np.ndarray:
    """(batch, classes): a 1-D output is one item; trailing axes are flattened."""
    return scores.reshape(1, -1) if scores.ndim <= 1 else scores.reshape(scores.shape[0], -1)


def _looks_like_probabilities(row: np.ndarray) -> bool:
    return bool(row.min() >= 0 and abs(float(row.sum()) - 1.0) < 1e-3)


def top_classes(scores: np.ndarray, k: int) -> list[list[tuple[int, float]]]:
    """The `k` highest (class, score) pairs of each batch item of a (batch, classes,
    ...) output, highest first; ties keep the lower class index first."""
    rows = _rows(scores)
    result = []
    for row in rows.astype(np.float64):
        order = np.argsort(-row, kind="stable")[:k]
        result.append([(int(index), float(row[index])) for index in order])
    return result


def format_top(scores: np.ndarray, k: int, labels: Sequence[str] | None, name: str) -> str:
    """The top-K table of one output, one block per batch item."""
    rows = _rows(scores)
    kind = "probability" if all(map(_looks_like_probabilities, rows)) else "score"
    lines = []
    for item, ranked in enumerate(top_classes(scores, k)):
        batch_note = f", batch item {item}" if len(rows) > 1 else ""
        lines.append(f"Top-{k} classes of {name}{batch_note}:")
        lines.append(f"  {'rank':>4}  {'class':>6}  {kind:>11}" + ("  label" if labels else ""))
        for rank, (index, value) in enumerate(ranked, start=1):
            label = ""
            if labels is not None:
                label = f"  {labels[index]}" if index < len(labels) else "  (no label)"
            lines.append(f"  {rank:>4}  {index:>6}  {value:>11.6f}{label}")
    return "\n".join(lines)


def save_outputs(path: Path, outputs: Sequence[np.ndarray]) -> Path:
    """The outputs as an .npz under tvmc's keys output_0, output_1, ...; returns the
    file written (numpy.savez adds `.npz` to a name without it)."""
    arrays: dict[str, Any] = {f"output_{i}": array for i, array in enumerate(outputs)}
    try:
        np.savez(path, **arrays)
    except OSError as error:
        raise UsageError(f"cannot write the outputs to {str(path)!r}: {error}") from None
    return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")


def _print_outputs(outputs: Sequence[np.ndarray], specs: Sequence[TensorSpec]) -> None:
    for index, (array, spec) in enumerate(zip(outputs, specs, strict=True)):
        print(f"output_{index}  {spec.name}  {list(array.shape)} {array.dtype}")


def _check_options(args: argparse.Namespace) -> None:
    """Checked before any work, so a typo fails fast."""
    for option, value in (("--print-top", args.print_top), ("--repeat", args.repeat),
                          ("--number", args.number)):  # fmt: skip
        if value is not None and value < 1:
            raise UsageError(f"{option} takes a positive count, got {value}")
        if value is not None and value > 2**31 - 1:
            raise UsageError(f"{option} takes a count below 2**31, got {value}")
    if not 0 <= args.min_repeat_ms < math.inf:
        raise UsageError(f"--min-repeat-ms takes a finite time >= 0, got {args.min_repeat_ms}")
    if args.output and Path(args.output).is_dir():
        raise UsageError(f"-o {args.output!r} is a directory; give the .npz file's name")
    if args.output and not Path(args.output).parent.is_dir():
        raise UsageError(f"-o {args.output!r}: its directory does not exist; create it first")


def command_run(args: argparse.Namespace) -> int:
    from ember.runtime import load

    _check_options(args)
    labels = read_labels(Path(args.labels)) if args.labels else None
    if args.rpc_tracker:
        with _remote_session(args) as session:
            return _run(args, _load_remote(session, Path(args.artifact)), labels)
    return _run(args, load(Path(args.artifact)), labels)


def _remote_session(args: argparse.Namespace) -> RemoteSession:
    """A board of --rpc-key from the tracker at --rpc-tracker."""
    from ember.rpc.client import connect_tracker

    host, port = rpc_tracker_address(args)
    with connect_tracker(host, port, args.token_file) as tracker:
        session = tracker.request(args.rpc_key, timeout=args.rpc_timeout)
    print(f"running on {session.where} ({session.device.get('triple', '?')})", file=sys.stderr)
    return session


def _load_remote(session: RemoteSession, path: Path) -> RemoteModule:
    """Upload the artifact and load it on the board, after checking it can run there."""
    from ember.rpc.client import check_compatible, device_notes
    from ember.runtime import read_metadata
    from ember.runtime.module import ModuleInfo

    info = ModuleInfo.from_metadata(read_metadata(path), str(path))
    check_compatible(info.target, info.cpu_features, session.device, str(path))
    for note in device_notes(info.target, session.device):
        print(f"note: {note}", file=sys.stderr)
    return session.load_module(session.upload(path, "artifact.tar"))  # any file name


def _run(args: argparse.Namespace, module: Module | RemoteModule, labels: list[str] | None) -> int:
    given = read_npz(Path(args.inputs)) if args.inputs else {}
    source = repr(args.inputs) if args.inputs else "--inputs"
    arrays, generated = make_inputs(module.inputs, given, args.fill_mode, source)
    if generated:
        print(
            f"note: inputs {generated} were not given; filled with --fill-mode {args.fill_mode}",
            file=sys.stderr,
        )
    for name, array in arrays.items():
        module.set_input(name, array)
    module.run()
    outputs = [np.array(module.get_output(i)) for i in range(module.get_num_outputs())]
    _print_outputs(outputs, module.outputs)
    if args.output:
        saved = save_outputs(Path(args.output), outputs)
        print(f"saved {len(outputs)} output(s) to {saved}")
    if args.print_time:
        result = module.benchmark(
            repeat=args.repeat, number=args.number, min_repeat_ms=args.min_repeat_ms
        )
        print(result)
    if args.profile:
        print(module.profile(repeat=args.repeat))
    if args.print_top:
        print(format_top(outputs[0], args.print_top, labels, "output_0"))
    return 0


def add_parser(commands: Any) -> None:
    run = commands.add_parser(
        "run", help="run a compiled artifact on inputs from an .npz file; time it; top-K"
    )
    run.add_argument("artifact", help="a .tar made by `ember compile`")
    run.add_argument("--inputs", help=".npz file of input arrays by input name")
    run.add_argument("-o", "--output", help="save the outputs to this .npz (output_0, ...)")
    run.add_argument(
        "--fill-mode",
        choices=FILL_MODES,
        default="random",
        help="how to make inputs that --inputs does not give (random: uniform [0, 1) "
        "floats, 0/1 integers; seeded, so runs repeat)",
    )
    run.add_argument("--print-time", action="store_true", help="benchmark and print ms")
    run.add_argument(
        "--profile",
        action="store_true",
        help="time each fused group's kernel (median of --repeat runs) and print them, "
        "slowest first, with share of the total and GFLOP/s",
    )
    run.add_argument(
        "--repeat", type=int, default=10, help="timed measurements, or profiled runs (default 10)"
    )
    run.add_argument("--number", type=int, default=1, help="runs averaged per measurement")
    run.add_argument(
        "--min-repeat-ms",
        type=float,
        default=0.0,
        help="raise --number until each measurement lasts this long",
    )
    run.add_argument("--print-top", type=int, metavar="K", help="print the top-K classes")
    run.add_argument("--labels", help="text file of class labels, one a line, for --print-top")
    add_rpc_arguments(run)
    run.add_argument(
        "--rpc-timeout",
        type=float,
        default=120.0,
        help="seconds to wait for a free board (120)",
    )
    run.set_defaults(run=command_run)

"""The `ember` command: `ember info` on models and artifacts, `ember compile`,
`ember run`, and the messages of the errors a user can cause."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from ember.cli import main, parse_shapes
from ember.graph.analysis import summarize
from ember.testing import get_workload, to_onnx
from ember.testing.oracle import run_onnxruntime

# Published multiply-accumulate counts (convolutions and the classifier) at 224x224:
# ResNet-18 1.82 G, ResNet-50 4.09 G, MobileNet v1 569 M.
PUBLISHED_MACS = {"resnet-18": 1.82e9, "resnet-50": 4.09e9, "mobilenet": 0.569e9}


@pytest.mark.parametrize("name", sorted(PUBLISHED_MACS))
def test_info_json_macs_match_published_counts(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["info", name, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["inputs"] == [{"name": "data", "shape": [1, 3, 224, 224], "dtype": "float32"}]
    assert summary["outputs"][0]["shape"] == [1, 1000]
    assert summary["total_macs"] == pytest.approx(PUBLISHED_MACS[name], rel=0.01)
    assert sum(op["count"] for op in summary["ops"]) == summary["nodes"]
    conv = next(op for op in summary["ops"] if op["op"] == "conv")
    assert conv["flops"] == 2 * conv["macs"]


def test_info_table_for_onnx_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph, params = get_workload("mlp", batch_size=4)
    path = tmp_path / "mlp.onnx"
    to_onnx(graph, params, path)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "[4, 3, 224, 224]" in out and "[4, 1000]" in out
    assert "dense" in out and "total" in out


def test_info_batch_size_and_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "mobilenet", "--layout", "NHWC", "--batch-size", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["inputs"][0]["shape"] == [2, 224, 224, 3]


def test_info_unknown_model_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "resnet-19"]) == 2
    err = capsys.readouterr().err
    assert "'resnet-19' is neither an existing model file nor a built-in workload" in err
    assert "resnet-18" in err


def test_info_missing_onnx_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(tmp_path / "absent.onnx")]) == 2
    assert "absent.onnx" in capsys.readouterr().err


def _save_program(module: object, example: object, path: Path) -> Path:
    import torch

    torch.export.save(torch.export.export(module, (example,)), str(path))  # type: ignore[arg-type]
    return path


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_info_on_a_pytorch_program(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    module = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                 torch.nn.Linear(8 * 6 * 6, 10)).eval()  # fmt: skip
    path = _save_program(module, torch.zeros(2, 3, 8, 8), tmp_path / "net.pt2")
    assert main(["info", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["inputs"] == [{"name": "input", "shape": [2, 3, 8, 8], "dtype": "float32"}]
    assert summary["outputs"][0]["shape"] == [2, 10]
    macs = {op["op"]: op["macs"] for op in summary["ops"]}
    assert macs["conv"] == 2 * 8 * 6 * 6 * 3 * 3 * 3
    assert macs["dense"] == 2 * 10 * 8 * 6 * 6


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_pytorch_program_shapes_are_fixed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    path = _save_program(torch.nn.ReLU(), torch.zeros(2, 3), tmp_path / "relu.pt2")
    assert main(["info", str(path), "--input-shapes", "input:[4,3]"]) == 2
    assert "export it again" in capsys.readouterr().err


def test_info_on_a_tflite_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ember.testing import tflite_models

    path = tmp_path / "mobilenet_v1.tflite"
    path.write_bytes(tflite_models.mobilenet_v1(size=64, alpha=0.25, classes=10))
    assert main(["info", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["inputs"] == [{"name": "input", "shape": [1, 64, 64, 3], "dtype": "float32"}]
    assert summary["outputs"][0]["shape"] == [1, 10]
    conv = next(op for op in summary["ops"] if op["op"] == "conv")
    # The first conv: 32x32 outputs x 8 channels x 3x3x3; then 13 depthwise and 13
    # pointwise convolutions (MACs counted by the same analysis as for ONNX models).
    assert conv["count"] == 27 and conv["macs"] > 32 * 32 * 8 * 27


def test_parse_shapes() -> None:
    assert parse_shapes("data:1,3,224,224; mask:1,16") == {
        "data": (1, 3, 224, 224),
        "mask": (1, 16),
    }
    assert parse_shapes(None) is None
    assert parse_shapes("data:1,3;") == {"data": (1, 3)}


def test_parse_shapes_error_says_the_format() -> None:
    from ember.errors import EmberError

    with pytest.raises(EmberError, match=r"or NAME:D1,D2,\.\.\."):
        parse_shapes("data=1,3")


# -- parse_shapes: tvmc's bracketed form ------------------------------------------------


def test_parse_shapes_bracketed_form() -> None:
    assert parse_shapes("data:[1,3,224,224] mask:[1,16]") == {
        "data": (1, 3, 224, 224),
        "mask": (1, 16),
    }
    # Names with colons (TensorFlow exports: "input:0"), ';' or ',' between items.
    assert parse_shapes("input:0:[1, 3];ids:[2,8],x:[4]") == {
        "input:0": (1, 3),
        "ids": (2, 8),
        "x": (4,),
    }


@pytest.mark.parametrize("text", ["data:[1,3", "data:[1,x]", "data[1,3]", "data:[1,3] junk"])
def test_parse_shapes_bracketed_errors_say_the_format(text: str) -> None:
    from ember.errors import EmberError

    with pytest.raises(EmberError, match=r"write NAME:\[D1,D2,\.\.\.\]"):
        parse_shapes(text)


# -- compile / run / info on artifacts ----------------------------------------------------

MLP_SHAPE = (2, 3, 8, 8)


@pytest.fixture(scope="module")
def mlp_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small compiled network: the built-in MLP on 2 x 3 x 8 x 8 images."""
    path = tmp_path_factory.mktemp("artifact") / "mlp.tar"
    assert main(["compile", "mlp", "--input-shapes", "data:[2,3,8,8]", "-o", str(path)]) == 0
    return path


def mlp_reference(image: np.ndarray) -> np.ndarray:
    """ONNX Runtime on the same MLP, exported to ONNX."""
    graph, params = get_workload("mlp", batch_size=2, image_shape=MLP_SHAPE[1:])
    return run_onnxruntime(to_onnx(graph, params), {"data": image})["output"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_compile_prints_what_it_built(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    artifact = tmp_path / "net.tar"
    code, out, _ = run_cli(capsys, "compile", "mlp", "--input-shapes", "data:[2,3,8,8]",
                           "-o", artifact)  # fmt: skip
    assert code == 0
    assert "compiled mlp for target 'llvm'" in out
    assert "data [2, 3, 8, 8] float32" in out and "output [2, 1000] float32" in out
    assert re.search(r"5 fused groups, 5 distinct kernels", out), out
    assert "arena:" in out and f"artifact: {artifact}" in out
    assert tarfile.is_tarfile(artifact)


def test_compile_dump_code_writes_what_build_compiled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dumped files are `Library.sources` of the build itself, not a re-run."""
    import ember

    built: list[ember.Library] = []
    real_build = ember.build

    def build_and_keep(*args: object, **kwargs: object) -> ember.Library:
        built.append(real_build(*args, **kwargs))  # type: ignore[arg-type]
        return built[-1]

    monkeypatch.setattr(ember, "build", build_and_keep)
    options = ["-o", tmp_path / "net.tar", "--dump-code", tmp_path / "code"]
    code, out, _ = run_cli(capsys, "compile", "mlp", "--input-shapes", "data:[2,3,8,8]", *options)
    assert code == 0
    files = sorted(path.name for path in (tmp_path / "code").iterdir())
    kernels = [name for name in files if name.endswith(".c") and name != "entry.c"]
    assert len(kernels) == 5 and "entry.c" in files
    assert sorted(f"{name[:-2]}.loop" for name in kernels) == [
        f for f in files if f.endswith(".loop")
    ]
    assert "ember_model_run" in (tmp_path / "code" / "entry.c").read_text()
    dense = next(name for name in kernels if name.startswith("dense_pack_add_relu"))
    assert "for" in (tmp_path / "code" / dense).read_text()
    assert (tmp_path / "code" / dense.replace(".c", ".loop")).read_text().startswith("func ")
    assert "11 files" in out
    (library,) = built
    for name, text in library.sources.files().items():
        assert (tmp_path / "code" / name).read_text() == text


def test_run_saves_outputs_that_match_onnxruntime(
    mlp_artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = np.random.default_rng(1).standard_normal(MLP_SHAPE).astype(np.float32)
    np.savez(tmp_path / "in.npz", data=image)
    code, out, err = run_cli(capsys, "run", mlp_artifact, "--inputs", tmp_path / "in.npz",
                             "-o", tmp_path / "out.npz")  # fmt: skip
    assert code == 0, err
    assert "output_0  output  [2, 1000] float32" in out
    with np.load(tmp_path / "out.npz") as saved:
        assert saved.files == ["output_0"]
        np.testing.assert_allclose(saved["output_0"], mlp_reference(image), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["zeros", "ones"])
def test_run_fill_modes(
    mode: str, mlp_artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "run", mlp_artifact, "--fill-mode", mode,
                           "-o", tmp_path / "out.npz")  # fmt: skip
    assert code == 0
    assert f"inputs ['data'] were not given; filled with --fill-mode {mode}" in err
    image = np.full(MLP_SHAPE, 1.0 if mode == "ones" else 0.0, np.float32)
    with np.load(tmp_path / "out.npz") as saved:
        np.testing.assert_allclose(saved["output_0"], mlp_reference(image), rtol=1e-4, atol=1e-5)


def test_run_print_time_and_top_k_with_labels(
    mlp_artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"class number {i}\n" for i in range(1000)))
    image = np.random.default_rng(2).standard_normal(MLP_SHAPE).astype(np.float32)
    np.savez(tmp_path / "in.npz", data=image)
    code, out, _ = run_cli(capsys, "run", mlp_artifact, "--inputs", tmp_path / "in.npz",
                           "--print-time", "--repeat", "3", "--print-top", "5",
                           "--labels", labels)  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    # The seed's runtime summary: a title, five columns in ms, one row of numbers.
    title = lines.index("Execution time summary:")
    assert lines[title + 1].split() == ["mean", "(ms)", "median", "(ms)", "max", "(ms)",
                                        "min", "(ms)", "std", "(ms)"]  # fmt: skip
    mean, median, high, low, std = map(float, lines[title + 2].split())
    assert 0 < low <= median <= high and low <= mean <= high and std >= 0
    probabilities = mlp_reference(image)
    for item in range(2):
        block = lines.index(f"Top-5 classes of output_0, batch item {item}:")
        assert lines[block + 1].split() == ["rank", "class", "probability", "label"]
        expected = np.argsort(-probabilities[item], kind="stable")[:5]
        for rank, index in enumerate(expected, start=1):
            fields = lines[block + 1 + rank].split()
            assert fields[:2] == [str(rank), str(index)]
            assert float(fields[2]) == pytest.approx(probabilities[item, index], rel=1e-3)
            assert " ".join(fields[3:]) == f"class number {index}"


def test_run_profile_prints_each_group_slowest_first(
    mlp_artifact: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ember.runtime import read_metadata

    groups = read_metadata(mlp_artifact)["groups"]
    assert isinstance(groups, list)
    code, out, _ = run_cli(capsys, "run", mlp_artifact, "--profile", "--repeat", "3")
    assert code == 0
    lines = out.splitlines()
    title = lines.index(f"Per-step profile: {len(groups)} steps, median of 3 runs each")
    assert lines[title + 1].split() == ["rank", "step", "time", "(ms)", "share", "cumul",
                                        "GFLOP/s", "group", "kernel"]  # fmt: skip
    rows = [line.split() for line in lines[title + 2 : title + 2 + len(groups)]]
    assert [int(row[0]) for row in rows] == list(range(1, len(groups) + 1))
    times = [float(row[2]) for row in rows]
    assert times == sorted(times, reverse=True) and times[-1] > 0
    by_step = {int(row[1]): (row[6], row[7]) for row in rows}
    assert by_step == {i: (g["name"], g["kernel"]) for i, g in enumerate(groups)}
    total = lines[title + 2 + len(groups)].split()
    assert (total[0], total[2]) == ("total", "100.0%")
    assert float(total[1]) == pytest.approx(sum(times), abs=1e-3)


def test_top_classes_of_logits_say_score_and_break_ties_by_index() -> None:
    from ember.cli_commands.run import format_top, top_classes

    logits = np.array([[1.0, 3.0, -2.0, 3.0]], np.float32)
    assert top_classes(logits, 3) == [[(1, 3.0), (3, 3.0), (0, 1.0)]]
    text = format_top(logits, 2, None, "output_0")
    assert text.splitlines() == [
        "Top-2 classes of output_0:",
        "  rank   class        score",
        "     1       1     3.000000",
        "     2       3     3.000000",
    ]


def test_run_widens_float16_inputs(
    mlp_artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = np.random.default_rng(3).standard_normal(MLP_SHAPE).astype(np.float16)
    np.savez(tmp_path / "in.npz", data=image)
    code, _, err = run_cli(capsys, "run", mlp_artifact, "--inputs", tmp_path / "in.npz",
                           "-o", tmp_path / "out.npz")  # fmt: skip
    assert code == 0, err
    with np.load(tmp_path / "out.npz") as saved:
        want = mlp_reference(image.astype(np.float32))
        np.testing.assert_allclose(saved["output_0"], want, rtol=1e-4, atol=1e-5)


# -- errors a user can cause: one line, exit status 2, no traceback -----------------------


def npz_with(tmp_path: Path, **arrays: np.ndarray) -> Path:
    path = tmp_path / "in.npz"
    np.savez(path, **arrays)
    return path


RUN_ERRORS = {
    "wrong input name": (
        lambda tmp: ["--inputs", npz_with(tmp, image=np.zeros(MLP_SHAPE, np.float32))],
        ["arrays named ['image']", "no such inputs", "data [2, 3, 8, 8] float32"],
    ),
    "wrong shape": (
        lambda tmp: ["--inputs", npz_with(tmp, data=np.zeros((1, 3, 8, 8), np.float32))],
        ["shape [1, 3, 8, 8]", "takes [2, 3, 8, 8]", "--input-shapes 'data:[1,3,8,8]'"],
    ),
    "lossy dtype": (
        lambda tmp: ["--inputs", npz_with(tmp, data=np.zeros(MLP_SHAPE, np.float64))],
        ["is float64 but the model takes float32", "astype('float32')"],
    ),
    "missing inputs file": (
        lambda tmp: ["--inputs", tmp / "absent.npz"],
        ["absent.npz", "does not exist"],
    ),
    "inputs file is not an npz": (
        lambda tmp: ["--inputs", _write(tmp / "in.npz", b"not a zip")],
        ["cannot read", "as an .npz file", "numpy.savez"],
    ),
    "missing labels file": (
        lambda tmp: ["--print-top", "5", "--labels", tmp / "labels.txt"],
        ["labels file", "labels.txt", "one class label a line"],
    ),
    "bad top-k": (lambda tmp: ["--print-top", "0"], ["--print-top takes a positive count"]),
    "bad repeat": (lambda tmp: ["--print-time", "--repeat", "0"], ["--repeat takes a positive"]),
    "unwritable output": (
        lambda tmp: ["-o", tmp / "absent" / "out.npz"],
        ["out.npz", "directory does not exist"],
    ),
    # np.savez would have written DIR.npz beside it.
    "output is a directory": (lambda tmp: ["-o", tmp], ["is a directory", ".npz file's name"]),
    "number too large for C": (
        lambda tmp: ["--print-time", "--number", str(2**31)],
        ["--number takes a count below 2**31"],
    ),
    "NaN min-repeat-ms": (
        lambda tmp: ["--print-time", "--min-repeat-ms", "nan"],
        ["--min-repeat-ms takes a finite time"],
    ),
}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("case", list(RUN_ERRORS))
def test_run_error_messages(
    case: str, mlp_artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options, phrases = RUN_ERRORS[case]
    code, _, err = run_cli(capsys, "run", mlp_artifact, *options(tmp_path))
    assert code == 2
    assert err.startswith("ember: error: ") and err.count("\n") == 1, err
    for phrase in phrases:
        assert phrase in err


def test_run_missing_and_corrupt_artifacts(
    mlp_artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "run", tmp_path / "absent.tar")
    assert code == 2 and "no artifact at" in err and "ember compile" in err
    garbage = _write(tmp_path / "garbage.tar", b"\x00garbage" * 100)
    code, _, err = run_cli(capsys, "run", garbage)
    assert code == 2 and "garbage.tar" in err and "rebuild it" in err
    truncated = _write(tmp_path / "truncated.tar", mlp_artifact.read_bytes()[:5000])
    code, _, err = run_cli(capsys, "run", truncated)
    assert code == 2 and "truncated.tar" in err
    # tarfile's multi-line "tried gz, bz2, xz" report is said in one line.
    code, _, err = run_cli(capsys, "run", garbage)
    assert err.count("\n") == 1 and "not a tar file" in err, err


def test_the_ember_command_exits_2_without_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ember.cli", "run", str(tmp_path / "absent.tar")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "no artifact at" in done.stderr


COMPILE_ERRORS = {
    "unknown model": (["resnet-19"], ["'resnet-19' is neither", "built-in workloads"]),
    "bad target": (["mlp", "--target", "tpu"], ["tpu"]),
    "shape for a workload input it lacks": (
        ["mlp", "--input-shapes", "image:[1,3,8,8]"],
        ["one input, 'data'", "['image']"],
    ),
    "output directory missing": (["mlp", "-o", "{tmp}/absent/net.tar"], ["does not exist"]),
    "output is a directory": (["mlp", "-o", "{tmp}"], ["is a directory"]),
    "missing tuning records": (
        ["mlp", "--tuning-records", "{tmp}/absent.json"],
        ["absent.json", "does not exist", "default schedules"],
    ),
}


@pytest.mark.parametrize("case", list(COMPILE_ERRORS))
def test_compile_error_messages(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, phrases = COMPILE_ERRORS[case]
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    if "-o" not in argv:
        argv += ["-o", str(tmp_path / "net.tar")]
    code, _, err = run_cli(capsys, "compile", *argv)
    assert code == 2, err
    for phrase in phrases:
        assert phrase in err


def test_compile_refuses_dump_code_into_a_file_before_building(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = _write(tmp_path / "code", b"a file")
    code, out, err = run_cli(capsys, "compile", "mlp", "-o", tmp_path / "net.tar",
                             "--dump-code", taken)  # fmt: skip
    assert code == 2 and "--dump-code" in err and "is a file" in err
    assert not (tmp_path / "net.tar").exists() and "compiled" not in out


def test_info_on_an_artifact(mlp_artifact: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph, params = get_workload("mlp", batch_size=2, image_shape=MLP_SHAPE[1:])
    summary = summarize(graph)
    code, out, _ = run_cli(capsys, "info", mlp_artifact, "--json")
    assert code == 0
    info = json.loads(out)
    assert info["target"] == "llvm"
    assert info["inputs"] == [{"name": "data", "shape": [2, 3, 8, 8], "dtype": "float32"}]
    assert info["outputs"] == [
        {"key": "output_0", "name": "output", "shape": [2, 1000], "dtype": "float32"}
    ]
    assert (info["groups"], info["kernels"]) == (5, 5)
    assert 0 < info["arena_bytes"] < 2**20
    assert info["params"] == sum(array.size for array in params.values())
    assert info["total_flops"] == summary.total_flops and info["total_macs"] == summary.total_macs
    code, out, _ = run_cli(capsys, "info", mlp_artifact)
    assert code == 0
    for phrase in ("output_0", "target: llvm", "fused groups: 5", "params: 97,960", "FLOPs"):
        assert phrase in out


def test_info_on_a_damaged_artifact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "info", _write(tmp_path / "bad.tar", b"nothing"))
    assert code == 2 and "bad.tar" in err and "rebuild it" in err


def _with_metadata(artifact: Path, path: Path, **changes: object) -> Path:
    with tarfile.open(artifact) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
    metadata = {**json.loads(members["mod.json"]), **changes}
    members["mod.json"] = json.dumps(metadata).encode()
    with tarfile.open(path, "w") as tar:
        for name, blob in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return path


def test_info_refuses_another_artifact_format_as_run_does(
    mlp_artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    future = _with_metadata(mlp_artifact, tmp_path / "future.tar", format_version=99)
    for command in ("info", "run"):
        code, _, err = run_cli(capsys, command, future)
        assert code == 2 and "artifact format 99" in err, err


def test_info_shows_an_artifact_with_damaged_extras(
    mlp_artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Entries `ember info` only displays may be damaged: it shows the rest, and no
    traceback."""
    odd = _with_metadata(mlp_artifact, tmp_path / "odd.tar", memory_plan=[1], groups=5,
                         graph={"total_flops": "many"}, versions=None)  # fmt: skip
    code, out, _ = run_cli(capsys, "info", odd, "--json")
    assert code == 0
    info = json.loads(out)
    assert (info["groups"], info["arena_bytes"], info["total_flops"]) == (0, 0, 0)
    assert info["inputs"] == [{"name": "data", "shape": [2, 3, 8, 8], "dtype": "float32"}]


@pytest.mark.skipif(
    shutil.which("aarch64-linux-gnu-gcc") is None, reason="needs aarch64-linux-gnu-gcc"
)
def test_info_reads_an_artifact_built_for_another_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ember info` reads mod.json only, so it works where `ember run` refuses."""
    artifact = tmp_path / "aarch64.tar"
    target = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"
    assert main(["compile", "mlp", "--input-shapes", "data:[1,3,8,8]", "--target", target,
                 "-o", str(artifact)]) == 0  # fmt: skip
    capsys.readouterr()
    code, out, _ = run_cli(capsys, "info", artifact, "--json")
    assert code == 0 and json.loads(out)["target"] == target
    code, _, err = run_cli(capsys, "run", artifact)
    assert code == 2 and "aarch64" in err and "--target llvm" in err

"""The device farm end to end on loopback: a tracker with servers, `ember query`, the
tracker's queue order, a network run on a board (Python and `ember run
--rpc-tracker`) equal to a local run, the single-file server under a bare Python,
and code for another architecture refused before it is sent."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from farm import ROOT, WAIT, Farm, board_counts, wait_until

import ember
from ember.cli import main
from ember.rpc.bundle import write_bundle
from ember.rpc.client import TargetMismatch, TrackerClient, connect_tracker
from ember.rpc.protocol import RPCError

KEY = "x86-board"


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    graph, params = ember.testing.get_workload("mlp", image_shape=(1, 16, 16), num_classes=10)
    path = tmp_path_factory.mktemp("farm") / "mlp.tar"
    ember.build(graph, "llvm", params=params).export_library(path)
    return path


def local_outputs(artifact: Path, x: np.ndarray) -> np.ndarray:
    module = ember.runtime.load(artifact)
    module.set_input(0, x)
    module.run()
    return module.get_output(0)


def test_query_shows_every_server(farm: Farm, capsys: pytest.CaptureFixture[str]) -> None:
    for key in (KEY, KEY, "other"):
        farm.add_server(key)
    assert main(["query", "--host", "127.0.0.1", "--port", str(farm.tracker.port)]) == 0
    printed = capsys.readouterr().out
    assert printed.split()[:3] == ["Tracker", "address:", farm.address]
    rows = {line.split()[0]: line.split()[1:] for line in printed.splitlines() if line.strip()}
    assert rows[KEY] == ["2", "2", "0"] and rows["other"] == ["1", "1", "0"]
    for server in farm.servers:
        assert f"127.0.0.1:{server.port}" in printed
    assert "x86_64-linux-gnu" in printed


def test_boards_go_by_priority_then_arrival(farm: Farm) -> None:
    farm.add_server(KEY)
    client = TrackerClient("127.0.0.1", farm.tracker.port)
    holder = client.request(KEY)
    order: list[str] = []

    def ask(name: str, priority: int) -> None:
        with TrackerClient("127.0.0.1", farm.tracker.port) as own:
            session = own.request(KEY, priority, timeout=WAIT)
            order.append(name)
            session.close()

    threads = []
    for count, (name, priority) in enumerate([("first", 0), ("urgent", 5), ("last", 0)], 1):
        thread = threading.Thread(target=ask, args=(name, priority))
        thread.start()
        threads.append(thread)
        wait_until(lambda c=count: board_counts(farm.tracker, KEY)["pending"] == c, "queueing")
    holder.close()
    for thread in threads:
        thread.join(WAIT)
    client.close()
    assert order == ["urgent", "first", "last"]
    wait_until(lambda: board_counts(farm.tracker, KEY)["free"] == 1, "the board free again")


def test_a_request_that_waits_too_long_says_for_what(farm: Farm) -> None:
    with TrackerClient("127.0.0.1", farm.tracker.port) as client:
        with pytest.raises(RPCError, match=r"no board of key 'nowhere' became free within 0.2 s"):
            client.request("nowhere", timeout=0.2)
        assert client.summary()["keys"].get("nowhere", {"pending": 0})["pending"] == 0


def test_remote_module_runs_as_the_local_one(farm: Farm, artifact: Path) -> None:
    farm.add_server(KEY)
    x = np.random.default_rng(0).standard_normal((1, 1, 16, 16)).astype("float32")
    tracker = connect_tracker("127.0.0.1", farm.tracker.port)
    with tracker, tracker.request(KEY) as remote:
        module = remote.load_module(remote.upload(artifact))
        module.set_input("data", x)
        module.run()
        np.testing.assert_array_equal(module.get_output(0), local_outputs(artifact, x))
        timing = module.benchmark(repeat=3, min_repeat_ms=0)
        assert len(timing.seconds) == 3 and timing.min > 0
        profile = module.profile(repeat=2)
        assert profile.rows and all(row.seconds >= 0 for row in profile.rows)
        assert set(remote.files()) == {"mlp.tar", "mlp.tar.module-1"}
    wait_until(lambda: farm.servers[0].sessions_served == 1, "the session's end")


def test_ember_run_on_a_board(farm: Farm, artifact: Path, tmp_path: Path) -> None:
    farm.add_server(KEY, work_dir=str(tmp_path))
    x = np.random.default_rng(1).standard_normal((1, 1, 16, 16)).astype("float32")
    np.savez(tmp_path / "x.npz", data=x)
    command = ["run", str(artifact), "--rpc-tracker", farm.address, "--rpc-key", KEY,
               "--inputs", str(tmp_path / "x.npz"), "-o", str(tmp_path / "out.npz"),
               "--print-time", "--repeat", "3", "--profile"]  # fmt: skip
    assert main(command) == 0
    remote = np.load(tmp_path / "out.npz")["output_0"]
    np.testing.assert_array_equal(remote, local_outputs(artifact, x))
    wait_until(lambda: farm.servers[0].sessions_served == 1, "the session's end")
    assert not list(tmp_path.glob("ember-session-*")), "the work directory was left behind"


def test_code_for_another_architecture_is_refused(
    farm: Farm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    farm.add_server(KEY)
    graph, params = ember.testing.get_workload("mlp", image_shape=(1, 8, 8), num_classes=4)
    path = tmp_path / "arm.tar"
    try:
        library = ember.build(graph, "llvm -mtriple=aarch64-linux-gnu", params=params)
    except ember.EmberError as error:
        pytest.skip(f"no aarch64 cross compiler: {error}")
    library.export_library(path)
    command = ["run", str(path), "--rpc-tracker", farm.address, "--rpc-key", KEY]
    assert main(command) == 2
    message = capsys.readouterr().err
    assert "built for 'llvm -mtriple=aarch64-linux-gnu' (aarch64)" in message
    assert "the board is x86_64" in message
    with connect_tracker("127.0.0.1", farm.tracker.port) as tracker, tracker.request(KEY) as remote:
        # Uploaded anyway, the board itself refuses to load it.
        with pytest.raises(RPCError, match="aarch64 code and this board is x86_64"):
            remote.load_module(remote.upload(path))
        with pytest.raises(TargetMismatch, match="uses avx512f"):
            from ember.rpc.client import check_compatible

            check_compatible("llvm -mcpu=skylake-avx512", ["avx512f"],
                             {"arch": "x86_64", "features": ["sse2"]}, "net.tar")  # fmt: skip


def test_the_bundle_serves_under_a_bare_python(farm: Farm, artifact: Path, tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "ember-server.pyz")
    # -I -S: no site-packages (no NumPy), no PYTHONPATH, not this checkout: the bundle
    # alone, as on a board.
    command = [sys.executable, "-I", "-S", str(bundle), "--tracker", farm.address, "--key",
               "bare", "--port", "0"]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    farm.processes.append(process)
    wait_until(lambda: board_counts(farm.tracker, "bare")["total"] == 1, "the bundle's server")
    x = np.ones((1, 1, 16, 16), "float32")
    with connect_tracker("127.0.0.1", farm.tracker.port) as tracker, tracker.request("bare") as r:
        module = r.load_module(r.upload(artifact))
        module.set_input(0, x)
        module.run()
        np.testing.assert_array_equal(module.get_output(0), local_outputs(artifact, x))
    assert process.poll() is None
    assert str(ROOT) not in bundle.read_bytes().decode("latin-1")


def test_the_bundle_names_the_python_it_needs(tmp_path: Path) -> None:
    """A board's older Python (Ubuntu 22.04 has 3.10) gets the version to install, not
    a traceback from the first syntax it lacks."""
    bundle = write_bundle(tmp_path / "ember-server.pyz")
    older = (
        "import runpy, sys; sys.version_info = (3, 10, 12); sys.argv = ['ember-server.pyz']; "
        f"runpy.run_path({str(bundle)!r}, run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", older], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "needs Python 3.11 or newer" in result.stderr and "python3.11" in result.stderr


def test_the_bundle_holds_every_device_module() -> None:
    from test_imports import SERVER_MODULES

    from ember.rpc.bundle import BUNDLED_MODULES

    for module in set(SERVER_MODULES) - {"ember.rpc.bundle"}:  # the host writes it
        path = module.replace(".", "/") + ".py"
        assert path in BUNDLED_MODULES or path.replace(".py", "/__init__.py") in BUNDLED_MODULES


def test_a_server_removes_what_dead_servers_left(farm: Farm, tmp_path: Path) -> None:
    import os

    dead = tmp_path / "ember-session-999999999-x1"  # no such process
    alive = tmp_path / f"ember-session-{os.getppid()}-x2"  # a live process's session
    other = tmp_path / "ember-session-notapid"
    for directory in (dead, alive, other):
        directory.mkdir()
        (directory / "candidate.so").write_bytes(b"left")
    farm.add_server(KEY, work_dir=str(tmp_path))
    assert not dead.exists() and alive.exists() and other.exists()


def test_a_board_unlike_the_target_gets_a_note() -> None:
    from ember.rpc.client import device_notes

    target = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"  # 4 cores, no dotprod
    pi5_like = {"arch": "aarch64", "cores": 8, "features": ["asimd", "neon", "dotprod"]}
    cores, features = device_notes(target, pi5_like)
    assert "-num-cores=8" in cores and "-mattr=+dotprod" in features
    assert device_notes(target, {"arch": "aarch64", "cores": 4, "features": ["neon"]}) == []
    assert device_notes(target, {"arch": "aarch64", "cores": 4, "features": []}) == []

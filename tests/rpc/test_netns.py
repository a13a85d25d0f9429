"""The farm across a real network interface: a board in its own network namespace
(`ip netns`, a veth pair; addresses the test makes itself, never another host's)
registers with a tracker on the host side with a token, and a network runs on it.
Skips where namespaces cannot be made (not root, no `ip`, no permission)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from farm import ROOT, Farm, board_counts, wait_until

import ember
from ember.rpc.client import TrackerClient
from ember.rpc.protocol import load_token, write_token

HOST_ADDRESS, BOARD_ADDRESS = "10.213.77.1", "10.213.77.2"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def namespace() -> Iterator[str]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and the `ip` command")
    name = f"ember-{uuid.uuid4().hex[:8]}"
    host_end, board_end = f"eh{name[-8:]}", f"eb{name[-8:]}"
    try:
        _ip("netns", "add", name)
    except (subprocess.SubprocessError, OSError) as error:
        pytest.skip(f"cannot make a network namespace here: {error}")
    try:
        _ip("link", "add", host_end, "type", "veth", "peer", "name", board_end)
        _ip("link", "set", board_end, "netns", name)
        _ip("addr", "add", f"{HOST_ADDRESS}/30", "dev", host_end)
        _ip("link", "set", host_end, "up")
        _ip("netns", "exec", name, "ip", "addr", "add", f"{BOARD_ADDRESS}/30", "dev", board_end)
        _ip("netns", "exec", name, "ip", "link", "set", board_end, "up")
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "link", "del", host_end], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def test_a_board_in_its_own_namespace(namespace: str, tmp_path: Path) -> None:
    token_file = tmp_path / "farm.token"
    write_token(token_file)
    token = load_token(token_file)
    farm = Farm(token, host=HOST_ADDRESS)
    try:
        command = ["ip", "netns", "exec", namespace, sys.executable, "-m", "ember.cli", "server",
                   "--tracker", farm.address, "--key", "netns-board", "--host", BOARD_ADDRESS,
                   "--port", "0", "--token-file", str(token_file)]  # fmt: skip
        process = subprocess.Popen(
            command, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        farm.processes.append(process)
        wait_until(lambda: board_counts(farm.tracker, "netns-board")["total"] == 1, "the board")
        (server,) = farm.tracker.summary()["servers"]
        assert server["host"] == BOARD_ADDRESS  # as the tracker saw it, across the veth
        graph, params = ember.testing.get_workload("mlp", image_shape=(1, 8, 8), num_classes=4)
        artifact = tmp_path / "mlp.tar"
        ember.build(graph, "llvm", params=params).export_library(artifact)
        x = np.ones((1, 1, 8, 8), "float32")
        tracker = TrackerClient(HOST_ADDRESS, farm.tracker.port, token)
        with tracker, tracker.request("netns-board", timeout=30) as remote:
            module = remote.load_module(remote.upload(artifact))
            module.set_input(0, x)
            module.run()
            remote_output = module.get_output(0)
        local = ember.runtime.load(artifact)
        local.set_input(0, x)
        local.run()
        np.testing.assert_array_equal(remote_output, local.get_output(0))
    finally:
        farm.stop()

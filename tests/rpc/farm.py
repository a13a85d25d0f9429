"""A device farm on loopback for the tests: a tracker and device servers, in this
process or as `ember server` processes (which a test can kill), all stopped by the
test that started them."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ember.rpc.server import DeviceServer
from ember.rpc.tracker import Tracker

ROOT = Path(__file__).resolve().parents[2]
# How long a test waits for something that takes a fraction of a second when the
# machine is idle: a guard against a hang, not a speed requirement.
WAIT = 60.0


def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def board_counts(tracker: Tracker, key: str) -> dict[str, int]:
    return tracker.summary()["keys"].get(key, {"total": 0, "free": 0, "pending": 0})


class Farm:
    """A tracker on a free port (of loopback, or an address the test made) and the
    servers a test adds."""

    def __init__(self, token: bytes | None = None, host: str = "127.0.0.1") -> None:
        self.token = token
        self.host = host
        self.tracker = Tracker(host, 0, token)
        self.tracker.start()
        self.servers: list[DeviceServer] = []
        self.processes: list[subprocess.Popen[str]] = []
        # Where server processes keep sessions: a killed one cannot clean up.
        self.work_dir = tempfile.mkdtemp(prefix="ember-farm-")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.tracker.port}"

    def add_server(self, key: str, **options: Any) -> DeviceServer:
        server = DeviceServer(
            "127.0.0.1", 0, self.token, (self.host, self.tracker.port), key, **options
        )
        server.start()
        self.servers.append(server)
        assert server.registered.wait(WAIT), "the server did not register"
        return server

    def start_server_process(self, key: str, *extra: str) -> subprocess.Popen[str]:
        """`ember server` in its own process (killable), registered before it returns."""
        before = board_counts(self.tracker, key)["total"]
        command = [sys.executable, "-m", "ember.cli", "server", "--tracker", self.address,
                   "--key", key, "--port", "0", "--work-dir", self.work_dir, *extra]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.processes.append(process)
        wait_until(lambda: board_counts(self.tracker, key)["total"] > before, "registration")
        return process

    def restart_tracker(self) -> None:
        """Stop the tracker and start a new one on the same port."""
        port = self.tracker.port
        self.tracker.stop()
        deadline = time.monotonic() + WAIT
        while True:
            tracker = Tracker(self.host, port, self.token)
            try:
                tracker.start()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.tracker = tracker

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        for server in self.servers:
            server.stop()
        self.tracker.stop()
        shutil.rmtree(self.work_dir, ignore_errors=True)

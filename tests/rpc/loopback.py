"""Trackers and device servers on loopback for the security tests: a token, small time
limits, every service a test starts stopped when it ends, and the proof that a service
still serves after an attack."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from farm import wait_until

from ember.rpc.client import RemoteSession, TrackerClient, open_session
from ember.rpc.protocol import Limits, load_token, write_token
from ember.rpc.server import DeviceServer
from ember.rpc.service import Service
from ember.rpc.session import SessionLimits
from ember.rpc.tracker import Tracker

HOST = "127.0.0.1"
KEY = "test-board"
# Small limits keep the slow-sender tests short; a loopback handshake takes milliseconds.
FAST = Limits(handshake_timeout=1.0, frame_timeout=1.0)
SESSION_LIMITS = SessionLimits(max_upload_bytes=2**20, max_files=3, idle_seconds=30.0)
# The longest any wait in these tests may last before the test fails: a hang guard,
# never a claim about speed.
GUARD = 10.0

S = TypeVar("S", bound=Service)


def new_token(path: Path) -> bytes:
    """A fresh token written to `path` (as `ember rpc token -o` does), read back."""
    write_token(path)
    token = load_token(path)
    assert token is not None
    return token


class Services:
    """The services a test started; `stop_all` stops them, the last started first."""

    def __init__(self) -> None:
        self.started: list[Service] = []

    def start(self, service: S) -> S:
        self.started.append(service)
        service.start()
        return service

    def stop_all(self) -> None:
        for service in reversed(self.started):
            service.stop()


def make_tracker(token: bytes, limits: Limits = FAST) -> Tracker:
    return Tracker(HOST, 0, token, limits=limits)


def make_server(token: bytes, work_dir: Path, **options: Any) -> DeviceServer:
    """A device server whose sessions work under `work_dir`; `options` as DeviceServer's
    (FAST limits unless given)."""
    options.setdefault("limits", FAST)
    return DeviceServer(HOST, 0, token, work_dir=str(work_dir), **options)


def tracker_client(tracker: Tracker, token: bytes | None) -> TrackerClient:
    """A client that gives up at once when the tracker is gone (no reconnecting)."""
    return TrackerClient(HOST, tracker.port, token, timeout=GUARD, reconnect_seconds=0)


@contextlib.contextmanager
def session_on(
    server: DeviceServer, token: bytes, port: int | None = None
) -> Iterator[RemoteSession]:
    """A session on a server without a tracker (through `port` when given), closed and
    cleaned up on exit, so that the next one finds the board free."""
    served = server.sessions_served
    remote = open_session(HOST, port or server.port, token, None, GUARD)
    try:
        yield remote
    finally:
        remote.close()
        wait_until(lambda: server.sessions_served > served, "the session to end", GUARD)


def assert_serves(service: Service, token: bytes) -> None:
    """The proof that an attack cost nothing: a normal summary or session."""
    if isinstance(service, Tracker):
        with tracker_client(service, token) as client:
            assert "keys" in client.summary()
    else:
        assert isinstance(service, DeviceServer)
        with session_on(service, token) as remote:
            remote.upload(b"alive", "alive.txt")
            assert remote.files() == {"alive.txt": 5}

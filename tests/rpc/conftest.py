"""Fixtures of the farm's tests: `farm` (a tracker on loopback, stopped with every
server it got), and for the security tests a `token`, the services a test `started`
(all stopped when it ends), a `tracker` and a device `server` holding that token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from farm import Farm
from loopback import SESSION_LIMITS, Services, make_server, make_tracker, new_token

from ember.rpc.server import DeviceServer
from ember.rpc.tracker import Tracker


@pytest.fixture
def farm() -> Iterator[Farm]:
    farm = Farm()
    try:
        yield farm
    finally:
        farm.stop()


@pytest.fixture
def token(tmp_path: Path) -> bytes:
    return new_token(tmp_path / "token")


@pytest.fixture
def started() -> Iterator[Services]:
    services = Services()
    try:
        yield services
    finally:
        services.stop_all()


@pytest.fixture
def tracker(started: Services, token: bytes) -> Tracker:
    return started.start(make_tracker(token))


@pytest.fixture
def server(started: Services, token: bytes, tmp_path: Path) -> DeviceServer:
    """A device server without a tracker: anyone holding the token gets a session."""
    return started.start(make_server(token, tmp_path, session_limits=SESSION_LIMITS))

"""The device farm: a tracker that hands out boards, device servers on the boards, and
the host's client (sessions, remote modules) that tuning and `ember run` use.

    tracker = ember.rpc.connect_tracker("127.0.0.1", 9190)
    with tracker.request("rasp4b-64") as remote:
        remote.upload("net.tar")
        module = remote.load_module("net.tar")

Modules, in the order they build on each other: `protocol` (frames, authentication,
limits), `service` (a listening socket with a thread per connection), `tracker`,
`device_worker` (the board's helper process), `session` (one client's work on a
board), `server` (the board's server), `client` (the host's side), `bundle` (the
single-file device server). Everything but `client` and `bundle` uses the standard
library only, so it runs on a bare board.
Names import on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.lazy import lazy_exports

if TYPE_CHECKING:  # what __getattr__ imports, spelled out for type checkers
    from ember.rpc.client import (
        RemoteModule,
        RemoteSession,
        TrackerClient,
        connect,
        connect_tracker,
    )
    from ember.rpc.protocol import RPCError
    from ember.rpc.server import DeviceServer
    from ember.rpc.session import SessionLimits
    from ember.rpc.tracker import Tracker

_NAMES = {
    "RemoteModule": "ember.rpc.client",
    "RemoteSession": "ember.rpc.client",
    "TrackerClient": "ember.rpc.client",
    "connect": "ember.rpc.client",
    "connect_tracker": "ember.rpc.client",
    "RPCError": "ember.rpc.protocol",
    "DeviceServer": "ember.rpc.server",
    "SessionLimits": "ember.rpc.session",
    "Tracker": "ember.rpc.tracker",
}

__all__ = [
    "DeviceServer",
    "RPCError",
    "RemoteModule",
    "RemoteSession",
    "SessionLimits",
    "Tracker",
    "TrackerClient",
    "connect",
    "connect_tracker",
]


__getattr__ = lazy_exports(__name__, _NAMES)

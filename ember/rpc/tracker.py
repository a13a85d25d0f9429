"""The tracker: device servers register under a key; clients ask for a board of a key
and get one when it is free, highest priority first, then in order of arrival.

    tracker = Tracker("127.0.0.1", 9190, token)
    tracker.start()                  # `ember tracker --host 127.0.0.1 --port 9190`

The tracker only matches: it hands the client the board's address and a one-time
ticket, and tells the board to expect that ticket; the session then goes straight from
client to board. A board is busy from the match until it reports the session (or the
unused ticket) over, on the connection it registered on. A board whose connection
drops is forgotten (it registers again when it can); a client that goes away while
queued leaves the queue. Standard library only.

Messages (JSON headers, see `ember.rpc.protocol`):

- board: hello {"role": "server", "key", "port", "host"?, "device", "busy_ticket"?};
  then {"op": "free", "ticket"} or {"op": "ping"} (answered {"op": "pong"}); the
  tracker sends {"op": "expect", "ticket"}.
- client: hello {"role": "client"}; then {"op": "request", "key", "priority",
  "timeout"} -> {"host", "port", "ticket", "key", "device"} or {"error"};
  {"op": "summary"} -> {"keys": {key: {"total", "free", "pending"}}, "servers": [...]}.
"""

from __future__ import annotations

import itertools
import logging
import math
import secrets
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ember.rpc.protocol import (
    DEFAULT_LIMITS,
    DEFAULT_TRACKER_PORT,
    Channel,
    ConnectionLost,
    Limits,
    RPCError,
)
from ember.rpc.service import Service

log = logging.getLogger("ember.rpc")

# A registered board says it is alive at least this often; silence for three periods
# means it is gone (a board behind a dead link never closes its connection).
HEARTBEAT_SECONDS = 5.0
# How long a client connection may sit idle between requests.
CLIENT_IDLE_SECONDS = 3600.0
_POLL_SECONDS = 0.25


@dataclass
class _Board:
    id: int
    key: str
    host: str
    port: int
    device: dict[str, Any]
    channel: Channel
    ticket: str | None = None  # the session it is reserved for; None: free
    free_since: float = field(default_factory=time.monotonic)

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "key": self.key,
            "host": self.host,
            "port": self.port,
            "free": self.ticket is None,
            "device": self.device,
        }


@dataclass
class _Request:
    key: str
    priority: int
    order: int
    match: dict[str, Any] | None = None


class Tracker(Service):
    """The tracker service; see the module docstring."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = DEFAULT_TRACKER_PORT, token: bytes | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:  # fmt: skip
        super().__init__(host, port, token, "tracker", limits)
        self._state = threading.Condition()
        self._boards: dict[int, _Board] = {}
        self._queue: list[_Request] = []
        self._ids = itertools.count(1)
        self._arrivals = itertools.count()

    # -- what tests and `ember query` read --------------------------------------------

    def summary(self) -> dict[str, Any]:
        """Per key: boards registered, free, and requests waiting; and every board."""
        with self._state:
            keys: dict[str, dict[str, int]] = {}
            for board in self._boards.values():
                counts = keys.setdefault(board.key, {"total": 0, "free": 0, "pending": 0})
                counts["total"] += 1
                counts["free"] += board.ticket is None
            for request in self._queue:
                keys.setdefault(request.key, {"total": 0, "free": 0, "pending": 0})
                keys[request.key]["pending"] += 1
            servers = [b.describe() for b in sorted(self._boards.values(), key=lambda b: b.id)]
        return {"keys": keys, "servers": servers}

    # -- connections --------------------------------------------------------------------

    def handle(self, channel: Channel, hello: dict[str, Any]) -> None:
        role = hello.get("role")
        if role == "server":
            self._serve_board(channel, hello)
        elif role == "client":
            self._serve_client(channel)
        else:
            channel.send({"error": f"unknown role {role!r}: expected 'server' or 'client'"})

    def _serve_board(self, channel: Channel, hello: dict[str, Any]) -> None:
        board = self._register(channel, hello)
        if board is None:
            return
        try:
            while not self.stopping:
                message, _ = channel.receive(3 * HEARTBEAT_SECONDS, "a heartbeat")
                if message.get("op") == "free":
                    self._release(board, str(message.get("ticket")))
                elif message.get("op") == "ping":
                    channel.send({"op": "pong"})  # the board's sign that we are alive
        except RPCError as error:
            log.info("tracker: board %d (%s at %s:%d) left: %s", board.id, board.key,
                     board.host, board.port, error)  # fmt: skip
        finally:
            with self._state:
                self._boards.pop(board.id, None)

    def _register(self, channel: Channel, hello: dict[str, Any]) -> _Board | None:
        key, port, device = hello.get("key"), hello.get("port"), hello.get("device", {})
        host = hello.get("host") or channel.peer.rsplit(":", 1)[0].strip("[]")
        valid = (
            isinstance(key, str) and 0 < len(key) <= 128 and isinstance(port, int)
            and 0 < port < 65536 and isinstance(device, dict) and isinstance(host, str)
        )  # fmt: skip
        if not valid:
            channel.send({"error": "a board registers with a key (1-128 characters), a port "
                                   "and a device description"})  # fmt: skip
            return None
        busy = hello.get("busy_ticket")
        assert isinstance(key, str) and isinstance(port, int) and isinstance(host, str)
        with self._state:
            board = _Board(next(self._ids), key, host, port, device, channel,
                           ticket=busy if isinstance(busy, str) else None)  # fmt: skip
            self._boards[board.id] = board
            channel.send({"ok": True, "id": board.id})
            self._match()
        log.info("tracker: board %d registered: key %s at %s:%d (%s)", board.id, key, host,
                 port, device.get("arch", "?"))  # fmt: skip
        return board

    def _release(self, board: _Board, ticket: str) -> None:
        with self._state:
            if board.ticket == ticket:
                board.ticket = None
                board.free_since = time.monotonic()
                self._match()

    def _serve_client(self, channel: Channel) -> None:
        while not self.stopping:
            message, _ = channel.receive(CLIENT_IDLE_SECONDS, "a request")
            op = message.get("op")
            if op == "summary":
                channel.send(self.summary())
            elif op == "request":
                channel.send(self._wait_for_board(channel, message))
            else:
                channel.send({"error": f"unknown request {op!r}: expected 'request' or 'summary'"})

    def _wait_for_board(self, channel: Channel, message: dict[str, Any]) -> dict[str, Any]:
        key, priority, timeout = (
            message.get("key"),
            message.get("priority", 0),
            message.get("timeout"),
        )
        if not isinstance(key, str) or not isinstance(priority, int):
            return {"error": "a request names a key (a string) and an integer priority"}
        if timeout is not None and not (isinstance(timeout, int | float) and timeout >= 0):
            return {"error": "a request's timeout is a number of seconds >= 0, or null"}
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        request = _Request(key, priority, next(self._arrivals))
        with self._state:
            self._queue.append(request)
            self._match()
            while request.match is None:
                left = deadline - time.monotonic()
                if left <= 0 or self.stopping or _has_hung_up(channel.sock):
                    self._queue.remove(request)
                    return {"error": self._no_board_message(key, timeout)}
                self._state.wait(min(left, _POLL_SECONDS))
        return request.match

    def _no_board_message(self, key: str, timeout: float | None) -> str:
        boards = [b for b in self._boards.values() if b.key == key]
        busy = sum(b.ticket is not None for b in boards)
        ahead = sum(r.key == key for r in self._queue)
        # No timeout: the client hung up or the tracker is stopping.
        waited = "before the request ended" if timeout is None else f"within {timeout:g} s"
        return (
            f"no board of key {key!r} became free {waited} at the tracker on port "
            f"{self.port}: {len(boards)} registered, {busy} busy, {ahead} other request(s) "
            "queued for the key; start more servers with `ember server --key "
            f"{key}`, or wait longer"
        )

    def _match(self) -> None:
        """Give free boards to waiting requests: priority, then arrival. Holds _state."""
        for request in sorted(self._queue, key=lambda r: (-r.priority, r.order)):
            free = [b for b in self._boards.values() if b.key == request.key and b.ticket is None]
            while free:
                board = min(free, key=lambda b: b.free_since)  # the longest idle first
                free.remove(board)
                ticket = secrets.token_hex(16)
                try:
                    board.channel.send({"op": "expect", "ticket": ticket})
                except ConnectionLost:
                    self._boards.pop(board.id, None)
                    continue
                board.ticket = ticket
                request.match = {"host": board.host, "port": board.port, "ticket": ticket,
                                 "key": board.key, "device": board.device}  # fmt: skip
                self._queue.remove(request)
                self._state.notify_all()
                break


def _has_hung_up(sock: socket.socket) -> bool:
    """Whether a client waiting for its reply has closed its connection."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True

"""The device server: runs on each board, registers with a tracker under a key, and
serves one session (`ember.rpc.session`) at a time.

    server = DeviceServer("127.0.0.1", 9090, token, tracker=("127.0.0.1", 9190),
                          key="rasp4b-64")
    server.start()            # `ember server --tracker 127.0.0.1:9190 --key rasp4b-64`

A session comes from the client the tracker matched the board with, holding the
tracker's one-time ticket, or, when there is no tracker, from anyone holding the token.
When it ends the tracker is told the board is free. The link to the tracker is kept
alive with pings and made again whenever it drops (a tracker restart costs a board
two seconds at most).

Standard library only: a board needs Python 3 and this package (`ember rpc bundle`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ember.device import host_description
from ember.rpc.protocol import (
    DEFAULT_LIMITS,
    DEFAULT_SERVER_PORT,
    Channel,
    Limits,
    RPCError,
    RPCTimeout,
    connect,
)
from ember.rpc.service import Service
from ember.rpc.session import (
    DEFAULT_SESSION_LIMITS,
    Session,
    SessionLimits,
    remove_stale_sessions,
)
from ember.rpc.tracker import HEARTBEAT_SECONDS

log = logging.getLogger("ember.rpc")

# A ticket the tracker announced but no client used within this time frees the board.
TICKET_SECONDS = 30.0
# A client may reach the board before the tracker's "expect" does.
_TICKET_GRACE_SECONDS = 5.0


class DeviceServer(Service):
    """The device server; see the module docstring."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_SERVER_PORT,
        token: bytes | None = None,
        tracker: tuple[str, int] | None = None,
        key: str | None = None,
        advertise_host: str | None = None,
        work_dir: str | None = None,
        limits: Limits = DEFAULT_LIMITS,
        session_limits: SessionLimits = DEFAULT_SESSION_LIMITS,
    ) -> None:
        # No message needs to be much larger than the largest upload.
        frame_bytes = min(limits.max_frame_bytes, session_limits.max_upload_bytes + 2**20)
        limits = dataclasses.replace(limits, max_frame_bytes=frame_bytes)
        super().__init__(host, port, token, "device server", limits, max_connections=64)
        if tracker is not None and not key:
            raise RPCError("a server that registers with a tracker needs a --key")
        self.tracker = tracker
        self.key = key
        self.advertise_host = advertise_host
        self.work_dir = work_dir
        self.session_limits = session_limits
        self.device = host_description()
        self.sessions_served = 0
        self.registered = threading.Event()  # set while registered with the tracker
        self._busy = threading.Lock()
        self._tickets = threading.Condition()
        self._expected: dict[str, float] = {}  # ticket -> when it expires
        self._active_ticket: str | None = None
        self._link: Channel | None = None
        self._link_thread: threading.Thread | None = None
        self._session: Session | None = None

    def start(self) -> None:
        remove_stale_sessions(Path(self.work_dir or tempfile.gettempdir()))
        super().start()
        if self.tracker is not None:
            self._link_thread = threading.Thread(
                target=self._tracker_link, name="server-tracker-link", daemon=True
            )
            self._link_thread.start()

    def stop(self) -> None:
        session = self._session
        if session is not None:  # a candidate may be running for an hour: end it now
            session.abort()
        super().stop()
        link = self._link
        if link is not None:
            link.close()
        if self._link_thread is not None:
            self._link_thread.join(timeout=10)

    # -- the tracker --------------------------------------------------------------------

    def _tracker_link(self) -> None:
        """Register, answer the tracker, and register again whenever the link drops."""
        assert self.tracker is not None
        backoff = 0.2
        while not self.stopping:
            try:
                self._registered_session()
                backoff = 0.2
            except (RPCError, OSError) as error:
                # OSError: stop() closed the link's socket under a read (EBADF).
                if not self.stopping:
                    log.info("server: tracker link: %s; registering again in %.1f s", error,
                             backoff)  # fmt: skip
            finally:
                self.registered.clear()
                self._link = None
            self._stopping.wait(backoff)
            backoff = min(2 * backoff, 2.0)

    def _registered_session(self) -> None:
        assert self.tracker is not None and self.key is not None
        host, port = self.tracker
        busy = self._active_ticket
        hello = {"role": "server", "key": self.key, "port": self.port, "device": self.device,
                 "host": self.advertise_host, "busy_ticket": busy}  # fmt: skip
        channel, _ = connect(host, port, self.token, hello, what="the tracker")
        try:
            reply, _ = channel.receive(10.0, "the tracker's registration answer")
            if "error" in reply:
                raise RPCError(f"the tracker refused the registration: {reply['error']}")
            with self._tickets:  # tickets of a tracker that restarted are void
                self._expected.clear()
            self._link = channel
            if busy is not None and busy != self._active_ticket:
                # The session ended while registering, its "free" sent to no one.
                channel.send({"op": "free", "ticket": busy})
            self.registered.set()
            log.info("server: registered with the tracker at %s:%d as key %s", host, port,
                     self.key)  # fmt: skip
            self._follow_tracker(channel)
        finally:
            channel.close()

    def _follow_tracker(self, channel: Channel) -> None:
        """Take the tracker's tickets, ping it, and notice when it falls silent (a
        tracker behind a dead link never closes the connection)."""
        last_ping = last_heard = time.monotonic()
        while not self.stopping:
            try:
                message, _ = channel.receive(1.0, "the tracker")
                last_heard = time.monotonic()
                if message.get("op") == "expect" and isinstance(message.get("ticket"), str):
                    with self._tickets:
                        self._expected[message["ticket"]] = time.monotonic() + TICKET_SECONDS
                        self._tickets.notify_all()
            except RPCTimeout:
                if time.monotonic() - last_heard > 3 * HEARTBEAT_SECONDS:
                    raise RPCTimeout(
                        f"the tracker has not answered for {3 * HEARTBEAT_SECONDS:g} s"
                    ) from None
            self._expire_tickets(channel)
            if time.monotonic() - last_ping >= HEARTBEAT_SECONDS:
                channel.send({"op": "ping"})
                last_ping = time.monotonic()

    def _expire_tickets(self, channel: Channel) -> None:
        now = time.monotonic()
        with self._tickets:
            expired = [t for t, expiry in self._expected.items() if expiry < now]
            for ticket in expired:
                del self._expected[ticket]
        for ticket in expired:
            log.info("server: a client matched by the tracker never came; free again")
            channel.send({"op": "free", "ticket": ticket})

    def _tell_tracker_free(self, ticket: str) -> None:
        link = self._link
        if link is not None:
            # A link that is down: registering again reports the board free.
            with contextlib.suppress(RPCError):
                link.send({"op": "free", "ticket": ticket})

    # -- sessions -----------------------------------------------------------------------

    def handle(self, channel: Channel, hello: dict[str, Any]) -> None:
        if hello.get("role") != "session":
            channel.send({"error": f"a device server serves sessions, not {hello.get('role')!r}"})
            return
        ticket = hello.get("ticket")
        if self.tracker is not None and not self._claim(ticket):
            channel.send({"error": "this board is handed out by its tracker: request it with "
                          "ember.rpc.connect_tracker(host, port).request(key)"})  # fmt: skip
            return
        if not self._busy.acquire(blocking=False):
            channel.send({"error": "the board is busy with another session"})
            if isinstance(ticket, str) and self.tracker is not None:
                self._tell_tracker_free(ticket)
            return
        try:
            self._active_ticket = ticket if isinstance(ticket, str) else None
            channel.send({"ok": True, "device": self.device})
            log.info("server: session from %s", channel.peer)
            with Session(channel, self.work_dir, self.session_limits, self.device) as session:
                self._session = session
                session.serve()
        finally:
            self._session = None
            self.sessions_served += 1
            self._active_ticket = None
            self._busy.release()
            if isinstance(ticket, str) and self.tracker is not None:
                self._tell_tracker_free(ticket)
            log.info("server: session from %s ended", channel.peer)

    def _claim(self, ticket: object) -> bool:
        """Whether `ticket` is one the tracker announced (waiting a little for it)."""
        if not isinstance(ticket, str):
            return False
        deadline = time.monotonic() + _TICKET_GRACE_SECONDS
        with self._tickets:
            while ticket not in self._expected:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._tickets.wait(left)
            del self._expected[ticket]
        return True

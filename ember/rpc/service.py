"""What the tracker and the device server share: a listening socket, a thread per
connection, the handshake, and a clean stop.

    service = MyService("127.0.0.1", 0, token, "tracker")
    service.start()           # listening; service.port is the port it got
    ...
    service.stop()            # closes the listener and every connection, joins threads

A connection that does not complete the handshake (garbage, a wrong token, a slow
sender, another protocol version) is refused and logged, and costs the others
nothing. At most `max_connections` are served at once; more are closed at once.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

from ember.rpc.protocol import (
    DEFAULT_LIMITS,
    Channel,
    Limits,
    RPCError,
    accept,
    check_bind_address,
    close_socket,
    listen,
)

log = logging.getLogger("ember.rpc")


class Service:
    """A TCP service speaking Ember's protocol; subclasses implement `handle`."""

    def __init__(
        self,
        host: str,
        port: int,
        token: bytes | None,
        name: str,
        limits: Limits = DEFAULT_LIMITS,
        max_connections: int = 512,
    ) -> None:
        check_bind_address(host, token, name)
        self.host = host
        self.requested_port = port
        self.token = token
        self.name = name
        self.limits = limits
        self.max_connections = max_connections
        self.port = 0
        self.refused = 0  # connections refused at the handshake, for tests and logs
        self._listener: socket.socket | None = None
        self._connections: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._accept_thread: threading.Thread | None = None

    def start(self) -> None:
        """Listen, and serve connections on background threads."""
        self._listener = listen(self.host, self.requested_port, self.name)
        self.port = self._listener.getsockname()[1]
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name=f"{self.name}-accept", daemon=True
        )
        self._accept_thread.start()

    def stop(self) -> None:
        """Stop listening, close every connection and wait for their threads."""
        self._stopping.set()
        if self._listener is not None:
            close_socket(self._listener)
        with self._lock:
            connections, threads = list(self._connections), list(self._threads)
        for sock in connections:
            close_socket(sock)
        for thread in [self._accept_thread, *threads]:
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=10)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def handle(self, channel: Channel, hello: dict[str, Any]) -> None:
        """Serve one authenticated connection until it ends (runs on its own thread)."""
        raise NotImplementedError

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                continue
            with self._lock:
                crowded = len(self._connections) >= self.max_connections
                if not crowded:
                    self._connections.add(sock)
            if crowded:
                log.warning("%s: refused a connection: %d already open", self.name,
                            self.max_connections)  # fmt: skip
                close_socket(sock)
                continue
            thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            with self._lock:
                self._threads.add(thread)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            try:
                channel, hello = accept(sock, self.token, self.name, self.limits)
            except (RPCError, OSError) as error:
                self.refused += 1
                if not self._stopping.is_set():
                    log.warning("%s: refused a connection: %s", self.name, error)
                return
            try:
                self.handle(channel, hello)
            except RPCError as error:
                if not self._stopping.is_set():
                    log.info("%s: connection from %s ended: %s", self.name, channel.peer, error)
            except Exception:  # a bug must cost one connection, not the service
                log.exception("%s: error serving %s", self.name, channel.peer)
        finally:
            close_socket(sock)
            with self._lock:
                self._connections.discard(sock)
                self._threads.discard(threading.current_thread())

"""What the tracker and the device server share: a listening socket, a thread per
connection, the handshake, and a clean stop.

    service = MyService("127.0.0.1", 0, token, "tracker")
    service.start()           # listening; service.port is the port it got
    ...
    service.stop()            # closes the listener and every connection, joins threads

A connection that does not complete the handshake (garbage, a wrong token, a slow
sender, another protocol version) is refused and logged, and costs the others
nothing. At most `max_connections` authenticated connections are served at once, and
at most MAX_HANDSHAKES_PER_HOST handshakes from one address are under way; more are
refused at once.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
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

# Handshakes one source address may have under way at once (each ends within the
# handshake timeout): a peer without the token cannot hold every slot.
MAX_HANDSHAKES_PER_HOST = 32


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
        self._authenticated: set[socket.socket] = set()
        self._handshakes: dict[str, int] = {}  # source address -> handshakes under way
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
                sock, address = self._listener.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                time.sleep(0.1)  # out of file descriptors: let connections end first
                continue
            host = str(address[0])
            with self._lock:
                crowded = self._handshakes.get(host, 0) >= MAX_HANDSHAKES_PER_HOST
                if not crowded:
                    self._handshakes[host] = self._handshakes.get(host, 0) + 1
                    self._connections.add(sock)
            if crowded:
                self.refused += 1
                log.warning("%s: refused a connection from %s: %d handshakes already under "
                            "way from there", self.name, host, MAX_HANDSHAKES_PER_HOST)  # fmt: skip
                close_socket(sock)
                continue
            thread = threading.Thread(target=self._serve, args=(sock, host), daemon=True)
            with self._lock:
                self._threads.add(thread)
            thread.start()

    def _serve(self, sock: socket.socket, host: str) -> None:
        try:
            authenticated = self._authenticate(sock, host)
            if authenticated is None:
                return
            channel, hello = authenticated
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
                self._authenticated.discard(sock)
                self._threads.discard(threading.current_thread())

    def _authenticate(
        self, sock: socket.socket, host: str
    ) -> tuple[Channel, dict[str, Any]] | None:
        """The handshake; None (logged, counted) when the peer is refused. Only
        authenticated connections count against max_connections: nobody without the
        token can crowd the others out for longer than a handshake's timeout."""
        try:
            try:
                channel, hello = accept(sock, self.token, self.name, self.limits)
            finally:
                with self._lock:
                    self._handshakes[host] -= 1
                    if not self._handshakes[host]:
                        del self._handshakes[host]
        except (RPCError, OSError) as error:
            self.refused += 1
            if not self._stopping.is_set():
                log.warning("%s: refused a connection: %s", self.name, error)
            return None
        with self._lock:
            crowded = len(self._authenticated) >= self.max_connections
            if not crowded:
                self._authenticated.add(sock)
        if crowded:
            channel.send({"error": f"the {self.name} already serves {self.max_connections} "
                          "connections; try again later"})  # fmt: skip
            log.warning("%s: refused %s: %d connections open", self.name, channel.peer,
                        self.max_connections)  # fmt: skip
            return None
        return channel, hello

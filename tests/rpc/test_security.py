"""Attacks on the tracker's and the device server's connections, each refused with the
service still up afterwards (a normal summary or session follows every one): wrong and
missing tokens, an impostor server, a token that would cross the wire, bytes that are
not the protocol, another protocol version, oversized, truncated and slow frames,
tampered, replayed and reflected frames, and listening beyond loopback without a token.
Attacks on sessions are in test_session_security.py.

Loopback and ephemeral ports only; time limits are small and every wait is bounded by
`GUARD`, a hang guard, never a claim about speed."""

from __future__ import annotations

import contextlib
import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from farm import wait_until
from loopback import (
    GUARD,
    HOST,
    SESSION_LIMITS,
    Services,
    assert_serves,
    make_server,
    make_tracker,
    new_token,
    session_on,
    tracker_client,
)

from ember.rpc import protocol
from ember.rpc.client import TrackerClient, connect, connect_tracker
from ember.rpc.protocol import (
    _LENGTH,
    _PREAMBLE,
    DEFAULT_LIMITS,
    MAGIC,
    PROTOCOL_VERSION,
    AuthenticationError,
    Channel,
    Limits,
)
from ember.rpc.server import DeviceServer
from ember.rpc.service import Service
from ember.rpc.tracker import Tracker


@pytest.fixture
def wrong_token_file(tmp_path: Path) -> Path:
    new_token(tmp_path / "wrong-token")
    return tmp_path / "wrong-token"


@pytest.fixture(params=["tracker", "device server"])
def service(request: pytest.FixtureRequest, started: Services, token: bytes,
            tmp_path: Path) -> Service:  # fmt: skip
    if request.param == "tracker":
        return started.start(make_tracker(token))
    return started.start(make_server(token, tmp_path, session_limits=SESSION_LIMITS))


# -- raw bytes --------------------------------------------------------------------------


def raw_connection(service: Service) -> socket.socket:
    return socket.create_connection((HOST, service.port), timeout=GUARD)


def plain_frame(header: dict[str, Any]) -> bytes:
    """A handshake frame: length, an all-zero tag, header length, JSON header."""
    encoded = json.dumps({**header, "blobs": []}).encode()
    body = bytes(32) + _LENGTH.pack(len(encoded)) + encoded
    return _LENGTH.pack(len(body)) + body


def receive_greeting(sock: socket.socket) -> dict[str, Any]:
    return protocol._receive_plain(sock, DEFAULT_LIMITS, time.monotonic() + GUARD, "greeting")


def read_until_closed(sock: socket.socket, within: float = GUARD) -> bytes:
    """What the peer sends until it closes the connection; fails if it is still open
    after `within` seconds."""
    deadline = time.monotonic() + within
    received = bytearray()
    while True:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(1 << 16)
        except ConnectionResetError:
            return bytes(received)
        except TimeoutError:
            pytest.fail(f"the connection is still open after {within:g} s")
        if not chunk:
            return bytes(received)
        received += chunk


def open_channel(service: Service, token: bytes) -> Channel:
    """An authenticated connection, past the handshake (and a session's answer)."""
    if isinstance(service, Tracker):
        channel, _ = protocol.connect(HOST, service.port, token, {"role": "client"}, GUARD)
        return channel
    hello = {"role": "session", "ticket": None}
    channel, _ = protocol.connect(HOST, service.port, token, hello, GUARD)
    answer, _ = channel.receive(GUARD)
    assert answer.get("ok"), answer
    return channel


def harmless_request(service: Service) -> dict[str, Any]:
    return {"op": "summary"} if isinstance(service, Tracker) else {"op": "files"}


class _Capture:
    def __init__(self) -> None:
        self.data = bytearray()

    def sendall(self, data: bytes | memoryview) -> None:
        self.data += data


def sealed(channel: Channel, header: dict[str, Any]) -> bytes:
    """The bytes `channel.send(header)` would put on the wire, not sent (but counted as
    sent: the next frame gets the next sequence number)."""
    real, capture = channel.sock, _Capture()
    channel.sock = capture  # type: ignore[assignment]
    try:
        channel.send(header)
    finally:
        channel.sock = real
    return bytes(capture.data)


# -- tokens -----------------------------------------------------------------------------


def test_the_tracker_refuses_a_wrong_or_missing_token(tracker: Tracker, token: bytes,
                                                      wrong_token_file: Path) -> None:  # fmt: skip
    with pytest.raises(AuthenticationError, match="wrong or missing RPC token"):
        connect_tracker(HOST, tracker.port, token_file=wrong_token_file, timeout=GUARD)
    with pytest.raises(AuthenticationError, match="wrong or missing RPC token"):
        tracker_client(tracker, None).summary()
    wait_until(lambda: tracker.refused == 2, "both refusals counted", GUARD)
    assert_serves(tracker, token)


def test_the_device_server_refuses_a_wrong_or_missing_token(
    server: DeviceServer, token: bytes, wrong_token_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EMBER_RPC_TOKEN_FILE", raising=False)
    for token_file in (wrong_token_file, None):
        with pytest.raises(AuthenticationError, match="wrong or missing RPC token"):
            connect(HOST, server.port, token_file=token_file, timeout=GUARD)
    wait_until(lambda: server.refused == 2, "both refusals counted", GUARD)
    assert server.sessions_served == 0
    assert_serves(server, token)


def test_the_client_refuses_a_server_that_cannot_prove_the_token(token: bytes) -> None:
    """An impostor that does not hold the token cannot answer the client's nonce."""
    listener = socket.create_server((HOST, 0))

    def impostor() -> None:
        with contextlib.suppress(OSError), listener.accept()[0] as sock:
            sock.settimeout(GUARD)
            sock.recv(_PREAMBLE.size)
            sock.sendall(plain_frame({"service": "tracker", "version": PROTOCOL_VERSION,
                                      "nonce": bytes(16).hex(), "auth": True}))  # fmt: skip
            protocol._receive_plain(sock, DEFAULT_LIMITS, time.monotonic() + GUARD, "hello")
            sock.sendall(plain_frame({"proof": "00" * 32}))
            sock.recv(1)

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    try:
        port = listener.getsockname()[1]
        with pytest.raises(AuthenticationError, match="could not prove it holds the token"):
            protocol.connect(HOST, port, token, {"role": "client"}, GUARD)
    finally:
        protocol.close_socket(listener)
        thread.join(GUARD)


class RecordingProxy:
    """A TCP relay to a port on loopback that keeps every byte it passes, both ways."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server((HOST, 0))
        self.port = self.listener.getsockname()[1]
        self.recorded = bytearray()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection((HOST, self.target_port), timeout=GUARD)
            except OSError:
                return
            upstream.settimeout(None)
            self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                thread = threading.Thread(target=self._relay, args=(source, sink), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _relay(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(1 << 16):
                with self._lock:
                    self.recorded += data
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        protocol.close_socket(self.listener)  # wakes the accepting thread
        for sock in self._sockets:
            protocol.close_socket(sock)
        for thread in self._threads:
            thread.join(GUARD)


@pytest.fixture
def proxy() -> Iterator[Callable[[int], RecordingProxy]]:
    proxies: list[RecordingProxy] = []

    def make(port: int) -> RecordingProxy:
        proxies.append(RecordingProxy(port))
        return proxies[-1]

    try:
        yield make
    finally:
        for each in proxies:
            each.close()


def test_the_token_never_crosses_the_wire(
    tracker: Tracker, server: DeviceServer, token: bytes, proxy: Callable[[int], RecordingProxy]
) -> None:
    to_tracker, to_server = proxy(tracker.port), proxy(server.port)
    with TrackerClient(HOST, to_tracker.port, token, GUARD, reconnect_seconds=0) as client:
        client.summary()
    with session_on(server, token, to_server.port) as remote:
        remote.upload(b"data", "data.bin")
        remote.files()
    for recorded in (to_tracker.recorded, to_server.recorded):
        assert b'"nonce"' in recorded and b'"proof"' in recorded  # the handshake went by
        assert token not in recorded
        assert bytes.fromhex(token.decode()) not in recorded
    assert b'"summary"' in to_tracker.recorded and b"data.bin" in to_server.recorded


# -- bytes that are not the protocol ----------------------------------------------------


def test_random_bytes_are_refused(service: Service, token: bytes) -> None:
    with raw_connection(service) as sock:
        sock.sendall(random.Random(0).randbytes(4096))
        assert read_until_closed(sock) == b""
    assert service.refused == 1
    assert_serves(service, token)


@pytest.mark.parametrize("preamble", [b"GET / HTTP/1.1\r\n\r\n", b"EMBX\x00\x01\x00\x00"])
def test_a_wrong_magic_is_refused(service: Service, token: bytes, preamble: bytes) -> None:
    with raw_connection(service) as sock:
        sock.sendall(preamble)
        assert read_until_closed(sock) == b""
    assert service.refused == 1
    assert_serves(service, token)


def test_another_protocol_version_is_told_both_versions(service: Service, token: bytes) -> None:
    with raw_connection(service) as sock:
        sock.sendall(_PREAMBLE.pack(MAGIC, 99, 0))
        answer = read_until_closed(sock)
    (size,) = _LENGTH.unpack(answer[:4])
    error = json.loads(answer[4 + 32 + 4 : 4 + size])["error"]
    assert "protocol version 99" in error and f"({PROTOCOL_VERSION})" in error
    assert service.refused == 1
    assert_serves(service, token)


def hello_frame() -> bytes:
    """A client's hello with a proof that is wrong (the attacks never get that far)."""
    return plain_frame({"role": "client", "nonce": bytes(16).hex(), "proof": "00" * 32})


@pytest.mark.parametrize(
    "attack",
    [
        "truncated preamble",
        "truncated hello",
        "oversized hello length",
        "hello over the handshake frame limit",
        "hello nested too deep",
    ],
)
def test_a_broken_handshake_is_refused(service: Service, token: bytes, attack: str) -> None:
    with raw_connection(service) as sock:
        if attack == "truncated preamble":
            sock.sendall(_PREAMBLE.pack(MAGIC, PROTOCOL_VERSION, 0)[:5])
            sock.shutdown(socket.SHUT_WR)
        else:
            sock.sendall(_PREAMBLE.pack(MAGIC, PROTOCOL_VERSION, 0))
            greeting = receive_greeting(sock)
            assert greeting["auth"] is True and len(bytes.fromhex(greeting["nonce"])) == 16
            if attack == "truncated hello":
                sock.sendall(hello_frame()[:-3])
                sock.shutdown(socket.SHUT_WR)
            elif attack == "oversized hello length":
                sock.sendall(b"\xff\xff\xff\xff")
            elif attack == "hello over the handshake frame limit":
                sock.sendall(plain_frame({"role": "client", "padding": "x" * 5000}))
            else:  # valid JSON that Python's parser cannot take
                nested = b"[" * 2000 + b"]" * 2000
                body = bytes(32) + _LENGTH.pack(len(nested)) + nested
                sock.sendall(_LENGTH.pack(len(body)) + body)
        assert read_until_closed(sock) == b""
    assert service.refused == 1
    assert_serves(service, token)


def _closed_while_trickling(sock: socket.socket, data: bytes, interval: float) -> bool:
    """Send `data` a byte every `interval` seconds; whether the peer closed the
    connection before GUARD seconds (it must send nothing meanwhile)."""
    deadline = time.monotonic() + GUARD
    for byte in data:
        if time.monotonic() > deadline:
            return False
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return True
        sock.settimeout(interval)
        try:
            received = sock.recv(1 << 16)
        except ConnectionResetError:
            return True
        except TimeoutError:
            continue  # still open: the next byte
        assert not received, f"the server answered a trickled frame: {received!r}"
        return True
    return False


@pytest.mark.parametrize("stage", ["preamble", "hello"])
def test_a_slow_handshake_is_dropped(started: Services, token: bytes, stage: str) -> None:
    """A sender that trickles its handshake is dropped after the handshake timeout,
    whatever the frame timeout (long here, as it is by default)."""
    limits = Limits(handshake_timeout=1.0, frame_timeout=60.0)
    tracker = started.start(make_tracker(token, limits))
    preamble = _PREAMBLE.pack(MAGIC, PROTOCOL_VERSION, 0)
    with raw_connection(tracker) as sock:
        if stage == "preamble":
            closed = _closed_while_trickling(sock, preamble, interval=1.0)
        else:
            sock.sendall(preamble)
            receive_greeting(sock)
            hello = hello_frame()
            closed = _closed_while_trickling(sock, hello, interval=0.25)
    assert closed, f"a connection trickling its {stage} was still open after {GUARD:g} s"
    assert tracker.refused == 1
    assert_serves(tracker, token)


# -- after the handshake ----------------------------------------------------------------


@pytest.mark.parametrize(
    "attack",
    ["oversized length", "truncated frame", "tampered header", "tampered tag",
     "header length past the frame", "header not JSON"],
)  # fmt: skip
def test_a_bad_frame_closes_the_connection(service: Service, token: bytes, attack: str,
                                           caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, "ember.rpc")
    with contextlib.closing(open_channel(service, token)) as channel:
        frame = sealed(channel, harmless_request(service))
        if attack == "oversized length":
            frame, reason = b"\xff\xff\xff\xff", "over the limit"
        elif attack == "truncated frame":
            frame, reason = frame[:-3], "closed while waiting"
        elif attack == "tampered header":
            frame, reason = frame[:-4] + bytes([frame[-4] ^ 1]) + frame[-3:], "authentication"
        elif attack == "tampered tag":
            frame, reason = frame[:10] + bytes([frame[10] ^ 1]) + frame[11:], "authentication"
        else:  # correctly tagged, so the receiver reads what follows the tag
            prefix = _LENGTH.pack(2**31) if attack.startswith("header length") else b""
            body = prefix or _LENGTH.pack(8) + b"not json"
            tag = channel._tag(b"C", channel._sent - 1, body, ())
            frame = _LENGTH.pack(32 + len(body)) + tag + body
            reason = "declares a header" if prefix else "not JSON"
        channel.sock.sendall(frame)
        if attack == "truncated frame":
            channel.sock.shutdown(socket.SHUT_WR)
        assert read_until_closed(channel.sock) == b""
    assert reason in caplog.text
    assert service.refused == 0
    assert_serves(service, token)


@pytest.mark.parametrize("replay", ["on the same connection", "on another connection",
                                    "reflected back"])  # fmt: skip
def test_a_replayed_frame_is_refused(service: Service, token: bytes, replay: str,
                                     caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    """A frame sent again on its connection (its sequence number is stale), on another
    connection (another session key), or the service's own frame sent back to it (the
    other direction)."""
    caplog.set_level(logging.INFO, "ember.rpc")
    with contextlib.closing(open_channel(service, token)) as first:
        frame = sealed(first, harmless_request(service))
        first.sock.sendall(frame)
        reply_body = protocol.read_frame(first.sock, GUARD, DEFAULT_LIMITS, 2**20, "a reply")
        if replay == "reflected back":
            first.sock.sendall(_LENGTH.pack(len(reply_body)) + reply_body)
        elif replay == "on the same connection":
            first.sock.sendall(frame)
        assert replay == "on another connection" or read_until_closed(first.sock) == b""
    if replay == "on another connection":
        if isinstance(service, DeviceServer):  # one session at a time
            wait_until(lambda: service.sessions_served == 1, "the first session to end", GUARD)
        with contextlib.closing(open_channel(service, token)) as second:
            second.sock.sendall(frame)
            assert read_until_closed(second.sock) == b""
    assert "failed its authentication check" in caplog.text
    assert_serves(service, token)


# -- where a service may listen ---------------------------------------------------------


@pytest.mark.parametrize("make", [Tracker, DeviceServer])
def test_listening_beyond_loopback_needs_a_token(
    make: Callable[..., Service], token: bytes
) -> None:
    with pytest.raises(AuthenticationError, match="without a token") as error:
        make("0.0.0.0", 0)
    assert "`ember rpc token -o FILE`" in str(error.value)
    make("0.0.0.0", 0, token)  # with one it may (not started: tests stay on loopback)
    make(HOST, 0)  # and on loopback without one


# -- what the handshake proves, and who may hold its slots --------------------------------


@pytest.mark.parametrize("tampered", ["key", "host", "port", "busy_ticket"])
def test_a_registration_altered_on_the_way_is_refused(
    tracker: Tracker, token: bytes, tampered: str
) -> None:
    # The proof covers the whole hello: someone on the path who rewrites where a board
    # is, or says it is busy for good, is refused even with the nonces relayed intact.
    hello = {"role": "server", "key": "board", "port": 9090, "host": "127.0.0.1",
             "busy_ticket": None, "device": {"arch": "x86_64"}}  # fmt: skip
    with raw_connection(tracker) as sock:
        sock.sendall(_PREAMBLE.pack(MAGIC, PROTOCOL_VERSION, 0))
        greeting = receive_greeting(sock)
        own_nonce = bytes(range(16))
        honest = {**hello, "nonce": own_nonce.hex()}
        proof = protocol._proof(token, b"connector", bytes.fromhex(greeting["nonce"]),
                                own_nonce, honest)  # fmt: skip
        altered = {**honest, tampered: {"key": "evil", "host": "10.6.6.6", "port": 6666,
                                        "busy_ticket": "forged"}[tampered]}  # fmt: skip
        sock.sendall(plain_frame({**altered, "proof": proof}))
        answer = receive_greeting(sock)
    assert "authentication failed" in answer["error"]
    assert tracker.summary()["servers"] == []
    assert_serves(tracker, token)


@pytest.mark.parametrize("proof", ["é" * 64, 64, None, ["00"]])
def test_a_proof_of_the_wrong_kind_is_refused(service: Service, token: bytes, proof: Any) -> None:
    refused = service.refused
    with raw_connection(service) as sock:
        sock.sendall(_PREAMBLE.pack(MAGIC, PROTOCOL_VERSION, 0))
        receive_greeting(sock)
        sock.sendall(plain_frame({"role": "client", "nonce": bytes(16).hex(), "proof": proof}))
        assert "authentication failed" in receive_greeting(sock)["error"]
    wait_until(lambda: service.refused == refused + 1, "the refusal counted", GUARD)
    assert_serves(service, token)


def test_idle_connections_from_one_address_cannot_lock_others_out(
    service: Service, token: bytes
) -> None:
    # Without the token one can only open connections and stay silent: those of one
    # address beyond MAX_HANDSHAKES_PER_HOST are closed at once, and none of them
    # takes a slot of the authenticated connections.
    from ember.rpc.service import MAX_HANDSHAKES_PER_HOST

    crowd = []
    try:
        for _ in range(max(MAX_HANDSHAKES_PER_HOST, service.max_connections) + 4):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.2", 0))  # another loopback address: the attacker's
            sock.connect((HOST, service.port))
            crowd.append(sock)
        assert read_until_closed(crowd[-1]) == b""  # one too many: closed at once
        assert_serves(service, token)  # from 127.0.0.1, while the crowd waits
    finally:
        for sock in crowd:
            sock.close()

"""The wire protocol of Ember's device farm: framing, authentication, limits.

Standard library only: the device server runs on boards with a bare Python.

Every connection starts with an 8-byte preamble from the side that connects (`EMBR`,
the protocol version, two reserved bytes), then a handshake of three small frames:

    acceptor  -> connector   {"service", "version", "nonce": Na, "auth"}
    connector -> acceptor    {"role", "nonce": Nc, "proof": HMAC(token, "connector"|Na|Nc), ...}
    acceptor  -> connector   {"proof": HMAC(token, "acceptor"|Nc|Na)}   or {"error": ...}

Both sides prove they hold the token without sending it; fresh nonces make an old
proof useless. From then on every frame carries an HMAC-SHA256 tag under the session
key HMAC(token, "session"|Na|Nc) over its direction, its sequence number and its
bytes, so a frame cannot be forged, altered, replayed, reordered or moved to another
connection: a session cannot be taken over mid-way. Without a token (loopback only,
see `check_bind_address`) the same exchange runs with an empty key, which guards
against corruption, not against anyone.

A frame: a 4-byte big-endian length, then the 32-byte tag, a 4-byte header length, a
JSON header (a dict; "blobs" lists the sizes of the binary blobs that follow) and the
blobs. Lengths are checked against `Limits` before anything is read or allocated;
once a frame has started it must arrive whole within `Limits.frame_timeout` seconds,
and a handshake within `Limits.handshake_timeout` (slow senders are dropped).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import socket
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember.config import rpc_token_file
from ember.errors import EmberError

MAGIC = b"EMBR"
# Where a tracker and a device server listen unless told otherwise (as TVM's do).
DEFAULT_TRACKER_PORT = 9190
DEFAULT_SERVER_PORT = 9090
PROTOCOL_VERSION = 1
_PREAMBLE = struct.Struct(">4sHH")
_LENGTH = struct.Struct(">I")
_TAG_BYTES = 32
_NONCE_BYTES = 16
# A handshake frame carries a board's device description (its CPU flags) at most.
_HANDSHAKE_FRAME_BYTES = 64 * 1024

Header = dict[str, Any]


class RPCError(EmberError):
    """Something went wrong talking to a tracker or a device server."""


class ConnectionLost(RPCError):
    """The other side closed the connection or could not be reached."""


class RPCTimeout(RPCError):
    """A wait ran out; the message says what was waited for and where."""


class AuthenticationError(RPCError):
    """The token was wrong or missing, or a frame's tag did not verify."""


class ProtocolError(RPCError):
    """Bytes that are not Ember's protocol: bad preamble, version, frame or header."""


class RemoteError(RPCError):
    """The other side understood the request and refused it or failed; the message is
    its own."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What a tracker or device server accepts, so no client can exhaust it."""

    max_frame_bytes: int = 512 * 2**20  # one message, blobs included
    max_header_bytes: int = 2**20
    handshake_timeout: float = 10.0
    frame_timeout: float = 120.0  # from a frame's first byte to its last


DEFAULT_LIMITS = Limits()


# -- tokens -----------------------------------------------------------------------------


def new_token() -> str:
    """A fresh shared secret (64 hex digits)."""
    return secrets.token_hex(32)


def write_token(path: Path) -> None:
    """Write a fresh token to `path`, readable by its owner only."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as stream:
        stream.write(new_token() + "\n")


def load_token(path: str | Path | None = None) -> bytes | None:
    """The shared secret in `path`, else in `EMBER_RPC_TOKEN_FILE`; None when neither
    is given (then tracker and servers listen on loopback only)."""
    chosen = path if path is not None else rpc_token_file()
    if chosen is None:
        return None
    try:
        text = Path(chosen).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise AuthenticationError(
            f"cannot read the RPC token file {str(chosen)!r} ({error}); make one with "
            "`ember rpc token -o FILE` and copy it to the tracker, the boards and the host"
        ) from None
    if len(text) < 16:
        raise AuthenticationError(
            f"the RPC token in {str(chosen)!r} is {len(text)} characters; a token needs at "
            "least 16 (`ember rpc token -o FILE` writes a good one)"
        )
    return text.encode()


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (127.0.0.0/8, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addresses = {str(info[4][0]) for info in infos}
    return bool(addresses) and all(
        ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses
    )


def check_bind_address(host: str, token: bytes | None, what: str) -> None:
    """Refuse to listen beyond loopback without a token: anyone who reaches an
    unauthenticated server can run code on it."""
    if token is None and not is_loopback(host):
        raise AuthenticationError(
            f"refusing to run the {what} on {host!r} without a token: anyone who can reach "
            "it could run code on your boards. Make a token with `ember rpc token -o "
            "FILE`, copy it to every machine of the farm and pass --token-file FILE (or "
            "set EMBER_RPC_TOKEN_FILE), or listen on 127.0.0.1"
        )


# -- frames -----------------------------------------------------------------------------


class Channel:
    """One authenticated connection: send and receive (header, blobs) messages. Sends
    and receives may run on two threads at once; each direction takes turns."""

    def __init__(self, sock: socket.socket, key: bytes, is_connector: bool, limits: Limits):
        self.sock = sock
        self.limits = limits
        self.peer = _peer_name(sock)
        self._key = key
        self._out_direction = b"C" if is_connector else b"A"
        self._in_direction = b"A" if is_connector else b"C"
        self._sent = 0
        self._received = 0
        self._send_lock = threading.Lock()
        self._receive_lock = threading.Lock()
        self.closed = False

    def send(self, header: Header, blobs: Sequence[bytes | memoryview] = ()) -> None:
        """Send one message; ConnectionLost if the connection is gone."""
        header = {**header, "blobs": [len(b) for b in blobs]}
        encoded = json.dumps(header, separators=(",", ":")).encode()
        with self._send_lock:
            if self.closed:
                raise ConnectionLost(f"the connection to {self.peer} is closed")
            prefix = _LENGTH.pack(len(encoded)) + encoded
            tag = self._tag(self._out_direction, self._sent, prefix, blobs)
            size = _TAG_BYTES + len(prefix) + sum(len(b) for b in blobs)
            try:
                self.sock.sendall(_LENGTH.pack(size) + tag + prefix)
                for blob in blobs:
                    self.sock.sendall(blob)
            except OSError as error:
                raise ConnectionLost(f"lost the connection to {self.peer}: {error}") from None
            self._sent += 1

    def receive(
        self, timeout: float | None, waiting_for: str = "a reply"
    ) -> tuple[Header, list[bytes]]:
        """The next message. `timeout`: seconds to wait for it to start (None: for
        ever); once started it must arrive within the frame timeout."""
        with self._receive_lock:
            body = read_frame(self.sock, timeout, self.limits, self.limits.max_frame_bytes,
                              f"{waiting_for} from {self.peer}")  # fmt: skip
            tag, rest = body[:_TAG_BYTES], memoryview(body)[_TAG_BYTES:]
            # Checked before the bytes are interpreted: nothing unauthenticated is parsed.
            expected = self._tag(self._in_direction, self._received, rest, ())
            if not hmac.compare_digest(tag, expected):
                raise AuthenticationError(
                    f"a message from {self.peer} failed its authentication check (a wrong "
                    "token, or the connection was tampered with); the connection is closed"
                )
            self._received += 1
            return _decode(rest, self.limits, self.peer)

    def request(
        self, header: Header, blobs: Sequence[bytes] = (), timeout: float | None = None,
        waiting_for: str = "a reply",
    ) -> tuple[Header, list[bytes]]:  # fmt: skip
        """Send, then receive the reply; a reply with "error" raises RemoteError."""
        self.send(header, blobs)
        reply, reply_blobs = self.receive(timeout, waiting_for)
        if "error" in reply:
            raise RemoteError(f"{self.peer}: {reply['error']}")
        return reply, reply_blobs

    def close(self) -> None:
        self.closed = True
        close_socket(self.sock)

    def _tag(
        self, direction: bytes, sequence: int, prefix: bytes | memoryview,
        blobs: Sequence[bytes | memoryview],
    ) -> bytes:  # fmt: skip
        mac = hmac.new(self._key, direction + sequence.to_bytes(8, "big"), hashlib.sha256)
        mac.update(prefix)
        for blob in blobs:
            mac.update(blob)
        return mac.digest()


def _decode(body: memoryview, limits: Limits, peer: str) -> tuple[Header, list[bytes]]:
    """A frame's header and blobs (after the tag)."""
    if len(body) < _LENGTH.size:
        raise ProtocolError(f"a truncated frame from {peer}")
    (header_bytes,) = _LENGTH.unpack(body[: _LENGTH.size])
    end = _LENGTH.size + header_bytes
    if header_bytes > limits.max_header_bytes or end > len(body):
        raise ProtocolError(f"a frame from {peer} declares a header of {header_bytes} bytes")
    try:
        header = json.loads(bytes(body[_LENGTH.size : end]))
    except (UnicodeDecodeError, ValueError, RecursionError):  # Recursion: nested too deep
        raise ProtocolError(f"a frame from {peer} has a header that is not JSON") from None
    sizes = header.get("blobs") if isinstance(header, dict) else None
    valid = isinstance(sizes, list) and all(isinstance(s, int) and s >= 0 for s in sizes)
    if not valid or end + sum(sizes) != len(body):  # type: ignore[arg-type]
        raise ProtocolError(f"a frame from {peer} has blob sizes that do not add up")
    blobs, offset = [], end
    for size in sizes:  # type: ignore[union-attr]
        blobs.append(bytes(body[offset : offset + size]))
        offset += size
    return header, blobs


def read_frame(
    sock: socket.socket, timeout: float | None, limits: Limits, max_bytes: int, what: str,
    deadline: float | None = None,
) -> bytearray:  # fmt: skip
    """One length-prefixed frame's body, refused before reading if it is too large;
    all of it before `deadline` (a `time.monotonic()` value) when one is given."""
    prefix = read_exactly(sock, _LENGTH.size, timeout, what, limits.frame_timeout, deadline)
    (size,) = _LENGTH.unpack(prefix)
    if size > max_bytes:
        raise ProtocolError(
            f"{what} announced a frame of {size} bytes, over the limit of {max_bytes}"
        )
    return read_exactly(sock, size, limits.frame_timeout, what, limits.frame_timeout, deadline)


def read_exactly(
    sock: socket.socket, count: int, first_byte_timeout: float | None, what: str,
    whole_timeout: float, deadline: float | None = None,
) -> bytearray:  # fmt: skip
    """`count` bytes: the first within `first_byte_timeout`, all of them within
    `whole_timeout` of the first (a sender that trickles bytes is cut off), and all
    before `deadline` (a `time.monotonic()` value: a handshake's limit) when given.
    Received straight into one buffer: an upload is not copied on the way."""
    buffer = bytearray(count)
    view = memoryview(buffer)
    received = 0
    frame_deadline: float | None = None
    while received < count:
        if frame_deadline is None:
            wait = first_byte_timeout
        else:
            wait = frame_deadline - time.monotonic()
            if wait <= 0:
                raise RPCTimeout(f"timed out after {whole_timeout:g} s receiving {what}")
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RPCTimeout(f"timed out receiving {what}: it did not arrive in time")
            wait = left if wait is None else min(wait, left)
        sock.settimeout(wait)
        try:
            chunk = sock.recv_into(view[received:], min(count - received, 1 << 20))
        except TimeoutError:
            if frame_deadline is None and wait == first_byte_timeout:  # not cut by `deadline`
                raise RPCTimeout(
                    f"waited {first_byte_timeout:g} s for {what} and none came"
                ) from None
            continue
        except OSError as error:
            raise ConnectionLost(f"lost the connection while waiting for {what}: {error}") from None
        if not chunk:
            raise ConnectionLost(f"the connection closed while waiting for {what}")
        if frame_deadline is None:
            frame_deadline = time.monotonic() + whole_timeout
        received += chunk
    return buffer


# -- handshake --------------------------------------------------------------------------


def _send_plain(sock: socket.socket, header: Header) -> None:
    encoded = json.dumps({**header, "blobs": []}).encode()
    body = bytes(_TAG_BYTES) + _LENGTH.pack(len(encoded)) + encoded
    sock.sendall(_LENGTH.pack(len(body)) + body)


def _receive_plain(sock: socket.socket, limits: Limits, deadline: float, what: str) -> Header:
    # The whole frame by the handshake's deadline, not a frame timeout after it starts.
    wait = max(0.0, deadline - time.monotonic())
    body = read_frame(sock, wait, limits, _HANDSHAKE_FRAME_BYTES, what, deadline)
    header, _ = _decode(memoryview(body)[_TAG_BYTES:], limits, what)
    return header


def _proof(token: bytes, label: bytes, first: bytes, second: bytes, message: Header) -> str:
    """HMAC of the two nonces and of what the prover said (its hello or greeting), so
    nobody on the path can alter a registration or a greeting unnoticed."""
    said = {k: v for k, v in message.items() if k not in ("proof", "blobs")}
    digest = hashlib.sha256(json.dumps(said, sort_keys=True, separators=(",", ":")).encode())
    return hmac.new(token, label + first + second + digest.digest(), hashlib.sha256).hexdigest()


def _proof_matches(header: Header, expected: str) -> bool:
    proof = header.get("proof")
    return isinstance(proof, str) and hmac.compare_digest(proof.encode(), expected.encode())


def _nonce(header: Header, peer: str) -> bytes:
    try:
        nonce = bytes.fromhex(header["nonce"])
    except (KeyError, TypeError, ValueError):
        raise ProtocolError(f"{peer} sent a handshake without a valid nonce") from None
    if len(nonce) != _NONCE_BYTES:
        raise ProtocolError(f"{peer} sent a handshake nonce of {len(nonce)} bytes")
    return nonce


def connect(
    host: str, port: int, token: bytes | None, hello: Header, timeout: float = 10.0,
    limits: Limits = DEFAULT_LIMITS, what: str = "the server",
) -> tuple[Channel, Header]:  # fmt: skip
    """Connect to a tracker or device server at host:port, authenticate, and send
    `hello` (the role and what it asks for); returns the channel and the acceptor's
    greeting."""
    where = f"{what} at {host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except TimeoutError:
        raise RPCTimeout(f"could not connect to {where} within {timeout:g} s") from None
    except OSError as error:
        raise ConnectionLost(
            f"cannot connect to {where}: {error.strerror or error}; is it running, and "
            "is the address right?"
        ) from None
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _connector_handshake(sock, token or b"", hello, limits, timeout, where)
    except BaseException:
        close_socket(sock)
        raise


def _connector_handshake(
    sock: socket.socket, token: bytes, hello: Header, limits: Limits, timeout: float,
    where: str,
) -> tuple[Channel, Header]:  # fmt: skip
    deadline = time.monotonic() + timeout
    sock.sendall(_PREAMBLE.pack(MAGIC, PROTOCOL_VERSION, 0))
    greeting = _receive_plain(sock, limits, deadline, f"the greeting of {where}")
    if "error" in greeting:
        raise RemoteError(f"{where} refused the connection: {greeting['error']}")
    acceptor_nonce = _nonce(greeting, where)
    own_nonce = secrets.token_bytes(_NONCE_BYTES)
    hello = {**hello, "nonce": own_nonce.hex()}
    proof = _proof(token, b"connector", acceptor_nonce, own_nonce, hello)
    _send_plain(sock, {**hello, "proof": proof})
    answer = _receive_plain(sock, limits, deadline, f"the authentication answer of {where}")
    if "error" in answer:
        raise AuthenticationError(f"{where} refused the connection: {answer['error']}")
    expected = _proof(token, b"acceptor", own_nonce, acceptor_nonce, greeting)
    if not _proof_matches(answer, expected):
        raise AuthenticationError(
            f"{where} could not prove it holds the token: it is not the tracker or server "
            "you meant, or it uses another token"
        )
    key = hmac.new(token, b"session" + acceptor_nonce + own_nonce, hashlib.sha256).digest()
    return Channel(sock, key, True, limits), greeting


def accept(
    sock: socket.socket, token: bytes | None, service: str, limits: Limits = DEFAULT_LIMITS
) -> tuple[Channel, Header]:
    """The acceptor's side of the handshake on a new connection; returns the channel
    and the connector's hello. ProtocolError / AuthenticationError / RPCTimeout /
    ConnectionLost when the peer is not an Ember peer holding the token."""
    peer = _peer_name(sock)
    deadline = time.monotonic() + limits.handshake_timeout
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    preamble = read_exactly(
        sock, _PREAMBLE.size, limits.handshake_timeout, f"the preamble of {peer}",
        limits.handshake_timeout, deadline,
    )  # fmt: skip
    magic, version, _ = _PREAMBLE.unpack(preamble)
    if magic != MAGIC:
        raise ProtocolError(
            f"{peer} does not speak Ember's RPC protocol (preamble {bytes(preamble)!r})"
        )
    if version != PROTOCOL_VERSION:
        message = (
            f"protocol version {version} is not this {service}'s ({PROTOCOL_VERSION}); "
            "use the same Ember version on the host, the tracker and the boards"
        )
        _send_plain(sock, {"error": message})
        raise ProtocolError(f"{peer}: {message}")
    own_nonce = secrets.token_bytes(_NONCE_BYTES)
    greeting = {"service": service, "version": PROTOCOL_VERSION, "nonce": own_nonce.hex(),
                "auth": token is not None}  # fmt: skip
    _send_plain(sock, greeting)
    hello = _receive_plain(sock, limits, deadline, f"the hello of {peer}")
    peer_nonce = _nonce(hello, peer)
    key_material = token or b""
    expected = _proof(key_material, b"connector", own_nonce, peer_nonce, hello)
    if not _proof_matches(hello, expected):
        _send_plain(sock, {"error": "authentication failed: wrong or missing RPC token"})
        raise AuthenticationError(f"{peer} failed authentication (wrong or missing token)")
    _send_plain(sock, {"proof": _proof(key_material, b"acceptor", peer_nonce, own_nonce, greeting)})
    key = hmac.new(key_material, b"session" + own_nonce + peer_nonce, hashlib.sha256).digest()
    return Channel(sock, key, False, limits), hello


# -- sockets ----------------------------------------------------------------------------


def parse_address(text: str, default_port: int) -> tuple[str, int]:
    """`host:port`, `host` or `[::1]:port` -> (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, ""
    try:
        port = int(port_text) if port_text else default_port
    except ValueError:
        port = -1
    if not host or not 0 < port < 65536:
        raise RPCError(f"{text!r} is not an address: give HOST:PORT, e.g. 127.0.0.1:9190")
    return host, port


def listen(host: str, port: int, what: str) -> socket.socket:
    """A listening socket on host:port (port 0: any free port)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except OSError as error:
        raise RPCError(f"cannot listen for the {what} on {host}:{port}: {error}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as error:
        sock.close()
        taken = error.errno == errno.EADDRINUSE
        hint = "; another process holds it: choose another --port" if taken else ""
        raise RPCError(
            f"cannot listen for the {what} on {host}:{port}: {error.strerror or error}{hint}"
        ) from None
    return sock


def close_socket(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _peer_name(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "a peer that has gone"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

"""The host's side of the device farm: ask a tracker for a board, and use it.

    tracker = ember.rpc.connect_tracker("127.0.0.1", 9190)      # token: EMBER_RPC_TOKEN_FILE
    print(tracker.summary())                                    # keys, boards, queue
    with tracker.request("rasp4b-64", priority=1, timeout=60) as remote:
        remote.upload("net.tar")
        module = remote.load_module("net.tar")                  # runs on the board
        module.set_input("data", x); module.run(); y = module.get_output(0)
        print(module.benchmark(repeat=10))                      # timed in C on the board

`ember.rpc.connect(host, port)` opens a session on a server directly (one started
without a tracker). Every wait has a timeout, and its error names what was waited for
and where. A tracker that restarts is reconnected to for `reconnect_seconds`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import EmberError, InputError
from ember.rpc.protocol import (
    DEFAULT_LIMITS,
    DEFAULT_SERVER_PORT,
    DEFAULT_TRACKER_PORT,
    Channel,
    ConnectionLost,
    Header,
    Limits,
    RemoteError,
    RPCError,
    RPCTimeout,
    load_token,
)
from ember.rpc.protocol import (
    connect as open_channel,
)
from ember.runtime.abi import TensorSpec
from ember.runtime.module import (
    BenchmarkResult,
    ModuleInfo,
    aligned_empty,
    check_inputs_set,
    checked_input,
    tensor_index,
)
from ember.runtime.profile import Profile

# Added to a board-side time limit before the host gives up on the board itself: the
# transfer of the request and the reply, and a loaded board's scheduling.
REPLY_MARGIN_SECONDS = 30.0


class TargetMismatch(EmberError):
    """Code built for a target the board cannot run (another architecture, CPU
    features it lacks): refused on the host, before it is sent."""


class TrackerClient:
    """A connection to a tracker (see the module docstring)."""

    def __init__(
        self, host: str, port: int, token: bytes | None = None, timeout: float = 10.0,
        reconnect_seconds: float = 30.0, limits: Limits = DEFAULT_LIMITS,
    ) -> None:  # fmt: skip
        self.host, self.port = host, port
        self.token = token
        self.timeout = timeout
        self.reconnect_seconds = reconnect_seconds
        self.limits = limits
        self._channel: Channel | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> TrackerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def summary(self) -> dict[str, Any]:
        """{"keys": {key: {"total", "free", "pending"}}, "servers": [...]}."""
        return self._call({"op": "summary"}, self.timeout, "the tracker's summary")

    def request(
        self, key: str, priority: int = 0, timeout: float | None = 60.0,
        session_timeout: float = 10.0,
    ) -> RemoteSession:  # fmt: skip
        """A session on a free board of `key`, waiting up to `timeout` seconds (None:
        for ever) for one; higher `priority` is served first."""
        wait = None if timeout is None else timeout + REPLY_MARGIN_SECONDS
        match = self._call(
            {"op": "request", "key": key, "priority": int(priority), "timeout": timeout},
            wait, f"a board of key {key!r}",
        )  # fmt: skip
        return open_session(
            match["host"], int(match["port"]), self.token, match.get("ticket"),
            session_timeout, self.limits, key=key,
        )  # fmt: skip

    def _call(self, header: Header, timeout: float | None, what: str) -> dict[str, Any]:
        # One request at a time on the connection (RPCRunner's threads share it).
        with self._lock:
            return self._call_locked(header, timeout, what)

    def _call_locked(self, header: Header, timeout: float | None, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.reconnect_seconds
        while True:
            try:
                channel = self._connected()
                reply, _ = channel.request(header, timeout=timeout, waiting_for=what)
                return reply
            except RemoteError as error:
                raise RPCError(f"the tracker at {self.host}:{self.port}: {_strip(error)}") from None
            except RPCError as error:
                self.close()  # a connection in an unknown state is not used again
                if not isinstance(error, ConnectionLost | RPCTimeout):
                    raise
                # A tracker that restarts comes back within seconds; a timeout while
                # waiting for a board is the answer, not a reason to retry.
                if isinstance(error, RPCTimeout) or time.monotonic() > deadline:
                    raise type(error)(f"{error} (the tracker at {self.host}:{self.port})") from None
                time.sleep(0.5)

    def _connected(self) -> Channel:
        if self._channel is None:
            self._channel, _ = open_channel(
                self.host, self.port, self.token, {"role": "client"}, self.timeout,
                self.limits, "the tracker",
            )  # fmt: skip
        return self._channel


def connect_tracker(
    host: str,
    port: int = DEFAULT_TRACKER_PORT,
    token_file: str | Path | None = None,
    timeout: float = 10.0,
) -> TrackerClient:
    """A client of the tracker at host:port; the token from `token_file` or
    `EMBER_RPC_TOKEN_FILE` (none: the tracker must be on loopback without one)."""
    client = TrackerClient(host, port, load_token(token_file), timeout)
    client.summary()  # fail now, with where, if it cannot be reached
    return client


def connect(
    host: str,
    port: int = DEFAULT_SERVER_PORT,
    token_file: str | Path | None = None,
    timeout: float = 10.0,
) -> RemoteSession:
    """A session on the device server at host:port, one started without a tracker."""
    return open_session(host, port, load_token(token_file), None, timeout)


def open_session(
    host: str, port: int, token: bytes | None, ticket: str | None, timeout: float = 10.0,
    limits: Limits = DEFAULT_LIMITS, key: str | None = None,
) -> RemoteSession:  # fmt: skip
    hello = {"role": "session", "ticket": ticket}
    what = f"the board of key {key!r}" if key else "the device server"
    channel, _ = open_channel(host, port, token, hello, timeout, limits, what)
    try:
        reply, _ = channel.receive(timeout, f"the session answer of {what}")
    except BaseException:
        channel.close()
        raise
    if "error" in reply:
        channel.close()
        raise RPCError(f"{what} at {host}:{port} refused the session: {reply['error']}")
    return RemoteSession(channel, reply.get("device", {}), f"{what} at {host}:{port}", key)


class RemoteSession:
    """A session on one board: upload files, load and run artifacts there, and the
    calls `RPCRunner` times kernels with. Close it (or use `with`) to free the board."""

    def __init__(
        self, channel: Channel, device: dict[str, Any], where: str, key: str | None
    ) -> None:
        self.channel = channel
        self.device = device
        self.where = where
        self.key = key
        self._uploads = 0

    def __enter__(self) -> RemoteSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteSession({self.where}, {self.device.get('triple', '?')})"

    def close(self) -> None:
        """End the session; the board cleans up and is free for the next client."""
        if not self.channel.closed:
            with contextlib.suppress(RPCError):
                self.channel.request({"op": "close"}, timeout=5.0)
            self.channel.close()

    def call(
        self, header: Header, blobs: Sequence[bytes] = (), timeout: float | None = 60.0
    ) -> tuple[dict[str, Any], list[bytes]]:
        """One request; `timeout` is how long the board may work on it (it enforces
        it too), the host waits a margin longer before it gives the board up."""
        if timeout is not None:
            header = {**header, "timeout": timeout}
        wait = None if timeout is None else timeout + REPLY_MARGIN_SECONDS
        try:
            return self.channel.request(header, blobs, wait, f"the answer to {header['op']}")
        except RemoteError as error:
            raise RemoteError(f"{self.where}: {_strip(error)}") from None
        except RPCError as error:
            self.channel.close()
            raise type(error)(f"{self.where}: {error}") from None

    def upload(
        self, data: str | Path | bytes, name: str | None = None, timeout: float = 60.0
    ) -> str:
        """Copy a file (or bytes) into the session's directory on the board; returns
        its name there (the file's own name by default)."""
        if isinstance(data, bytes):
            contents = data
            self._uploads += 1
            name = name or f"upload-{self._uploads}"
        else:
            path = Path(data)
            try:
                contents = path.read_bytes()
            except OSError as error:  # this machine's problem, not the board's
                raise EmberError(f"cannot read {str(path)!r} to upload it: {error}") from None
            name = name or path.name
        self.call({"op": "upload", "name": name}, [contents], timeout)
        return name

    def remove(self, name: str, timeout: float = 60.0) -> None:
        self.call({"op": "remove", "name": name}, timeout=timeout)

    def files(self) -> dict[str, int]:
        """The session's files on the board and their sizes."""
        reply, _ = self.call({"op": "files"})
        return dict(reply["files"])

    def load_module(self, name: str, timeout: float = 120.0) -> RemoteModule:
        """Load an uploaded artifact (`.tar` from `ember compile`) on the board."""
        reply, _ = self.call({"op": "load_module", "name": name}, timeout=timeout)
        _raise_failure(reply, f"{self.where}: loading {name}")
        info = ModuleInfo.from_metadata(reply["metadata"], f"{name} on {self.where}")
        check_compatible(info.target, info.cpu_features, self.device, name)
        return RemoteModule(self, reply["module"], info)


class RemoteModule:
    """An artifact loaded on a board, used as `ember.runtime.Module` is: inputs are
    kept on the host and sent with each run; outputs come back as NumPy arrays."""

    def __init__(self, session: RemoteSession, name: str, info: ModuleInfo) -> None:
        self.session = session
        self.name = name
        self.info = info
        self._inputs = [aligned_empty(s.shape, s.dtype) for s in info.inputs]
        self._unset = set(range(len(info.inputs)))
        self._outputs: list[np.ndarray] = []

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return tuple(self.info.inputs)

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return tuple(self.info.outputs)

    def get_num_outputs(self) -> int:
        return len(self.info.outputs)

    def set_input(self, key: str | int, value: np.ndarray) -> None:
        """Keep `value` for input `key` (sent with the next run); shape and dtype must
        match exactly, as for `ember.runtime.Module.set_input`."""
        index, array = checked_input(self.info.inputs, key, value)
        np.copyto(self._inputs[index], array)
        self._unset.discard(index)

    def run(self, timeout: float = 600.0) -> None:
        """Run the network once on the board."""
        _, blobs = self._call({"op": "run"}, timeout)
        self._outputs = [
            np.frombuffer(blob, spec.dtype).reshape(spec.shape).copy()
            for blob, spec in zip(blobs, self.info.outputs, strict=True)
        ]

    def get_output(self, key: int | str) -> np.ndarray:
        if not self._outputs:
            raise InputError("no outputs yet: call run() first")
        return self._outputs[tensor_index(self.info.outputs, key, "output")].copy()

    def benchmark(
        self, repeat: int = 3, number: int = 1, min_repeat_ms: float = 500,
        cache_flush: bool = False, timeout: float = 600.0,
    ) -> BenchmarkResult:  # fmt: skip
        """Time `run` in C on the board (see `ember.runtime.Module.benchmark`)."""
        header = {"op": "benchmark", "repeat": repeat, "number": number,
                  "min_repeat_ms": float(min_repeat_ms), "cache_flush": cache_flush}  # fmt: skip
        reply, _ = self._call(header, timeout)
        return BenchmarkResult(tuple(reply["costs"]))

    def profile(self, repeat: int = 10, timeout: float = 600.0) -> Profile:
        """Each step's time on the board (see `ember.runtime.Module.profile`)."""
        reply, _ = self._call({"op": "profile", "repeat": repeat}, timeout)
        return Profile.from_steps(
            reply["names"], reply["kernels"], reply["seconds"], self.info.groups, repeat
        )

    def _call(self, header: Header, timeout: float) -> tuple[dict[str, Any], list[bytes]]:
        check_inputs_set(self.info.inputs, self._unset)
        blobs = [array.tobytes() for array in self._inputs]
        reply, reply_blobs = self.session.call({**header, "module": self.name}, blobs, timeout)
        _raise_failure(reply, f"{self.session.where}: {header['op']} of {self.name}")
        return reply, reply_blobs


def check_compatible(
    target: str, cpu_features: Sequence[str], device: dict[str, Any], what: str
) -> None:
    """Refuse code for `target` (using `cpu_features`) on a board that cannot run it:
    another architecture, or a CPU without the features the code uses."""
    from ember.target import Target

    arch = Target(target).target_arch
    board = device.get("arch", "?")
    if arch != board:
        raise TargetMismatch(
            f"{what} is built for {target!r} ({arch}) and the board is {board} "
            f"({device.get('cpu') or 'unknown CPU'}): build for the board's target, e.g. "
            f"--target 'llvm -mtriple={board}-linux-gnu'"
        )
    present = set(device.get("features", ()))
    missing = [f for f in cpu_features if f not in present]
    if present and missing:
        raise TargetMismatch(
            f"{what} is built for {target!r}, which uses {', '.join(missing)}; the board's "
            f"CPU ({device.get('cpu') or '?'}) lacks them: build for a target the board "
            "supports (name its -mcpu, or -mattr=-feature)"
        )


# Features worth tuning for that a board may have and a target string may not name.
_NOTABLE_FEATURES = ("avx2", "fma", "avx512f", "avx512vnni", "avxvnni", "dotprod", "i8mm", "sve")


def device_notes(target: str, device: dict[str, Any]) -> list[str]:
    """Where the board differs from what the compiler assumes of `target` (its device
    model: cores, vector features): code still runs, but is tuned for another machine.
    Each note says which target option to add."""
    from ember.device import device_model
    from ember.target import Target

    model = device_model(Target(target))
    notes = []
    cores = device.get("cores")
    if isinstance(cores, int) and cores > 0 and cores != model.num_cores:
        notes.append(
            f"the board has {cores} cores and target {target!r} assumes {model.num_cores}: "
            f"add -num-cores={cores} to tune and build for the board"
        )
    present = set(device.get("features", ()))
    unused = [f for f in _NOTABLE_FEATURES if f in present and f not in model.features]
    if unused:
        notes.append(
            f"the board's CPU has {', '.join(unused)}, which code for target {target!r} does "
            f"not use: add -mattr=+{',+'.join(unused)} (or name its -mcpu)"
        )
    return notes


def _raise_failure(reply: dict[str, Any], what: str) -> None:
    if "failure" in reply:
        raise RPCError(f"{what} failed: {reply.get('message', 'no message')}")


def _strip(error: RPCError) -> str:
    """A RemoteError's text without the peer prefix the caller adds itself."""
    text = str(error)
    return text.split(": ", 1)[1] if ": " in text else text

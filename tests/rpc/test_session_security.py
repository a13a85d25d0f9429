"""Attacks on a device server's sessions and on the tracker's boards, each refused
with the server still up afterwards: upload names outside the session's directory,
uploads over the size and file limits, loading what was not uploaded, artifacts with a
symlink or a member outside the directory, code for another architecture, unknown
requests, a session left idle, a session without the tracker's one-time ticket, a
client that hangs up while queued.

Loopback and ephemeral ports only; every wait is bounded by `GUARD`, a hang guard."""

from __future__ import annotations

import _ctypes
import contextlib
import hashlib
import io
import json
import logging
import tarfile
from pathlib import Path
from typing import Any

import pytest
from farm import wait_until
from loopback import (
    GUARD,
    HOST,
    KEY,
    SESSION_LIMITS,
    Services,
    assert_serves,
    make_server,
    session_on,
    tracker_client,
)

from ember.rpc import protocol
from ember.rpc import server as server_module
from ember.rpc.client import open_session
from ember.rpc.protocol import RPCError
from ember.rpc.server import DeviceServer
from ember.rpc.session import SessionError, SessionLimits, check_library_architecture
from ember.rpc.tracker import Tracker

HOST_SO = Path(_ctypes.__file__)  # a real shared library built for this machine


@pytest.fixture
def board(started: Services, tracker: Tracker, token: bytes, tmp_path: Path) -> DeviceServer:
    """A device server registered with `tracker` under KEY; idle sessions end after 1 s."""
    board = started.start(make_server(token, tmp_path, tracker=(HOST, tracker.port), key=KEY,
                                      session_limits=SessionLimits(idle_seconds=1.0)))  # fmt: skip
    assert board.registered.wait(GUARD), "the board did not register with the tracker"
    return board


# -- sessions ---------------------------------------------------------------------------


def test_upload_names_must_stay_in_the_session_directory(server: DeviceServer, token: bytes,
                                                         tmp_path: Path) -> None:  # fmt: skip
    names = ["../x", "/etc/passwd", ".hidden", "a/b", "..", "x/../../y", "a\\b", "n" * 129]
    with session_on(server, token) as remote:
        for name in names:
            with pytest.raises(RPCError, match="not a file name a session may use"):
                remote.upload(b"owned", name)
        for odd in ["", None, 7, ["x"]]:  # sent as they are (upload() would name them)
            with pytest.raises(RPCError, match="not a file name a session may use"):
                remote.call({"op": "upload", "name": odd}, [b"owned"])
        assert remote.files() == {}
        remote.upload(b"fine", "fine.bin")
        assert remote.files() == {"fine.bin": 4}
    assert not (tmp_path / "x").exists() and not (tmp_path.parent / "x").exists()
    assert_serves(server, token)


def test_an_upload_over_the_size_limit_is_refused(server: DeviceServer, token: bytes) -> None:
    limit = SESSION_LIMITS.max_upload_bytes
    with session_on(server, token) as remote:
        with pytest.raises(RPCError, match=f"over the upload limit of {limit}"):
            remote.upload(bytes(limit + 1), "big.bin")
        remote.upload(bytes(limit), "big.bin")
        assert remote.files() == {"big.bin": limit}


def test_uploads_past_the_file_limit_are_refused(server: DeviceServer, token: bytes) -> None:
    with session_on(server, token) as remote:
        for index in range(SESSION_LIMITS.max_files):
            remote.upload(b"x", f"f{index}")
        with pytest.raises(RPCError, match="already holds 3 files, its limit"):
            remote.upload(b"x", "one-too-many")
        remote.upload(b"xy", "f0")  # replacing one is not one more
        remote.remove("f1")
        remote.upload(b"x", "one-too-many")
        assert sorted(remote.files()) == ["f0", "f2", "one-too-many"]


def test_only_uploaded_files_can_be_loaded(server: DeviceServer, token: bytes) -> None:
    with session_on(server, token) as remote:
        with pytest.raises(RPCError, match=r"'never\.tar' was not uploaded in this session"):
            remote.load_module("never.tar")
        with pytest.raises(RPCError, match=r"'lib\.so' was not uploaded in this session"):
            remote.call({"op": "check", "library": "lib.so"})
        with pytest.raises(RPCError, match="not a file name a session may use"):
            remote.call({"op": "time", "library": "../../../usr/lib/libc.so.6"})
        with pytest.raises(RPCError, match="'never' was not uploaded in this session"):
            remote.remove("never")
        assert remote.files() == {}


def fake_elf(machine: int) -> bytes:
    """A little-endian 64-bit ELF header for `machine`, and nothing else."""
    return b"\x7fELF\x02\x01\x01" + bytes(11) + machine.to_bytes(2, "little") + bytes(44)


def foreign_arch(arch: str) -> tuple[str, int]:
    return ("x86_64", 62) if arch == "aarch64" else ("aarch64", 183)


def artifact(members: dict[str, bytes | str], checksums: Any = None) -> bytes:
    """A tar of `members` (bytes: a file; str: a symlink to it), with a mod.json that
    holds `checksums` (by default, the right ones)."""
    files = {name: data for name, data in members.items() if isinstance(data, bytes)}
    if checksums is None:
        checksums = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    files.setdefault("mod.json", json.dumps({"checksums": checksums}).encode())
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in {**members, **files}.items():
            info = tarfile.TarInfo(name)
            if isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("members", "refusal"),
    [
        ({"mod.so": "/etc/passwd", "mod.params": b""}, "mod.so is not a regular file"),
        ({"../escape": b"x", "mod.params": b""}, "lacks mod.so: not an Ember artifact"),
    ],
    ids=["symlink mod.so", "member outside the directory"],
)
def test_an_unsafe_artifact_is_refused(
    server: DeviceServer, token: bytes, tmp_path: Path, members: dict[str, bytes | str],
    refusal: str,
) -> None:  # fmt: skip
    with session_on(server, token) as remote:
        remote.upload(artifact(members), "net.tar")
        with pytest.raises(RPCError, match=refusal):
            remote.load_module("net.tar")
        assert "net.tar" in remote.files()
    assert not (tmp_path / "escape").exists()
    assert_serves(server, token)


def test_code_for_another_architecture_is_refused(server: DeviceServer, token: bytes,
                                                  tmp_path: Path) -> None:  # fmt: skip
    arch = server.device["arch"]
    other, other_machine = foreign_arch(arch)
    (tmp_path / "foreign.so").write_bytes(fake_elf(other_machine))
    (tmp_path / "text.so").write_bytes(b"not a library at all")
    with pytest.raises(SessionError, match=f"is {other} code and this board is {arch}"):
        check_library_architecture(tmp_path / "foreign.so", arch)
    with pytest.raises(SessionError, match="not a shared library"):
        check_library_architecture(tmp_path / "text.so", arch)
    check_library_architecture(HOST_SO, arch)
    with session_on(server, token) as remote:
        remote.upload(fake_elf(other_machine), "foreign.so")
        with pytest.raises(RPCError, match=f"{other} code and this board is {arch}"):
            remote.call({"op": "check", "library": "foreign.so", "arguments": "args.bin"})
        remote.upload(artifact({"mod.so": fake_elf(other_machine), "mod.params": b""}), "net.tar")
        with pytest.raises(RPCError, match=f"{other} code and this board is {arch}"):
            remote.load_module("net.tar")
        # This machine's own library passes the check (and the request stops at the
        # next one, before anything runs). The extracted net.tar counts as a file.
        remote.remove("foreign.so")
        remote.upload(HOST_SO, "host.so")
        with pytest.raises(RPCError, match=r"'args\.bin' was not uploaded"):
            remote.call({"op": "check", "library": "host.so", "arguments": "args.bin"})


def test_an_unknown_request_is_answered_and_the_session_continues(
    server: DeviceServer, token: bytes
) -> None:
    with session_on(server, token) as remote:
        for op in ["format_disk", "__class__", "_store", 5, None]:
            with pytest.raises(RPCError, match="unknown request"):
                remote.call({"op": op})
        with pytest.raises(RPCError, match="the request lacks 'repeat'"):
            remote.call({"op": "benchmark"})
        remote.upload(b"still here", "here.txt")
        assert remote.files() == {"here.txt": 10}


def test_an_artifact_with_malformed_checksums_is_answered(server: DeviceServer,
                                                          token: bytes) -> None:  # fmt: skip
    with session_on(server, token) as remote:
        remote.upload(artifact({"mod.so": fake_elf(62), "mod.params": b""}, []), "net.tar")
        with pytest.raises(RPCError, match="no checksums"):
            remote.load_module("net.tar")
        assert "net.tar" in remote.files()


@pytest.mark.parametrize("first", ["refused after extraction", "refused during extraction"])
def test_an_artifact_uploaded_again_is_loaded_anew(server: DeviceServer, token: bytes,
                                                   first: str) -> None:  # fmt: skip
    foreign = artifact({"mod.so": fake_elf(foreign_arch(server.device["arch"])[1]),
                        "mod.params": b""})  # fmt: skip
    symlink = artifact({"mod.so": "/etc/passwd", "mod.params": b""})
    before, after = (
        (foreign, symlink) if first == "refused after extraction" else (symlink, foreign)
    )
    refusal = "not a regular file" if after is symlink else "code and this board is"
    with session_on(server, token) as remote:
        remote.upload(before, "net.tar")
        with pytest.raises(RPCError):
            remote.load_module("net.tar")
        remote.upload(after, "net.tar")
        with pytest.raises(RPCError, match=refusal):
            remote.load_module("net.tar")


@pytest.mark.parametrize("compression", ["gz", "xz", "bz2"])
def test_a_corrupt_compressed_artifact_is_answered(
    server: DeviceServer, token: bytes, compression: str
) -> None:
    # tarfile's decompressors raise their own errors (zlib.error, LZMAError, OSError).
    magic = {"gz": b"\x1f\x8b\x08\x00", "xz": b"\xfd7zXZ\x00", "bz2": b"BZh9"}[compression]
    with session_on(server, token) as remote:
        remote.upload(magic + bytes(range(256)) * 4, "net.tar")
        with pytest.raises(RPCError, match="not an Ember artifact"):
            remote.load_module("net.tar")
        assert set(remote.files()) == {"net.tar"}  # nothing extracted is left behind


def test_numbers_out_of_range_are_answered(server: DeviceServer, token: bytes) -> None:
    host_library = Path(_ctypes.__file__).read_bytes()  # passes the architecture check
    request = {"op": "time", "library": "kernel.so", "timer": "timer.so", "arguments": "a",
               "symbol": "s", "args": [], "number": 1, "repeat": 1, "min_repeat_ms": 0,
               "cooldown_ms": 0, "flush_cache": 0, "cold_weights": 0}  # fmt: skip
    with session_on(server, token) as remote:
        for name, contents in (("kernel.so", host_library), ("timer.so", host_library)):
            remote.upload(contents, name)
        remote.upload(b"", "a")
        for field, value in [("number", 10**400), ("repeat", -1), ("number", 2**31),
                             ("repeat", "3"), ("min_repeat_ms", 10**400)]:  # fmt: skip
            with pytest.raises(RPCError, match=r"must be an integer|bad request|failed"):
                remote.call({**request, field: value})
        assert set(remote.files()) == {"kernel.so", "timer.so", "a"}


# -- the tracker's boards ---------------------------------------------------------------


def test_an_idle_session_is_closed_and_the_board_freed(tracker: Tracker, board: DeviceServer,
                                                       token: bytes) -> None:  # fmt: skip
    with tracker_client(tracker, token) as client:
        idle = client.request(KEY, timeout=GUARD)
        try:
            with pytest.raises(protocol.ConnectionLost):
                idle.channel.receive(GUARD, "the server to close the idle session")
        finally:
            idle.channel.close()
        assert board.sessions_served == 1
        wait_until(lambda: client.summary()["keys"][KEY]["free"] == 1, "a free board", GUARD)
        with client.request(KEY, timeout=GUARD) as remote:
            assert remote.files() == {}


def test_a_board_refuses_a_session_without_the_trackers_ticket(
    tracker: Tracker, board: DeviceServer, token: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "_TICKET_GRACE_SECONDS", 0.5)
    for ticket in [None, "f" * 32, 12345]:
        with pytest.raises(RPCError, match="handed out by its tracker"):
            open_session(HOST, board.port, token, ticket, GUARD)  # type: ignore[arg-type]
    # A ticket the tracker gave is good for one session only.
    match, _ = protocol.connect(HOST, tracker.port, token, {"role": "client"}, GUARD)
    with contextlib.closing(match):
        granted, _ = match.request({"op": "request", "key": KEY, "timeout": GUARD}, timeout=GUARD)
    with open_session(HOST, board.port, token, granted["ticket"], GUARD) as remote:
        remote.files()
    wait_until(lambda: board.sessions_served == 1, "the session to end", GUARD)
    with pytest.raises(RPCError, match="handed out by its tracker"):
        open_session(HOST, board.port, token, granted["ticket"], GUARD)
    assert board.sessions_served == 1
    with tracker_client(tracker, token) as client:
        wait_until(lambda: client.summary()["keys"][KEY]["free"] == 1, "a free board", GUARD)
        with client.request(KEY, timeout=GUARD) as remote:
            assert remote.files() == {}


def test_a_client_that_leaves_the_queue_costs_the_tracker_nothing(
    tracker: Tracker, token: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """A client waiting for ever for a board that never comes, then hanging up."""
    caplog.set_level(logging.INFO, "ember.rpc")
    waiting, _ = protocol.connect(HOST, tracker.port, token, {"role": "client"}, GUARD)
    with contextlib.closing(waiting):
        waiting.send({"op": "request", "key": "no-such-board", "timeout": None})
        with tracker_client(tracker, token) as client:
            wait_until(
                lambda: "no-such-board" in client.summary()["keys"], "the request to queue", GUARD
            )
    with tracker_client(tracker, token) as client:
        wait_until(lambda: client.summary()["keys"] == {}, "the queue to empty", GUARD)
    tracker.stop()  # joins the connection's thread, so whatever it logged is logged
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text

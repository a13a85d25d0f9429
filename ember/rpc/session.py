"""A session on a board: one client's work directory, its helper process and its
requests (`DeviceServer` serves one at a time).

A session uploads files into a fresh work directory, and asks to time a kernel
candidate, check its outputs, or load an artifact and run, benchmark or profile it.
That work runs in a helper process (`ember.rpc.device_worker`) whose working directory
is the session's: a candidate that crashes or hangs costs a restart of the helper and
is reported as the candidate's error, never the server's. When the session ends
(closed, dropped, idle or over time) the helper is stopped and the work directory
removed.

Limits (`SessionLimits`) bound what one session may store and how long it may run;
upload names are plain file names (no `/`, no `..`, no leading dot) written only into
the session's own directory, and only files the session uploaded can be loaded.

Standard library only.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember.autoschedule.worker import Worker, WorkerCrashed, WorkerError, WorkerTimedOut
from ember.rpc.protocol import Channel, RPCError
from ember.runtime.abi import (
    ARTIFACT_MEMBERS,
    LIBRARY_FILE,
    METADATA_FILE,
    PARAMS_FILE,
    file_sha256,
)

log = logging.getLogger("ember.rpc")

DEVICE_WORKER = "ember.rpc.device_worker"
# Work directories are named SESSION_PREFIX + the server's pid + "-" + random.
SESSION_PREFIX = "ember-session-"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")
# ELF e_machine values of the architectures Ember builds for.
_ELF_MACHINES = {3: "i386", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv64"}


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """What one session may do on a board."""

    max_upload_bytes: int = 256 * 2**20  # one file
    max_files: int = 4096  # uploaded and extracted, at once
    max_directory_bytes: int = 2 * 2**30  # everything in the work directory
    session_seconds: float = 24 * 3600.0
    idle_seconds: float = 600.0  # between two requests
    max_call_seconds: float = 3600.0  # one run, benchmark or measurement


DEFAULT_SESSION_LIMITS = SessionLimits()


class SessionError(RPCError):
    """A request a session cannot carry out (a bad name, over a limit, ...)."""


class Session:
    """One client's session: its work directory, its helper process, its requests."""

    def __init__(
        self, channel: Channel, work_dir: str | None, limits: SessionLimits,
        device: dict[str, Any],
    ) -> None:  # fmt: skip
        self.channel = channel
        self.limits = limits
        self.device = device
        prefix = f"{SESSION_PREFIX}{os.getpid()}-"  # whose it is: see _remove_stale_sessions
        self.directory = Path(tempfile.mkdtemp(prefix=prefix, dir=work_dir))
        self.files: dict[str, int] = {}  # uploaded or extracted name -> bytes
        self.modules: dict[str, Path] = {}  # module name -> extraction directory
        self._worker: Worker | None = None
        self._threads: int | None = None
        self._extractions = 0
        self._aborted = False
        self._started = time.monotonic()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_worker()
        shutil.rmtree(self.directory, ignore_errors=True)

    def serve(self) -> None:
        while True:
            left = self.limits.session_seconds - (time.monotonic() - self._started)
            if left <= 0:
                self.channel.send({"error": "the session ran past its time limit and is closed"})
                return
            request, blobs = self.channel.receive(
                min(left, self.limits.idle_seconds), "the session's next request"
            )
            op = request.get("op")
            if op == "close":
                self.channel.send({"ok": True})
                return
            handler = getattr(self, f"_op_{op}", None) if isinstance(op, str) else None
            if handler is None:
                self.channel.send({"error": f"unknown request {op!r}"})
                continue
            try:
                reply, reply_blobs = handler(request, blobs)
            except (SessionError, KeyError, TypeError, ValueError, OSError) as error:
                reply, reply_blobs = {"error": _describe(error)}, []
            except Exception as error:  # a request the checks missed: answered, logged
                log.exception("server: request %r failed", op)
                reply, reply_blobs = {"error": f"the board failed: {_describe(error)}"}, []
            self.channel.send(reply, reply_blobs)

    # -- files --------------------------------------------------------------------------

    def _op_device(self, request: dict[str, Any], blobs: list[bytes]) -> tuple[dict, list]:
        return {"device": self.device}, []

    def _op_upload(self, request: dict[str, Any], blobs: list[bytes]) -> tuple[dict, list]:
        name = _checked_name(request.get("name"))
        if len(blobs) != 1:
            raise SessionError("an upload carries exactly one file")
        self._forget_module(name)
        self._store(name, blobs[0])
        return {"ok": True, "name": name, "bytes": len(blobs[0])}, []

    def _op_remove(self, request: dict[str, Any], blobs: list[bytes]) -> tuple[dict, list]:
        name = self._uploaded(request.get("name"))
        self._forget_module(name)
        (self.directory / name).unlink()
        del self.files[name]
        return {"ok": True}, []

    def _forget_module(self, name: str) -> None:
        """Drop the extraction of artifact `name` (replaced or removed)."""
        directory = self.modules.pop(name, None)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
            self.files.pop(directory.name, None)

    def _op_files(self, request: dict[str, Any], blobs: list[bytes]) -> tuple[dict, list]:
        return {"files": dict(self.files)}, []

    def _store(self, name: str, contents: bytes) -> None:
        if len(contents) > self.limits.max_upload_bytes:
            raise SessionError(f"{name} is {len(contents)} bytes, over the upload limit of "
                               f"{self.limits.max_upload_bytes}")  # fmt: skip
        used = sum(size for other, size in self.files.items() if other != name)
        if used + len(contents) > self.limits.max_directory_bytes:
            raise SessionError(
                f"storing {name} would put {used + len(contents)} bytes in the work directory, "
                f"over its limit of {self.limits.max_directory_bytes}; remove files first"
            )
        if name not in self.files and len(self.files) >= self.limits.max_files:
            raise SessionError(f"the session already holds {len(self.files)} files, its limit")
        # A new file, then renamed over the old one: a library the helper still has
        # mapped under this name is never rewritten in place.
        partial = self.directory / f".{name}.partial"
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        try:
            with os.fdopen(os.open(partial, flags, 0o600), "wb") as stream:
                stream.write(contents)
            os.replace(partial, self.directory / name)
        finally:
            partial.unlink(missing_ok=True)
        self.files[name] = len(contents)

    def _uploaded(self, name: object) -> str:
        checked = _checked_name(name)
        if checked not in self.files:
            raise SessionError(f"{checked!r} was not uploaded in this session")
        return checked

    # -- kernels ------------------------------------------------------------------------

    def _op_time(self, request: dict[str, Any], blobs: list[bytes]) -> tuple[dict, list]:
        return self._kernel(request, "time")

    def _op_check(self, request: dict[str, Any], blobs: list[bytes]) -> tuple[dict, list]:
        return self._kernel(request, "check")

    def _kernel(self, request: dict[str, Any], op: str) -> tuple[dict, list]:
        library = self._loadable(request.get("library"))
        work: dict[str, Any] = {
            "op": op,
            "library": str(library),
            "timer": str(self._loadable(request.get("timer"))) if op == "time" else "",
            "arguments": str(self.directory / self._uploaded(request.get("arguments"))),
            "symbol": str(request["symbol"]),
            "args": [[int(n), bool(o), bool(w), str(d)] for n, o, w, d in request["args"]],
        }
        if op == "time":
            for name in ("number", "repeat"):
                work[name] = _bounded_int(request[name], name)
            for name in ("min_repeat_ms", "cooldown_ms"):
                work[name] = float(request[name])
            work["flush_cache"] = bool(request["flush_cache"])
            work["cold_weights"] = bool(request["cold_weights"])
        reply = self._call(work, request.get("threads"), request.get("timeout"))
        outputs = reply.pop("outputs", [])
        return reply, outputs

    def _loadable(self, name: object) -> Path:
        """An uploaded library, checked to be code for this board's architecture."""
        path = self.directory / self._uploaded(name)
        check_library_architecture(path, self.device["arch"])
        return path

    # -- artifacts ----------------------------------------------------------------------

    def _op_load_module(self, request: dict[str, Any], blobs: list[bytes]) -> tuple[dict, list]:
        name = self._uploaded(request.get("name"))
        if name not in self.modules:
            directory = self._extract_artifact(name)
            try:
                check_library_architecture(directory / LIBRARY_FILE, self.device["arch"])
            except SessionError:
                shutil.rmtree(directory, ignore_errors=True)
                raise
            self.modules[name] = directory
            self.files[directory.name] = sum(f.stat().st_size for f in directory.iterdir())
        work = {"op": "load", "directory": str(self.modules[name])}
        reply = self._call(work, request.get("threads"), request.get("timeout"))
        return {**reply, "module": name}, []

    def _op_run(self, request: dict[str, Any], blobs: list[bytes]) -> tuple[dict, list]:
        return self._module_call(request, blobs, {"op": "run"})

    def _op_benchmark(self, request: dict[str, Any], blobs: list[bytes]) -> tuple[dict, list]:
        work = {"op": "benchmark", "repeat": _bounded_int(request["repeat"], "repeat"),
                "number": _bounded_int(request["number"], "number"),
                "min_repeat_ms": float(request["min_repeat_ms"]),
                "cache_flush": bool(request.get("cache_flush", False))}  # fmt: skip
        return self._module_call(request, blobs, work)

    def _op_profile(self, request: dict[str, Any], blobs: list[bytes]) -> tuple[dict, list]:
        work = {"op": "profile", "repeat": _bounded_int(request["repeat"], "repeat")}
        return self._module_call(request, blobs, work)

    def _module_call(
        self, request: dict[str, Any], blobs: list[bytes], work: dict[str, Any]
    ) -> tuple[dict, list]:
        name = _checked_name(request.get("module"))
        if name not in self.modules:
            raise SessionError(f"module {name!r} is not loaded: call load_module first")
        work = {**work, "directory": str(self.modules[name]), "inputs": blobs}
        reply = self._call(work, request.get("threads"), request.get("timeout"))
        outputs = reply.pop("outputs", [])
        return reply, outputs

    def _extract_artifact(self, name: str) -> Path:
        """The artifact's three members, regular files only, into a folder of their
        own (a new one each time: the helper keeps loaded libraries by path); their
        checksums verified against mod.json. Nothing is left behind on failure."""
        self._extractions += 1
        target = self.directory / f"{name}.module-{self._extractions}"
        target.mkdir()
        try:
            self._extract_members(name, target)
            _verify_checksums(target, name)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        return target

    def _extract_members(self, name: str, target: Path) -> None:
        sizes: dict[str, int] = {}
        used = sum(self.files.values())
        try:
            with tarfile.open(self.directory / name, "r:*") as tar:
                for member in tar:
                    member_name = member.name.removeprefix("./")
                    if member_name not in ARTIFACT_MEMBERS or member_name in sizes:
                        continue
                    if not member.isfile():
                        raise SessionError(f"{name}: {member_name} is not a regular file")
                    used += member.size
                    if member.size > self.limits.max_upload_bytes:
                        raise SessionError(f"{name}: {member_name} is over the size limit")
                    if used > self.limits.max_directory_bytes:
                        raise SessionError(
                            f"extracting {name} would exceed the work directory's limit of "
                            f"{self.limits.max_directory_bytes} bytes"
                        )
                    stream = tar.extractfile(member)
                    assert stream is not None
                    with stream, open(target / member_name, "xb") as out:
                        shutil.copyfileobj(stream, out, 1 << 20)
                    sizes[member_name] = member.size
        except SessionError:
            raise
        except Exception as error:  # tarfile's, or its decompressors' (zlib, lzma, ...)
            raise SessionError(f"{name} is not an Ember artifact (.tar): {error}") from None
        missing = [m for m in ARTIFACT_MEMBERS if m not in sizes]
        if missing:
            raise SessionError(f"{name} lacks {', '.join(missing)}: not an Ember artifact")

    # -- the helper process -------------------------------------------------------------

    def _call(self, work: dict[str, Any], threads: object, timeout: object) -> dict[str, Any]:
        """Run `work` in the helper; a crash or a hang becomes a failure reply."""
        limit = self.limits.max_call_seconds
        seconds = float(timeout) if isinstance(timeout, int | float) and timeout > 0 else limit
        worker = self._worker_for(threads if isinstance(threads, int) and threads > 0 else None)
        worker.send(work)
        try:
            reply = worker.receive(min(seconds, limit))
        except WorkerTimedOut:
            self._worker = None
            return {"failure": "timeout", "message": f"did not finish within {seconds:g} s on "
                    "the board (its process was killed and restarted)"}  # fmt: skip
        except WorkerCrashed as crash:
            self._worker = None
            return {"failure": "runtime", "message": f"crashed its process on the board: "
                    f"{crash.reason}"}  # fmt: skip
        assert isinstance(reply, dict)
        return reply

    def _worker_for(self, threads: int | None) -> Worker:
        if self._worker is not None and self._threads != threads:
            self.stop_worker()
        if self._worker is None:
            env = {"OMP_NUM_THREADS": str(threads)} if threads else {}
            env["TMPDIR"] = str(self.directory)  # what uploaded code writes stays here
            try:
                worker = Worker(DEVICE_WORKER, env, cwd=str(self.directory))
                worker.wait_ready()
            except WorkerError as error:
                raise SessionError(f"cannot start the board's helper process: {error}") from None
            self._worker, self._threads = worker, threads
            if self._aborted:  # the server stopped while this helper started
                self.stop_worker()
                raise SessionError("the server is stopping")
        return self._worker

    def abort(self) -> None:
        """End the work in progress (from another thread): the request waiting on the
        helper ends as a crash, and the session then ends with the server."""
        self._aborted = True  # before looking: a helper starting now sees the flag
        worker = self._worker
        if worker is not None:
            worker.signal_kill()

    def stop_worker(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None


def remove_stale_sessions(work_dir: Path) -> None:
    """Remove the work directories of sessions whose server process is gone (killed,
    or the board lost power) so that they do not pile up on a board."""
    for directory in work_dir.glob(f"{SESSION_PREFIX}*-*"):
        owner = directory.name.removeprefix(SESSION_PREFIX).split("-", 1)[0]
        if not owner.isdigit() or int(owner) == os.getpid():
            continue
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            log.info("server: removing %s, left by a server that has gone", directory)
            shutil.rmtree(directory, ignore_errors=True)
        except PermissionError:
            pass  # another user's live process


def check_library_architecture(path: Path, arch: str) -> None:
    """Refuse a shared library built for another architecture than this board's."""
    with open(path, "rb") as stream:
        header = stream.read(20)
    if len(header) < 20 or header[:4] != b"\x7fELF":
        raise SessionError(f"{path.name} is not a shared library (ELF) for this board")
    machine = int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")
    built_for = _ELF_MACHINES.get(machine, f"ELF machine {machine}")
    if built_for != arch:
        raise SessionError(
            f"{path.name} is {built_for} code and this board is {arch}: build for the "
            f"board's target (e.g. llvm -mtriple={arch}-linux-gnu)"
        )


def _verify_checksums(directory: Path, source: str) -> None:
    try:
        metadata = json.loads((directory / METADATA_FILE).read_text(encoding="utf-8"))
        checksums = metadata["checksums"]
        if not isinstance(checksums, dict):
            raise TypeError("checksums is not a mapping")
    except (OSError, ValueError, KeyError, TypeError):
        raise SessionError(f"{source}: mod.json is unreadable or has no checksums") from None
    for member in (LIBRARY_FILE, PARAMS_FILE):
        if checksums.get(member) != file_sha256(directory / member):
            raise SessionError(f"{source}: {member} does not match its checksum")


def _checked_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise SessionError(
            f"{name!r} is not a file name a session may use: 1-128 letters, digits and "
            "'_.+-', not starting with a dot, no '/' or '..'"
        )
    return name


def _bounded_int(value: object, name: str) -> int:
    if not isinstance(value, int) or not 1 <= value < 2**31:
        raise SessionError(f"{name} must be an integer between 1 and 2**31-1, not {value!r}")
    return value


def _describe(error: Exception) -> str:
    if isinstance(error, SessionError):
        return str(error)
    if isinstance(error, KeyError):
        return f"the request lacks {error}"
    return f"bad request: {type(error).__name__}: {error}"

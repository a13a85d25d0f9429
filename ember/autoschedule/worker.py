"""Helper processes for measuring: untrusted work (lowering and compiling a candidate,
running its kernel) happens in a child process, so a crash, a hang or a leak in one
candidate costs a restart of that child, never the tuner.

    worker = Worker("ember.autoschedule.measure_worker", env={"OMP_NUM_THREADS": "4"})
    worker.send(request)
    reply = worker.receive(timeout=10.0)   # WorkerCrashed / WorkerTimedOut
    worker.close()

The child is `python -m <module>` (not a fork: the tuner may have OpenMP kernels
loaded, and forking a process with live OpenMP threads is unsafe), started in its own
session so killing its process group also kills what it started (a compiler), and
with its own environment (the OpenMP thread count is fixed when a process starts).
Requests and replies are pickled over two pipes (`multiprocessing.connection`); the
child's module calls `serve(handler)`, which says "ready" once the module's imports
and setup are done, so start-up time is never charged to a candidate. The child exits
when the tuner closes the pipe or dies (a watchdog thread sees it reparented, also
while a kernel spins in C).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from ember.errors import EmberError

# Importing Ember and NumPy takes well under a second; a loaded machine needs more.
START_TIMEOUT = 120.0
_READY = "ready"


# Ctrl-C raises KeyboardInterrupt in the main thread, but when the signal lands on
# another thread (rich's refresh thread, say) a blocking wait in the main thread is not
# woken: waits go in slices this long, so Ctrl-C takes effect within one.
_WAIT_SLICE = 0.25


def wait_for_any(connections: Sequence[Any], timeout: float | None) -> list[Any]:
    """`multiprocessing.connection.wait`, interruptible by Ctrl-C within a slice."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = wait(connections, _WAIT_SLICE if left is None else min(_WAIT_SLICE, left))
        if ready or (left is not None and left <= _WAIT_SLICE):
            return ready


class WorkerError(EmberError):
    """A measurement helper process could not be started."""


class WorkerCrashed(Exception):
    """The child died while handling a request; `reason` says how (signal or status)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class WorkerTimedOut(Exception):
    """The child did not reply in time (it has been killed)."""


class Worker:
    """One child process running `module`'s `serve` loop; see the module docstring."""

    def __init__(
        self,
        module: str,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        cwd: str | None = None,
    ) -> None:
        to_child_read, to_child_write = os.pipe()
        from_child_read, from_child_write = os.pipe()
        child_fds = (to_child_read, from_child_write)
        environment = {**os.environ, **(env or {})}
        # The child must import this same Ember, also when it is not installed.
        root = str(Path(__file__).resolve().parents[2])
        environment["PYTHONPATH"] = os.pathsep.join(
            p for p in (root, environment.get("PYTHONPATH", "")) if p
        )
        argv = [sys.executable, "-m", module, *map(str, child_fds), str(os.getpid()), *args]
        try:
            self.process = subprocess.Popen(
                argv, pass_fds=child_fds, env=environment, start_new_session=True, cwd=cwd
            )
        except OSError as error:
            for fd in (to_child_write, from_child_read):
                os.close(fd)
            raise WorkerError(f"cannot start {module}: {error}") from None
        finally:
            for fd in child_fds:
                _close_quietly(fd)
        self.module = module
        self._to_child = Connection(to_child_write, readable=False)
        self._from_child = Connection(from_child_read, writable=False)
        self.ready = False

    @property
    def connection(self) -> Connection:
        """What to `multiprocessing.connection.wait` on for this child's replies."""
        return self._from_child

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Block until the child has started (its first message); WorkerError if it
        dies or stays silent, after killing it."""
        if self.ready:
            return
        problem = f"it did not start within {timeout:g} s"
        if self._from_child.poll(timeout):
            try:
                self.ready = self._from_child.recv() == _READY
                problem = "its first message was not 'ready'"
            except (EOFError, OSError):
                problem = f"it exited first ({self.kill()})"
        if not self.ready:
            self.kill()
            raise WorkerError(
                f"the helper process {self.module} could not start: {problem}; run "
                f"`python -m {self.module}` by hand to see why"
            )

    def send(self, request: Any) -> None:
        """Send a request (to a started child; see wait_ready)."""
        with contextlib.suppress(OSError):  # the child is gone; receive() reports how
            self._to_child.send(request)

    def receive(self, timeout: float | None) -> Any:
        """The reply to the request sent. Raises WorkerTimedOut (after killing the
        child) or WorkerCrashed (after reaping it)."""
        if not wait_for_any([self._from_child], timeout):
            self.kill()
            raise WorkerTimedOut()
        try:
            return self._from_child.recv()
        except (EOFError, OSError):
            raise WorkerCrashed(self.kill()) from None

    def signal_kill(self) -> None:
        """Kill the child and what it started, and nothing more: safe from another
        thread while one waits in `receive`, which then sees the crash (and reaps)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def kill(self) -> str:
        """Kill the child and everything it started, reap it, and say how it ended."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
        code = self.process.wait()
        self._close_pipes()
        return describe_exit(code)

    def close(self, grace: float = 2.0) -> None:
        """Ask the child to exit (closing its input), then kill it if it does not."""
        self._close_pipes()
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()

    def _close_pipes(self) -> None:
        for connection in (self._to_child, self._from_child):
            if not connection.closed:
                connection.close()


def describe_exit(code: int) -> str:
    """A child's exit status in words: 'killed by SIGSEGV (signal 11)', 'exit status 3'."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "an unknown signal"
        return f"killed by {name} (signal {-code})"
    return f"exit status {code}"


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


# -- the child's side ---------------------------------------------------------------------


def serve(handler: Callable[[Any], Any]) -> None:
    """The child's main loop: reply `handler(request)` to each request until the
    parent closes the pipe. argv: the two pipe ends Worker passes, the parent's pid."""
    read_fd, write_fd, parent = (int(value) for value in sys.argv[1:4])
    requests = Connection(read_fd, writable=False)
    replies = Connection(write_fd, readable=False)
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()
    # A parent that closes the pipe (a tuning run ended by Ctrl-C while this child was
    # still starting or working) is a normal end, not an error to print.
    try:
        replies.send(_READY)
        while True:
            try:
                request = requests.recv()
            except (EOFError, OSError):
                return
            replies.send(handler(request))
    except OSError:  # BrokenPipeError: nobody reads the replies any more
        return


def _exit_when_orphaned(parent: int) -> None:
    # ctypes releases the GIL around a kernel call, so this runs even while one spins.
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)

"""Emulated AArch64 boards: a real AArch64 Python (Debian's arm64 packages) running
Ember's single-file device server under `qemu-aarch64`, on an x86 machine.

    python -m ember.testing.arm_board --setup                    # once, as root
    python -m ember.testing.arm_board --tracker 127.0.0.1:9190 --key rasp4b-64 --count 2

Setting up needs root, apt and qemu-user (`apt-get install qemu-user`): it adds the
arm64 architecture to dpkg, downloads Python 3.11 and the libraries it links
(`ARM64_PACKAGES`), unpacks them into a sysroot under the cache directory
(`EMBER_ARM_SYSROOT` to use another), and registers qemu's binfmt handler so that the
processes the board's Python starts (its helper) run too. `ArmBoard` starts one board
and stops it; tests use it through `tests/rpc`'s fixtures and skip, saying why, where
it cannot be set up. Times under emulation mean nothing: only behaviour and numbers do.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ember.config import cache_dir
from ember.errors import EmberError

ARM64_PACKAGES = (
    "python3.11-minimal:arm64",
    "libpython3.11-minimal:arm64",
    "libpython3.11-stdlib:arm64",
    "libc6:arm64",
    "libgcc-s1:arm64",
    "libgomp1:arm64",
    "libffi8:arm64",
    "zlib1g:arm64",
    "libexpat1:arm64",
    "libssl3:arm64",
)
_BINFMT = Path("/proc/sys/fs/binfmt_misc")
_BINFMT_CONF = Path("/usr/lib/binfmt.d/qemu-aarch64.conf")
_PYTHON = Path("usr/bin/python3.11")


class BoardUnavailable(EmberError):
    """An emulated board cannot run here; the message says what is missing."""


def sysroot() -> Path:
    """Where the AArch64 Python is unpacked (`EMBER_ARM_SYSROOT`, or the cache)."""
    configured = os.environ.get("EMBER_ARM_SYSROOT")
    return Path(configured) if configured else cache_dir() / "arm64-sysroot"


def unavailable_reason() -> str | None:
    """Why an emulated board cannot start here, or None when it can."""
    if shutil.which("qemu-aarch64") is None:
        return "qemu-aarch64 is not installed (apt-get install qemu-user)"
    if not (sysroot() / _PYTHON).is_file():
        return (
            f"no AArch64 Python in {sysroot()}: run `python -m ember.testing.arm_board "
            "--setup` as root (make test does where it can)"
        )
    if not (_BINFMT / "qemu-aarch64").exists():
        return (
            "qemu's binfmt handler for AArch64 is not registered: run `python -m "
            "ember.testing.arm_board --setup` as root"
        )
    return None


def setup() -> Path:
    """Download and unpack the AArch64 Python and register the binfmt handler (root
    with apt); returns the sysroot. Does nothing that is already done."""
    root = sysroot()
    if not (root / _PYTHON).is_file():
        _unpack_packages(root)
    _register_binfmt()
    reason = unavailable_reason()
    if reason is not None:
        raise BoardUnavailable(reason)
    return root


def _unpack_packages(root: Path) -> None:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise BoardUnavailable("setting up the AArch64 Python needs root and apt-get")
    _run(["dpkg", "--add-architecture", "arm64"])
    _run(["apt-get", "update", "-qq"])
    with tempfile.TemporaryDirectory() as downloads:
        # apt's sandbox user may not write to a root-owned temporary folder.
        os.chmod(downloads, 0o777)
        _run(["apt-get", "download", "-qq", *ARM64_PACKAGES], cwd=downloads)
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        for package in sorted(Path(downloads).glob("*.deb")):
            _run(["dpkg", "-x", str(package), str(partial)])
        partial.replace(root)


def _register_binfmt() -> None:
    if (_BINFMT / "qemu-aarch64").exists():
        return
    if os.geteuid() != 0 or not _BINFMT_CONF.is_file():
        raise BoardUnavailable(
            f"registering qemu's binfmt handler needs root and qemu-user's {_BINFMT_CONF}"
        )
    if not (_BINFMT / "register").exists():
        _run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(_BINFMT)])
    (_BINFMT / "register").write_text(_BINFMT_CONF.read_text().strip())


def _run(command: list[str], cwd: str | None = None) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise BoardUnavailable(f"`{' '.join(command)}` failed: {result.stderr.strip()[-500:]}")


class ArmBoard:
    """One emulated board: the device server bundle on the AArch64 Python, registered
    with a tracker under `key`. Stop it (or use `with`) to end its process."""

    def __init__(
        self, tracker: str, key: str, token_file: str | None = None, work_dir: str | None = None
    ) -> None:
        from ember.rpc.bundle import write_bundle

        reason = unavailable_reason()
        if reason is not None:
            raise BoardUnavailable(reason)
        root = sysroot()
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="ember-arm-board-"))
        bundle = write_bundle(self.work_dir / "ember-server.pyz")
        command = [str(root / _PYTHON), "-I", "-S", str(bundle), "--tracker", tracker, "--key",
                   key, "--port", "0", "--work-dir", str(self.work_dir)]  # fmt: skip
        if token_file:
            command += ["--token-file", token_file]
        environment = {**os.environ, "QEMU_LD_PREFIX": str(root)}
        self.process = subprocess.Popen(
            command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def __enter__(self) -> ArmBoard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ember.testing.arm_board", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--setup", action="store_true", help="set up (as root), then exit")
    parser.add_argument("--tracker", default="127.0.0.1:9190", help="HOST:PORT (127.0.0.1:9190)")
    parser.add_argument("--key", default="rasp4b-64", help="the boards' key (rasp4b-64)")
    parser.add_argument("--count", type=int, default=1, help="boards to start (1)")
    parser.add_argument("--token-file", help="the farm's token")
    args = parser.parse_args(argv)
    try:
        if args.setup:
            print(f"AArch64 Python ready in {setup()}")
            return 0
        boards = [ArmBoard(args.tracker, args.key, args.token_file) for _ in range(args.count)]
    except EmberError as error:
        print(f"arm_board: error: {error}", file=sys.stderr)
        return 2
    print(f"{args.count} emulated AArch64 board(s) registering with {args.tracker} as key "
          f"{args.key}; Ctrl-C stops them", flush=True)  # fmt: skip
    # SIGTERM too: the boards are processes of their own and must not outlive this one.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while all(board.process.poll() is None for board in boards):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for board in boards:
            board.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

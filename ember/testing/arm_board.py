"""Emulated ARM boards: a real AArch64 (or 32-bit ARM) Python, Debian's arm64 (armhf)
packages, running Ember's single-file device server under `qemu-aarch64` (`qemu-arm`),
on an x86 machine.

    python -m ember.testing.arm_board --setup                    # once, as root
    python -m ember.testing.arm_board --tracker 127.0.0.1:9190 --key rasp4b-64 --count 2
    python -m ember.testing.arm_board --setup --arch armhf       # a 32-bit OS's board
    python -m ember.testing.arm_board --arch armhf --key rasp4b --count 2

Setting up needs root, apt and qemu-user (`apt-get install qemu-user`): it adds the
architecture to dpkg, downloads Python 3.11 and the libraries it links
(`BoardArch.packages`), unpacks them into a sysroot under the cache directory
(`EMBER_ARM_SYSROOT` / `EMBER_ARMHF_SYSROOT` to use another), and registers qemu's
binfmt handler so that the processes the board's Python starts (its helper) run too.
`ArmBoard` starts one board and stops it; tests use it through `tests/rpc`'s fixtures
and skip, saying why, where it cannot be set up. Times under emulation mean nothing:
only behaviour and numbers do.
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
from dataclasses import dataclass
from pathlib import Path

from ember.config import cache_dir
from ember.errors import EmberError


@dataclass(frozen=True)
class BoardArch:
    """An emulated board's architecture: Debian's name for it, the packages of its
    Python, and the qemu-user binary (and binfmt entry) that runs its code."""

    debian: str  # dpkg's architecture: arm64, armhf
    name: str  # what to call it: AArch64, 32-bit ARM
    qemu: str  # qemu-aarch64, qemu-arm (also the binfmt_misc entry's name)

    @property
    def packages(self) -> tuple[str, ...]:
        return tuple(f"{package}:{self.debian}" for package in _PYTHON_PACKAGES)

    @property
    def binfmt_conf(self) -> Path:
        return Path(f"/usr/lib/binfmt.d/{self.qemu}.conf")


# Python 3.11 and the libraries it (and OpenMP kernels) link, Debian 12's names.
_PYTHON_PACKAGES = (
    "python3.11-minimal",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "libc6",
    "libgcc-s1",
    "libgomp1",
    "libffi8",
    "zlib1g",
    "libexpat1",
    "libssl3",
)
ARCHES = {
    "arm64": BoardArch("arm64", "AArch64", "qemu-aarch64"),
    # A Raspberry Pi with a 32-bit OS (armv7l): hard float, NEON.
    "armhf": BoardArch("armhf", "32-bit ARM", "qemu-arm"),
}
ARM64 = ARCHES["arm64"]
_BINFMT = Path("/proc/sys/fs/binfmt_misc")
_PYTHON = Path("usr/bin/python3.11")


class BoardUnavailable(EmberError):
    """An emulated board cannot run here; the message says what is missing."""


def sysroot(arch: BoardArch = ARM64) -> Path:
    """Where the board's Python is unpacked: the cache's `<arch>-sysroot`
    (`EMBER_ARM_SYSROOT` for AArch64's, `EMBER_ARMHF_SYSROOT` for 32-bit ARM's)."""
    variable = "EMBER_ARM_SYSROOT" if arch is ARM64 else f"EMBER_{arch.debian.upper()}_SYSROOT"
    configured = os.environ.get(variable)
    return Path(configured) if configured else cache_dir() / f"{arch.debian}-sysroot"


def unavailable_reason(arch: BoardArch = ARM64) -> str | None:
    """Why an emulated board of `arch` cannot start here, or None when it can."""
    setup = f"run `python -m ember.testing.arm_board --setup --arch {arch.debian}` as root"
    if shutil.which(arch.qemu) is None:
        return f"{arch.qemu} is not installed (apt-get install qemu-user)"
    if not (sysroot(arch) / _PYTHON).is_file():
        return f"no {arch.name} Python in {sysroot(arch)}: {setup} (make test does where it can)"
    if not (_BINFMT / arch.qemu).exists():
        return f"qemu's binfmt handler for {arch.name} is not registered: {setup}"
    return None


def setup(arch: BoardArch = ARM64) -> Path:
    """Download and unpack the board's Python and register the binfmt handler (root
    with apt); returns the sysroot. Does nothing that is already done."""
    root = sysroot(arch)
    if not (root / _PYTHON).is_file():
        _unpack_packages(root, arch)
    _register_binfmt(arch)
    reason = unavailable_reason(arch)
    if reason is not None:
        raise BoardUnavailable(reason)
    return root


def _unpack_packages(root: Path, arch: BoardArch) -> None:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise BoardUnavailable(f"setting up the {arch.name} Python needs root and apt-get")
    _run(["dpkg", "--add-architecture", arch.debian])
    # An index that failed to update (a mirror mid-sync: the security suite's armhf
    # index, 2026-12-05) need not be one the packages come from: apt keeps the indexes
    # it did fetch, so the download is tried all the same, and a failure says both.
    try:
        _run(["apt-get", "update", "-qq"])
        update_error = ""
    except BoardUnavailable as error:
        update_error = f" (after {error})"
    with tempfile.TemporaryDirectory() as downloads:
        # apt's sandbox user may not write to a root-owned temporary folder.
        os.chmod(downloads, 0o777)
        try:
            _run(["apt-get", "download", "-qq", *arch.packages], cwd=downloads)
        except BoardUnavailable as error:
            raise BoardUnavailable(f"{error}{update_error}") from None
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        for package in sorted(Path(downloads).glob("*.deb")):
            _run(["dpkg", "-x", str(package), str(partial)])
        partial.replace(root)


def _register_binfmt(arch: BoardArch) -> None:
    if (_BINFMT / arch.qemu).exists():
        return
    if os.geteuid() != 0 or not arch.binfmt_conf.is_file():
        raise BoardUnavailable(
            f"registering qemu's binfmt handler needs root and qemu-user's {arch.binfmt_conf}"
        )
    if not (_BINFMT / "register").exists():
        _run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(_BINFMT)])
    (_BINFMT / "register").write_text(arch.binfmt_conf.read_text().strip())


def _run(command: list[str], cwd: str | None = None) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise BoardUnavailable(f"`{' '.join(command)}` failed: {result.stderr.strip()[-500:]}")


class ArmBoard:
    """One emulated board: the device server bundle on the `arch` Python, registered
    with a tracker under `key`. Stop it (or use `with`) to end its process."""

    def __init__(
        self,
        tracker: str,
        key: str,
        token_file: str | None = None,
        work_dir: str | None = None,
        arch: BoardArch = ARM64,
    ) -> None:
        from ember.rpc.bundle import write_bundle

        reason = unavailable_reason(arch)
        if reason is not None:
            raise BoardUnavailable(reason)
        root = sysroot(arch)
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
        prog="python -m ember.testing.arm_board",
        description=" ".join(__doc__.split("\n\n")[0].split()),
    )
    parser.add_argument("--setup", action="store_true", help="set up (as root), then exit")
    parser.add_argument("--arch", choices=sorted(ARCHES), default="arm64",
                        help="arm64 (a 64-bit OS; default) or armhf (32-bit, armv7l)")  # fmt: skip
    parser.add_argument("--tracker", default="127.0.0.1:9190", help="HOST:PORT (127.0.0.1:9190)")
    parser.add_argument(
        "--key", help="the boards' key (rasp4b-64 for arm64, rasp4b for armhf: the tutorials')"
    )
    parser.add_argument("--count", type=int, default=1, help="boards to start (1)")
    parser.add_argument("--token-file", help="the farm's token")
    args = parser.parse_args(argv)
    arch = ARCHES[args.arch]
    args.key = args.key or ("rasp4b-64" if arch is ARM64 else "rasp4b")
    try:
        if args.setup:
            print(f"{arch.name} Python ready in {setup(arch)}")
            return 0
        boards = [
            ArmBoard(args.tracker, args.key, args.token_file, arch=arch) for _ in range(args.count)
        ]
    except EmberError as error:
        print(f"arm_board: error: {error}", file=sys.stderr)
        return 2
    print(f"{args.count} emulated {arch.name} board(s) registering with {args.tracker} as key "
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

"""An emulated 32-bit ARM board (a Raspberry Pi with a 32-bit OS: Debian's armhf
Python running the device server bundle under qemu-arm) behind a tracker: the tuning
tutorial's flow for `-mtriple=armv7l-linux-gnueabihf` (tasks, tune on the board,
compile with the records, run there) equal to the reference interpreter, and every
kernel family of the kernel tests checked on the board. Skips, saying why, where the
board cannot be set up (`python -m ember.testing.arm_board --setup --arch armhf`,
which `make test` runs as root). Times under emulation mean nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from boards import check_every_kernel_family, run_the_seeds_flow
from farm import WAIT, Farm, board_counts, wait_until

from ember.testing.arm_board import ARCHES, ArmBoard, unavailable_reason

KEY = "rasp4b"
TARGET = "llvm -mtriple=armv7l-linux-gnueabihf -mcpu=cortex-a72 -mattr=+neon"
ARMHF = ARCHES["armhf"]


@pytest.fixture(scope="module")
def arm32_farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Farm]:
    reason = unavailable_reason(ARMHF)
    if reason is not None:
        pytest.skip(f"no emulated 32-bit ARM board: {reason}")
    farm = Farm()
    board = None
    try:
        work_dir = tmp_path_factory.mktemp("arm32-board")
        board = ArmBoard(farm.address, KEY, work_dir=str(work_dir), arch=ARMHF)
        wait_until(lambda: board_counts(farm.tracker, KEY)["total"] == 1, "a 32-bit ARM board")
        yield farm
    finally:
        if board is not None:
            board.stop()
        farm.stop()


def test_the_seeds_flow_on_a_32_bit_board(
    arm32_farm: Farm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [server] = arm32_farm.tracker.summary()["servers"]
    assert server["device"]["arch"] == "arm"
    # 32-bit NEON code is built with -funsafe-math-optimizations (ember.toolchain):
    # equal within the fp32 tolerance, not bit for bit.
    run_the_seeds_flow(arm32_farm.address, KEY, TARGET, 32, 8, 8, tmp_path, capsys)


def test_every_kernel_family_on_a_32_bit_board(arm32_farm: Farm) -> None:
    check_every_kernel_family(arm32_farm.address, KEY, TARGET, boards=1, timeout=WAIT)

"""`ember rpc bundle`: the device server as one file a board runs with its own Python.

    ember rpc bundle -o ember-server.pyz
    scp ember-server.pyz farm.token pi@board:
    python3 ember-server.pyz --tracker HOST:9190 --key rasp4b-64 --token-file farm.token

A zip application (PEP 441) of exactly the modules the device side imports, all
standard library only (tests/rpc check it runs under `python -I -S`, no site
packages): no NumPy, no compiler, nothing to install on the board. Libraries arrive
compiled for the board from the host.
"""

from __future__ import annotations

import io
import stat
import zipfile
from pathlib import Path

# The device side: the server, its helper process, and what they import.
BUNDLED_MODULES = (
    "ember/__init__.py",
    "ember/errors.py",
    "ember/lazy.py",
    "ember/config.py",
    "ember/device.py",
    "ember/target.py",
    "ember/runtime/__init__.py",
    "ember/runtime/abi.py",
    "ember/autoschedule/__init__.py",
    "ember/autoschedule/worker.py",
    "ember/autoschedule/measure_abi.py",
    "ember/rpc/__init__.py",
    "ember/rpc/protocol.py",
    "ember/rpc/service.py",
    "ember/rpc/tracker.py",
    "ember/rpc/session.py",
    "ember/rpc/server.py",
    "ember/rpc/device_worker.py",
    "ember/cli_commands/__init__.py",
    "ember/cli_commands/rpc.py",
)

_MAIN = """\
import sys

if sys.version_info < (3, 11):
    sys.exit(
        "ember-server.pyz needs Python 3.11 or newer, this is " + sys.version.split()[0]
        + ": run it with python3.11 (Debian 12 / Raspberry Pi OS bookworm: apt-get "
        "install python3.11-minimal)"
    )

from ember.cli_commands.rpc import server_main

sys.exit(server_main())
"""


def write_bundle(path: Path) -> Path:
    """Write the device server's zip application to `path` (executable); returns it."""
    root = Path(__file__).resolve().parents[2]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("__main__.py", _MAIN)
        for module in BUNDLED_MODULES:
            archive.write(root / module, module)
    path.write_bytes(b"#!/usr/bin/env python3\n" + buffer.getvalue())
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path

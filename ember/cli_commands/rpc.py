"""The device farm's commands: `ember tracker`, `ember server`, `ember query`, `ember rpc
token` and `ember rpc bundle`.

    ember rpc token -o farm.token                   # the shared secret, copied everywhere
    ember tracker --host 0.0.0.0 --port 9190 --token-file farm.token
    ember server --tracker HOST:9190 --key rasp4b-64 --token-file farm.token   # each board
    ember query --host HOST --port 9190 --token-file farm.token
    ember rpc bundle -o ember-server.pyz            # the device side as one file:
    python3 ember-server.pyz --tracker HOST:9190 --key rasp4b-64 --token-file farm.token

Only the standard library is imported at module level: `ember-server.pyz` runs
`server_main` from here on a board that has nothing but Python.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ember.errors import EmberError, UsageError
from ember.rpc.protocol import DEFAULT_SERVER_PORT, DEFAULT_TRACKER_PORT

if TYPE_CHECKING:
    from ember.rpc.service import Service

# `ember server` tries this many ports from --port up when one is taken (as TVM's does).
_PORT_TRIES = 100


def _log_to_stderr() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)


def _serve_until_signal(service: Service) -> int:
    """Block until Ctrl-C or SIGTERM, then stop `service` (started by the caller)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
    return 0


def command_tracker(args: argparse.Namespace) -> int:
    from ember.rpc.protocol import load_token
    from ember.rpc.tracker import Tracker

    _log_to_stderr()
    token = load_token(args.token_file)
    tracker = Tracker(args.host, args.port, token)
    tracker.start()
    auth = "token required" if token else "no token: loopback only"
    print(f"Ember tracker listening on {args.host}:{tracker.port} ({auth})", flush=True)
    return _serve_until_signal(tracker)


def command_server(args: argparse.Namespace) -> int:
    from ember.rpc.protocol import RPCError, load_token, parse_address
    from ember.rpc.server import DeviceServer

    _log_to_stderr()
    token = load_token(args.token_file)
    tracker = parse_address(args.tracker, DEFAULT_TRACKER_PORT) if args.tracker else None
    if tracker is not None and not args.key:
        raise UsageError("--tracker needs --key: the name clients will ask for (e.g. rasp4b-64)")
    tries = 1 if args.port == 0 else _PORT_TRIES
    for port in range(args.port, args.port + tries):
        server = DeviceServer(
            args.host, port, token, tracker, args.key, args.advertise_host, args.work_dir
        )
        try:
            server.start()
            break
        except RPCError:
            if port == args.port + tries - 1:
                raise
    where = f"{args.host}:{server.port}"
    registering = f", registering with {args.tracker} as key {args.key}" if tracker else ""
    print(f"Ember device server listening on {where}{registering}", flush=True)
    print(f"Device: {_describe_device(server.device)}", flush=True)
    return _serve_until_signal(server)


def command_query(args: argparse.Namespace) -> int:
    from ember.rpc.client import TrackerClient
    from ember.rpc.protocol import load_token

    with TrackerClient(args.host, args.port, load_token(args.token_file), args.timeout,
                       reconnect_seconds=0) as tracker:  # fmt: skip
        summary = tracker.summary()
    print(format_summary(summary, f"{args.host}:{args.port}"))
    return 0


def format_summary(summary: dict[str, Any], where: str) -> str:
    """The tracker's state as `ember query` prints it: the servers, then per key the
    boards registered, free, and requests waiting."""
    rule = "-" * 78
    lines = [f"Tracker address: {where}", "", "Server List", rule]
    lines.append(f"{'server-address':<24}{'key':<16}{'state':<7}device")
    lines.append(rule)
    for server in summary.get("servers", []):
        address = f"{server['host']}:{server['port']}"
        state = "free" if server.get("free") else "busy"
        lines.append(f"{address:<24}{server['key']:<16}{state:<7}"
                     f"{_describe_device(server.get('device', {}))}")  # fmt: skip
    lines += [rule, "", "Queue Status", "-" * 42]
    lines.append(f"{'key':<24}{'total':>6}{'free':>6}{'pending':>8}")
    lines.append("-" * 42)
    for key, counts in sorted(summary.get("keys", {}).items()):
        lines.append(f"{key:<24}{counts['total']:>6}{counts['free']:>6}{counts['pending']:>8}")
    lines.append("-" * 42)
    return "\n".join(lines)


def _describe_device(device: dict[str, Any]) -> str:
    features = set(device.get("features", ()))
    shown = [f for f in ("neon", "asimd", "dotprod", "avx2", "avx512f", "avx512vnni")
             if f in features]  # fmt: skip
    parts = [device.get("triple", "?"), device.get("cpu") or "unknown CPU",
             f"{device.get('cores', '?')} cores", *shown]  # fmt: skip
    return ", ".join(str(p) for p in parts)


def command_token(args: argparse.Namespace) -> int:
    from ember.rpc.protocol import write_token

    path = Path(args.output)
    try:
        write_token(path)
    except FileExistsError:
        raise UsageError(f"{path} exists; remove it first or choose another -o") from None
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error}") from None
    print(f"wrote a new RPC token to {path} (mode 600); copy it to the tracker, every board "
          "and the host, and pass --token-file or set EMBER_RPC_TOKEN_FILE")  # fmt: skip
    return 0


def command_bundle(args: argparse.Namespace) -> int:
    from ember.rpc.bundle import write_bundle

    path = write_bundle(Path(args.output))
    print(f"wrote {path} ({path.stat().st_size // 1024} KiB): on a board with Python 3, run\n"
          f"  python3 {path.name} --tracker HOST:{DEFAULT_TRACKER_PORT} --key KEY "
          "[--token-file FILE]")  # fmt: skip
    return 0


def _add_token_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token-file",
        help="the farm's shared secret (`ember rpc token`; default EMBER_RPC_TOKEN_FILE). "
        "Without one, only loopback addresses are allowed",
    )


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--tracker", metavar="HOST:PORT", help="register with this tracker")
    add("--key", help="the key clients ask the tracker for (e.g. rasp4b-64)")
    add("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    add(
        "--port",
        type=int,
        default=DEFAULT_SERVER_PORT,
        help=f"port to listen on, or the next free one above it (default "
        f"{DEFAULT_SERVER_PORT}; 0: any)",
    )
    add("--advertise-host", help="the address clients should connect to (default: as seen by "
        "the tracker)")  # fmt: skip
    add("--work-dir", help="where sessions' files go (default: the system's temporary folder)")
    _add_token_argument(parser)


def add_parser(commands: Any) -> None:
    tracker = commands.add_parser("tracker", help="run the device farm's tracker")
    tracker.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    tracker.add_argument("--port", type=int, default=DEFAULT_TRACKER_PORT, help="port (9190)")
    _add_token_argument(tracker)
    tracker.set_defaults(run=command_tracker)

    server = commands.add_parser("server", help="run a device server on a board")
    add_server_arguments(server)
    server.set_defaults(run=command_server)

    query = commands.add_parser("query", help="list a tracker's boards and queue")
    query.add_argument("--host", default="127.0.0.1", help="the tracker's address")
    query.add_argument("--port", type=int, default=DEFAULT_TRACKER_PORT, help="its port (9190)")
    query.add_argument("--timeout", type=float, default=10.0, help="seconds to wait (10)")
    _add_token_argument(query)
    query.set_defaults(run=command_query)

    rpc = commands.add_parser("rpc", help="device farm tools: token, bundle")
    actions = rpc.add_subparsers(dest="action", required=True)
    token = actions.add_parser("token", help="write a new shared secret for the farm")
    token.add_argument("-o", "--output", required=True, help="the token file to create")
    token.set_defaults(run=command_token)
    bundle = actions.add_parser("bundle", help="write the device server as one .pyz file")
    bundle.add_argument("-o", "--output", default="ember-server.pyz", help="the file to write")
    bundle.set_defaults(run=command_bundle)


def server_main(argv: Sequence[str] | None = None) -> int:
    """`python3 ember-server.pyz ...`: the device server alone."""
    parser = argparse.ArgumentParser(prog="ember-server", description="Ember device server")
    add_server_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return command_server(args)
    except EmberError as error:
        print(f"ember-server: error: {error}", file=sys.stderr)
        return 2

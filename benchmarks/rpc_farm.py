"""The RPC device farm on loopback: what a remote measurement costs over a local one,
how throughput grows with boards, and how the tracker holds up under many boards.

    python benchmarks/rpc_farm.py [--candidates 40] [--sampled 20] [--rounds 10]
        [--threads 1] [--slow-ms 50] [--slow-candidates 32] [--boards 1 2 4]
        [--fake-boards 200] [--cycles 1000]

Everything runs on 127.0.0.1 on ports the system picks, without a token: a tracker and
device servers as `ember tracker` / `ember server` processes (a board's work runs apart
from the host's Python, as on a real farm), started and stopped by this script.

1. Overhead: --candidates candidates of ResNet-18's (32x32 input) 1x1 shortcut conv
   (--sampled randomly annotated states, the rest copies of the default schedule),
   built once by LocalBuilder(n_parallel=2), then timed by LocalRunner and by
   RPCRunner on one board, both number=1 repeat=1 min_repeat_ms=0, in alternating
   blocks of all candidates (--rounds blocks each, after an untimed one), the kernels
   on --threads threads (1 by default: on a busy 2-core machine a two-thread kernel
   may wait a 4 ms scheduler tick at its fork and join, in either runner). Per
   candidate: the runner's wall time (MeasureResult.all_cost less the build) and the
   measured cost; the difference of the wall times is the farm's overhead. Then what
   it is made of: the round trip of an empty session request, and one upload.
2. Throughput: a prebuilt candidate whose packed entry takes --slow-ms, in three
   kinds: `cpu` spins on its thread's CPU clock (a kernel: it needs a core for that
   long), `spin` on the wall clock, `sleep` sleeps (the farm alone, whatever the host's
   cores). The timer calls it twice (a warm-up, then the timed call), so a candidate
   keeps a board busy 2 x --slow-ms. Timed on 1, 2, 4 boards (n_parallel = boards);
   candidates/s and the speed-up over one board. Then the host's builder (the
   candidates/s LocalBuilder(n_parallel=2) built in part 1) against what N boards use.
3. Tracker: --fake-boards raw connections register as boards of one key (a thread reads
   the tracker's "expect" frames and pings every few seconds), then --cycles cycles of
   request (one raw client connection) and release (a "free" on the matched board's
   connection). Errors, cycles/s, request latency, and the tracker process's resident
   memory and threads at each stage.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import re
import select
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

import ember
from ember.autoschedule import HardwareParams, SearchTask, extract_tasks
from ember.autoschedule.annotate import sample_initial_population
from ember.autoschedule.builder import LocalBuilder
from ember.autoschedule.measure import BuildResult, MeasureInput, MeasureResult
from ember.autoschedule.rpc_runner import RPCRunner
from ember.autoschedule.runner import LocalRunner, TimingRunner
from ember.autoschedule.sketch import generate_sketches
from ember.rpc.client import RemoteSession, TrackerClient
from ember.rpc.protocol import Channel, RPCError, connect
from ember.schedule.default import default_schedule
from ember.target import Target
from ember.toolchain import compile_shared

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
KEY = "bench-loopback"
# Guards against a hang, not speed requirements: a process listening, boards
# registering or freed, a runner's candidate, the whole tracker part.
START_SECONDS = 60.0
SETTLE_SECONDS = 20.0
CANDIDATE_TIMEOUT = 10.0
TRACKER_PART_SECONDS = 180.0
# The fake boards ping this often (the tracker drops a board silent for 15 s).
PING_SECONDS = 4.0

# Packed entries in the kernels' calling convention that take SLOW_MS milliseconds;
# SLOW_MS is defined in front. _POSIX_C_SOURCE: clock_gettime and nanosleep under C11.
SLOW_C = """
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <time.h>

static double seconds(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void spin(clockid_t clock) {
  double end = seconds(clock) + 1e-3 * SLOW_MS;
  while (seconds(clock) < end) {
  }
}

int32_t cpu_packed(void* const* args, int32_t num_args) {
  spin(CLOCK_THREAD_CPUTIME_ID);
  return 0;
}

int32_t spin_packed(void* const* args, int32_t num_args) {
  spin(CLOCK_MONOTONIC);
  return 0;
}

int32_t sleep_packed(void* const* args, int32_t num_args) {
  struct timespec t = {SLOW_MS / 1000, (SLOW_MS % 1000) * 1000000L};
  nanosleep(&t, NULL);
  return 0;
}
"""
SLOW_KINDS = {
    "cpu": "spins on CPU time (needs a core)",
    "spin": "spins on the wall clock",
    "sleep": "sleeps (nanosleep)",
}


class BenchmarkError(Exception):
    """Something this benchmark needs did not happen (a service, a board, a result)."""


def _wait_until(condition: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise BenchmarkError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


def _median_ms(values: Sequence[float]) -> float:
    return statistics.median(values) * 1e3


def process_memory(pid: int) -> tuple[int, int]:
    """Resident KiB and threads of process `pid` (Linux /proc)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.split()
    return int(fields["VmRSS"][0]), int(fields["Threads"][0])


# -- services -------------------------------------------------------------------------


class Services:
    """`ember tracker` and `ember server` processes on loopback; stop() ends them.
    Their logs go to files in `logs` (named in errors)."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.processes: list[subprocess.Popen[str]] = []
        self.tracker_pid = 0
        self.tracker_port = 0

    def start_tracker(self) -> None:
        process, self.tracker_port = self._start("tracker", "--host", HOST, "--port", "0")
        self.tracker_pid = process.pid

    def add_servers(self, count: int) -> None:
        """`count` servers of KEY, registered and free before it returns."""
        total = self.board_counts()["total"] + count
        for _ in range(count):
            self._start("server", "--tracker", f"{HOST}:{self.tracker_port}", "--key", KEY,
                        "--host", HOST, "--port", "0")  # fmt: skip
        self.wait_all_free(total)

    def board_counts(self) -> dict[str, int]:
        with TrackerClient(HOST, self.tracker_port, reconnect_seconds=0) as client:
            keys = client.summary()["keys"]
        return keys.get(KEY, {"total": 0, "free": 0, "pending": 0})

    def wait_all_free(self, total: int) -> None:
        """Until the tracker has `total` boards of KEY, all free (a closed session's
        board reports itself free a moment after the client has gone)."""

        def settled() -> bool:
            counts = self.board_counts()
            return counts["total"] == total and counts["free"] == total

        _wait_until(settled, f"{total} free boards of {KEY!r} at the tracker", SETTLE_SECONDS)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        self.processes = []

    def _start(self, *arguments: str) -> tuple[subprocess.Popen[str], int]:
        log_path = self.logs / f"{arguments[0]}-{len(self.processes)}.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "ember.cli", *arguments],
                env=env, stdout=subprocess.PIPE, stderr=log, text=True,
            )  # fmt: skip
        self.processes.append(process)
        return process, _listening_port(process, log_path)


def _listening_port(process: subprocess.Popen[str], log_path: Path) -> int:
    """The port in the process's "... listening on HOST:PORT" line."""
    assert process.stdout is not None
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline and process.poll() is None:
        readable, _, _ = select.select([process.stdout], [], [], 0.5)
        if readable:
            found = re.search(r"listening on \S+:(\d+)", process.stdout.readline())
            if found:
                return int(found.group(1))
    raise BenchmarkError(f"`ember {log_path.stem}` did not start listening; see {log_path}")


# -- candidates -----------------------------------------------------------------------


def find_conv_task(threads: int) -> SearchTask:
    """ResNet-18's (32x32 input) 1x1 shortcut conv with its bias, as the runner tests,
    for `threads` threads (both runners start their helper with that many)."""
    graph, params = ember.testing.get_workload("resnet-18", image_shape=(3, 32, 32))
    target = Target("llvm")
    hardware = replace(HardwareParams.for_target(target), num_cores=threads)
    tasks, _ = extract_tasks(graph, params, target, hardware_params=hardware)
    for task in tasks:
        if re.fullmatch(r"conv(_pack)?_add", task.desc):
            return task
    raise BenchmarkError(f"no 1x1 conv task among {[t.desc for t in tasks]}")


@dataclass
class Built:
    """Part 1's candidates, built, and how fast the builder built them."""

    inputs: list[MeasureInput]
    results: list[BuildResult]
    rates: dict[str, tuple[int, float]] = field(default_factory=dict)  # kind -> (count, s)


def build_candidates(builder: LocalBuilder, task: SearchTask, count: int, sampled: int) -> Built:
    """Randomly annotated states and copies of the default schedule, `count` in all;
    each kind built in one timed call (after a warm-up build that starts the helpers)."""
    default = MeasureInput(task, default_schedule(task.compute_dag, task.target))
    states = sample_initial_population(
        task, generate_sketches(task), min(sampled, count - 1), random.Random(0)
    )
    kinds = {
        "default schedule": [default] * (count - len(states)),
        "randomly annotated": [MeasureInput(task, s) for s in states],
    }
    builder.build([default] * builder.n_parallel)
    built = Built([], [])
    for kind, inputs in kinds.items():
        start = time.perf_counter()
        results = builder.build(inputs)
        built.rates[kind] = (len(inputs), time.perf_counter() - start)
        for measure_input, result in zip(inputs, results, strict=True):
            if result.ok:
                built.inputs.append(measure_input)
                built.results.append(result)
    if not built.results:
        raise BenchmarkError("no candidate built")
    return built


# -- 1. overhead ----------------------------------------------------------------------


@dataclass
class Samples:
    """One runner's timings: per candidate its walls and costs (one per round), and
    each block's wall divided by its candidates."""

    walls: list[list[float]]
    costs: list[list[float]]
    blocks: list[float] = field(default_factory=list)

    @staticmethod
    def empty(count: int) -> Samples:
        return Samples([[] for _ in range(count)], [[] for _ in range(count)])

    def add(self, results: list[MeasureResult], built: Built, wall: float) -> None:
        for index, (result, build) in enumerate(zip(results, built.results, strict=True)):
            if not result.ok:
                raise BenchmarkError(f"a candidate failed: {result.error}: {result.message}")
            self.walls[index].append(result.all_cost - build.time_cost)
            self.costs[index].append(result.costs[0])
        self.blocks.append(wall / len(results))

    def candidate_walls(self) -> list[float]:
        return [statistics.median(w) for w in self.walls]

    def candidate_costs(self) -> list[float]:
        return [statistics.median(c) for c in self.costs]


def _timed_block(runner: TimingRunner, built: Built) -> tuple[list[MeasureResult], float]:
    start = time.perf_counter()
    results = runner.run(built.inputs, built.results)
    return results, time.perf_counter() - start


def measure_overhead(port: int, built: Built, rounds: int) -> dict[str, Samples]:
    """LocalRunner and RPCRunner (one board), alternating blocks of all candidates,
    the order swapped every round; one untimed block of each first."""
    settings = {"number": 1, "repeat": 1, "min_repeat_ms": 0, "timeout": CANDIDATE_TIMEOUT}
    samples = {name: Samples.empty(len(built.results)) for name in ("local", "rpc")}
    with (
        LocalRunner(**settings) as local,
        RPCRunner(KEY, HOST, port, n_parallel=1, **settings) as remote,
    ):
        runners: dict[str, TimingRunner] = {"local": local, "rpc": remote}
        for runner in runners.values():
            _timed_block(runner, built)
        for round_index in range(rounds):
            order = ["local", "rpc"] if round_index % 2 == 0 else ["rpc", "local"]
            for name in order:
                results, wall = _timed_block(runners[name], built)
                samples[name].add(results, built, wall)
    return samples


def measure_round_trips(port: int, library: str, count: int = 100) -> dict[str, float]:
    """Median seconds of the session requests a remote candidate is made of, on a
    board of KEY: an empty one (`files`), uploading `library`, removing it."""
    contents = Path(library).read_bytes()
    times: dict[str, list[float]] = {"empty request": [], "upload": [], "remove": []}
    requests: dict[str, Callable[[RemoteSession], object]] = {
        "empty request": lambda session: session.call({"op": "files"}),
        "upload": lambda session: session.upload(contents, "candidate.so"),
        "remove": lambda session: session.remove("candidate.so"),
    }
    with TrackerClient(HOST, port) as tracker, tracker.request(KEY, timeout=30) as session:
        for _ in range(count):
            for name, request in requests.items():
                start = time.perf_counter()
                request(session)
                times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {**medians, "bytes": len(contents)}


def report_overhead(samples: dict[str, Samples], built: Built, trips: dict[str, float]) -> float:
    """Print part 1's tables; returns the remote wall time per candidate (seconds)."""
    local, remote = samples["local"], samples["rpc"]
    walls = {name: s.candidate_walls() for name, s in samples.items()}
    costs = {name: s.candidate_costs() for name, s in samples.items()}
    task = built.inputs[0].task
    print(f"\n1. Remote vs local measurement: {len(built.results)} candidates of "
          f"{task.desc} ({task.hardware_params.num_cores} threads), number=1 repeat=1 "
          f"min_repeat_ms=0, {len(local.blocks)} alternating blocks")  # fmt: skip
    print("  per candidate: its runner time (all_cost less the build); per block: a block's "
          "wall / its candidates; both medians, as the measured cost")  # fmt: skip
    print(f"  {'runner':24s} {'per candidate':>17s} {'per block':>18s} "
          f"{'measured cost':>14s}")  # fmt: skip
    for name, label in (("local", "LocalRunner"), ("rpc", "RPCRunner, 1 board")):
        print(f"  {label:24s} {_median_ms(walls[name]):14.2f} ms "
              f"{_median_ms(samples[name].blocks):15.2f} ms "
              f"{statistics.median(costs[name]) * 1e6:11.1f} us")  # fmt: skip
    differences = [r - l for r, l in zip(walls["rpc"], walls["local"], strict=True)]
    block_overhead = _median_ms(remote.blocks) - _median_ms(local.blocks)
    print(f"  {'overhead (RPC - local)':24s} {_median_ms(differences):14.2f} ms "
          f"{block_overhead:15.2f} ms   (target: <= 5 ms a candidate)")  # fmt: skip
    ratios = sorted(r / l for r, l in zip(costs["rpc"], costs["local"], strict=True))
    low, high = min(costs["local"]) * 1e6, max(costs["local"]) * 1e6
    print(f"  measured costs, remote / local per candidate: median {statistics.median(ratios):.2f}"
          f", 10th-90th percentile {_percentile(ratios, 10):.2f}-{_percentile(ratios, 90):.2f}"
          f" (local costs {low:.1f}-{high:.1f} us)")  # fmt: skip
    print(f"  a remote candidate is 3 session requests (upload its library, time, remove): "
          f"an empty request takes {trips['empty request'] * 1e3:.2f} ms, the upload of "
          f"{trips['bytes'] / 1024:.0f} KiB {trips['upload'] * 1e3:.2f} ms, its removal "
          f"{trips['remove'] * 1e3:.2f} ms (medians of 100)")  # fmt: skip
    return statistics.median(walls["rpc"])


def _percentile(ordered: Sequence[float], percent: float) -> float:
    return ordered[min(len(ordered) - 1, round(percent / 100 * (len(ordered) - 1)))]


# -- 2. throughput --------------------------------------------------------------------


def slow_library(milliseconds: int) -> Path:
    return compile_shared([f"#define SLOW_MS {milliseconds}\n" + SLOW_C], "llvm")


def measure_throughput(
    services: Services, template: tuple[MeasureInput, BuildResult], library: Path,
    kind: str, boards: int, count: int,
) -> tuple[float, int, float]:  # fmt: skip
    """Candidates/s of `count` `kind` candidates on `boards` boards at once, the
    boards the runner held, and the median measured cost (seconds)."""
    measure_input, good = template
    candidate = BuildResult(str(library), f"{kind}_packed", good.args)
    with RPCRunner(KEY, HOST, services.tracker_port, n_parallel=boards, number=1, repeat=1,
                   min_repeat_ms=0, timeout=CANDIDATE_TIMEOUT) as runner:  # fmt: skip
        # Untimed: the sessions, the timer and arguments uploads, the boards' helpers.
        runner.run([measure_input] * 2 * boards, [candidate] * 2 * boards)
        held = runner.boards
        start = time.perf_counter()
        results = runner.run([measure_input] * count, [candidate] * count)
        wall = time.perf_counter() - start
    failed = [r for r in results if not r.ok]
    if failed:
        raise BenchmarkError(f"{len(failed)} {kind} candidates failed: {failed[0].message}")
    services.wait_all_free(services.board_counts()["total"])
    return count / wall, held, statistics.median(r.costs[0] for r in results)


def report_throughput(
    services: Services, template: tuple[MeasureInput, BuildResult], args: argparse.Namespace
) -> dict[str, dict[int, float]]:
    """Part 2's table; returns candidates/s per kind and board count."""
    library = slow_library(args.slow_ms)
    board_seconds = 2 * args.slow_ms * 1e-3
    print(f"\n2. Throughput: {args.slow_candidates} candidates of {args.slow_ms} ms a call "
          f"(a board busy {board_seconds * 1e3:.0f} ms a candidate: warm-up + timed call); "
          f"ideal = boards / {board_seconds * 1e3:.0f} ms")  # fmt: skip
    print(f"  {'candidate':38s} {'boards':>6s} {'cand/s':>7s} {'speed-up':>8s} "
          f"{'of ideal':>8s} {'cost':>8s}")  # fmt: skip
    rates: dict[str, dict[int, float]] = {}
    for kind, description in SLOW_KINDS.items():
        rates[kind] = {}
        for boards in args.boards:
            rate, held, cost = measure_throughput(
                services, template, library, kind, boards, args.slow_candidates
            )
            if held != boards:
                raise BenchmarkError(f"the runner held {held} boards, not {boards}")
            rates[kind][boards] = rate
            speedup = rate / rates[kind][args.boards[0]] * args.boards[0]
            ideal = boards / board_seconds
            print(f"  {kind + ': ' + description:38s} {boards:6d} {rate:7.2f} {speedup:7.2f}x "
                  f"{rate / ideal:7.0%} {cost * 1e3:5.1f} ms")  # fmt: skip
    return rates


def report_builder(
    built: Built, remote_wall: float, rates: dict[str, dict[int, float]], boards: Sequence[int]
) -> None:
    """The builder's candidates/s against what boards use: a board busy T seconds a
    candidate uses 1/T a second, so N boards outrun the builder when T < N / rate."""
    print("\n  The host's builder, LocalBuilder(n_parallel=2), part 1's candidates:")
    for kind, (count, seconds) in built.rates.items():
        if count:
            each = seconds / count * 1e3
            print(f"    {kind:20s} {count:3d} candidates in {seconds:5.2f} s: "
                  f"{count / seconds:5.2f} candidates/s ({each:.0f} ms each)")  # fmt: skip
    count, seconds = built.rates["default schedule"]
    rate = count / seconds
    slow_seconds = min(rates["sleep"]) / rates["sleep"][min(rates["sleep"])]
    print(f"    boards the builder keeps busy ({rate:.2f} default-schedule builds/s): "
          f"{rate * remote_wall:.2f} with part 1's conv ({remote_wall * 1e3:.2f} ms a "
          f"candidate on a board), {rate * slow_seconds:.2f} with the slow candidates "
          f"({slow_seconds * 1e3:.0f} ms)")  # fmt: skip
    limits = ", ".join(f"{n} board{'s' if n > 1 else ''} {n / rate * 1e3:.0f} ms" for n in boards)
    print(f"    the builder is the limit for candidates that keep a board busy less than: "
          f"{limits}")  # fmt: skip


# -- 3. tracker -----------------------------------------------------------------------


@dataclass
class FakeBoard:
    channel: Channel
    port: int
    tickets: set[str] = field(default_factory=set)  # announced by the tracker


class FakeBoards:
    """Raw connections registered as boards of KEY; a thread reads what the tracker
    sends them (its "expect" frames) and pings on each every PING_SECONDS."""

    def __init__(self, tracker_port: int) -> None:
        self.tracker_port = tracker_port
        self.boards: dict[int, FakeBoard] = {}  # by the port it registered with
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="fake-boards", daemon=True)

    def register(self, count: int) -> None:
        for index in range(count):
            port = 30000 + index
            hello = {"role": "server", "key": KEY, "port": port,
                     "device": {"arch": "x86_64", "fake": True}}  # fmt: skip
            channel, _ = connect(HOST, self.tracker_port, None, hello, what="the tracker")
            self.boards[port] = FakeBoard(channel, port)
            reply, _ = channel.receive(10.0, "the registration answer")
            if not reply.get("ok"):
                self.errors.append(f"board {port} not registered: {reply}")
        self._thread.start()

    def announced(self) -> int:
        return sum(len(board.tickets) for board in self.boards.values())

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        for board in self.boards.values():
            board.channel.close()

    def _poll(self) -> None:
        with selectors.DefaultSelector() as selector:
            for board in self.boards.values():
                selector.register(board.channel.sock, selectors.EVENT_READ, board)
            last_ping = time.monotonic()
            while not self._stop.is_set():
                for key, _ in selector.select(0.2):
                    self._read(key.data, selector)
                if time.monotonic() - last_ping >= PING_SECONDS:
                    for board in self.boards.values():
                        if not board.channel.closed:
                            board.channel.send({"op": "ping"})
                    last_ping = time.monotonic()

    def _read(self, board: FakeBoard, selector: selectors.BaseSelector) -> None:
        try:
            message, _ = board.channel.receive(5.0, "a tracker frame")
        except RPCError as error:
            self.errors.append(f"board {board.port}: {error}")
            selector.unregister(board.channel.sock)
            board.channel.close()
            return
        if message.get("op") == "expect":
            board.tickets.add(str(message.get("ticket")))
        else:
            self.errors.append(f"board {board.port} got {message}")


@dataclass
class TrackerRun:
    memory: list[tuple[str, int, int]] = field(default_factory=list)  # stage, KiB, threads
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    register_seconds: float = 0.0
    cycle_seconds: float = 0.0
    uses: dict[int, int] = field(default_factory=dict)  # board port -> times matched


def request_cycles(
    client: Channel, fakes: FakeBoards, count: int, run: TrackerRun, sample: Callable[[str], None]
) -> list[tuple[FakeBoard, str]]:
    """`count` request / release cycles; the (board, ticket) of each match."""
    matched = []
    deadline = time.monotonic() + TRACKER_PART_SECONDS
    start = time.perf_counter()
    for cycle in range(1, count + 1):
        if time.monotonic() > deadline:
            run.errors.append(f"stopped after {cycle - 1} cycles: out of time")
            break
        begin = time.perf_counter()
        client.send({"op": "request", "key": KEY, "priority": 0, "timeout": 10})
        reply, _ = client.receive(30.0, "a board")
        run.latencies.append(time.perf_counter() - begin)
        board = fakes.boards.get(reply.get("port", -1))
        if "error" in reply or board is None or reply.get("key") != KEY:
            run.errors.append(f"cycle {cycle}: {reply}")
            continue
        board.channel.send({"op": "free", "ticket": reply["ticket"]})
        matched.append((board, str(reply["ticket"])))
        run.uses[board.port] = run.uses.get(board.port, 0) + 1
        if cycle in (count // 2, count):
            sample(f"after {cycle} cycles")
    run.cycle_seconds = time.perf_counter() - start
    return matched


def _summary(client: Channel) -> dict[str, int]:
    reply, _ = client.request({"op": "summary"}, timeout=10.0)
    return dict(reply["keys"].get(KEY, {"total": 0, "free": 0, "pending": 0}))


def check_after_cycles(
    client: Channel, fakes: FakeBoards, matched: list[tuple[FakeBoard, str]], run: TrackerRun
) -> None:
    """Every match announced to its own board; all boards free again, nothing queued."""
    try:
        _wait_until(lambda: fakes.announced() >= len(matched), "the expect frames", 10.0)
    except BenchmarkError as error:
        run.errors.append(str(error))
    run.errors += [f"ticket {t} never announced to board {b.port}" for b, t in matched
                   if t not in b.tickets]  # fmt: skip
    boards = len(fakes.boards)
    settled = {"total": boards, "free": boards, "pending": 0}
    try:
        _wait_until(lambda: _summary(client) == settled, "every board free", 10.0)
    except BenchmarkError:
        run.errors.append(f"after the cycles the tracker says {_summary(client)}")
    run.errors += fakes.errors


def measure_tracker(logs: Path, boards: int, cycles: int) -> TrackerRun:
    run = TrackerRun()
    services = Services(logs)
    with ExitStack() as stack:
        stack.callback(services.stop)
        services.start_tracker()
        pid = services.tracker_pid

        def sample(stage: str) -> None:
            run.memory.append((stage, *process_memory(pid)))

        time.sleep(0.5)  # the tracker's start-up settled
        sample("started")
        fakes = FakeBoards(services.tracker_port)
        stack.callback(fakes.close)
        start = time.perf_counter()
        fakes.register(boards)
        run.register_seconds = time.perf_counter() - start
        sample(f"{boards} boards registered")
        client, _ = connect(HOST, services.tracker_port, None, {"role": "client"})
        stack.callback(client.close)
        matched = request_cycles(client, fakes, cycles, run, sample)
        check_after_cycles(client, fakes, matched, run)
        fakes.close()
        _wait_until(lambda: _summary(client)["total"] == 0, "the boards to be dropped", 10.0)
        sample("boards disconnected")
    return run


def report_tracker(run: TrackerRun, boards: int, cycles: int) -> None:
    done = len(run.latencies)
    print(f"\n3. Tracker: {boards} fake boards, {cycles} request/release cycles from one "
          "client connection")  # fmt: skip
    print(f"  registration: {boards} boards in {run.register_seconds:.2f} s "
          f"({boards / run.register_seconds:.0f}/s, handshake included)")  # fmt: skip
    latencies = sorted(run.latencies)
    print(f"  cycles: {done} in {run.cycle_seconds:.2f} s: {done / run.cycle_seconds:.0f} "
          f"cycles/s; request latency median {_median_ms(latencies):.2f} ms, "
          f"99th percentile {_percentile(latencies, 99) * 1e3:.2f} ms")  # fmt: skip
    uses = sorted(run.uses.values())
    print(f"  boards matched: {len(uses)} of {boards}, {uses[0]}-{uses[-1]} times each"
          if uses else "  boards matched: none")  # fmt: skip
    print(f"  errors: {len(run.errors)}")
    for error in run.errors[:5]:
        print(f"    {error}")
    print(f"  {'tracker process':32s} {'RSS':>10s} {'threads':>8s}")
    for stage, kib, threads in run.memory:
        print(f"  {stage:32s} {kib / 1024:7.1f} MiB {threads:8d}")


# -- main -----------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        output = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    found = re.search(r"Model name:\s*(.+)", output)
    return found.group(1).strip() if found else "unknown"


def farm_parts(args: argparse.Namespace, logs: Path) -> None:
    """Parts 1 and 2: one tracker and max(--boards) servers."""
    task = find_conv_task(args.threads)
    services = Services(logs)
    with ExitStack() as stack:
        stack.callback(services.stop)
        builder = stack.enter_context(LocalBuilder(n_parallel=2))
        built = build_candidates(builder, task, args.candidates, args.sampled)
        services.start_tracker()
        services.add_servers(max(args.boards))
        samples = measure_overhead(services.tracker_port, built, args.rounds)
        services.wait_all_free(max(args.boards))
        trips = measure_round_trips(services.tracker_port, str(built.results[0].path))
        remote_wall = report_overhead(samples, built, trips)
        services.wait_all_free(max(args.boards))
        template = (built.inputs[0], built.results[0])
        rates = report_throughput(services, template, args)
        report_builder(built, remote_wall, rates, args.boards)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=40, help="part 1's candidates")
    parser.add_argument("--sampled", type=int, default=20, help="of which randomly annotated")
    parser.add_argument("--rounds", type=int, default=10, help="timed blocks per runner")
    parser.add_argument("--threads", type=int, default=1, help="part 1's kernel threads")
    parser.add_argument("--slow-ms", type=int, default=50, help="part 2's call, ms")
    parser.add_argument("--slow-candidates", type=int, default=32, help="per configuration")
    parser.add_argument("--boards", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--fake-boards", type=int, default=200, help="part 3's boards")
    parser.add_argument("--cycles", type=int, default=1000, help="part 3's request/release")
    args = parser.parse_args()
    os.environ.pop("EMBER_RPC_TOKEN_FILE", None)  # loopback, no token, for every side
    print(f"RPC device farm on loopback: {cpu_model()}, {os.cpu_count()} CPUs, "
          f"{datetime.date.today()}, load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ember-rpc-farm-") as tmp:
        farm_parts(args, Path(tmp))
        run = measure_tracker(Path(tmp), args.fake_boards, args.cycles)
        report_tracker(run, args.fake_boards, args.cycles)
    print(f"\n(total {time.monotonic() - started:.0f} s, load average now "
          f"{os.getloadavg()[0]:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()

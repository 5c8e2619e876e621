#!/usr/bin/env python3
"""ICP (RFC 2186) queries answered per second: harvest-cache against Squid, run by hand.

    python bench/icp.py [--duration 10] [--repeats 3] [--windows 1,16,128] [--objects 1000]
                        [--only squid|harvest] [--squid-log-icp on|off] [--keep]
    python bench/icp.py --calibrate       # the generator against a trivial echo responder only

Each system is started fresh on core 0 with its ICP port open to 127.0.0.0/8, and ``--objects``
1 KiB objects are fetched through its HTTP port so that it holds them fresh (max-age=3600). A
query generator (a separate process on core 1: plain blocking UDP socket, no event loop) then
keeps W queries outstanding for ``--duration`` seconds, half for the stored URLs and half for
URLs never fetched, and counts the replies, their opcodes and their latency; a query with no
reply within 1 s is lost (and replaced, so the window stays full). Every run first measures
the generator against a trivial echo responder on core 0, the ceiling of the client. Results
are printed with the Harvest/Squid ratios and written to bench/results/icp.json. See
bench/README.md ("ICP").

Internal modes (started by the harness itself): ``--generate`` (the query generator) and
``--echo`` (the echo responder).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import errno
import json
import os
import platform
import random
import resource
import socket
import statistics
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import run as base

DEFAULT_OUTPUT = base.BENCH / "results" / "icp.json"
HOST = base.HOST
SYSTEMS = ("squid", "harvest")
REPLY_TIMEOUT = 1.0  # a query with no reply within this is lost
TARGET = 1.0  # the target: Harvest answers at least as many queries/s as Squid
HIT, MISS, MISS_NOFETCH, QUERY = 2, 3, 21, 1
OPCODE_NAMES = {
    1: "QUERY",
    2: "HIT",
    3: "MISS",
    4: "ERR",
    10: "SECHO",
    11: "DECHO",
    21: "MISS_NOFETCH",
    22: "DENIED",
    23: "HIT_OBJ",
}
# ICP v2 header: opcode, version, length (the whole datagram), request number, options, option
# data, sender address; a QUERY's payload is the requester address (0), the URL and a NUL.
HEADER = struct.Struct("!BBHIIII")
REPLY_HEAD = struct.Struct("!BBHI")
NUMBER = struct.Struct("!I")
SO_RCVTIMEO_20MS = struct.pack("ll", 0, 20_000)
HIST_US = 100_000  # latency histogram: 1 µs buckets up to 100 ms, then one overflow bucket


def say(*parts: object) -> None:
    print(*parts, flush=True)


# -- the query generator (its own process, on core 1) -----------------------------------------


def query_datagram(number: int, url: str) -> bytes:
    payload = b"\0\0\0\0" + url.encode("latin-1") + b"\0"
    return HEADER.pack(1, 2, HEADER.size + len(payload), number, 0, 0, 0) + payload


def percentile_us(hist: list[int], fraction: float) -> float | None:
    total = sum(hist)
    if not total:
        return None
    want = fraction * total
    seen = 0
    for us, n in enumerate(hist):
        seen += n
        if seen >= want:
            return float(us)
    return float(HIST_US)


def generate(
    port: int,
    window: int,
    duration: float,
    urls: list[str],
    stored: list[bool],
    unique_misses: bool = False,
) -> dict[str, Any]:
    """Keep ``window`` queries outstanding at 127.0.0.1:``port`` for ``duration`` seconds.

    One blocking UDP socket, connected (so only the server's replies reach it), with a 20 ms
    receive timeout (SO_RCVTIMEO) so that every wait is bounded. Request numbers count up from
    1; query N asks for ``urls[N % len(urls)]``. Every reply is matched to its query by the
    echoed request number and checked (version 2, length field = datagram size).

    ``unique_misses``: a query for a URL not stored (``stored[i]`` false) asks for that URL
    with ``&q=N`` appended (N the request number), so that no such URL is ever asked twice.
    """
    n = len(urls)
    bufs = [bytearray(query_datagram(0, u)) for u in urls]
    # For each URL made new per query: the payload up to the number (requester 0, the URL).
    fresh: list[bytes | None] = [
        b"\0\0\0\0" + (u + "&q=").encode("latin-1") if unique_misses and not s else None
        for u, s in zip(urls, stored, strict=True)
    ]
    pack_header = HEADER.pack
    header_size = HEADER.size
    kind = [256 if s else 0 for s in stored]  # (offsets into by_class)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.bind((HOST, 0))
    sock.connect((HOST, port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, SO_RCVTIMEO_20MS)
    send, recv = sock.send, sock.recv
    set_number = NUMBER.pack_into
    head = REPLY_HEAD.unpack_from
    clock = time.perf_counter_ns
    timeout_ns = int(REPLY_TIMEOUT * 1e9)
    hist = [0] * (HIST_US + 1)
    # Replies by (URL class, opcode): index kind * 256 + opcode.
    by_class = [0] * 512
    outstanding: dict[int, int] = {}  # request number -> send time (ns), oldest first
    seq = sent = answered = replied = lost = late = unknown = malformed = send_errors = 0
    cpu_start = time.process_time()
    start = clock()
    end = start + int(duration * 1e9)
    drain_end = end + timeout_ns
    next_sweep = start + 20_000_000

    def fire(now: int) -> None:  # (off the hot path: the reply loop below inlines it)
        nonlocal seq, sent, send_errors
        seq += 1
        i = seq % n
        pre = fresh[i]
        if pre is None:
            buf: bytes | bytearray = bufs[i]
            set_number(buf, 4, seq)
        else:
            tail = b"%d\0" % seq
            buf = pack_header(1, 2, header_size + len(pre) + len(tail), seq, 0, 0, 0) + pre + tail
        outstanding[seq] = now
        try:
            send(buf)
        except OSError:  # (ECONNREFUSED from an earlier ICMP error, ENOBUFS)
            send_errors += 1
        sent += 1

    for _ in range(window):
        fire(clock())
    pop = outstanding.pop
    buf: bytes | bytearray
    while True:
        try:
            data = recv(2048)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.ECONNREFUSED):
                raise
            data = None
        now = clock()
        if data is not None:
            try:
                op, version, length, number = head(data)
            except struct.error:
                malformed += 1
                if now >= drain_end:  # (no stream of stray datagrams keeps this running)
                    break
                continue
            t0 = pop(number, None)
            if t0 is None:
                if number <= seq:
                    late += 1  # already counted lost
                else:
                    unknown += 1
                if now >= drain_end:
                    break
                continue
            replied += 1
            if now < end:
                if version == 2 and length == len(data):
                    answered += 1
                    us = (now - t0) // 1000
                    hist[us if us < HIST_US else HIST_US] += 1
                    by_class[kind[number % n] + op] += 1
                else:
                    malformed += 1
                seq += 1  # the next query, inline (fire() without the call)
                i = seq % n
                pre = fresh[i]
                if pre is None:
                    buf = bufs[i]
                    set_number(buf, 4, seq)
                else:
                    tail = b"%d\0" % seq
                    buf = (
                        pack_header(1, 2, header_size + len(pre) + len(tail), seq, 0, 0, 0)
                        + pre
                        + tail
                    )
                outstanding[seq] = now
                try:
                    send(buf)
                except OSError:
                    send_errors += 1
                sent += 1
                if now < next_sweep:
                    continue
            elif version != 2 or length != len(data):
                malformed += 1
        if now >= next_sweep or data is None:
            next_sweep = now + 20_000_000
            expired = []
            for number, t0 in outstanding.items():
                if now - t0 < timeout_ns:
                    break
                expired.append(number)
            for number in expired:
                del outstanding[number]
                lost += 1
                if now < end:
                    fire(now)
            if now < end and not outstanding:  # (every query was lost: refill the window)
                for _ in range(window):
                    fire(now)
        if now >= end and (not outstanding or now >= drain_end):
            break
    wall_s = (clock() - start) / 1e9
    cpu_s = time.process_time() - cpu_start
    lost += len(outstanding)
    sock.close()
    seconds = duration
    classes: dict[str, dict[str, int]] = {}
    for k, name in ((1, "stored"), (0, "unstored")):
        counts = {
            OPCODE_NAMES.get(op, str(op)): by_class[k * 256 + op]
            for op in range(256)
            if by_class[k * 256 + op]
        }
        classes[name] = counts
    p50 = percentile_us(hist, 0.50)
    p99 = percentile_us(hist, 0.99)
    return {
        "window": window,
        "seconds": seconds,
        "loop_wall_s": round(wall_s, 3),
        "loop_cpu_s": round(cpu_s, 3),
        "sent": sent,
        "answered": answered,
        "answered_per_s": round(answered / seconds, 1),
        "replied": replied,
        "lost": lost,
        "late": late,
        "unknown": unknown,
        "malformed": malformed,
        "send_errors": send_errors,
        "p50_ms": round(p50 / 1000, 4) if p50 is not None else None,
        "p99_ms": round(p99 / 1000, 4) if p99 is not None else None,
        "replies": classes,
    }


def generator_main(args: argparse.Namespace) -> int:
    spec = json.loads(Path(args.urls).read_text())
    result = generate(
        args.port,
        args.window,
        args.duration,
        spec["urls"],
        spec["stored"],
        spec.get("unique_misses", False),
    )
    print("ICPJSON " + json.dumps(result), flush=True)
    return 0


def echo_main(args: argparse.Namespace) -> int:
    """Send every datagram back unchanged (opcode QUERY and all), for ``--lifetime`` s at most."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((HOST, args.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 200_000))
    recvfrom, sendto = sock.recvfrom, sock.sendto
    deadline = time.monotonic() + args.lifetime
    while time.monotonic() < deadline:
        for _ in range(65_536):  # check the deadline at least this often
            try:
                data, addr = recvfrom(2048)
            except BlockingIOError:
                break
            with contextlib.suppress(OSError):
                sendto(data, addr)
    return 0


# -- the harness ----------------------------------------------------------------------------


def harvest_extra_toml(harvest_cmd: list[str] | None) -> str:
    """TOML that every harvest-cache this starts gets: no admin listener, where the build has
    one (its default port, 3129, would clash between caches and with anything else there)."""
    if harvest_cmd is None:
        return ""
    try:
        ref = subprocess.run(
            [*harvest_cmd, "--config-reference"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return '\n[admin]\nlisten = "none"\n' if "## [admin]" in ref else ""


QUIET_PERCENT = 5.0  # a run in which other processes took more of a core than this is redone


def wait_quiet(limit: float, quiet_seconds: int = 3) -> float:
    """Wait (at most ``limit`` seconds) until both cores were less than QUIET_PERCENT busy in
    each of ``quiet_seconds`` seconds in a row (the servers under test idle meanwhile); the
    seconds waited."""
    t0 = time.monotonic()
    before = base.core_seconds()
    quiet = 0
    while time.monotonic() - t0 < limit and quiet < quiet_seconds:
        time.sleep(1.0)
        after = base.core_seconds()
        busy = [after[c][0] - before[c][0] for c in (base.PROXY_CPU, base.CLIENT_CPU)]
        before = after
        quiet = quiet + 1 if max(busy) * 100 < QUIET_PERCENT else 0  # (over about a second)
    return time.monotonic() - t0


def disturbed(run: IcpRun) -> bool:
    return max(run.others_core0_percent, run.others_core1_percent) > QUIET_PERCENT


def measured_run(
    args: argparse.Namespace,
    label: str,
    procs: base.Processes,
    port: int,
    window: int,
    urls: Path,
    pgid: int,
) -> IcpRun:
    """One run, after the machine is quiet; redone (``--retries`` times at most) when other
    processes took more than QUIET_PERCENT of either core during it."""
    run = None
    for attempt in range(args.retries + 1):
        waited = wait_quiet(args.quiet_wait)
        if args.quiet_wait and waited >= args.quiet_wait:
            say(f"  (the machine was still busy after {waited:.0f} s: running anyway)")
        run = run_generator(procs, port, window, args.duration, urls, pgid)
        if not disturbed(run) or attempt == args.retries:
            break
        say(
            f"  ({label} W={window}: other processes took {run.others_core0_percent:.0f}%/"
            f"{run.others_core1_percent:.0f}% of cores {base.PROXY_CPU}/{base.CLIENT_CPU}:"
            " run again)"
        )
    assert run is not None
    return run


def tree_state() -> str:
    """The commit checked out, and whether harvest_cache/ differs from it (what a
    harvest-cache started now runs: the tree may change between runs)."""
    commit = base.version_of(["git", "-C", str(base.REPO), "rev-parse", "HEAD"])
    try:
        dirty = subprocess.run(
            ["git", "-C", str(base.REPO), "status", "--porcelain", "--", "harvest_cache"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return commit
    return commit + (" plus uncommitted changes to harvest_cache/" if dirty else "")


def free_udp_port() -> int:
    """A UDP port free on the wildcard address (where Squid binds its ICP socket)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def icp_probe(port: int, urls: list[str], first_number: int = 1) -> list[int | None]:
    """One query at a time for each URL; the reply opcodes (None: no reply within 1 s)."""
    out: list[int | None] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((HOST, 0))
        s.connect((HOST, port))
        s.settimeout(REPLY_TIMEOUT)
        for i, url in enumerate(urls):
            number = first_number + i
            op: int | None = None
            try:
                s.send(query_datagram(number, url))
                deadline = time.monotonic() + REPLY_TIMEOUT
                while time.monotonic() < deadline:  # skip stray replies to other numbers
                    data = s.recv(2048)
                    if len(data) >= 8 and REPLY_HEAD.unpack_from(data)[3] == number:
                        op = data[0]
                        break
            except (TimeoutError, ConnectionRefusedError):
                pass
            out.append(op)
    return out


def wait_icp(port: int, proc: subprocess.Popen[bytes], url: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise base.BenchError(f"exited with status {proc.returncode} before answering ICP")
        if icp_probe(port, [url], 999_999)[0] is not None:
            return
        time.sleep(0.2)
    raise base.BenchError(f"no ICP reply on {HOST}:{port} after {timeout:.0f} s")


@dataclass
class IcpRun:
    answered_per_s: float
    sent: int
    answered: int
    lost: int
    loss_percent: float
    p50_ms: float | None
    p99_ms: float | None
    hit_percent: float  # of the replies
    wrong: int  # a stored URL not answered HIT, or a never-fetched one answered HIT
    replies: dict[str, dict[str, int]]
    server_cpu_percent: float
    generator_cpu_percent: float
    others_core0_percent: float
    others_core1_percent: float
    steal_percent: float
    late: int
    unknown: int
    malformed: int
    send_errors: int


@dataclass
class WindowResult:
    window: int
    runs: list[IcpRun]
    answered_per_s: float
    loss_percent: float
    p50_ms: float | None
    p99_ms: float | None
    hit_percent: float
    wrong: int
    server_cpu_percent: float
    generator_cpu_percent: float
    checks: list[str] = field(default_factory=list)


def run_generator(
    procs: base.Processes,
    port: int,
    window: int,
    duration: float,
    urls_file: Path,
    server_pgid: int | None,
) -> IcpRun:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--generate",
        "--port",
        str(port),
        "--window",
        str(window),
        "--duration",
        str(duration),
        "--urls",
        str(urls_file),
    ]
    cpu_before = base.cpu_seconds(server_pgid) if server_pgid else 0.0
    cores_before = base.core_seconds()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = procs.start(argv, None, base.CLIENT_CPU)
    try:
        out, _ = proc.communicate(timeout=duration + 60)
    finally:
        procs.stop(proc)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cores_after = base.core_seconds()
    cpu = (base.cpu_seconds(server_pgid) - cpu_before) if server_pgid else 0.0
    gen_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    text = out.decode(errors="replace")
    raw = None
    for line in text.splitlines():
        if line.startswith("ICPJSON "):
            raw = json.loads(line[len("ICPJSON ") :])
    if raw is None:
        raise base.BenchError(
            f"the generator printed no result (status {proc.returncode}):\n{text[-2000:]}"
        )
    # The server's CPU share is over the measured seconds (it idles while the generator
    # starts and drains); the generator's is its own, over its query loop.
    wall = raw["seconds"]

    def task(core: str) -> float:
        return cores_after[core][0] - cores_before[core][0]

    steal = sum(cores_after[c][1] - cores_before[c][1] for c in cores_after)
    replies = raw["replies"]
    stored, unstored = replies.get("stored", {}), replies.get("unstored", {})
    total = sum(stored.values()) + sum(unstored.values())
    hits = stored.get("HIT", 0) + unstored.get("HIT", 0)
    wrong = sum(v for k, v in stored.items() if k != "HIT") + unstored.get("HIT", 0)
    decided = raw["replied"] + raw["lost"]
    return IcpRun(
        answered_per_s=raw["answered_per_s"],
        sent=raw["sent"],
        answered=raw["answered"],
        lost=raw["lost"],
        loss_percent=round(100 * raw["lost"] / decided, 3) if decided else 0.0,
        p50_ms=raw["p50_ms"],
        p99_ms=raw["p99_ms"],
        hit_percent=round(100 * hits / total, 2) if total else 0.0,
        wrong=wrong,
        replies=replies,
        server_cpu_percent=round(100 * cpu / wall, 1),
        generator_cpu_percent=round(100 * raw["loop_cpu_s"] / raw["loop_wall_s"], 1),
        others_core0_percent=round(max(0.0, 100 * (task(base.PROXY_CPU) - cpu) / wall), 1),
        others_core1_percent=round(max(0.0, 100 * (task(base.CLIENT_CPU) - gen_cpu) / wall), 1),
        steal_percent=round(100 * steal / wall, 1),
        late=raw["late"],
        unknown=raw["unknown"],
        malformed=raw["malformed"],
        send_errors=raw["send_errors"],
    )


def median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def summarize(window: int, runs: list[IcpRun], echo: bool) -> WindowResult:
    p50s = [r.p50_ms for r in runs if r.p50_ms is not None]
    p99s = [r.p99_ms for r in runs if r.p99_ms is not None]
    res = WindowResult(
        window=window,
        runs=runs,
        answered_per_s=median([r.answered_per_s for r in runs]),
        loss_percent=median([r.loss_percent for r in runs]),
        p50_ms=median(p50s) if p50s else None,
        p99_ms=median(p99s) if p99s else None,
        hit_percent=median([r.hit_percent for r in runs]),
        wrong=sum(r.wrong for r in runs),
        server_cpu_percent=median([r.server_cpu_percent for r in runs]),
        generator_cpu_percent=median([r.generator_cpu_percent for r in runs]),
    )
    res.checks = checks(res, echo)
    return res


def checks(res: WindowResult, echo: bool) -> list[str]:
    """What makes a window's numbers suspect (empty when they look sane)."""
    problems = []
    answered = sum(r.answered for r in res.runs)
    if not answered:
        return ["no query was answered"]
    if not echo:
        if not 45 <= res.hit_percent <= 55:
            problems.append(f"{res.hit_percent:.1f}% of replies were HIT (expected about 50%)")
        if res.wrong > 0.01 * answered:
            problems.append(f"{res.wrong} of {answered} replies had the wrong answer")
    if res.loss_percent > 1:
        problems.append(f"{res.loss_percent:.2f}% of queries lost")
    odd = sum(r.malformed + r.unknown for r in res.runs)
    if odd:
        problems.append(f"{odd} malformed or unmatched replies")
    if res.window > 1 and res.server_cpu_percent < 80 and not echo:
        problems.append(
            f"the server used {res.server_cpu_percent:.0f}% of its core with {res.window}"
            " outstanding: the generator may be the bottleneck"
        )
    if res.window > 1 and res.generator_cpu_percent >= 95 and not echo:
        problems.append(
            f"the generator used {res.generator_cpu_percent:.0f}% of core {base.CLIENT_CPU}"
        )
    return problems + base.disturbances(res.runs)


def print_run(label: str, window: int, i: int, repeats: int, run: IcpRun) -> None:
    say(
        f"  {label:17} W={window:<4} run {i + 1}/{repeats}: {run.answered_per_s:10,.0f} answered/s"
        f"  loss {run.loss_percent:5.2f}%  p50 {fmt_ms(run.p50_ms)} ms  p99 {fmt_ms(run.p99_ms)} ms"
        f"  HIT {run.hit_percent:5.1f}%  cpu {run.server_cpu_percent:3.0f}%"
        f" (generator {run.generator_cpu_percent:.0f}%, others {run.others_core0_percent:.0f}%/"
        f"{run.others_core1_percent:.0f}%, steal {run.steal_percent:.0f}%)"
        + (f"  wrong {run.wrong}" if run.wrong and not label.startswith("echo") else "")
    )


def fmt_ms(v: float | None) -> str:
    return f"{v:6.3f}" if v is not None else "     -"


STREAMS = {
    "unique": "stored URLs cycled; every query for a URL not stored names a new URL",
    "repeated": "stored URLs and as many never-fetched URLs, all cycled (each asked again"
    " every 2 x --objects queries)",
}


def url_spec(
    origin: str, objects: int, workdir: Path, tag: str, stream: str
) -> tuple[Path, list[str], list[str]]:
    """The query stream's URLs: ``objects`` to store and as many never fetched, shuffled;
    with the stream "unique", the generator makes each query for a never-fetched one new."""
    stored = [f"http://{origin}/obj/1k?r=icp-{tag}&n={i}" for i in range(objects)]
    never = [f"http://{origin}/obj/1k?r=icp-never-{tag}&n={i}" for i in range(objects)]
    pairs = [(u, True) for u in stored] + [(u, False) for u in never]
    random.Random(2186).shuffle(pairs)
    path = workdir / f"urls-{tag}-{stream}.json"
    path.write_text(
        json.dumps(
            {
                "urls": [u for u, _ in pairs],
                "stored": [s for _, s in pairs],
                "unique_misses": stream == "unique",
            }
        )
    )
    return path, stored, never


def calibrate(args: argparse.Namespace, procs: base.Processes, workdir: Path) -> dict[str, Any]:
    """The generator against a Python echo responder on core 0 (a lower bound of its ceiling:
    when the responder's core is saturated, the generator could go faster still)."""
    say(f"\n=== echo responder (calibration: the generator's ceiling), core {base.PROXY_CPU} ===")
    port = free_udp_port()
    runs_total = len(args.window_list) * len(args.stream_list) * args.calibrate_repeats
    # (It is stopped when done; this bounds it should the harness die without stopping it.)
    lifetime = (args.duration + 5 + args.quiet_wait) * runs_total * (args.retries + 1) + 60
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--echo",
        "--port",
        str(port),
        "--lifetime",
        str(lifetime),
    ]
    proc = procs.start(argv, workdir / "echo.log", base.PROXY_CPU)
    out: dict[str, Any] = {"streams": {}}
    try:
        for stream in args.stream_list:
            urls, stored, _ = url_spec("127.0.0.1:9", 1000, workdir, "echo", stream)
            deadline = time.monotonic() + 10
            while icp_probe(port, stored[:1])[0] is None:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise base.BenchError(
                        f"the echo responder does not answer\n{base.tail(workdir / 'echo.log')}"
                    )
                time.sleep(0.1)
            windows: dict[str, Any] = {}
            for w in args.window_list:
                runs = []
                for r in range(args.calibrate_repeats):
                    run = measured_run(args, "echo", procs, port, w, urls, proc.pid)
                    runs.append(run)
                    print_run(f"echo {stream}", w, r, args.calibrate_repeats, run)
                windows[str(w)] = asdict(summarize(w, runs, echo=True))
            out["streams"][stream] = {"windows": windows}
    finally:
        procs.stop(proc)
    return out


def bench_system(
    system: str,
    args: argparse.Namespace,
    procs: base.Processes,
    workdir: Path,
    origin: base.Origin,
    harvest_cmd: list[str] | None,
) -> dict[str, Any]:
    say(f"\n=== {system} ===")
    icp_port = free_udp_port()
    extra = harvest_extra_toml(harvest_cmd) if system == "harvest" else ""
    if system == "squid" and args.squid_log_icp == "off":
        extra = "log_icp_queries off\n"
    proxy = base.Proxy(
        system,
        procs,
        workdir,
        args.memory_mb,
        True,
        harvest_cmd,
        icp_port=icp_port,
        extra_conf=extra,
    )
    out: dict[str, Any] = {
        "status": "ok",
        "version": proxy.version,
        "command": proxy.argv,
        "icp_port": icp_port,
        "streams": {},
    }
    if system == "harvest":
        out["tree_at_start"] = tree_state()
    try:
        tag = f"{system[0]}{time.time_ns() % 10**12:x}"
        files = {s: url_spec(origin.hostport, args.objects, workdir, tag, s) for s in STREAMS}
        _, stored, never = files["repeated"]
        wait_icp(icp_port, proxy.proc, never[0])
        t = time.monotonic()
        for url in stored:
            proxy.get(url, base.SIZES["1k"])
        say(f"  warmed {len(stored)} objects through HTTP in {time.monotonic() - t:.1f} s")
        probe_stored = icp_probe(icp_port, stored, 1)
        probe_never = icp_probe(icp_port, never, 1 + len(stored))
        probe = {
            "stored": dict(_count(probe_stored)),
            "never_fetched": dict(_count(probe_never)),
        }
        out["probe"] = probe
        say(
            f"  one-at-a-time probe: stored {probe['stored']},"
            f" never fetched {probe['never_fetched']}"
        )
        for stream in args.stream_list:
            urls_file = files[stream][0]
            windows: dict[str, Any] = {}
            for w in args.window_list:
                runs = []
                for r in range(args.repeats):
                    run = measured_run(args, system, procs, icp_port, w, urls_file, proxy.pgid)
                    if proxy.proc.poll() is not None:
                        raise base.BenchError(
                            f"{system} died during W={w}\n{base.tail(proxy.error_log)}"
                        )
                    runs.append(run)
                    print_run(f"{system} {stream}", w, r, args.repeats, run)
                res = summarize(w, runs, echo=False)
                for problem in res.checks:
                    say(f"  WARNING {stream} W={w}: {problem}")
                windows[str(w)] = asdict(res)
            out["streams"][stream] = {"windows": windows}
    finally:
        proxy.stop()
    return out


def _count(ops: list[int | None]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for op in ops:
        name = "no reply" if op is None else OPCODE_NAMES.get(op, str(op))
        counts[name] = counts.get(name, 0) + 1
    return counts


def ratios(report: dict[str, Any], streams: list[str], windows: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    systems = report["systems"]
    sq, hv = systems.get("squid", {}), systems.get("harvest", {})
    if sq.get("status") != "ok" or hv.get("status") != "ok":
        return out
    for stream in streams:
        for w in windows:
            s = sq["streams"].get(stream, {}).get("windows", {}).get(str(w))
            h = hv["streams"].get(stream, {}).get("windows", {}).get(str(w))
            if not s or not h:
                continue

            def ratio(key: str, s: dict[str, Any] = s, h: dict[str, Any] = h) -> float | None:
                return round(h[key] / s[key], 2) if s[key] and h[key] is not None else None

            r = {
                "answered_per_s": ratio("answered_per_s"),
                "p50": ratio("p50_ms"),
                "p99": ratio("p99_ms"),
            }
            r["target"] = TARGET
            r["meets_target"] = r["answered_per_s"] is not None and r["answered_per_s"] >= TARGET
            out.setdefault(stream, {})[str(w)] = r
    return out


def table(report: dict[str, Any], streams: list[str], windows: list[int]) -> None:
    head = (
        f"{'stream':8} {'W':>4} {'system':8} {'answered/s':>11} {'loss%':>6} {'p50 ms':>7}"
        f" {'p99 ms':>7} {'HIT%':>5} {'wrong':>6} {'cpu0%':>5} {'cpu1%':>5}"
    )
    say("\n" + head)
    say("-" * len(head))
    rows = [("echo", report.get("calibration"))] + [(s, report["systems"].get(s)) for s in SYSTEMS]
    for stream in streams:
        for w in windows:
            for name, res in rows:
                if res is None:
                    continue
                if res.get("status", "ok") != "ok":
                    say(f"{stream:8} {w:>4} {name:8} could not run: see above")
                    continue
                r = res["streams"].get(stream, {}).get("windows", {}).get(str(w))
                if r is None:
                    continue
                hit = "-" if name == "echo" else f"{r['hit_percent']:5.1f}"
                wrong = "-" if name == "echo" else str(r["wrong"])
                say(
                    f"{stream:8} {w:>4} {name:8} {r['answered_per_s']:11,.0f}"
                    f" {r['loss_percent']:6.2f} {fmt_ms(r['p50_ms']):>7} {fmt_ms(r['p99_ms']):>7}"
                    f" {hit:>5} {wrong:>6} {r['server_cpu_percent']:5.0f}"
                    f" {r['generator_cpu_percent']:5.0f}" + ("  SUSPECT" if r["checks"] else "")
                )
            ratio = report["ratios"].get(stream, {}).get(str(w))
            if ratio:
                verdict = "meets" if ratio["meets_target"] else "MISSES"
                p50 = f"{ratio['p50']:6.2f}x" if ratio["p50"] is not None else "      -"
                p99 = f"{ratio['p99']:6.2f}x" if ratio["p99"] is not None else "      -"
                say(
                    f"{stream:8} {w:>4} {'H/S':8} {ratio['answered_per_s']:10.2f}x {'':6} {p50}"
                    f" {p99}   target answered/s >= {TARGET:g}x Squid: {verdict}"
                )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="ICP queries answered per second: harvest-cache vs Squid."
    )
    p.add_argument("--duration", type=float, default=10.0, help="seconds per run (10)")
    p.add_argument("--repeats", type=int, default=3, help="runs per window; medians kept (3)")
    p.add_argument("--windows", default="1,16,128", help="outstanding queries, comma-separated")
    p.add_argument(
        "--streams",
        default="unique,repeated",
        help="query streams, comma-separated: unique (each query for a URL not stored names a"
        " new URL), repeated (the never-fetched URLs cycled like the stored ones)",
    )
    p.add_argument("--objects", type=int, default=1000, help="objects stored (and as many not)")
    p.add_argument("--only", choices=SYSTEMS, help="benchmark one system only")
    p.add_argument("--memory-mb", type=int, default=256, help="memory tier of both (256)")
    p.add_argument(
        "--squid-log-icp",
        choices=("on", "off"),
        default="off",
        help="Squid's log_icp_queries (off: harvest-cache does not log ICP queries either)",
    )
    p.add_argument("--calibrate-repeats", type=int, default=1, help="echo runs per window (1)")
    p.add_argument(
        "--retries",
        type=int,
        default=3,
        help="times a run is redone when other processes took over 5%% of a core in it (3)",
    )
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=120.0,
        help="seconds to wait at most, before each run, for both cores to be idle (120)",
    )
    p.add_argument("--harvest-cmd", help="command that starts harvest-cache (default: the venv's)")
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON results file")
    p.add_argument("--keep", action="store_true", help="keep the work dir (configs, logs)")
    p.add_argument("--calibrate", action="store_true", help="only the generator against an echo")
    # Internal modes: the generator and the echo responder, started by the harness.
    p.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--echo", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--window", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--urls", help=argparse.SUPPRESS)
    p.add_argument("--lifetime", type=float, default=600.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        args.window_list = [int(w) for w in args.windows.split(",") if w.strip()]
    except ValueError:
        p.error("--windows takes comma-separated integers")
    args.stream_list = [x.strip() for x in args.streams.split(",") if x.strip()]
    if not args.stream_list or any(x not in STREAMS for x in args.stream_list):
        p.error(f"--streams takes a comma-separated subset of {', '.join(STREAMS)}")
    if not args.window_list or any(w < 1 or w > 4096 for w in args.window_list):
        p.error("need 1 <= each window <= 4096")
    if not 0 < args.duration <= 600 or args.repeats < 1 or args.calibrate_repeats < 1:
        p.error("need 0 < --duration <= 600, --repeats >= 1")
    if not 0 <= args.retries <= 20 or not 0 <= args.quiet_wait <= 3600:
        p.error("need 0 <= --retries <= 20 and 0 <= --quiet-wait <= 3600")
    if not 1 <= args.objects <= 100_000:
        p.error("need 1 <= --objects <= 100000")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.generate:
        return generator_main(args)
    if args.echo:
        return echo_main(args)
    if (os.cpu_count() or 1) < 2:
        say("warning: fewer than 2 cores; the pinning below assumes cores 0 and 1")
    else:
        os.sched_setaffinity(0, {int(base.CLIENT_CPU)})
    with base.Session("harvest-bench-icp-", args.keep) as session, base.terminated_as_exit():
        procs, workdir = session.procs, session.workdir
        status = 0
        needs = ["taskset"]
        if not args.calibrate:
            needs.append("nginx")
            if args.only != "harvest":
                needs.append("squid")
        base.ensure_tools(needs)
        report: dict[str, Any] = {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": {
                "cpu": base._cpu_model(),
                "cores": os.cpu_count(),
                "kernel": platform.release(),
                "python": platform.python_version(),
            },
            "settings": {
                "duration_s": args.duration,
                "repeats": args.repeats,
                "windows": args.window_list,
                "streams": {x: STREAMS[x] for x in args.stream_list},
                "objects_stored": args.objects,
                "objects_never_fetched": args.objects,
                "reply_timeout_s": REPLY_TIMEOUT,
                "memory_mb": args.memory_mb,
                "squid_log_icp_queries": args.squid_log_icp,
                "cores": {"server": base.PROXY_CPU, "generator": base.CLIENT_CPU},
                "generator": f"python {platform.python_version()}, one blocking UDP socket",
                "harvest_commit": base.version_of(
                    ["git", "-C", str(base.REPO), "rev-parse", "HEAD"]
                )
                + " (plus uncommitted changes, if any)",
            },
            "calibration": None,
            "systems": {},
            "ratios": {},
        }
        report["calibration"] = calibrate(args, procs, workdir)
        if args.calibrate:
            table(report, args.stream_list, args.window_list)
            out = args.output.with_name("icp-calibrate.json")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(report, indent=2) + "\n")
            say(f"\nwrote {out}")
            return 0
        systems = [args.only] if args.only else list(SYSTEMS)
        harvest_cmd = base.harvest_command(args.harvest_cmd) if "harvest" in systems else None
        origin = base.Origin("nginx", procs, workdir, base.ORIGIN_CPU)
        report["settings"]["origin"] = origin.version
        say(
            f"origin {origin.version} on {origin.hostport}, core {base.ORIGIN_CPU}; servers on"
            f" core {base.PROXY_CPU}; generator on core {base.CLIENT_CPU};"
            f" {args.repeats} x {args.duration:g} s per window"
        )
        for system in systems:
            try:
                report["systems"][system] = bench_system(
                    system, args, procs, workdir, origin, harvest_cmd
                )
            except base.BenchError as e:
                if system == "harvest":
                    status = 1
                say(f"\n*** {system} COULD NOT RUN: {e}")
                report["systems"][system] = {"status": f"could not run: {e}"}
        report["ratios"] = ratios(report, args.stream_list, args.window_list)
        table(report, args.stream_list, args.window_list)
        base.write_report(report, args.output)
        return status
    return session.status


if __name__ == "__main__":
    sys.exit(main())

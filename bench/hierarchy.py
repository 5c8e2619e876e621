#!/usr/bin/env python3
"""What a cache hierarchy costs and saves, with harvest-cache at every level; run by hand.

    python bench/hierarchy.py [--part latency|replay|all] [--samples 1000]
                              [--requests 20000] [--urls 5000] [--zipf 0.8] [--seed 2187] [--keep]

Part ``latency``: three caches chained child C -> parent P -> grandparent G (G goes to the
origin), ICP on, cache digests off so that ICP decides. For each sample a fresh 1 KiB object is
stored at one level only as far as C can tell (fetched through that cache directly), then timed
through C: a local hit at C, a hit one level up (ICP query to P, PARENT_HIT, fetched from P) or
two levels up (P answers MISS; C fetches through P, which asks G and fetches G's hit). Reported:
median and p99 per case, and the latency each level adds.

Part ``replay``: a synthetic trace (Zipf popularity over ``--urls`` URLs, bodies of 1 to 64
KiB, 10% of the URLs uncacheable: ``no-store`` or ``private``) from two client groups, replayed
once through two sibling children C1 and C2 that share parent P (P goes to the origin) and once
through two independent caches with no peers (one per client group). Reported: origin fetches
of each (nginx's request counter), requests saved by the hierarchy, and where the children's
requests were answered (local hits, sibling hits, parent hits; from the access logs).

Caches on core 0, nginx and this harness (the client) on core 1; only 127.0.0.1. Results are
printed and written to bench/results/hierarchy.json. See bench/README.md ("Hierarchy").
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import icp as icpbench
import run as base

DEFAULT_OUTPUT = base.BENCH / "results" / "hierarchy.json"
HOST = base.HOST
KIB = 1024
SIZES_KIB = (1, 2, 4, 8, 16, 32, 64)
LATENCY_TARGET_MS = 1.0  # the target: under 1 ms median added per level
WARMUP_SAMPLES = 20

# Locations added to the benchmark's nginx origin: /h/<size>/... cacheable for an hour,
# /nostore/<size>/... and /private/<size>/... not storable by a shared cache; each serves the
# file /sz/<size> (query strings and the rest of the path ignored).
NGINX_LOCATIONS = """\
        location ~ ^/h/(?<sz>[0-9]+k)/ {
            add_header Cache-Control "max-age=3600";
            try_files /sz/$sz =404;
        }
        location ~ ^/nostore/(?<sz>[0-9]+k)/ {
            add_header Cache-Control "no-store";
            try_files /sz/$sz =404;
        }
        location ~ ^/private/(?<sz>[0-9]+k)/ {
            add_header Cache-Control "private, max-age=3600";
            try_files /sz/$sz =404;
        }
"""

NODE_TOML = """\
# harvest-cache as one level of the benchmark's hierarchy (memory only).
[server]
listen = "{host}:{port}"
name = "{name}"

[cache]
dir = "{dir}/cache"
memory_mb = {memory_mb}
disk_mb = 0

[log]
access_log = "{dir}/access.log"
level = "warning"

[icp]
port = {icp_port}
allow = ["127.0.0.0/8"]

[hierarchy]
digests = false
{peers}{extra}"""

PEER_TOML = """
[[hierarchy.peers]]
name = "{name}"
host = "{host}"
http_port = {http_port}
icp_port = {icp_port}
role = "{role}"
"""


def say(*parts: object) -> None:
    print(*parts, flush=True)


# -- caches ------------------------------------------------------------------------------------


class Node:
    """One harvest-cache, named (its Via name, under which its siblings know it)."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        memory_mb: int,
        icp: bool = True,
    ) -> None:
        self.name = name
        self.port = base.free_port()
        self.icp_port = icpbench.free_udp_port() if icp else 0
        self.dir = workdir / name
        self.dir.mkdir(parents=True)
        self.memory_mb = memory_mb
        self.access_log = self.dir / "access.log"
        self.log = self.dir / "stderr.log"
        self.peers: list[tuple[Node, str]] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.tree = ""  # the commit (and whether harvest_cache/ was changed) it started from

    def peer(self, other: Node, role: str) -> None:
        self.peers.append((other, role))

    def start(self, procs: base.Processes, harvest_cmd: list[str], extra: str = "") -> None:
        peers = "".join(
            PEER_TOML.format(
                name=p.name, host=HOST, http_port=p.port, icp_port=p.icp_port, role=role
            )
            for p, role in self.peers
        )
        conf = self.dir / "harvest.toml"
        conf.write_text(
            NODE_TOML.format(
                host=HOST,
                port=self.port,
                name=self.name,
                dir=self.dir,
                memory_mb=self.memory_mb,
                icp_port=self.icp_port,
                peers=peers,
                extra=extra,
            )
        )
        self.proc = procs.start([*harvest_cmd, "--config", str(conf)], self.log, base.PROXY_CPU)

    def wait_ready(self, probe_url: str) -> None:
        assert self.proc is not None
        try:
            base.wait_listening(self.port, self.proc, 30)
            if self.icp_port:
                icpbench.wait_icp(self.icp_port, self.proc, probe_url)
        except base.BenchError as e:
            raise base.BenchError(f"cache {self.name}: {e}\n{base.tail(self.log)}") from None

    def stop(self, procs: base.Processes) -> None:
        if self.proc is not None:
            procs.stop(self.proc, grace=10)
            if self.proc.returncode not in (0, -15):
                say(f"  note: {self.name} exited with status {self.proc.returncode}")

    def log_lines(self) -> list[list[str]]:
        """The access log's lines, split into fields (read after the cache stopped, so that
        every line is written). Field 3: result/status; 6: URL; 8: hierarchy/peer."""
        try:
            text = self.access_log.read_text(errors="replace")
        except FileNotFoundError:
            return []
        return [f for f in (line.split() for line in text.splitlines()) if len(f) >= 9]


def start_all(
    nodes: list[Node], procs: base.Processes, harvest_cmd: list[str], probe_url: str
) -> None:
    extra = icpbench.harvest_extra_toml(harvest_cmd)
    for node in nodes:
        node.start(procs, harvest_cmd, extra)
        node.tree = icpbench.tree_state()
    for node in nodes:
        node.wait_ready(probe_url)


class Usage:
    """CPU use while a part runs: the caches' (core 0), the origin's and this client's (core
    1), and everything else's on each core (from /proc/stat), in percent of one core."""

    def __init__(self, nodes: list[Node], origin: base.Origin) -> None:
        self.pgids = [n.proc.pid for n in nodes if n.proc is not None]
        self.origin = origin.proc.pid
        self.cores = base.core_seconds()
        self.caches = sum(base.cpu_seconds(pg) for pg in self.pgids)
        self.origin_cpu = base.cpu_seconds(self.origin)
        me = resource.getrusage(resource.RUSAGE_SELF)
        self.me = me.ru_utime + me.ru_stime
        self.t = time.monotonic()

    def result(self) -> dict[str, float]:
        wall = max(time.monotonic() - self.t, 1e-6)
        cores = base.core_seconds()
        caches = sum(base.cpu_seconds(pg) for pg in self.pgids) - self.caches
        origin = base.cpu_seconds(self.origin) - self.origin_cpu
        r = resource.getrusage(resource.RUSAGE_SELF)
        me = r.ru_utime + r.ru_stime - self.me

        def busy(core: str) -> float:
            return cores[core][0] - self.cores[core][0]

        steal = sum(cores[c][1] - self.cores[c][1] for c in cores)
        return {
            "seconds": round(wall, 2),
            "caches_cpu_percent": round(100 * caches / wall, 1),
            "origin_cpu_percent": round(100 * origin / wall, 1),
            "client_cpu_percent": round(100 * me / wall, 1),
            "others_core0_percent": round(
                max(0.0, 100 * (busy(base.PROXY_CPU) - caches) / wall), 1
            ),
            "others_core1_percent": round(
                max(0.0, 100 * (busy(base.CLIENT_CPU) - origin - me) / wall), 1
            ),
            "steal_percent": round(100 * steal / wall, 1),
        }


def usage_text(u: dict[str, float]) -> str:
    return (
        f"cpu: caches {u['caches_cpu_percent']:.0f}%, origin {u['origin_cpu_percent']:.0f}%,"
        f" client {u['client_cpu_percent']:.0f}%, others {u['others_core0_percent']:.0f}%/"
        f"{u['others_core1_percent']:.0f}%, steal {u['steal_percent']:.0f}%"
    )


def usage_checks(name: str, usage: dict[str, float]) -> list[str]:
    problems = []
    for core, key in (
        (base.PROXY_CPU, "others_core0_percent"),
        (base.CLIENT_CPU, "others_core1_percent"),
    ):
        if usage[key] > 5:
            problems.append(f"{name}: other processes took {usage[key]:.0f}% of core {core}")
    if usage["steal_percent"] > 5:
        problems.append(f"{name}: the hypervisor stole {usage['steal_percent']:.0f}%")
    return problems


# -- a lean HTTP/1.1 client (keep-alive, absolute-form requests to a proxy) --------------------


class Client:
    """One persistent connection to a proxy; GET only; Content-Length or chunked bodies."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = None
        self.buf = bytearray()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.buf.clear()

    def _fill(self) -> None:
        assert self.sock is not None
        chunk = self.sock.recv(256 * KIB)
        if not chunk:
            raise ConnectionError("connection closed by the proxy")
        self.buf += chunk

    def _read_until(self, marker: bytes) -> bytes:
        for _ in range(100_000):
            i = self.buf.find(marker)
            if i >= 0:
                out = bytes(self.buf[: i + len(marker)])
                del self.buf[: i + len(marker)]
                return out
            self._fill()
        raise ConnectionError("response head too long")

    def _read_exact(self, n: int) -> None:
        for _ in range(100_000):
            if len(self.buf) >= n:
                del self.buf[:n]
                return
            self._fill()
        raise ConnectionError("body too long")

    def get(self, url: str) -> tuple[int, int, str]:
        """(status, body length, head) of a GET of ``url`` through the proxy."""
        host = url.split("/", 3)[2]
        req = f"GET {url} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: harvest-bench\r\n\r\n".encode()
        for attempt in range(2):
            reused = self.sock is not None
            if self.sock is None:
                self.sock = socket.create_connection((HOST, self.port), timeout=30)
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                self.sock.sendall(req)
                return self._response()
            except (ConnectionError, TimeoutError, OSError) as e:
                self.close()
                if not reused or attempt:
                    raise base.BenchError(f"GET {url} through port {self.port}: {e!r}") from None
        raise AssertionError("unreachable")

    def _response(self) -> tuple[int, int, str]:
        head = self._read_until(b"\r\n\r\n").decode("latin-1")
        lines = head.split("\r\n")
        status = int(lines[0].split()[1])
        fields: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                fields[k.strip().lower()] = v.strip()
        length = 0
        if "chunked" in fields.get("transfer-encoding", "").lower():
            for _ in range(1_000_000):
                size = int(self._read_until(b"\r\n").split(b";")[0].strip(), 16)
                if size == 0:
                    self._read_until(b"\r\n")  # (no trailers are expected)
                    break
                self._read_exact(size + 2)
                length += size
        elif "content-length" in fields:
            length = int(fields["content-length"])
            self._read_exact(length)
        else:
            raise ConnectionError(f"a response without a length: {lines[0]}")
        if "close" in fields.get("connection", "").lower():
            self.close()
        return status, length, head


# -- part (a): latency per level ---------------------------------------------------------------


def icp_rtts(port: int, urls: list[str]) -> list[float]:
    """Round trips (ms) of one ICP query at a time to ``port``, one per URL."""
    out = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((HOST, 0))
        s.connect((HOST, port))
        s.settimeout(1.0)
        for i, url in enumerate(urls, 1):
            data = icpbench.query_datagram(i, url)
            t = time.perf_counter()
            s.send(data)
            try:
                reply = s.recv(2048)
            except TimeoutError:
                continue
            out.append((time.perf_counter() - t) * 1000)
            if icpbench.REPLY_HEAD.unpack_from(reply)[3] != i:
                raise base.BenchError("ICP reply to another query")
    return out


def stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "n": len(values),
        "median_ms": round(statistics.median(values), 4),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 4),
        "mean_ms": round(statistics.fmean(values), 4),
    }


def part_latency(
    args: argparse.Namespace,
    procs: base.Processes,
    workdir: Path,
    origin: base.Origin,
    harvest_cmd: list[str],
) -> dict[str, Any]:
    say("\n=== latency per level: child C -> parent P -> grandparent G -> origin ===")
    wd = workdir / "latency"
    g = Node("bench-g", wd, args.memory_mb)
    p = Node("bench-p", wd, args.memory_mb)
    c = Node("bench-c", wd, args.memory_mb)
    p.peer(g, "parent")
    c.peer(p, "parent")
    tag = f"{time.time_ns() % 10**12:x}"
    base_url = f"http://{origin.hostport}/obj/1k?r=lat-{tag}"
    nodes = [g, p, c]
    out: dict[str, Any] = {}
    try:
        start_all(nodes, procs, harvest_cmd, f"{base_url}-probe")
        clients = {n.name: Client(n.port) for n in nodes}
        via_c = clients[c.name]
        cases = (("C", c), ("P", p), ("G", g))
        total = args.samples + WARMUP_SAMPLES
        for attempt in range(args.retries + 1):
            icpbench.wait_quiet(args.quiet_wait)
            times: dict[str, list[float]] = {k: [] for k, _ in cases}
            p_direct: list[float] = []
            urls: dict[str, list[str]] = {k: [] for k, _ in cases}
            bad = 0
            t_start = time.monotonic()
            usage = Usage(nodes, origin)
            for i in range(total):
                for j in range(3):
                    case, node = cases[(i + j) % 3]
                    url = f"{base_url}-{attempt}-{case}-{i}"
                    status, length, _ = clients[node.name].get(url)  # store it at that level
                    if status != 200 or length != KIB:
                        bad += 1
                    t = time.perf_counter()
                    status, length, _ = via_c.get(url)
                    elapsed = (time.perf_counter() - t) * 1000
                    if status != 200 or length != KIB:
                        bad += 1
                    if i >= WARMUP_SAMPLES:
                        times[case].append(elapsed)
                        urls[case].append(url)
                        if case == "P":  # P's own hit, asked directly, for comparison
                            t = time.perf_counter()
                            clients[p.name].get(url)
                            p_direct.append((time.perf_counter() - t) * 1000)
            out["usage"] = usage.result()
            out["harvest_tree"] = sorted({n.tree for n in nodes})
            say(
                f"  {total} samples per case in {time.monotonic() - t_start:.1f} s;"
                f" {usage_text(out['usage'])}"
            )
            if attempt == args.retries or not usage_checks("latency", out["usage"]):
                break
            say("  (disturbed by other processes: sampling again, with new URLs)")
        rtts = icp_rtts(p.icp_port, urls["P"][: args.samples])
        for cl in clients.values():
            cl.close()
    finally:
        for node in reversed(nodes):
            node.stop(procs)
    # What C and P logged for each timed request: the proof of the path taken.
    c_log: dict[str, list[str]] = {}
    for f in c.log_lines():
        c_log.setdefault(f[6], []).append(f"{f[3].split('/')[0]} {f[8].split('/')[0]}")
    p_log: dict[str, list[str]] = {}
    for f in p.log_lines():
        p_log.setdefault(f[6], []).append(f"{f[3].split('/')[0]} {f[8].split('/')[0]}")
    expect_c = {
        "C": "HIT HIER_NONE",  # (C's second request: the first one stored it)
        "P": "PARENT_HIT",
        "G": "PARENT_MISS",
    }
    paths: dict[str, Counter[str]] = {}
    wrong: dict[str, int] = {}
    for case, _ in cases:
        seen: Counter[str] = Counter()
        miss = 0
        for url in urls[case]:
            lines = c_log.get(url, [])
            last = lines[-1] if lines else "no log line"
            seen[last] += 1
            want = expect_c[case]
            ok = all(w in last for w in want.split())
            if case == "G":  # and P fetched it as G's hit
                ok = ok and any("PARENT_HIT" in x for x in p_log.get(url, []))
            miss += not ok
        paths[case] = seen
        wrong[case] = miss
    res: dict[str, dict[str, Any]] = {k: dict(stats(v)) for k, v in times.items()}
    for case, _ in cases:
        res[case]["c_log"] = dict(paths[case].most_common())
        res[case]["unexpected_path"] = wrong[case]
    out["cases"] = {
        "C": {"about": "local hit at C", **res["C"]},
        "P": {"about": "one level: ICP to P (HIT), fetched from P", **res["P"]},
        "G": {
            "about": "two levels: ICP to P (MISS), through P, whose ICP to G hits",
            **res["G"],
        },
    }
    out["p_direct_hit"] = stats(p_direct)
    out["icp_rtt_to_p"] = stats(rtts)
    if res["C"] and res["P"] and res["G"]:
        one = res["P"]["median_ms"] - res["C"]["median_ms"]
        two = res["G"]["median_ms"] - res["P"]["median_ms"]
        out["added_per_level_ms"] = {
            "first level (P - C)": round(one, 4),
            "second level (G - P)": round(two, 4),
            "target_ms": LATENCY_TARGET_MS,
            "meets_target": one < LATENCY_TARGET_MS and two < LATENCY_TARGET_MS,
        }
    checks = usage_checks("latency", out["usage"])
    if bad:
        checks.append(f"{bad} requests were not 200 with a 1 KiB body")
    for case, n in wrong.items():
        if n:
            checks.append(f"case {case}: {n} timed requests did not take the expected path")
    out["checks"] = checks
    for problem in checks:
        say(f"  WARNING: {problem}")
    return out


# -- part (b): replay --------------------------------------------------------------------------


def make_trace(args: argparse.Namespace, origin: str) -> dict[str, Any]:
    """URLs ranked by popularity (Zipf with exponent ``--zipf``), each with a size and a
    cacheability; ``--requests`` requests drawn from them, each from client group 1 or 2."""
    rng = random.Random(args.seed)
    n = args.urls
    uncacheable = set(rng.sample(range(n), round(n * args.uncacheable)))
    urls, sizes, kinds = [], [], []
    for rank in range(n):
        size = rng.choice(SIZES_KIB)
        kind = "h"
        if rank in uncacheable:
            kind = "nostore" if rng.random() < 0.5 else "private"
        urls.append(f"http://{origin}/{kind}/{size}k/u{rank}")
        sizes.append(size * KIB)
        kinds.append(kind)
    weights = [1 / (rank + 1) ** args.zipf for rank in range(n)]
    picks = rng.choices(range(n), weights=weights, k=args.requests)
    groups = [1 if rng.random() < 0.5 else 2 for _ in picks]
    # What ideal caches would do: every uncacheable request goes to the origin; each
    # cacheable URL is fetched once per independent cache that sees it, once per hierarchy.
    cacheable = [i for i in picks if kinds[i] == "h"]
    seen_by: dict[int, set[int]] = {1: set(), 2: set()}
    for i, grp in zip(picks, groups, strict=True):
        if kinds[i] == "h":
            seen_by[grp].add(i)
    ideal_independent = (len(picks) - len(cacheable)) + len(seen_by[1]) + len(seen_by[2])
    ideal_hierarchy = (len(picks) - len(cacheable)) + len(set(cacheable))
    return {
        "urls": urls,
        "sizes": sizes,
        "kinds": kinds,
        "picks": picks,
        "groups": groups,
        "summary": {
            "requests": len(picks),
            "distinct_urls": n,
            "distinct_urls_requested": len(set(picks)),
            "uncacheable_urls": len(uncacheable),
            "uncacheable_requests": len(picks) - len(cacheable),
            "group1_requests": groups.count(1),
            "group2_requests": groups.count(2),
            "requested_bytes": sum(sizes[i] for i in picks),
            "ideal_origin_fetches_independent": ideal_independent,
            "ideal_origin_fetches_hierarchy": ideal_hierarchy,
        },
    }


def replay(trace: dict[str, Any], caches: dict[int, Node]) -> dict[str, Any]:
    clients = {grp: Client(node.port) for grp, node in caches.items()}
    bad = 0
    t = time.monotonic()
    for i, grp in zip(trace["picks"], trace["groups"], strict=True):
        status, length, _ = clients[grp].get(trace["urls"][i])
        if status != 200 or length != trace["sizes"][i]:
            bad += 1
    seconds = time.monotonic() - t
    for cl in clients.values():
        cl.close()
    return {"seconds": round(seconds, 2), "bad_responses": bad}


def classify(lines: list[list[str]], urls: set[str]) -> Counter[str]:
    """Where each logged request for one of ``urls`` was answered."""
    out: Counter[str] = Counter()
    for f in lines:
        if f[6] not in urls:
            continue
        result, _, status = f[3].partition("/")
        hier = f[8].split("/")[0]
        out["requests"] += 1
        if status == "504":  # a sibling's only-if-cached request for what we do not hold
            out["sibling_request_504"] += 1
            continue
        if hier.startswith("TIMEOUT_"):
            out["icp_timeouts"] += 1
            out[f"icp_timeout {hier}"] += 1
            hier = hier[len("TIMEOUT_") :]
        if "HIT" in result and hier == "HIER_NONE":
            out["local_hit"] += 1
        elif hier.endswith("SIBLING_HIT"):
            out["sibling_hit"] += 1
        elif hier.endswith("PARENT_HIT"):
            out["parent_hit"] += 1
        elif hier == "HIER_DIRECT":
            out["direct"] += 1
        elif "PARENT" in hier:
            out["via_parent_no_hit"] += 1
        else:
            out[f"other {result} {hier}"] += 1
    return out


def without_sibling_requests(kid: Counter[str], sibling: Counter[str]) -> Counter[str]:
    """``kid``'s counts less the requests its sibling sent it. Those come from 127.0.0.1 like
    the clients', so they are told apart by count: each SIBLING_HIT the sibling logged is one
    hit in ``kid``'s log (served from its store), and each 504 (only-if-cached, not held) is
    a sibling's request too (clients never get one: bad_responses counts them)."""
    own = Counter(kid)
    served = sibling["sibling_hit"]
    own["requests"] -= served + kid["sibling_request_504"]
    own["local_hit"] -= served
    own["served_to_sibling"] = served
    return own


def part_replay(
    args: argparse.Namespace,
    procs: base.Processes,
    workdir: Path,
    origin: base.Origin,
    harvest_cmd: list[str],
) -> dict[str, Any]:
    trace = make_trace(args, origin.hostport)
    summary = trace["summary"]
    say(
        f"\n=== replay: {summary['requests']:,} requests over {args.urls:,} URLs (Zipf"
        f" {args.zipf:g}), {summary['uncacheable_requests']:,} to uncacheable URLs ==="
    )
    urls = set(trace["urls"])
    probe = f"http://{origin.hostport}/h/1k/probe"
    out: dict[str, Any] = {"trace": summary}

    def replay_once(setup: str, attempt: int) -> tuple[dict[str, Any], dict[str, Node]]:
        """Fresh caches of ``setup`` ("independent": A and B, no peers; "hierarchy": siblings
        C1 and C2 under parent P, which goes direct), the trace replayed through them."""
        wd = workdir / f"replay-{setup}-{attempt}"
        if setup == "independent":
            nodes = {
                "A": Node("bench-a", wd, args.memory_mb, icp=False),
                "B": Node("bench-b", wd, args.memory_mb, icp=False),
            }
            entry = {1: nodes["A"], 2: nodes["B"]}
        else:
            p = Node("bench-p", wd, args.memory_mb)
            c1, c2 = Node("bench-c1", wd, args.memory_mb), Node("bench-c2", wd, args.memory_mb)
            c1.peer(p, "parent")
            c1.peer(c2, "sibling")
            c2.peer(p, "parent")
            c2.peer(c1, "sibling")
            nodes = {"P": p, "C1": c1, "C2": c2}
            entry = {1: c1, 2: c2}
        try:
            start_all(list(nodes.values()), procs, harvest_cmd, probe)
            icpbench.wait_quiet(args.quiet_wait)
            before = origin.requests_served()
            usage = Usage(list(nodes.values()), origin)
            run = replay(trace, entry)
            run["origin_fetches"] = origin.requests_served() - before - 1
            run["usage"] = usage.result()
            run["harvest_tree"] = sorted({n.tree for n in nodes.values()})
        finally:
            for node in reversed(list(nodes.values())):
                node.stop(procs)
        say(
            f"  {setup}: {run['origin_fetches']:,} origin fetches, replayed in"
            f" {run['seconds']:.1f} s; {usage_text(run['usage'])}"
        )
        return run, nodes

    results: dict[str, tuple[dict[str, Any], dict[str, Node]]] = {}
    for setup in ("independent", "hierarchy"):
        for attempt in range(args.retries + 1):
            results[setup] = replay_once(setup, attempt)
            if attempt == args.retries or not usage_checks(setup, results[setup][0]["usage"]):
                break
            say("  (disturbed by other processes: replaying again through fresh caches)")
    run, nodes = results["independent"]
    fetched = run["origin_fetches"]
    independent = {
        **run,
        "caches": {
            "A (group 1)": classify(nodes["A"].log_lines(), urls),
            "B (group 2)": classify(nodes["B"].log_lines(), urls),
        },
    }
    run, nodes = results["hierarchy"]
    fetched_h = run["origin_fetches"]
    c1_lines = classify(nodes["C1"].log_lines(), urls)
    c2_lines = classify(nodes["C2"].log_lines(), urls)
    hierarchy = {
        **run,
        "caches": {
            "C1 (group 1)": without_sibling_requests(c1_lines, c2_lines),
            "C2 (group 2)": without_sibling_requests(c2_lines, c1_lines),
            "P (parent)": classify(nodes["P"].log_lines(), urls),
        },
        "raw_log_counts": {"C1": c1_lines, "C2": c2_lines},
    }
    out["independent"] = independent
    out["hierarchy"] = hierarchy
    out["origin_fetches_saved"] = fetched - fetched_h
    out["origin_fetches_saved_percent"] = round(100 * (fetched - fetched_h) / fetched, 2)
    # Per level, as shares of the clients' requests.
    kids = [hierarchy["caches"]["C1 (group 1)"], hierarchy["caches"]["C2 (group 2)"]]
    total = sum(k["requests"] for k in kids)
    parent = hierarchy["caches"]["P (parent)"]
    levels = {
        "local_hit": sum(k["local_hit"] for k in kids),
        "sibling_hit": sum(k["sibling_hit"] for k in kids),
        "parent_hit": sum(k["parent_hit"] for k in kids),
        "through_parent_to_origin": sum(k["via_parent_no_hit"] for k in kids),
        "child_direct": sum(k["direct"] for k in kids),
    }
    out["hierarchy_levels_percent"] = {
        k: round(100 * v / total, 2) if total else None for k, v in levels.items()
    }
    out["hierarchy_levels"] = levels
    ind_kids = list(independent["caches"].values())
    ind_total = sum(k["requests"] for k in ind_kids)
    out["independent_hit_percent"] = (
        round(100 * sum(k["local_hit"] for k in ind_kids) / ind_total, 2) if ind_total else None
    )
    out["parent_hit_percent_of_its_requests"] = (
        round(100 * parent["local_hit"] / parent["requests"], 2) if parent["requests"] else None
    )
    checks = []
    for name, res in (("independent", independent), ("hierarchy", hierarchy)):
        checks += usage_checks(f"{name} replay", res["usage"])
        if res["bad_responses"]:
            checks.append(f"{name}: {res['bad_responses']} responses not 200 of the right size")
    for name, got, ideal in (
        ("independent", fetched, summary["ideal_origin_fetches_independent"]),
        ("hierarchy", fetched_h, summary["ideal_origin_fetches_hierarchy"]),
    ):
        if abs(got - ideal) > 0.01 * ideal:
            checks.append(f"{name}: {got} origin fetches, ideal caches would make {ideal}")
    if total != summary["requests"] or ind_total != summary["requests"]:
        checks.append(
            f"the children logged {total} and {ind_total} requests for {summary['requests']}"
        )
    timeouts = sum(k.get("icp_timeouts", 0) for k in kids)
    if timeouts:
        checks.append(f"{timeouts} ICP waits timed out")
    out["checks"] = checks
    for problem in checks:
        say(f"  WARNING: {problem}")
    return out


# -- report ------------------------------------------------------------------------------------


def print_report(report: dict[str, Any]) -> None:
    lat = report.get("latency")
    if lat and "cases" in lat:
        say("\nlatency of a 1 KiB hit through child C (ms)")
        say(f"{'case':42} {'median':>8} {'p99':>8} {'mean':>8}  C logged")
        for key, row in lat["cases"].items():
            if not row.get("n"):
                continue
            logged = ", ".join(f"{k} {v}" for k, v in list(row["c_log"].items())[:2])
            say(
                f"{key + ': ' + row['about']:42.42} {row['median_ms']:8.3f} {row['p99_ms']:8.3f}"
                f" {row['mean_ms']:8.3f}  {logged}"
            )
        for key, label in (
            ("p_direct_hit", "P's hit asked directly (for comparison)"),
            ("icp_rtt_to_p", "ICP round trip to P, one at a time"),
        ):
            row = lat.get(key) or {}
            if row:
                say(
                    f"{label:42.42} {row['median_ms']:8.3f} {row['p99_ms']:8.3f}"
                    f" {row['mean_ms']:8.3f}"
                )
        added = lat.get("added_per_level_ms")
        if added:
            verdict = "meets" if added["meets_target"] else "MISSES"
            say(
                f"added per level (medians): first {added['first level (P - C)']:.3f} ms, second"
                f" {added['second level (G - P)']:.3f} ms; target < {LATENCY_TARGET_MS:g} ms:"
                f" {verdict}" + ("  SUSPECT" if lat["checks"] else "")
            )
    rep = report.get("replay")
    if rep and "hierarchy" in rep:
        t = rep["trace"]
        say(
            f"\nreplay: {t['requests']:,} requests, {t['distinct_urls_requested']:,} distinct URLs"
            f" requested, {t['uncacheable_requests']:,} uncacheable"
        )
        say(f"{'setup':30} {'origin fetches':>14} {'ideal':>7} {'seconds':>8}")
        for name, key in (
            ("independent caches (A, B)", "independent"),
            ("hierarchy (C1, C2 -> P)", "hierarchy"),
        ):
            ideal = t[f"ideal_origin_fetches_{key}"]
            r = rep[key]
            say(f"{name:30} {r['origin_fetches']:14,} {ideal:7,} {r['seconds']:8.1f}")
        say(
            f"origin fetches saved by the hierarchy: {rep['origin_fetches_saved']:,}"
            f" ({rep['origin_fetches_saved_percent']:.1f}%)"
        )
        lv = rep["hierarchy_levels_percent"]
        say(
            f"children's requests answered: locally {lv['local_hit']:.1f}%, by the sibling"
            f" {lv['sibling_hit']:.1f}%, by the parent's store {lv['parent_hit']:.1f}%"
            f" (together {lv['local_hit'] + lv['sibling_hit'] + lv['parent_hit']:.1f}%, against"
            f" {rep['independent_hit_percent']:.1f}% for independent caches); the parent's own"
            f" hit ratio {rep['parent_hit_percent_of_its_requests']:.1f}%"
        )
        say(
            f"\n{'cache':14} {'requests':>9} {'local hit':>10} {'sibling':>8} {'parent':>8}"
            f" {'via P':>7} {'direct':>7}"
        )
        for setup in ("independent", "hierarchy"):
            for name, c in rep[setup]["caches"].items():
                n = c.get("requests", 0)

                def pct(key: str, c: Counter[str] | dict[str, int] = c, n: int = n) -> str:
                    return f"{100 * c.get(key, 0) / n:.1f}%" if n else "-"

                say(
                    f"{name:14} {n:9,} {pct('local_hit'):>10} {pct('sibling_hit'):>8}"
                    f" {pct('parent_hit'):>8} {pct('via_parent_no_hit'):>7} {pct('direct'):>7}"
                )
        if rep["checks"]:
            say("replay SUSPECT: " + "; ".join(rep["checks"]))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Latency and savings of a harvest-cache hierarchy.")
    p.add_argument("--part", choices=("latency", "replay", "all"), default="all")
    p.add_argument("--samples", type=int, default=1000, help="timed requests per case (1000)")
    p.add_argument("--requests", type=int, default=20_000, help="replayed requests (20000)")
    p.add_argument("--urls", type=int, default=5000, help="distinct URLs in the replay (5000)")
    p.add_argument("--zipf", type=float, default=0.8, help="Zipf exponent of popularity (0.8)")
    p.add_argument("--uncacheable", type=float, default=0.1, help="share of URLs (0.1)")
    p.add_argument("--seed", type=int, default=2187, help="seed of the trace (2187)")
    p.add_argument("--memory-mb", type=int, default=256, help="memory tier of each cache (256)")
    p.add_argument(
        "--retries",
        type=int,
        default=3,
        help="times a part is redone when other processes took over 5%% of a core in it (3)",
    )
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=120.0,
        help="seconds to wait at most, before each part, for both cores to be idle (120)",
    )
    p.add_argument("--harvest-cmd", help="command that starts harvest-cache (default: the venv's)")
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON results file")
    p.add_argument("--keep", action="store_true", help="keep the work dir (configs, logs)")
    args = p.parse_args(argv)
    if not 1 <= args.samples <= 100_000 or not 1 <= args.requests <= 1_000_000:
        p.error("need 1 <= --samples <= 100000 and 1 <= --requests <= 1000000")
    if not 0 <= args.retries <= 20 or not 0 <= args.quiet_wait <= 3600:
        p.error("need 0 <= --retries <= 20 and 0 <= --quiet-wait <= 3600")
    if not 1 <= args.urls <= 1_000_000 or not 0 <= args.uncacheable < 1 or args.zipf < 0:
        p.error("need 1 <= --urls <= 1000000, 0 <= --uncacheable < 1, --zipf >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if (os.cpu_count() or 1) < 2:
        say("warning: fewer than 2 cores; the pinning below assumes cores 0 and 1")
    else:  # this harness is the client: keep it off the caches' core
        os.sched_setaffinity(0, {int(base.CLIENT_CPU)})
    with base.Session("harvest-bench-hier-", args.keep) as session, base.terminated_as_exit():
        procs, workdir = session.procs, session.workdir
        status = 0
        base.ensure_tools(["nginx", "taskset"])
        harvest_cmd = base.harvest_command(args.harvest_cmd)
        if harvest_cmd is None:
            say("harvest COULD NOT RUN: no .venv/bin/harvest-cache and no harvest_cache.cli")
            return 1
        files = {f"sz/{k}k": os.urandom(k * KIB) for k in SIZES_KIB}
        origin = base.Origin(
            "nginx",
            procs,
            workdir,
            base.ORIGIN_CPU,
            extra_locations=NGINX_LOCATIONS,
            extra_files=files,
        )
        say(
            f"origin {origin.version} on {origin.hostport}, core {base.ORIGIN_CPU}; caches on"
            f" core {base.PROXY_CPU}; client on core {base.CLIENT_CPU}"
        )
        report: dict[str, Any] = {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": {
                "cpu": base._cpu_model(),
                "cores": os.cpu_count(),
                "kernel": platform.release(),
                "python": platform.python_version(),
            },
            "settings": {
                k: getattr(args, k)
                for k in ("samples", "requests", "urls", "zipf", "uncacheable", "seed")
            }
            | {
                "memory_mb": args.memory_mb,
                "origin": origin.version,
                "harvest": base.version_of([*harvest_cmd, "--version"]),
                "harvest_commit": base.version_of(
                    ["git", "-C", str(base.REPO), "rev-parse", "HEAD"]
                )
                + " (plus uncommitted changes, if any)",
                "cores": {
                    "caches": base.PROXY_CPU,
                    "origin": base.ORIGIN_CPU,
                    "client": base.CLIENT_CPU,
                },
                "cache_digests": False,
            },
        }
        for part, fn in (("latency", part_latency), ("replay", part_replay)):
            if args.part not in (part, "all"):
                continue
            try:
                report[part] = fn(args, procs, workdir, origin, harvest_cmd)
            except base.BenchError as e:
                status = 1
                say(f"\n*** {part}: harvest COULD NOT RUN: {e}")
                report[part] = {"status": f"could not run: {e}"}
        print_report(report)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
        say(f"\nwrote {args.output}")
        return status
    return session.status


if __name__ == "__main__":
    sys.exit(main())

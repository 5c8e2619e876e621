"""What a cache array (CARP) buys: one Zipf workload replayed through three set-ups of
harvest-cache, memory-only, with the same memory in all:

  single    one cache with three times the memory tier;
  array     three caches, each a member of one array in front mode (every URL one home; the
            clients spread over the three, a member forwarding another's URLs to it);
  siblings  three caches, each the other two's ICP sibling (the clients spread the same way).

Reported for each: the hit ratio (requests not fetched from the origin, of those a cache
could keep), origin requests and ICP datagrams per client request. Then the latency a member
adds to a hit it forwards to the URL's home (a hit asked of another member, against the
same hit asked of its home), the median of many.

    .venv/bin/python bench/cache_array.py [--requests 60000] [--urls 100000] [--memory-mb 32]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import hierarchy as hier
import run as base

sys.path.insert(0, str(base.REPO))
from harvest_cache.hierarchy.carp import Array

DEFAULT_OUTPUT = base.BENCH / "results" / "array.json"
MEMBERS = ("m1", "m2", "m3")
ARRAY_PEER = """
[[hierarchy.peers]]
name = "{name}"
host = "{host}"
http_port = {http_port}
icp_port = 0
carp = true
proxy_only = true
"""


def nodes_for(setup: str, workdir: Path, memory_mb: int) -> list[hier.Node]:
    if setup == "single":
        return [hier.Node("single", workdir, 3 * memory_mb, icp=False)]
    icp = setup == "siblings"
    nodes = [hier.Node(name, workdir, memory_mb, icp=icp) for name in MEMBERS]
    if icp:
        for node in nodes:
            for other in nodes:
                if other is not node:
                    node.peer(other, "sibling")
    return nodes


def start(
    setup: str, nodes: list[hier.Node], procs: base.Processes, cmd: list[str], probe: str
) -> dict[str, int]:
    """Start the set-up's caches, each with an admin listener of its own (for its ICP
    counters); their admin ports, by name."""
    peers = "".join(ARRAY_PEER.format(name=n.name, host=base.HOST, http_port=n.port) for n in nodes)
    admin = {}
    for node in nodes:
        admin[node.name] = base.free_port()
        array = f'array_name = "{node.name}"\n{peers}' if setup == "array" else ""
        node.start(procs, cmd, f'{array}\n[admin]\nlisten = "{base.HOST}:{admin[node.name]}"\n')
    for node in nodes:
        node.wait_ready(probe)
    return admin


def icp_sent(admin: dict[str, int]) -> int:
    """ICP queries the caches sent (their metrics)."""
    total = 0
    for port in admin.values():
        for line in base.scrape_metrics(port).splitlines():
            if line.startswith("harvest_cache_icp_queries_sent_total{"):
                total += int(float(line.split()[-1]))
    return total


def replay(
    setup: str, args: argparse.Namespace, trace: dict[str, Any], nodes: list[hier.Node]
) -> dict[str, Any]:
    clients = [hier.Client(n.port) for n in nodes]
    bad = 0
    began = time.monotonic()
    for n, i in enumerate(trace["picks"]):
        client = clients[n % len(clients)]
        status, length, _ = client.get(trace["urls"][i])
        if status != 200 or length != trace["sizes"][i]:
            bad += 1
    seconds = time.monotonic() - began
    for c in clients:
        c.close()
    return {"seconds": round(seconds, 1), "bad_responses": bad}


def forwarded_hit_ms(
    args: argparse.Namespace,
    origin: base.Origin,
    procs: base.Processes,
    workdir: Path,
    cmd: list[str],
) -> dict[str, float]:
    """Median time of a 1 KiB hit asked of its home, and of another member (forwarded)."""
    nodes = nodes_for("array", workdir / "latency", args.memory_mb)
    probe = f"http://{origin.hostport}/h/1k/probe"
    start("array", nodes, procs, cmd, probe)
    try:
        array = Array([(n, 1, ()) for n in MEMBERS])
        by_name = {n.name: n for n in nodes}
        urls = [f"http://{origin.hostport}/h/1k/lat{i}" for i in range(args.samples)]
        home, other = [], []
        for url in urls:
            owner = array.choose(url)
            assert owner is not None
            at_home = by_name[owner.name]
            elsewhere = next(n for n in nodes if n is not at_home)
            for node in (at_home, elsewhere):  # (warm: the home holds it, connections up)
                hier.Client(node.port).get(url)
            for node, into in ((at_home, home), (elsewhere, other)):
                client = hier.Client(node.port)
                client.get(url)
                t = time.perf_counter()
                status, _, _ = client.get(url)
                into.append((time.perf_counter() - t) * 1000)
                client.close()
                assert status == 200
    finally:
        for node in nodes:
            node.stop(procs)
    median_home, median_other = statistics.median(home), statistics.median(other)
    return {
        "hit_at_home_ms": round(median_home, 3),
        "hit_through_another_member_ms": round(median_other, 3),
        "added_ms": round(median_other - median_home, 3),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--requests", type=int, default=60_000)
    p.add_argument("--urls", type=int, default=100_000)
    p.add_argument("--zipf", type=float, default=0.8)
    p.add_argument("--uncacheable", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=2187)
    p.add_argument("--memory-mb", type=int, default=32, help="each member's (single: 3x)")
    p.add_argument("--samples", type=int, default=300)
    p.add_argument("--harvest-cmd")
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = p.parse_args(argv)
    os.sched_setaffinity(0, {int(base.CLIENT_CPU)})
    with base.Session("harvest-bench-array-", False) as session, base.terminated_as_exit():
        procs, workdir = session.procs, session.workdir
        cmd = base.harvest_command(args.harvest_cmd)
        assert cmd is not None
        files = {f"sz/{k}k": os.urandom(k * hier.KIB) for k in hier.SIZES_KIB}
        origin = base.Origin(
            "nginx", procs, workdir, base.ORIGIN_CPU,
            extra_locations=hier.NGINX_LOCATIONS, extra_files=files,
        )  # fmt: skip
        trace = hier.make_trace(args, origin.hostport)
        cacheable = len(trace["picks"]) - trace["summary"]["uncacheable_requests"]
        probe = f"http://{origin.hostport}/h/1k/probe"
        report: dict[str, Any] = {"trace": trace["summary"], "setups": {}}
        for setup in ("single", "array", "siblings"):
            nodes = nodes_for(setup, workdir / setup, args.memory_mb)
            admin = start(setup, nodes, procs, cmd, probe)
            try:
                before = origin.requests_served()
                run = replay(setup, args, trace, nodes)
                fetched = origin.requests_served() - before - 1
                queries = icp_sent(admin)
            finally:
                for node in nodes:
                    node.stop(procs)
            requests = len(trace["picks"])
            uncacheable = trace["summary"]["uncacheable_requests"]
            run |= {
                "origin_requests": fetched,
                "origin_requests_per_request": round(fetched / requests, 4),
                "hit_ratio_percent": round(
                    100 * (cacheable - (fetched - uncacheable)) / cacheable, 2
                ),
                "icp_queries_sent": queries,
                "icp_datagrams_per_request": round(2 * queries / requests, 3),
            }
            report["setups"][setup] = run
            base.say(f"  {setup:9} {json.dumps(run)}")
        report["forwarded_hit"] = forwarded_hit_ms(args, origin, procs, workdir, cmd)
        base.say(f"  forwarded hit: {report['forwarded_hit']}")
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
        base.say(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

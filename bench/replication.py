#!/usr/bin/env python3
"""Replication benchmark, run by hand (never in CI): how fast a change reaches every member
of a group and how many bytes that moves, for the agreed topology and for a full mesh, with
N real members (a broker and a replicator each) on loopback behind throttling relays that
inject each link's delay and bandwidth; and how fast a member that comes back with 10,000
stale objects is repaired by Merkle anti-entropy alone.

    .venv/bin/python bench/replication.py [--sizes 5,10,20] [--changes 10] [--burst 40]
                                          [--record-bytes 4000] [--rejoin 10000]

Links: each member gets a place on a plane; a link's one-way delay is 2 ms plus 1 ms per 10
units of distance (2-30 ms), its bandwidth 20 MB/s. Targets (the issue's): every change
reaches all members within 2 s plus the sum of the link delays on the topology's longest
path; bytes moved per change at most 1.3x the minimum (one copy of the change to each other
member); a rejoining member with 10,000 stale objects repaired in under 10 s, moving only
those objects. "Periodic full copies" is costed from the size of one copy of the collection.
Results go to bench/results/replication.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from broker.oid import oid  # noqa: E402
from harvest_common.replication.version import Version  # noqa: E402
from harvest_common.replication.wire import Entry, pack  # noqa: E402
from harvest_common.soif import Record, encode  # noqa: E402
from tests.replicator.cluster import GROUP, TOKEN, Cluster, Member, until  # noqa: E402

OUTPUT = BENCH / "results" / "replication.json"
RATE = 20e6
TIMING = {
    "probe_interval": 1.0,
    "probe_timeout": 0.4,
    "suspicion_timeout": 5.0,
    "measure_interval": 3.0,
    "measure_bytes": 16384,
    "anti_entropy_interval": 3600.0,  # out of the way: pushes alone are measured
    "long_poll": 20.0,
    "request_timeout": 30.0,
}


@contextlib.contextmanager
def kept_on_failure() -> Iterator[str]:
    """A temporary directory for a group's members, removed unless the run failed (its
    members' logs are then left for reading)."""
    directory = tempfile.mkdtemp(prefix="harvest-bench-")
    yield directory
    shutil.rmtree(directory)


def place_links(cluster: Cluster, seed: int) -> dict[tuple[int, int], float]:
    """Delays from positions on a 280 x 280 plane; returns the one-way delay of each link."""
    rng = random.Random(seed)
    where = [(rng.uniform(0, 280), rng.uniform(0, 280)) for _ in range(cluster.size)]
    delays = {}
    for (i, j), relay in cluster.relays.items():
        relay.delay = 0.002 + math.dist(where[i], where[j]) / 10_000
        relay.rate = RATE
        delays[i, j] = relay.delay
    return delays


async def agreed_topology(cluster: Cluster, within: float) -> dict[str, Any]:
    """Wait until every member holds one topology of every member, built on measured costs."""
    found: dict[str, Any] = {}

    async def settled() -> bool:
        views = []
        for member in cluster.members:
            async with cluster.http.get(f"{member.url}/topology/{GROUP}") as response:
                views.append(await response.json())
        first = views[0]
        if first is None or any(v != first for v in views):
            return False
        topology = first["topology"]
        measured = all(edge["cost"] < 1.0 for edge in topology["edges"])
        if len(topology["members"]) == cluster.size and measured:
            found.update(topology)
            return True
        return False

    await until(settled, within, "one measured topology at every member")
    return found


def longest_path_delay(topology: dict[str, Any], delays: dict[tuple[int, int], float]) -> float:
    """The sum of the injected one-way delays on the longest shortest path of ``topology``
    (shortest by those delays)."""
    members = [int(m[1:]) for m in topology["members"]]
    far: dict[tuple[int, int], float] = {(a, b): math.inf for a in members for b in members}
    for m in members:
        far[m, m] = 0.0
    for edge in topology["edges"]:
        a, b = int(edge["a"][1:]), int(edge["b"][1:])
        far[a, b] = delays[a, b]
        far[b, a] = delays[b, a]
    for k in members:
        for i in members:
            for j in members:
                if far[i, k] + far[k, j] < far[i, j]:
                    far[i, j] = far[i, k] + far[k, j]
    return max(far.values())


async def register(cluster: Cluster, member: Member, name: str, size: int) -> str:
    """Register a server at ``member``; returns its object id."""
    from harvest_common.hsr_client import server_record

    rng = random.Random(name)
    text = " ".join(f"w{rng.randrange(50_000)}" for _ in range(size // 7))
    record = server_record(
        "gatherer", name=name, host=f"{name}.example", port=8500, description=text
    )
    async with cluster.http.post(
        f"{member.broker_url}/api/hsr/register",
        data=encode(record),
        headers={"Content-Type": "application/x-soif"},
    ) as response:
        assert response.status in (200, 201), await response.text()
        key: str = (await response.json())["oid"]
        return key


async def holds(cluster: Cluster, member: Member, key: str) -> bool:
    async with cluster.http.get(f"{member.broker_url}/api/objects/{key}") as response:
        return response.status == 200


async def propagation(cluster: Cluster, changes: int, size: int, rng: random.Random) -> list[float]:
    """Seconds for each of ``changes`` changes (one at a time, at random members) to reach
    every member."""
    times = []
    for n in range(changes):
        origin = rng.choice(cluster.members)
        started = time.monotonic()
        key = await register(cluster, origin, f"p{n}-{rng.randrange(10**9)}", size)
        waiting = set(range(cluster.size))
        deadline = started + 60
        while waiting and time.monotonic() < deadline:
            found = await asyncio.gather(
                *(holds(cluster, cluster.members[i], key) for i in sorted(waiting))
            )
            waiting -= {i for i, ok in zip(sorted(waiting), found, strict=True) if ok}
            if waiting:
                await asyncio.sleep(0.005)
        assert not waiting, f"change {n} did not reach {sorted(waiting)} within 60 s"
        times.append(time.monotonic() - started)
    return times


async def replication_bytes(cluster: Cluster) -> dict[str, float]:
    """Bytes of replication requests and answers every member has received so far, by kind
    (change lists, object transfers, Merkle nodes; not membership messages or link probes)."""
    total: dict[str, float] = {}
    for member in cluster.members:
        async with cluster.http.get(f"{member.url}/metrics") as response:
            text = await response.text()
        for line in text.splitlines():
            name, _, value = line.rpartition(" ")
            kind = name.partition('kind="')[2].partition('"')[0]
            if name.startswith("harvest_replicator_request_bytes_total{") and kind in (
                "notify",
                "entries",
                "changes",
            ):
                total[f"{kind} requests"] = total.get(f"{kind} requests", 0.0) + float(value)
            if name.startswith("harvest_replicator_sent_bytes_total{"):
                total[f"{kind} answers"] = total.get(f"{kind} answers", 0.0) + float(value)
    return total


async def packed_size(cluster: Cluster, member: Member, keys: Sequence[str]) -> int:
    """Bytes of one transfer of ``keys`` from ``member`` (what one copy costs)."""
    async with cluster.http.post(
        f"{member.broker_url}/api/replica/{GROUP}/entries",
        json={"oids": list(keys)},
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as response:
        return len(await response.read())


async def burst(cluster: Cluster, count: int, size: int, rng: random.Random) -> dict[str, float]:
    """``count`` changes at random members at once: bytes moved against the minimum."""
    before = await replication_bytes(cluster)
    carried = sum(relay.carried for relay in cluster.relays.values())
    started = time.monotonic()
    keys = await asyncio.gather(
        *(
            register(cluster, rng.choice(cluster.members), f"b{n}-{rng.randrange(10**9)}", size)
            for n in range(count)
        )
    )
    await cluster.converged(cluster.members, within=120)
    took = time.monotonic() - started
    await asyncio.sleep(1.0)  # the last announcements of what was just applied
    after = await replication_bytes(cluster)
    kinds = {kind: after[kind] - before.get(kind, 0.0) for kind in sorted(after)}
    moved = sum(kinds.values())
    on_links = sum(relay.carried for relay in cluster.relays.values()) - carried
    one_copy = await packed_size(cluster, cluster.members[0], keys)
    minimum = one_copy * (cluster.size - 1)
    return {
        "changes": count,
        "seconds": round(took, 3),
        "bytes": moved,
        "minimum_bytes": minimum,
        "ratio": round(moved / minimum, 3),
        "bytes_by_kind": kinds,
        "link_bytes_all_traffic": on_links,
    }


async def run_size(size: int, args: argparse.Namespace, mesh: bool) -> dict[str, Any]:
    topology = {"k": size - 1, "min_degree": size - 1, "max_degree": size - 1} if mesh else {}
    with kept_on_failure() as directory:
        cluster = Cluster(Path(directory), size, TIMING, topology)
        try:
            await cluster.start()
            delays = place_links(cluster, args.seed)
            agreed = await agreed_topology(cluster, within=60 + 3 * size)
            bound = 2.0 + longest_path_delay(agreed, delays)
            rng = random.Random(args.seed)
            times = await propagation(cluster, args.changes, args.record_bytes, rng)
            moved = await burst(cluster, args.burst, args.record_bytes, rng)
            full_copy = await full_copy_bytes(cluster)
        finally:
            await cluster.close()
    return {
        "members": size,
        "topology": "full mesh" if mesh else "agreed (k=2, degree 2-4)",
        "edges": len(agreed["edges"]),
        "edge_cost_seconds": round(agreed["total_cost"], 4),
        "hops": agreed["hops"],
        "propagation_s": {
            "p50": round(statistics.median(times), 3),
            "max": round(max(times), 3),
            "bound": round(bound, 3),
            "target_met": max(times) <= bound,
        },
        "burst": moved,
        "bytes_target_met": moved["ratio"] <= 1.3,
        "periodic_full_copy_bytes_per_round": full_copy,
    }


async def full_copy_bytes(cluster: Cluster) -> float:
    """One round of periodic full copies: every other member copies the whole collection."""
    async with cluster.http.get(
        f"{cluster.members[0].broker_url}/api/replica/{GROUP}/changes?after=0&limit=10000",
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as response:
        listed = await response.json()
    keys = [change[1] for change in listed["changes"]]
    return float(await packed_size(cluster, cluster.members[0], keys) * (cluster.size - 1))


def objects(count: int, size: int, stamp: float, origin: str, seed: int) -> list[Entry]:
    """``count`` objects of about ``size`` bytes, as a member's collector would have made."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        url = f"http://www{n % 97}.example.edu/doc/{n}.html"
        words = " ".join(f"w{rng.randrange(50_000)}" for _ in range(size // 7))
        record = Record(
            "FILE", url, (("Title", f"Document {n}".encode()), ("Abstract", words.encode()))
        )
        out.append(
            Entry(
                oid(GROUP, url),
                GROUP,
                url,
                GROUP,
                time.time() + 10**7,
                Version(stamp, origin),
                encode(record),
            )
        )
    return out


async def apply(cluster: Cluster, member: Member, entries: Sequence[Entry]) -> None:
    for start in range(0, len(entries), 1000):
        async with cluster.http.post(
            f"{member.broker_url}/api/replica/{GROUP}/apply",
            data=pack(entries[start : start + 1000]),
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as response:
            assert response.status == 200, await response.text()


async def last_seq(cluster: Cluster, member: Member) -> int:
    async with cluster.http.get(
        f"{member.broker_url}/api/replica/{GROUP}/changes?after=0&limit=0",
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as response:
        seq: int = (await response.json())["last_seq"]
        return seq


def cpu_seconds(cluster: Cluster) -> dict[str, float]:
    """CPU seconds used so far by each member's processes and by this one (the relays)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {"bench (relays)": time.process_time()}
    for member in cluster.members:
        for kind, process in (("broker", member.broker), ("replicator", member.replicator)):
            if process.process is None:
                continue
            fields = Path(f"/proc/{process.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            found[f"{member.id} {kind}"] = (int(fields[11]) + int(fields[12])) / tick
    return found


async def rejoin(args: argparse.Namespace) -> dict[str, Any]:
    """A member away while ``args.rejoin`` objects changed, back with its change cursors
    already past those changes: only Merkle anti-entropy can repair it."""
    timing = dict(TIMING, anti_entropy_interval=2.0)
    with kept_on_failure() as directory:
        cluster = Cluster(Path(directory), 5, timing)
        try:
            await cluster.start()
            place_links(cluster, args.seed)
            await agreed_topology(cluster, within=90)
            origin, away = cluster.members[0], cluster.members[4]
            await apply(
                cluster, origin, objects(args.rejoin, args.record_bytes, time.time(), "m0", 1)
            )
            await cluster.converged(cluster.members, within=300)
            await cluster.stop_member(away)
            await apply(
                cluster, origin, objects(args.rejoin, args.record_bytes, time.time(), "m0", 2)
            )
            present = cluster.members[:4]
            await cluster.converged(present, within=300)
            cursors = {m.id: await last_seq(cluster, m) for m in present}
            state = away.directory / "replicator" / "state.json"
            state.write_text(json.dumps({"cursors": {GROUP: cursors}}))
            before = cpu_seconds(cluster)
            started = time.monotonic()
            await cluster.start_member(away)
            took = await cluster.converged(cluster.members, within=300)
            repaired = time.monotonic() - started
            spent = {k: round(v - before.get(k, 0.0), 2) for k, v in cpu_seconds(cluster).items()}
            async with cluster.http.get(f"{away.url}/metrics") as response:
                text = await response.text()
            received = sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("harvest_replicator_received_bytes_total{")
            )
            applied = sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("harvest_replicator_applied_objects_total{")
                and 'kind="anti_entropy"' in line
            )
        finally:
            await cluster.close()
            if args.verbose:
                print((away.directory / "replicator.log").read_text()[-4000:], file=sys.stderr)
    return {
        "stale_objects": args.rejoin,
        "seconds_from_restart": round(repaired, 2),
        "seconds_after_start_to_equal": round(took, 2),
        "objects_applied_by_anti_entropy": applied,
        "bytes_received": received,
        "cpu_seconds_during_repair": spent,
        "target_met": repaired < 10.0 and applied == args.rejoin,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5,10,20")
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--burst", type=int, default=40)
    parser.add_argument("--record-bytes", type=int, default=4000)
    parser.add_argument("--rejoin", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1994)
    parser.add_argument("--verbose", action="store_true", help="print the rejoiner's log")
    parser.add_argument("--no-mesh", action="store_true", help="skip the full-mesh runs")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "runs": [],
    }
    for size in (int(s) for s in args.sizes.split(",")):
        for mesh in (False,) if args.no_mesh else (False, True):
            try:
                run = await run_size(size, args, mesh)
            except AssertionError as error:  # a group that never settled is a result too
                run = {"members": size, "full_mesh": mesh, "failed": str(error)}
            print(json.dumps(run), flush=True)
            results["runs"].append(run)
    if args.rejoin:
        results["rejoin"] = await rejoin(args)
        print(json.dumps(results["rejoin"]), flush=True)
    OUTPUT.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())

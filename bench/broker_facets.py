#!/usr/bin/env python3
"""Broker facets benchmark, run by hand (never in CI): what counting a query's facets
(broker/facets.py) costs, as a client sees it, on the generated records of
bench/broker_index.py (40 gatherers, 6 types, update times over 32 years).

    .venv/bin/python bench/broker_facets.py [--records 20000] [--queries 50] [--seed 1994]

The records are loaded as bench/broker_api.py loads them and ``python -m broker serve`` runs
on them; each class of query of bench/broker_index.py is asked one request at a time over
one keep-alive connection three ways: ``GET /api/search`` (10 results), the same with
``facets=1``, and the search page ``GET /?q=`` (results, facets and HTML). Reported per class
and way: p50/p99/max milliseconds, and the broker process's CPU milliseconds per request
(user + system, from /proc). Results go to bench/results/broker_facets.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import aiohttp

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from broker_api import arguments, header, percentiles, warmed  # noqa: E402

from broker.query.parser import describe  # noqa: E402

OUTPUT = BENCH / "results" / "broker_facets.json"
WAYS = {
    "api": ("/api/search", {"limit": "10"}),
    "api+facets": ("/api/search", {"limit": "10", "facets": "1"}),
    "page": ("/", {"n": "10"}),
}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def main() -> None:
    args = arguments(__doc__.split("\n\n")[0], 20_000, 50)
    results = header(args)
    async with warmed(args) as (classes, url, process, loading):
        results["load_seconds"] = round(loading, 1)
        async with aiohttp.ClientSession() as session:
            measured: dict[str, dict[str, object]] = {}
            for query_class in classes:
                row: dict[str, object] = {}
                for way, (path, extra) in WAYS.items():
                    times = []
                    cpu = cpu_seconds(process.pid)
                    for node in query_class.queries:
                        started = time.perf_counter()
                        params = {"q": describe(node), **extra}
                        async with session.get(f"{url}{path}", params=params) as response:
                            await response.read()
                            assert response.status == 200, response.status
                        times.append((time.perf_counter() - started) * 1000)
                    cpu = cpu_seconds(process.pid) - cpu
                    row[way] = {**percentiles(times), "cpu_ms": round(cpu * 1000 / len(times), 2)}
                measured[query_class.name] = row
                print(query_class.name, json.dumps(row), flush=True)
            results["classes"] = measured
    OUTPUT.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())

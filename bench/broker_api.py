#!/usr/bin/env python3
"""Broker HTTP API benchmark, run by hand (never in CI): query latency as a client sees it,
through ``GET /api/search`` of a real broker process holding the same generated records as
bench/broker_index.py (the issue's target: p99 <= 10 ms).

    .venv/bin/python bench/broker_api.py [--records 100000] [--queries 200] [--seed 1994]

The records are loaded into a data directory first (the registry by staged pulls, the index
from it, as ``harvest-broker collect --offline`` does); then ``python -m broker serve`` runs on
it and this process asks each class of query of bench/broker_index.py, one request at a time
over one keep-alive connection, 10 results a page with their snippets. Results go to
bench/results/broker_api.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from broker_index import Corpus, QueryClass, query_classes  # noqa: E402

from broker.index import TantivyIndex  # noqa: E402
from broker.query.parser import describe  # noqa: E402
from broker.registry import Registry  # noqa: E402
from broker.sync import IndexSync  # noqa: E402

OUTPUT = BENCH / "results" / "broker_api.json"
TARGET_P99_MS = 10.0
BATCH = 1000


async def load(directory: Path, records: int, seed: int) -> tuple[Corpus, list[object], float]:
    corpus = Corpus(seed)
    made = corpus.records(records)
    started = time.perf_counter()
    async with await Registry.open(directory / "registry.db") as registry:
        async with registry.begin("bench") as pull:
            for start in range(0, len(made), BATCH):
                await pull.add(made[start : start + BATCH])
            await pull.commit(cursor="0", complete=False, now=time.time(), default_ttl=1e8)
        async with await TantivyIndex.open(directory / "index") as index:
            await IndexSync(registry, index).after_opening()
    return corpus, list(made), time.perf_counter() - started


async def serve(directory: Path) -> tuple[asyncio.subprocess.Process, str]:
    config = directory / "broker.toml"
    config.write_text(
        f'[broker]\nlisten = "127.0.0.1:0"\ndata_dir = "{directory}"\nmax_results = 10\n'
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "broker", "serve", str(config), stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    async with asyncio.timeout(120):
        line = (await process.stdout.readline()).decode()
    return process, line.rsplit("listening on ", 1)[1].strip().rstrip("/")


def percentiles(times: list[float]) -> dict[str, float]:
    """The median, 99th percentile and maximum of ``times`` (milliseconds)."""
    times = sorted(times)
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p99_ms": round(times[int(0.99 * (len(times) - 1))], 2),
        "max_ms": round(times[-1], 2),
    }


@contextlib.asynccontextmanager
async def warmed(
    args: argparse.Namespace,
) -> AsyncIterator[tuple[list[QueryClass], str, asyncio.subprocess.Process, float]]:
    """A broker process serving ``args.records`` generated records, its vocabulary of
    approximate words built: the classes of ``args.queries`` queries to ask it, its URL, the
    process and the seconds loading took."""
    with tempfile.TemporaryDirectory(prefix="harvest-bench-") as name:
        directory = Path(name)
        corpus, records, loading = await load(directory, args.records, args.seed)
        classes = query_classes(records, corpus, args.queries, args.seed)  # type: ignore[arg-type]
        process, url = await serve(directory)
        try:
            # The first approximate query builds the typo table: not what is measured.
            warming = {"q": "cachee~1"}
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"{url}/api/search", params=warming) as warm,
            ):
                await warm.read()
            await asyncio.sleep(10)
            yield classes, url, process, loading
        finally:
            process.terminate()
            await process.wait()


def arguments(about: str, records: int, queries: int) -> argparse.Namespace:
    """The command line of a benchmark of ``about`` on generated records (their number,
    queries of each class and the seed; the defaults given)."""
    parser = argparse.ArgumentParser(description=about)
    parser.add_argument("--records", type=int, default=records)
    parser.add_argument("--queries", type=int, default=queries)
    parser.add_argument("--seed", type=int, default=1994)
    return parser.parse_args()


def header(args: argparse.Namespace) -> dict[str, object]:
    """What a benchmark's results begin with: when, where, and how many records."""
    return {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": f"{platform.machine()}",
        "records": args.records,
    }


async def main() -> None:
    args = arguments(__doc__.split("\n\n")[0], 100_000, 200)
    results = header(args) | {"target_p99_ms": TARGET_P99_MS}
    async with warmed(args) as (classes, url, _, loading):
        results["load_seconds"] = round(loading, 1)
        async with aiohttp.ClientSession() as session:
            measured = {}
            for query_class in classes:
                times = []
                for node in query_class.queries:
                    started = time.perf_counter()
                    async with session.get(
                        f"{url}/api/search", params={"q": describe(node), "limit": "10"}
                    ) as response:
                        await response.read()
                        assert response.status == 200, response.status
                    times.append((time.perf_counter() - started) * 1000)
                measured[query_class.name] = {
                    **percentiles(times),
                    "target": query_class.target,
                }
                print(query_class.name, measured[query_class.name], flush=True)
            results["classes"] = measured
    OUTPUT.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())

#!/usr/bin/env python3
"""Two workers each: harvest-cache ``--workers 2`` against Squid ``workers 2``, run by hand.

    python bench/workers.py [--workers 2] [--duration 5] [--repeats 3] [--scenarios hit-1k,miss]

The machine has two cores, so here nothing is pinned: each proxy's workers, wrk (one thread)
and the nginx origin share both cores, the same way for both systems. Scenarios are those of
bench/run.py (hits of 16 warm 1 KiB objects; a storm of unique 1 KiB misses), each run
``--repeats`` times for ``--duration`` seconds with 64 connections; medians are reported with
the Harvest/Squid ratio, and written to bench/results/workers.json. See bench/README.md
("Workers").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import run as base

DEFAULT_OUTPUT = base.BENCH / "results" / "workers.json"


def measure(
    system: str,
    args: argparse.Namespace,
    procs: base.Processes,
    workdir: Path,
    origin: base.Origin,
    harvest_cmd: list[str] | None,
) -> dict[str, Any]:
    proxy = base.Proxy(
        system, procs, workdir, args.memory_mb, True, harvest_cmd, workers=args.workers
    )
    out: dict[str, Any] = {"version": proxy.version, "scenarios": {}}
    try:
        for scn in (s for s in base.SCENARIOS if s.name in args.scenario_list):
            tag = f"{system}-w{args.workers}-{int(time.time() * 1000)}"
            if scn.kind == "hit":
                for _ in range(2):  # every worker may take a connection: warm them all
                    for n in range(scn.urls):
                        url = f"http://{origin.hostport}/obj/{scn.size}?r={tag}&n={n}"
                        proxy.get(url, base.SIZES[scn.size])
            runs = []
            for r in range(args.repeats):
                run_tag = tag if scn.kind == "hit" else f"{tag}-{r}"
                lua = base.lua_args(scn, origin, run_tag, True)
                raw = base.run_wrk(procs, proxy.port, lua, args, args.duration)
                seconds = raw["duration_us"] / 1e6
                runs.append(
                    {
                        "rps": round(raw["requests"] / seconds, 1),
                        "p50_ms": round(raw["latency_us"]["p50"] / 1000, 3),
                        "p99_ms": round(raw["latency_us"]["p99"] / 1000, 3),
                        "errors": {k: v for k, v in raw["errors"].items() if v},
                    }
                )
                base.say(f"  {system:7} {scn.name:8} run {r + 1}/{args.repeats}: {runs[-1]}")
            out["scenarios"][scn.name] = {
                "runs": runs,
                "rps": statistics.median(r["rps"] for r in runs),
                "p50_ms": statistics.median(r["p50_ms"] for r in runs),
                "p99_ms": statistics.median(r["p99_ms"] for r in runs),
            }
    finally:
        proxy.stop()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2, help="workers of each proxy (2)")
    p.add_argument("--duration", type=float, default=5.0, help="seconds per run (5)")
    p.add_argument("--repeats", type=int, default=3, help="runs per scenario; medians (3)")
    p.add_argument("--scenarios", default="hit-1k,miss", help="of bench/run.py (hit-1k,miss)")
    p.add_argument("--memory-mb", type=int, default=256, help="memory tier of each (256)")
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON results file")
    args = p.parse_args()
    args.scenario_list = args.scenarios.split(",")
    args.threads, args.connections = 1, 64  # (what base.run_wrk reads)
    base.ensure_tools(["squid", "wrk", "nginx", "taskset"])
    harvest_cmd = base.harvest_command(None)
    report: dict[str, Any] = {"workers": args.workers, "settings": vars(args) | {}}
    with base.Session("harvest-bench-workers-", False) as session:
        procs, workdir = session.procs, session.workdir
        origin = base.Origin("nginx", procs, workdir, base.ALL_CPUS)
        for system in ("squid", "harvest"):
            report[system] = measure(system, args, procs, workdir, origin, harvest_cmd)
    if session.status:
        return session.status
    print(f"\n{'scenario':10} {'squid req/s':>12} {'harvest req/s':>14} {'H/S':>6}")
    for name in args.scenario_list:
        squid, harvest = report["squid"]["scenarios"][name], report["harvest"]["scenarios"][name]
        ratio = harvest["rps"] / squid["rps"]
        report.setdefault("ratios", {})[name] = round(ratio, 2)
        print(f"{name:10} {squid['rps']:12,.0f} {harvest['rps']:14,.0f} {ratio:5.2f}x")
    report["settings"].pop("output", None)
    args.output.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

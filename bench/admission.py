"""What the disk tier's promotion rule (harvest_cache.store.admission) does to the memory
tier, simulated: the real ``Admission`` in front of an LRU of a fixed number of objects, every
object on disk, request streams of several shapes. For each share of the tier a doorkeeper
generation holds (and for promoting every read, "always"), the memory tier's hit ratio and the
promotions per request (each a disk read copied into memory and an object evicted).

    .venv/bin/python bench/admission.py [--objects 4096] [--requests 400000] [--seed 1]
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import random
import sys
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harvest_cache.store.admission import Admission

SHARES = (1.0, 0.5, 0.25, 0.125)


def zipf(keys: int, alpha: float, rng: random.Random) -> Callable[[], int]:
    weights = itertools.accumulate(1 / (rank + 1) ** alpha for rank in range(keys))
    cumulative = list(weights)
    total = cumulative[-1]
    return lambda: bisect.bisect_left(cumulative, rng.random() * total)


def simulate(
    next_key: Callable[[], int], objects: int, share: float | None, requests: int
) -> tuple[float, float]:
    """(memory hit ratio, promotions per request) for a tier of ``objects`` objects."""
    tier: OrderedDict[int, None] = OrderedDict()
    admission = None if share is None else Admission(share)
    hits = promotions = 0
    for _ in range(requests):
        key = next_key()
        if key in tier:
            tier.move_to_end(key)
            hits += 1
            continue
        fits = len(tier) < objects
        if admission is None or admission.admits(str(key), fits, len(tier)):
            if not fits:
                tier.popitem(last=False)
            tier[key] = None
            promotions += 1
    return hits / requests, promotions / requests


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--objects", type=int, default=4096, help="objects the memory tier holds")
    p.add_argument("--requests", type=int, default=400_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--output", type=Path, help="JSON results (bench/results/admission.json)")
    args = p.parse_args(argv)
    n = args.objects
    workloads: dict[str, Callable[[random.Random], Callable[[], int]]] = {
        f"uniform over {4 * n:,}": lambda rng: lambda: rng.randrange(4 * n),
        "Zipf(0.8) over 100,000": lambda rng: zipf(100_000, 0.8, rng),
        f"Zipf(0.8) over {4 * n:,}": lambda rng: zipf(4 * n, 0.8, rng),
        "Zipf(1.0) over 100,000": lambda rng: zipf(100_000, 1.0, rng),
    }
    results = []
    print(f"{'workload':<24} {'generation':>12} {'hit ratio':>9} {'promotions/req':>14}")
    for name, make in workloads.items():
        for share in (None, *SHARES):
            hit, promoted = simulate(make(random.Random(args.seed)), n, share, args.requests)
            label = "always" if share is None else f"{share:g} x tier"
            print(f"{name:<24} {label:>12} {hit:>9.3f} {promoted:>14.3f}")
            results.append({"workload": name, "share": share, "hit": hit, "promotions": promoted})
    output = args.output or Path(__file__).resolve().parent / "results" / "admission.json"
    output.write_text(json.dumps({"objects": n, "requests": args.requests, "runs": results}))
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A store killed with SIGKILL mid-write: whatever a reopened store returns is whole and right,
and every object whose commit had returned is still there."""

from __future__ import annotations

import asyncio
import hashlib
import random
import sys
from pathlib import Path

import pytest

from harvest_cache.config import CacheConfig
from harvest_cache.store.interface import FileBody, StoredObject
from harvest_cache.store.tiered import open_store

REPO = Path(__file__).resolve().parents[2]
KEYS = 7
SIZES = (0, 300, 40_000, 700_000, 3_000_000)
BIG = SIZES.index(3_000_000)
ROUNDS = 3
COMMITS_BEFORE_KILL = 12

# The child writes versions start, start+1, ... to keys k{version % KEYS} through the real
# store, body sizes cycling through SIZES, printing "begin V" before and "done V" after each
# commit; every third version then gets its head updated.
CHILD = f"""
import asyncio, hashlib, sys
from pathlib import Path
from harvest_cache.config import CacheConfig
from harvest_cache.http.stored import StoredHead
from harvest_cache.store.tiered import open_store

def body(version):
    n = {SIZES!r}[version % {len(SIZES)}]
    seed = hashlib.sha256(str(version).encode()).digest()
    return (seed * (n // 32 + 1))[:n]

async def main(directory, version):
    store = await open_store(CacheConfig(dir=Path(directory), memory_mb=1,
                                         memory_max_object_kb=64, disk_mb=512))
    while True:
        key, data = f"k{{version % {KEYS}}}", body(version)
        head = StoredHead(key, 200, "OK", (("x-version", str(version)),), 0.0, 0.0, len(data))
        print("begin", version, flush=True)
        writer = store.open_writer(key, len(data))
        for i in range(0, len(data), 16384):
            await writer.write(data[i : i + 16384])
            await asyncio.sleep(0.001 if len(data) > 1000000 else 0)  # a big body trickles in
        await writer.commit(head)
        print("done", version, flush=True)
        if version % 3 == 0:
            headers = head.headers + (("x-updated", "1"),)
            await store.update_head(key, StoredHead(key, 200, "OK", headers, 1.0, 1.0, len(data)))
        version += 1

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def expected_body(version: int) -> bytes:
    n = SIZES[version % len(SIZES)]
    seed = hashlib.sha256(str(version).encode()).digest()
    return (seed * (n // 32 + 1))[:n]


def spools(directory: Path) -> list[Path]:
    """Spool files left anywhere under tmp/ (each process spools in a directory of its own)."""
    return [p for p in (directory / "tmp").rglob("*") if p.is_file()]


def read_whole(body: FileBody) -> bytes:
    with body.file as f:
        f.seek(body.offset)
        return f.read(body.length)


async def run_and_kill(directory: Path, start: int, rng: random.Random) -> list[tuple[str, int]]:
    """Run the child until it has committed enough and is writing a big body, then SIGKILL it.

    Returns every event the child printed before it died.
    """
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        str(directory),
        str(start),
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    assert proc.stdout is not None
    events: list[tuple[str, int]] = []
    try:
        for _ in range(1000):  # the kill comes after about 30 lines
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=20)
            assert line, f"child exited early with {await proc.wait()}"
            event, version = parse(line.decode())
            events.append((event, version))
            commits = sum(e == "done" for e, _ in events)
            if event == "begin" and commits >= COMMITS_BEFORE_KILL and version % len(SIZES) == BIG:
                # Into the ~200 ms write, past its first spill to a spool in tmp/.
                await asyncio.sleep(rng.uniform(0.1, 0.15))
                break
        else:
            pytest.fail("the child never began a big write")
    finally:
        proc.kill()  # SIGKILL
        await proc.wait()
    assert proc.returncode == -9
    events += map(parse, (await proc.stdout.read()).decode().splitlines())
    return events


def parse(line: str) -> tuple[str, int]:
    event, version = line.split()
    return event, int(version)


@pytest.mark.slow
async def test_sigkill_mid_write_never_yields_a_partial_object(tmp_path: Path) -> None:
    cfg = CacheConfig(dir=tmp_path / "cache", memory_mb=1, memory_max_object_kb=64, disk_mb=512)
    rng = random.Random(1994)
    committed: dict[str, int] = {}  # the last committed version of each key, over all rounds
    for round_ in range(ROUNDS):
        start = round_ * 1000
        events = await run_and_kill(cfg.dir, start, rng)
        committed.update((f"k{v % KEYS}", v) for e, v in events if e == "done")
        assert events[-1][0] == "begin", "the kill should land inside a write"
        interrupted = events[-1][1]

        assert spools(cfg.dir) != [], "the kill should leave a spool behind"

        store = await open_store(cfg)
        assert spools(cfg.dir) == []
        for i in range(KEYS):
            key = f"k{i}"
            found = await store.get(key)
            if key not in committed:
                assert found is None, f"{key} was never committed"
                continue
            assert isinstance(found, StoredObject), f"committed {key} lost"
            version = int(dict(found.head.headers)["x-version"])
            assert version != interrupted, "an interrupted write was returned"
            assert version == committed[key], "not the last committed version"
            body = found.body if isinstance(found.body, bytes) else read_whole(found.body)
            assert found.head.body_length == len(body)
            assert body == expected_body(version), f"{key} v{version} is damaged"
        assert store.read_failures == 0
        await store.close()

"""WarcArchive: records read back with warcio, checked by the standard ``warcio`` tool."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

from warcio.archiveiterator import ArchiveIterator

from gatherer.archive import WarcArchive
from gatherer.fetch.file import FileFetcher
from gatherer.fetch.http import HttpFetcher
from gatherer.fetch.result import Fetched
from gatherer.fetch.settings import FetchSettings
from tests.support import Origin, static

WARCIO = str(Path(sys.executable).parent / "warcio")
NAME = re.compile(r"harvest-(\d{14})-(\d{5})\.warc\.gz")
TEXT = b"plain words, " * 500


def read(path: Path) -> list[dict[str, Any]]:
    """Every record of a WARC file: type, headers, HTTP headers and payload."""
    records = []
    with path.open("rb") as stream:
        for record in ArchiveIterator(stream):
            records.append(
                {
                    "type": record.rec_type,
                    "uri": record.rec_headers.get_header("WARC-Target-URI"),
                    "id": record.rec_headers.get_header("WARC-Record-ID"),
                    "warc": record.rec_headers,
                    "http": record.http_headers,
                    "content_type": record.content_type,
                    "payload": record.content_stream().read(),
                }
            )
    return records


def warcio(command: str, path: Path) -> str:
    done = subprocess.run(
        [WARCIO, command, str(path)], capture_output=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.decode()


def resource(url: str, content: bytes, content_type: str | None = None) -> Fetched:
    return Fetched(url=url, content=content, content_type=content_type)


async def test_http_exchanges_and_resources(tmp_path: Path, origin: Origin) -> None:
    origin.route("/plain", static(TEXT, {"Content-Type": "text/plain"}))
    origin.route("/zipped", static(gzip.compress(TEXT), {"Content-Encoding": "gzip"}))
    (tmp_path / "local.txt").write_bytes(b"a local file\n")
    async with HttpFetcher(FetchSettings(timeout=5.0)) as http:
        plain = await http.fetch(origin.url("/plain"))
        zipped = await http.fetch(origin.url("/zipped"))
    local = await FileFetcher(FetchSettings()).fetch((tmp_path / "local.txt").as_uri())
    menu = resource("gopher://127.0.0.1/1", b"Welcome\n", "text/x-gopher-menu")
    blob = resource("ftp://127.0.0.1/pub/blob.bin", bytes(range(256)))

    async with WarcArchive(
        tmp_path / "warc", rotate_bytes=1 << 30, software="harvest-test"
    ) as archive:
        for fetched in (plain, zipped, local, menu, blob):
            await archive.record(fetched)
    (path,) = archive.paths
    assert NAME.fullmatch(path.name)
    records = read(path)
    assert [r["type"] for r in records] == [
        "warcinfo",
        "response",
        "request",
        "response",
        "request",
        "resource",
        "resource",
        "resource",
    ]
    info = records[0]
    assert info["warc"].get_header("WARC-Filename") == path.name
    assert b"software: harvest-test" in info["payload"]

    for fetched, response, request in ((plain, *records[1:3]), (zipped, *records[3:5])):
        assert response["uri"] == request["uri"] == fetched.url
        assert request["warc"].get_header("WARC-Concurrent-To") == response["id"]
        assert response["payload"] == fetched.content == TEXT
        assert response["http"].get_statuscode() == "200"
        assert response["warc"].get_header("WARC-IP-Address") == "127.0.0.1"
        assert request["http"].get_header("User-Agent") == FetchSettings().user_agent
        assert request["http"].protocol == "GET"
    assert records[1]["http"].get_header("Content-Type") == "text/plain"
    # The decoded body is archived, described as such; the wire fields are kept aside.
    decoded = records[3]["http"]
    assert decoded.get_header("Content-Encoding") is None
    assert decoded.get_header("X-Archive-Orig-Content-Encoding") == "gzip"
    assert decoded.get_header("Content-Length") == str(len(TEXT))

    for fetched, record in zip((local, menu, blob), records[5:], strict=True):
        assert (record["uri"], record["payload"]) == (fetched.url, fetched.content)
    assert [r["content_type"] for r in records[5:]] == [
        "application/octet-stream",
        "text/x-gopher-menu",
        "application/octet-stream",
    ]

    warcio("check", path)  # every digest verified
    index = [json.loads(line) for line in warcio("index", path).splitlines()]
    assert [entry.get("warc-target-uri") for entry in index[1:]] == [r["uri"] for r in records[1:]]


def gzip_members(data: bytes) -> list[tuple[int, bytes]]:
    """Each gzip member of ``data``: its header's XFL byte (2 for level 9, 4 for level 1, 0
    between) and what it holds."""
    members = []
    while data:
        member = zlib.decompressobj(zlib.MAX_WBITS + 16)
        members.append((data[8], member.decompress(data)))
        assert member.eof
        data = member.unused_data
    return members


async def test_each_record_is_a_gzip_member_of_its_own(tmp_path: Path) -> None:
    async with WarcArchive(tmp_path, rotate_bytes=1 << 30, software="t") as archive:
        for n in range(3):
            await archive.record(resource(f"file:///doc{n}", TEXT))
    (path,) = archive.paths
    members = gzip_members(await asyncio.to_thread(path.read_bytes))
    assert len(members) == len(read(path)) == 4  # warcinfo and three resources
    assert all(held.startswith(b"WARC/1.") for _, held in members)
    assert {flags for flags, _ in members} == {0}  # zlib's default level, not 9


async def test_rotation_starts_new_files(tmp_path: Path) -> None:
    async with WarcArchive(tmp_path, rotate_bytes=600, software="t", prefix="harvest") as archive:
        for n in range(6):
            await archive.record(resource(f"file:///doc{n}", os.urandom(1000)))
    paths = archive.paths
    assert len(paths) == 6  # (each record takes its file past 600 bytes)
    serials = [int(NAME.fullmatch(p.name).group(2)) for p in paths]  # type: ignore[union-attr]
    assert serials == sorted(serials)
    assert len(set(serials)) == len(serials)
    uris = []
    for path in paths:
        records = read(path)
        assert records[0]["type"] == "warcinfo"
        uris += [r["uri"] for r in records[1:]]
        warcio("check", path)
    assert uris == [f"file:///doc{n}" for n in range(6)]


async def test_concurrent_records_keep_their_order(tmp_path: Path) -> None:
    async with WarcArchive(tmp_path, rotate_bytes=1 << 30, software="t") as archive:
        await asyncio.gather(
            *(archive.record(resource(f"gopher://h/0/{n}", b"%d" % n)) for n in range(40))
        )
    (path,) = archive.paths
    assert [r["uri"] for r in read(path)[1:]] == [f"gopher://h/0/{n}" for n in range(40)]


async def test_nothing_to_archive_creates_no_file(tmp_path: Path) -> None:
    unchanged = Fetched(url="file:///x", content=b"", not_modified=True, last_modified="1:1")
    async with WarcArchive(tmp_path / "w", rotate_bytes=1000, software="t") as archive:
        await archive.record(unchanged)
    assert archive.paths == ()
    assert not (tmp_path / "w").exists()


async def test_earlier_files_are_not_overwritten(tmp_path: Path) -> None:
    now = time.time()
    earlier = [
        tmp_path / f"harvest-{time.strftime('%Y%m%d%H%M%S', time.gmtime(now + s))}-00000.warc.gz"
        for s in range(3)
    ]
    for path in earlier:
        path.write_bytes(b"an earlier run")
    async with WarcArchive(tmp_path, rotate_bytes=1 << 30, software="t") as archive:
        await archive.record(resource("file:///new", b"new"))
    assert all(path.read_bytes() == b"an earlier run" for path in earlier)
    (path,) = archive.paths
    assert path not in earlier
    assert [r["uri"] for r in read(path)[1:]] == ["file:///new"]

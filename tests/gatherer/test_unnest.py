"""Presentation unnesting: members of compressed files and archives, and the bomb limits."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import struct
import tarfile
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable

import pytest

from gatherer.errors import UnnestError
from gatherer.essence.document import Document
from gatherer.essence.options import EssenceOptions
from gatherer.essence.unnest import Unnested, unnest

URL = "http://example.org/pub/archive"
OPTIONS = EssenceOptions()


def tar_of(files: dict[str, bytes], *, fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """A tar holding ``files`` as regular files, in order."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def zip_of(files: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A zip holding ``files`` (names ending in / are directories), in order."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def gzip_of_zeros(size: int) -> bytes:
    """A gzip stream of ``size`` zero bytes, compressed a MiB at a time (never all in memory)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    mib = bytes(1 << 20)
    parts = [compressor.compress(mib) for _ in range(size >> 20)]
    return b"".join([*parts, compressor.flush()])


def run(content: bytes, name: str, options: EssenceOptions = OPTIONS) -> Unnested:
    return unnest(Document(URL, content, name=name), options)


def names(unnested: Unnested) -> list[str]:
    return [member.name for member in unnested.members]


FILES = {"src/main.c": b"int main(void) { return 0; }\n", "README": b"Read me first.\n"}

SINGLE = [
    ("gzip drops .gz", gzip.compress(b"hello\n"), "notes.txt.gz", "notes.txt"),
    ("bzip2 drops .bz2", bz2.compress(b"hello\n"), "notes.txt.bz2", "notes.txt"),
    ("xz drops .xz", lzma.compress(b"hello\n"), "notes.txt.xz", "notes.txt"),
    ("suffix case ignored", gzip.compress(b"hello\n"), "NOTES.TXT.GZ", "NOTES.TXT"),
    ("no known suffix keeps the name", gzip.compress(b"hello\n"), "blob", "blob"),
]


@pytest.mark.parametrize(
    ("content", "name", "member"), [c[1:] for c in SINGLE], ids=[c[0] for c in SINGLE]
)
def test_compressed_file_has_one_member_named_without_suffix(
    content: bytes, name: str, member: str
) -> None:
    result = run(content, name)
    assert result == Unnested((Document(URL, b"hello\n", name=member),))
    assert not result.truncated


def test_member_of_unnamed_document_is_named_after_the_url() -> None:
    result = unnest(Document("http://e.org/d/notes.gz?x=1", gzip.compress(b"hi")), OPTIONS)
    assert names(result) == ["notes"]


def test_members_keep_the_container_url_and_have_no_content_type() -> None:
    document = Document(URL, tar_of(FILES), "application/x-tar", "latin-1", "bundle.tar")
    members = unnest(document, OPTIONS).members
    assert [(m.url, m.content_type, m.charset) for m in members] == [(URL, None, None)] * 2


ARCHIVES = [
    ("tar", tar_of(FILES), "bundle.tar"),
    ("ustar tar", tar_of(FILES, fmt=tarfile.USTAR_FORMAT), "bundle.tar"),
    ("gnu tar", tar_of(FILES, fmt=tarfile.GNU_FORMAT), "bundle.tar"),
    ("tar.gz", gzip.compress(tar_of(FILES)), "bundle.tar.gz"),
    ("tgz", gzip.compress(tar_of(FILES)), "bundle.tgz"),
    ("tar.bz2", bz2.compress(tar_of(FILES)), "bundle.tar.bz2"),
    ("tbz2", bz2.compress(tar_of(FILES)), "bundle.tbz2"),
    ("txz", lzma.compress(tar_of(FILES)), "bundle.txz"),
    ("deflated zip", zip_of(FILES), "bundle.zip"),
    ("stored zip", zip_of(FILES, zipfile.ZIP_STORED), "bundle.zip"),
    ("bzip2 zip", zip_of(FILES, zipfile.ZIP_BZIP2), "bundle.zip"),
    ("lzma zip", zip_of(FILES, zipfile.ZIP_LZMA), "bundle.zip"),
    ("zip directories skipped", zip_of({"src/": b"", **FILES, "empty/": b""}), "b.zip"),
]


@pytest.mark.parametrize(
    ("content", "name"), [c[1:] for c in ARCHIVES], ids=[c[0] for c in ARCHIVES]
)
def test_archive_members_in_order_compression_transparent(content: bytes, name: str) -> None:
    result = run(content, name)
    assert [(m.name, m.content) for m in result.members] == list(FILES.items())
    assert result.reason is None


NESTED = [
    (
        "zip in tar: prefixed by the zip's path",
        tar_of({"a.txt": b"a", "docs/d.zip": zip_of({"x.txt": b"x", "y/z.txt": b"z"})}),
        ["a.txt", "docs/d.zip/x.txt", "docs/d.zip/y/z.txt"],
    ),
    (
        "gzip in tar: named without suffix",
        tar_of({"dir/x.txt.gz": gzip.compress(b"x")}),
        ["dir/x.txt"],
    ),
    (
        "tar.gz in zip: prefixed by the path in the zip",
        zip_of({"inner.tar.gz": gzip.compress(tar_of({"i.txt": b"i"}))}),
        ["inner.tar.gz/i.txt"],
    ),
    (
        "tar in tar",
        tar_of({"t.tar": tar_of({"deep.txt": b"d"}), "after.txt": b"a"}),
        ["t.tar/deep.txt", "after.txt"],
    ),
]


@pytest.mark.parametrize(
    ("content", "expected"), [c[1:] for c in NESTED], ids=[c[0] for c in NESTED]
)
def test_nested_presentations_are_unnested_to_their_leaves(
    content: bytes, expected: list[str]
) -> None:
    result = run(content, "outer")
    assert names(result) == expected
    assert result.reason is None


def test_concatenated_gzip_streams_join_and_trailing_padding_is_ignored() -> None:
    content = gzip.compress(b"one ") + gzip.compress(b"two") + bytes(512)
    assert [m.content for m in run(content, "x.gz").members] == [b"one two"]


def test_empty_compressed_file_has_one_empty_member() -> None:
    assert run(gzip.compress(b""), "empty.gz").members == (Document(URL, b"", name="empty"),)


def _unsafe_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:

        def add(name: str, kind: bytes = tarfile.REGTYPE, content: bytes = b"") -> None:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.size = len(content)
            info.linkname = "ok.txt" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
            archive.addfile(info, io.BytesIO(content))

        add("ok.txt", content=b"fine")
        add("/etc/passwd", content=b"absolute")
        add("../escape.txt", content=b"parent")
        add("a/../../escape.txt", content=b"parent inside")
        add("new\nline.txt", content=b"control character")
        add("symlink", tarfile.SYMTYPE)
        add("hardlink", tarfile.LNKTYPE)
        add("dir", tarfile.DIRTYPE)
        add("fifo", tarfile.FIFOTYPE)
        add("tty", tarfile.CHRTYPE)
        add("disk", tarfile.BLKTYPE)
        add("./also/ok.txt", content=b"normalized")
    return buffer.getvalue()


def test_tar_keeps_only_safe_regular_files() -> None:
    result = run(_unsafe_tar(), "unsafe.tar")
    assert [(m.name, m.content) for m in result.members] == [
        ("ok.txt", b"fine"),
        ("also/ok.txt", b"normalized"),
    ]
    assert result.reason is None  # skipping unsafe members is not a cut


def _flagged_last_member(content: bytes, flag: int) -> bytes:
    """``content`` (a zip) with general-purpose ``flag`` set on its last member."""
    patched = bytearray(content)
    local = zipfile.ZipFile(io.BytesIO(content)).infolist()[-1].header_offset
    central = content.rfind(b"PK\x01\x02")
    for flags_at in (local + 6, central + 8):
        (flags,) = struct.unpack_from("<H", patched, flags_at)
        struct.pack_into("<H", patched, flags_at, flags | flag)
    return bytes(patched)


@pytest.mark.parametrize(
    "flag", [0x1, 0x20, 0x40], ids=["encrypted", "patched data", "strong encryption"]
)
def test_zip_keeps_only_safe_readable_files(flag: int) -> None:
    content = zip_of(
        {
            "ok.txt": b"fine",
            "../escape.txt": b"parent",
            "/abs.txt": b"absolute",
            "..\\dos\\escape.txt": b"backslash parent",
            "tab\there.txt": b"control character",
            "locked.txt": b"unreadable",
        }
    )
    result = run(_flagged_last_member(content, flag), "unsafe.zip")
    assert names(result) == ["ok.txt"]
    assert result.reason is None


def test_gzip_bomb_stops_at_the_byte_budget_with_bounded_memory() -> None:
    bomb = gzip_of_zeros(200 << 20)
    assert len(bomb) < 1 << 20  # 200 MiB of zeros compress to about 200 KiB
    limit = 4 << 20
    tracemalloc.start()
    try:
        result = run(bomb, "zeros.gz", EssenceOptions(unnest_max_bytes=limit))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(len(m.content) for m in result.members) <= limit
    assert result.members == ()  # the one member was cut short, so it is dropped
    assert result.reason == f"expanded beyond {limit} bytes"
    assert peak < 2 * limit  # streamed: never anywhere near 200 MiB


def test_byte_budget_keeps_the_members_read_before_it_ran_out() -> None:
    content = zip_of({"a.txt": b"small", "big.bin": bytes(8 << 20), "c.txt": b"never read"})
    result = run(content, "b.zip", EssenceOptions(unnest_max_bytes=1 << 20))
    assert names(result) == ["a.txt"]
    assert result.truncated


def test_byte_budget_is_shared_by_every_level() -> None:
    # Each zip member is under the budget, together they are over it.
    inner = {f"{n}.bin": bytes(300_000) for n in range(4)}
    content = tar_of({"a.zip": zip_of(inner), "b.zip": zip_of(inner)})
    result = run(content, "t.tar", EssenceOptions(unnest_max_bytes=1_000_000))
    assert names(result) == ["a.zip/0.bin", "a.zip/1.bin", "a.zip/2.bin"]
    assert sum(len(m.content) for m in result.members) <= 1_000_000


def _with_declared_size(content: bytes, size: int) -> bytes:
    """``content`` (a one-member zip) with the member's size fields in both headers set to
    ``size``."""
    patched = bytearray(content)
    struct.pack_into("<I", patched, 22, size)  # local file header: uncompressed size
    central = content.rfind(b"PK\x01\x02")
    struct.pack_into("<I", patched, central + 24, size)  # central directory: the same
    return bytes(patched)


def test_zip_declaring_a_small_size_for_a_huge_member_is_not_trusted() -> None:
    lying = _with_declared_size(zip_of({"z.bin": bytes(20 << 20)}), 100)
    with pytest.raises(UnnestError, match="corrupt zip"):
        run(lying, "l.zip", EssenceOptions(unnest_max_bytes=1 << 20))


def test_zip_declaring_a_huge_size_for_a_small_member_reads_the_real_data() -> None:
    lying = _with_declared_size(zip_of({"small.txt": b"tiny"}), 0xFFFF_FFF0)
    result = run(lying, "l.zip", EssenceOptions(unnest_max_bytes=1 << 20))
    assert [(m.name, m.content) for m in result.members] == [("small.txt", b"tiny")]


def test_zip_bomb_members_stop_at_the_byte_budget() -> None:
    content = zip_of({f"{n}.bin": bytes(4 << 20) for n in range(10)})
    result = run(content, "bomb.zip", EssenceOptions(unnest_max_bytes=2 << 20))
    assert result.members == ()
    assert result.reason == f"expanded beyond {2 << 20} bytes"


def _gzipped(times: int, content: bytes) -> bytes:
    for _ in range(times):
        content = gzip.compress(content, mtime=0)
    return content


DEPTHS = [
    ("within the limit", 3, 3, ["t.txt"], [b"text"], None),
    ("one level too deep", 4, 3, ["t.txt.gz"], [_gzipped(1, b"text")], "nested deeper"),
    ("two levels too deep", 5, 3, ["t.txt.gz.gz"], [_gzipped(2, b"text")], "nested deeper"),
    ("depth limit one", 2, 1, ["t.txt.gz"], [_gzipped(1, b"text")], "nested deeper"),
]


@pytest.mark.parametrize(
    ("levels", "max_depth", "expected_names", "expected_contents", "reason"),
    [c[1:] for c in DEPTHS],
    ids=[c[0] for c in DEPTHS],
)
def test_nesting_beyond_max_depth_returns_the_nested_file_as_it_is(
    levels: int,
    max_depth: int,
    expected_names: list[str],
    expected_contents: list[bytes],
    reason: str | None,
) -> None:
    name = "t.txt" + ".gz" * levels
    result = run(_gzipped(levels, b"text"), name, EssenceOptions(unnest_max_depth=max_depth))
    assert [(m.name, m.content) for m in result.members] == list(
        zip(expected_names, expected_contents, strict=True)
    )
    assert result.reason == (None if reason is None else f"{reason} than {max_depth} levels")


def test_zip_in_zip_in_zip_beyond_the_depth_limit() -> None:
    innermost = zip_of({"leaf.txt": b"leaf"})
    content = zip_of({"b.zip": zip_of({"c.zip": innermost, "mid.txt": b"m"}), "top.txt": b"t"})
    result = run(content, "a.zip", EssenceOptions(unnest_max_depth=2))
    assert [(m.name, m.content) for m in result.members] == [
        ("b.zip/c.zip", innermost),
        ("b.zip/mid.txt", b"m"),
        ("top.txt", b"t"),
    ]
    assert result.reason == "nested deeper than 2 levels"


def test_unnest_called_at_the_depth_limit_gives_nothing() -> None:
    document = Document(URL, tar_of(FILES), name="t.tar")
    result = unnest(document, EssenceOptions(unnest_max_depth=2), depth=2)
    assert result == Unnested((), "nested deeper than 2 levels")


MEMBER_LIMITS = [
    ("more members than the limit", 10, 3, 3, "more than 3 members"),
    ("exactly the limit", 3, 3, 3, None),
    ("fewer than the limit", 2, 3, 2, None),
]


@pytest.mark.parametrize(
    ("files", "limit", "kept", "reason"),
    [c[1:] for c in MEMBER_LIMITS],
    ids=[c[0] for c in MEMBER_LIMITS],
)
@pytest.mark.parametrize("archive", [tar_of, zip_of], ids=["tar", "zip"])
def test_member_limit_cuts_the_list(
    archive: Callable[[dict[str, bytes]], bytes],
    files: int,
    limit: int,
    kept: int,
    reason: str | None,
) -> None:
    content = archive({f"f{n}.txt": b"x" for n in range(files)})
    result = run(content, "many", EssenceOptions(unnest_max_members=limit))
    assert names(result) == [f"f{n}.txt" for n in range(kept)]
    assert result.reason == reason


def test_member_limit_counts_members_of_nested_archives() -> None:
    content = tar_of({"a.zip": zip_of({"1": b"1", "2": b"2"}), "b.txt": b"b", "c.txt": b"c"})
    result = run(content, "t.tar", EssenceOptions(unnest_max_members=3))
    assert names(result) == ["a.zip/1", "a.zip/2", "b.txt"]
    assert result.reason == "more than 3 members"


def _flip(content: bytes, offset: int) -> bytes:
    return content[:offset] + bytes([content[offset] ^ 0xFF]) + content[offset + 1 :]


def _unsupported_zip_version() -> bytes:
    content = bytearray(zip_of({"a.txt": b"a"}))
    central = content.rfind(b"PK\x01\x02")
    struct.pack_into("<B", content, central + 6, 99)  # "version needed to extract": 9.9
    return bytes(content)


_GZIP = gzip.compress(b"some text " * 50)
_ZIP = zip_of({"a.txt": b"some text " * 50})
CORRUPT = [
    ("truncated gzip", _GZIP[:-20], "x.gz", "truncated gzip stream"),
    ("gzip with a bad CRC", _flip(_GZIP, len(_GZIP) - 6), "x.gz", "corrupt gzip stream"),
    ("gzip with bad data", _flip(_GZIP, 15), "x.gz", "corrupt gzip stream"),
    ("not gzip at all", b"plain text", "x.gz", "not a gzip stream"),
    ("truncated bzip2", bz2.compress(b"text " * 50)[:-10], "x.bz2", "truncated bzip2 stream"),
    ("bad bzip2", b"BZh9" + bytes(40), "x.bz2", "corrupt bzip2 stream"),
    ("truncated xz", lzma.compress(b"text " * 50)[:-10], "x.xz", "truncated xz stream"),
    ("bad xz", b"\xfd7zXZ\x00" + bytes(40), "x.xz", "corrupt xz stream"),
    ("not a tar", b"plain text, not a tar", "x.tar", "corrupt tar"),
    ("truncated tar member", tar_of({"a.txt": b"a" * 2000})[:1024], "x.tar", "corrupt tar"),
    ("truncated zip", _ZIP[:-30], "x.zip", "corrupt zip"),
    ("zip member with bad data", _flip(_ZIP, 40), "x.zip", "corrupt zip"),
    ("unsupported zip version", _unsupported_zip_version(), "x.zip", "unsupported zip"),
]


@pytest.mark.parametrize(
    ("content", "name", "message"), [c[1:] for c in CORRUPT], ids=[c[0] for c in CORRUPT]
)
def test_corrupt_input_raises_unnest_error(content: bytes, name: str, message: str) -> None:
    with pytest.raises(UnnestError, match=message):
        run(content, name)


def test_corrupt_nested_member_is_kept_as_it_is_and_reported() -> None:
    broken = zip_of({"1.txt": b"one", "2.txt": b"two " * 100})
    broken = broken[: broken.rfind(b"2.txt") - 10]  # the central directory is gone
    content = tar_of({"a.txt": b"a", "broken.zip": broken, "b.txt": b"b"})
    result = run(content, "t.tar")
    assert [(m.name, m.content) for m in result.members] == [
        ("a.txt", b"a"),
        ("broken.zip", broken),
        ("b.txt", b"b"),
    ]
    assert result.reason is not None
    assert result.reason.startswith("broken.zip: corrupt zip")


def test_a_document_that_is_not_nested_raises() -> None:
    with pytest.raises(UnnestError, match="Text is not"):
        run(b"just text", "a.txt")


def test_unnested_repr_and_truncated() -> None:
    cut = Unnested((Document(URL, b"abc", name="a"),), "more than 1 members")
    assert repr(cut) == "Unnested(1 members, 3 bytes, cut: more than 1 members)"
    assert cut.truncated
    assert not Unnested(()).truncated

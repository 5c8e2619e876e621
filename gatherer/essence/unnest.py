"""Presentation unnesting: the files inside compressed files and archives, within bomb limits.

A gzip, bzip2 or xz file has one member, its decompressed bytes, named after the file without
its suffix (``pkg.tar.gz`` -> ``pkg.tar``, ``pkg.tgz`` -> ``pkg.tar``). A tar gives its regular
files, a zip its files, named by path. Members found to be nested presentations are unnested
in turn, so the result is the leaves, in archive order. Compression is transparent: the
members of ``pkg.tar.gz`` are named as those of ``pkg.tar``; an archive inside an archive
prefixes its members with its path there (``bundle.tar`` holding ``docs.zip`` and
``src.tar.gz`` gives ``docs.zip/a.txt`` and ``src.tar.gz/a.c``).

Limits (``EssenceOptions``), all for one top-level document:

* ``unnest_max_bytes``: the bytes decompression may produce, summed over every level (gzip,
  bzip2 and xz output, zip member contents). Decompression streams in chunks and stops when
  the budget runs out: the member being read is dropped, unnesting ends, and the members read
  so far are returned. Tar members are slices of bytes already in hand, so they are not
  charged; sparse tar members, whose holes would expand, are skipped.
* ``unnest_max_members``: members returned; further ones end unnesting.
* ``unnest_max_depth``: nesting levels expanded; a deeper nested presentation is returned as
  a member as it is.

Each cut is reported in ``Unnested.reason``. Unsafe members are skipped silently: links,
devices, directories, encrypted zip members or unknown zip methods, absolute paths, ``..``
and names with control characters. A corrupt top-level document raises ``UnnestError``; a
corrupt nested member is returned as it is (its partial members dropped) and reported.
"""

from __future__ import annotations

import bz2
import io
import lzma
import re
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

from gatherer.errors import UnnestError
from gatherer.essence.document import Document
from gatherer.essence.options import EssenceOptions
from gatherer.essence.types import name_of, recognize

_CHUNK = 64 * 1024
# xz headers choose the dictionary size; cap what a header can make liblzma allocate
# (xz -9 needs 64 MiB).
_XZ_MEMLIMIT = 128 * 1024 * 1024
# General-purpose flags zipfile cannot read: encrypted, patched data, strong encryption.
_ZIP_UNREADABLE_FLAGS = 0x1 | 0x20 | 0x40
_ZIP_METHODS = frozenset(
    {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
)
_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f]")

COMPRESSED_TYPES = frozenset({"GNUCompressed", "BZip2Compressed", "XZCompressed"})
ARCHIVE_TYPES = frozenset({"Tar", "Zip"})
NESTED_TYPES = COMPRESSED_TYPES | ARCHIVE_TYPES


@dataclass(frozen=True, slots=True)
class Unnested:
    """The leaf members of a nested presentation, in order, and what cut the list if anything.

    ``reason`` is None when every member was read; else it says which limit (or which
    corrupt nested member) cut the list, several reasons joined by ``"; "``.
    """

    members: tuple[Document, ...]
    reason: str | None = None

    @property
    def truncated(self) -> bool:
        """True when limits or a corrupt nested member cut the list."""
        return self.reason is not None

    def __repr__(self) -> str:
        size = sum(len(member.content) for member in self.members)
        cut = f", cut: {self.reason}" if self.reason else ""
        return f"Unnested({len(self.members)} members, {size} bytes{cut})"


def unnest(document: Document, options: EssenceOptions, *, depth: int = 0) -> Unnested:
    """The members of ``document``, a nested presentation at nesting level ``depth``.

    Raises ``UnnestError`` when ``document`` is not a nested presentation or is corrupt.
    """
    kind = recognize(document)
    if kind not in NESTED_TYPES:
        raise UnnestError(f"{kind} is not a compressed file or an archive")
    if depth >= options.unnest_max_depth:
        return Unnested((), _too_deep(options))
    walk = _Walk(options)
    try:
        walk.expand(document, kind, "", depth)
    except _Stop as stop:
        walk.note(stop.reason)
    return Unnested(tuple(walk.members), "; ".join(walk.reasons) or None)


class _Decompressor(Protocol):
    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...


class _Gunzip:
    """zlib's gzip decompressor shaped like bz2's and lzma's: it keeps unconsumed input itself."""

    __slots__ = ("_inflate", "_tail")

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        self._tail = b""

    @property
    def eof(self) -> bool:
        return self._inflate.eof

    @property
    def unused_data(self) -> bytes:
        return self._inflate.unused_data

    def decompress(self, data: bytes, max_length: int, /) -> bytes:
        # Concatenate only when given new input: the tail can be most of the file.
        chunk = self._inflate.decompress(self._tail + data if data else self._tail, max_length)
        self._tail = self._inflate.unconsumed_tail
        return chunk


@dataclass(frozen=True, slots=True)
class _Codec:
    """One compression format: how its streams start, its file suffixes, its decompressor."""

    name: str
    magic: bytes
    suffixes: tuple[tuple[str, str], ...]  # (suffix, what replaces it in the member's name)
    new: Callable[[], _Decompressor]


def _unxz() -> _Decompressor:
    return lzma.LZMADecompressor(lzma.FORMAT_XZ, memlimit=_XZ_MEMLIMIT)


_CODECS = {
    "GNUCompressed": _Codec(
        "gzip", b"\x1f\x8b", ((".tgz", ".tar"), (".taz", ".tar"), (".gz", "")), _Gunzip
    ),
    "BZip2Compressed": _Codec(
        "bzip2",
        b"BZh",
        ((".tbz2", ".tar"), (".tbz", ".tar"), (".bz2", ""), (".bz", "")),
        bz2.BZ2Decompressor,
    ),
    "XZCompressed": _Codec("xz", b"\xfd7zXZ\x00", ((".txz", ".tar"), (".xz", "")), _unxz),
}


class _Stop(Exception):
    """A limit ended the walk: an internal signal, caught by ``unnest``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Walk:
    """One unnesting: the members found so far and the limits they are counted against."""

    __slots__ = ("budget", "members", "options", "reasons")

    def __init__(self, options: EssenceOptions) -> None:
        self.options = options
        self.budget = options.unnest_max_bytes
        self.members: list[Document] = []
        self.reasons: list[str] = []

    def note(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)

    def charge(self, size: int) -> None:
        self.budget -= size
        if self.budget < 0:
            raise _Stop(f"expanded beyond {self.options.unnest_max_bytes} bytes")

    def add(self, member: Document) -> None:
        if len(self.members) >= self.options.unnest_max_members:
            raise _Stop(f"more than {self.options.unnest_max_members} members")
        self.members.append(member)

    def expand(self, document: Document, kind: str, prefix: str, depth: int) -> None:
        """Visit the members of ``document`` (of nested type ``kind``); names start ``prefix``."""
        codec = _CODECS.get(kind)
        if codec is not None:
            content = self.decompress(document.content, codec)
            name = _decompressed_name(document.name or name_of(document), codec)
            # The decompressed file stands in for the compressed one: same prefix.
            self.visit(Document(document.url, content, name=name), prefix, depth + 1)
            return
        members = _tar_members(document.content) if kind == "Tar" else self.zip_members(document)
        for path, content in members:
            name = prefix + path
            self.visit(Document(document.url, content, name=name), f"{name}/", depth + 1)

    def visit(self, member: Document, prefix: str, depth: int) -> None:
        """Unnest ``member`` if it is a nested presentation within the depth limit, else add it."""
        kind = recognize(member)
        if kind not in NESTED_TYPES:
            self.add(member)
        elif depth >= self.options.unnest_max_depth:
            self.note(_too_deep(self.options))
            self.add(member)
        else:
            kept = len(self.members)
            try:
                self.expand(member, kind, prefix, depth)
            except UnnestError as error:
                # One corrupt file in an archive (test data, say) must not lose the others.
                del self.members[kept:]
                self.note(f"{member.name}: {error}")
                self.add(member)

    def decompress(self, content: bytes, codec: _Codec) -> bytes:
        """All streams of ``codec`` at the start of ``content``, charged to the byte budget."""
        if not content.startswith(codec.magic):
            raise UnnestError(f"not a {codec.name} stream")
        parts: list[bytes] = []
        pending = content
        try:
            # Like gzip(1): concatenated streams join; trailing bytes that start none are padding.
            while pending.startswith(codec.magic):
                decompressor = codec.new()
                data = pending
                while not decompressor.eof:
                    chunk = decompressor.decompress(data, _CHUNK)
                    data = b""  # the decompressor keeps what it did not consume
                    if not chunk and not decompressor.eof:
                        raise UnnestError(f"truncated {codec.name} stream")
                    self.charge(len(chunk))
                    parts.append(chunk)
                pending = decompressor.unused_data
        except (zlib.error, OSError, lzma.LZMAError) as error:  # OSError: bz2's bad data
            raise UnnestError(f"corrupt {codec.name} stream: {error}") from error
        return b"".join(parts)

    def zip_members(self, archive: Document) -> Iterator[tuple[str, bytes]]:
        """(path, content) of the zip's safe file members, read in budget-charged chunks."""
        try:
            with zipfile.ZipFile(io.BytesIO(archive.content)) as zipped:
                for info in zipped.infolist():
                    path = _safe_path(info.filename)
                    if (
                        path is None
                        or info.is_dir()
                        or info.flag_bits & _ZIP_UNREADABLE_FLAGS
                        or info.compress_type not in _ZIP_METHODS
                    ):
                        continue
                    # Read to the end of the data, not to the declared size, which may lie.
                    parts: list[bytes] = []
                    with zipped.open(info) as stream:
                        while chunk := stream.read(_CHUNK):
                            self.charge(len(chunk))
                            parts.append(chunk)
                    yield path, b"".join(parts)
        except NotImplementedError as error:  # a newer zip version than zipfile reads
            raise UnnestError(f"unsupported zip: {error}") from error
        except (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, OSError) as error:
            raise UnnestError(f"corrupt zip: {error}") from error
        except ValueError as error:  # offsets before the start, undecodable UTF-8 names
            raise UnnestError(f"corrupt zip: {error}") from error


def _tar_members(content: bytes) -> Iterator[tuple[str, bytes]]:
    """(path, content) of the tar's safe regular files; mode "r:" so tarfile never decompresses."""
    try:
        with tarfile.open(fileobj=io.BytesIO(content), mode="r:") as archive:
            for info in archive:
                path = _safe_path(info.name)
                if path is None or not info.isreg() or info.issparse():
                    continue
                reader = archive.extractfile(info)
                if reader is not None:  # always, for a regular file; narrows the type
                    yield path, reader.read()
    except (tarfile.TarError, EOFError, OSError) as error:
        raise UnnestError(f"corrupt tar: {error}") from error


def _too_deep(options: EssenceOptions) -> str:
    return f"nested deeper than {options.unnest_max_depth} levels"


def _safe_path(name: str) -> str | None:
    """``name`` normalized (``./a//b`` -> ``a/b``), or None when it could escape or mislead."""
    path = PurePosixPath(name)
    # Backslashes are separators to DOS-made zips: check them as such.
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if not parts or parts[0] == "/" or ".." in parts or _UNSAFE_NAME.search(name):
        return None
    return str(path)


def _decompressed_name(name: str, codec: _Codec) -> str:
    lowered = name.lower()
    for suffix, replacement in codec.suffixes:
        if lowered.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)] + replacement
    return name

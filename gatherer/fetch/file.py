"""FILE URLs: documents and directories on the gatherer's own file system.

Any host is accepted and ignored: Harvest's manual writes ``file://host/path`` for a path on
the gatherer's machine. Symbolic links are followed wherever they lead (the gatherer reads
what its user may read; confining it is the configuration's URL filters' job). Every file
system call runs in a worker thread.

A document's change token is ``"{mtime_ns}:{size}"``, given as ``Fetched.last_modified`` and
compared with ``Validators.last_modified``: the same token means not modified, without reading
the file. Directories are always listed (their links feed the crawl).
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable
from urllib.parse import unquote, urlsplit

from gatherer.errors import FetchError
from gatherer.fetch.body import Body
from gatherer.fetch.listing import Listing
from gatherer.fetch.result import Fetched, Validators
from gatherer.fetch.settings import FetchSettings


class FileFetcher:
    """Fetches file: URLs, each in one worker-thread call."""

    def __init__(self, settings: FetchSettings) -> None:
        self._max_bytes = settings.max_bytes

    async def fetch(
        self,
        url: str,
        *,
        validators: Validators | None = None,
        permit: Callable[[str], bool] | None = None,  # (no redirects here)
    ) -> Fetched:
        # Percent-escapes are bytes of the file name; undecodable ones survive as surrogates.
        path = unquote(urlsplit(url).path, errors="surrogateescape") or "/"
        if not path.startswith("/"):  # ("file:name": relative to nothing the gatherer owns)
            raise FetchError(url, "refused", "not an absolute path")
        token = validators.last_modified if validators is not None else None
        try:
            return await asyncio.to_thread(_read, url, path, token, self._max_bytes)
        except (FileNotFoundError, NotADirectoryError) as error:
            raise FetchError(url, "status", f"no such file: {error}", status=404) from error
        except OSError as error:  # (PermissionError among them)
            raise FetchError(url, "io", f"{type(error).__name__}: {error}") from error


def _read(url: str, path: str, token: str | None, max_bytes: int) -> Fetched:
    """(In a worker thread.) The file or directory at ``path`` as a Fetched."""
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        listing = Listing(url, max_bytes)
        with os.scandir(path) as entries:
            for entry in entries:
                listing.add(entry.name, entry.is_dir())
        return listing.document(modified=st.st_mtime)
    if not stat.S_ISREG(st.st_mode):
        # A FIFO or device could block a thread forever, or never end.
        raise FetchError(url, "io", "not a regular file or directory")
    current = f"{st.st_mtime_ns}:{st.st_size}"
    if current == token:
        return Fetched(
            url=url, content=b"", not_modified=True, last_modified=current, modified=st.st_mtime
        )
    body = Body(url, max_bytes)
    body.expect(st.st_size)
    with open(path, "rb") as file:
        body.add(file.read(max_bytes + 1))  # (+1: a file grown since the stat fails too)
    return Fetched(url=url, content=body.value(), last_modified=current, modified=st.st_mtime)

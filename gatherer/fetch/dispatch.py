"""The fetchers of every scheme behind one door: ``Fetchers`` picks one by the URL's scheme."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Protocol
from urllib.parse import urlsplit

from gatherer.errors import FetchError
from gatherer.fetch.file import FileFetcher
from gatherer.fetch.ftp import FtpFetcher
from gatherer.fetch.gopher import GopherFetcher
from gatherer.fetch.http import HttpFetcher
from gatherer.fetch.result import Fetched, Validators
from gatherer.fetch.settings import FetchSettings
from gatherer.fetch.slots import ConnectionSlots

__all__ = ["FetchSettings", "Fetcher", "Fetchers"]


class Fetcher(Protocol):
    """What every scheme's fetcher offers."""

    async def fetch(
        self,
        url: str,
        *,
        validators: Validators | None = None,
        permit: Callable[[str], bool] | None = None,
    ) -> Fetched: ...


class Fetchers:
    """All the fetchers, opened and closed together by ``async with``."""

    def __init__(self, settings: FetchSettings) -> None:
        self._http = HttpFetcher(settings)
        # FTP and Gopher connect by themselves: they share one set of connection slots.
        slots = ConnectionSlots(
            per_host=settings.connections_per_host, total=settings.max_connections
        )
        self._by_scheme: dict[str, Fetcher] = {
            "http": self._http,
            "https": self._http,
            "file": FileFetcher(settings),
            "ftp": FtpFetcher(settings, slots),
            "gopher": GopherFetcher(settings, slots),
        }

    async def __aenter__(self) -> Fetchers:
        await self._http.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._http.__aexit__(exc_type, exc, tb)

    async def fetch(
        self,
        url: str,
        *,
        validators: Validators | None = None,
        permit: Callable[[str], bool] | None = None,
    ) -> Fetched:
        """Fetch ``url`` with its scheme's fetcher; an unsupported scheme is ``refused``."""
        scheme = urlsplit(url).scheme.lower()
        fetcher = self._by_scheme.get(scheme)
        if fetcher is None:
            raise FetchError(url, "refused", f"unsupported scheme {scheme!r}")
        return await fetcher.fetch(url, validators=validators, permit=permit)

    async def get_robots(self, url: str) -> tuple[int | None, bytes]:
        """The robots.txt status and body for ``url``'s HTTP(S) host (see
        ``HttpFetcher.get_robots``). Other schemes have none: ``refused``."""
        if urlsplit(url).scheme.lower() not in ("http", "https"):
            raise FetchError(url, "refused", "robots.txt is an HTTP(S) matter")
        return await self._http.get_robots(url)

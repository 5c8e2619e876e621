"""How the fetchers behave: one frozen value shared by every scheme's fetcher."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


def _no_logins() -> Mapping[str, tuple[str, str]]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class FetchSettings:
    """Settings of every fetch.

    ``proxy`` ("http://host:port"): every HTTP(S) fetch goes through it, so that a hierarchy
    of Harvest caches absorbs repeated gathering; ``https_via_proxy`` says how an https://
    URL does (harvest_common.cache_client: ``absolute``, cached by the cache, or
    ``tunnel``). ``timeout`` bounds a whole fetch (redirects included), ``connect_timeout``
    each connection attempt. ``max_bytes`` caps a document
    (decoded); a larger one fails with ``too_large``. ``ftp_logins`` maps an FTP host to
    (user, password); other hosts are logged into as "anonymous" / "harvest@".
    ``connections_per_host`` and ``max_connections`` cap simultaneous connections, per host
    and in all, for each of HTTP and FTP/Gopher.
    """

    user_agent: str = "Harvest-Gatherer/0.1"
    proxy: str | None = None
    https_via_proxy: str = "absolute"
    timeout: float = 60.0
    connect_timeout: float = 10.0
    max_bytes: int = 16 * 1024 * 1024
    max_redirects: int = 5
    ftp_logins: Mapping[str, tuple[str, str]] = field(default_factory=_no_logins)
    connections_per_host: int = 2
    max_connections: int = 64

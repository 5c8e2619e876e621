"""Request targets: the absolute-form URL a forward proxy receives, and CONNECT's authority."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urlsplit

from harvest_cache.errors import RequestError

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Target:
    """An origin and a path; ``url`` is the canonical form used as the cache key."""

    scheme: str
    host: str
    port: int
    path: str
    # Made once: a request asks for them several times.
    authority: str = field(init=False, compare=False, repr=False)
    url: str = field(init=False, compare=False, repr=False)

    @property
    def tls(self) -> bool:
        """Whether the origin is reached over TLS."""
        return self.scheme == "https"

    def __post_init__(self) -> None:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = self.port
        authority = host if port == _DEFAULT_PORTS.get(self.scheme) else f"{host}:{port}"
        object.__setattr__(self, "authority", authority)
        object.__setattr__(self, "url", f"{self.scheme}://{authority}{self.path}")


def _check_host(host: str, raw: str) -> str:
    if not host:
        raise RequestError(400, f"no host in {raw!r}")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise RequestError(400, f"bad IPv6 address in {raw!r}") from None
        return host
    if any(c in host for c in " \t\r\n/\\@%") or host.startswith(".") or ".." in host:
        raise RequestError(400, f"bad host in {raw!r}")
    return host


# "scheme://authority" then a path or query of visible ASCII with no fragment: the targets
# nearly every request carries, split without urlsplit, their origin part parsed once.
_PLAIN = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/?#]*)([/?][!\x24-~]*)?")
_PORT = re.compile(r"[0-9]{1,5}")


def parse_absolute(raw: str) -> Target:
    """Parse an absolute-form request target (RFC 9112 3.2.2): ``http`` or ``https``."""
    plain = _PLAIN.fullmatch(raw)
    if plain is None:
        return _parse_absolute(raw)
    try:
        origin = _origin(plain[1])
    except RequestError:
        return _parse_absolute(raw)  # for the error that names the whole target
    path = plain[2] or "/"
    if path[0] == "?":
        path = "/" + path
    return Target(origin.scheme, origin.host, origin.port, path)


@lru_cache(maxsize=1024)
def _origin(prefix: str) -> Target:
    return _parse_absolute(prefix + "/")


# A path and query that ``parse_absolute`` keeps as spelt.
PLAIN_PATH = re.compile(rb"/[!\x24-~]*")


def canonical_url(raw: bytes) -> str | None:
    """``raw`` as text if it is an absolute ``http`` URL spelt as its cache key (what
    ``parse_absolute(raw).url`` is), else None: then it must be parsed to know its key. Most
    URLs are spelt so, and telling costs two look-ups and a pass over the bytes (ICP asks it
    of every new URL, so it avoids a regex) instead of a parse."""
    slash = raw.find(b"/", 7)
    if slash < 0 or not raw.startswith(b"http://"):
        return None
    origin = raw[:slash]
    canonical = _CANONICAL_ORIGINS.get(origin)
    if canonical is None:
        canonical = _canonical_origin(origin)
    # (A canonical origin's bytes are all among PLAIN_PATH's, so the whole URL is tested.)
    return raw.decode("latin-1") if canonical and not raw.translate(None, _PATH_BYTES) else None


_PATH_BYTES = bytes([0x21, *range(0x24, 0x7F)])  # what PLAIN_PATH takes after its slash
_CANONICAL_ORIGINS: dict[bytes, bool] = {}


def _canonical_origin(origin: bytes) -> bool:
    text = origin.decode("latin-1")
    try:
        canonical = _origin(text).url == text + "/"
    except RequestError:
        canonical = False
    if len(_CANONICAL_ORIGINS) >= 1024:
        _CANONICAL_ORIGINS.clear()
    _CANONICAL_ORIGINS[origin] = canonical
    return canonical


def _parse_absolute(raw: str) -> Target:
    if raw.startswith("/"):
        raise RequestError(400, "a proxy request must carry an absolute URL (http://host/path)")
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        raise RequestError(400, f"malformed URL {raw!r}") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        if scheme:
            raise RequestError(501, f"the {scheme!r} scheme is not supported")
        raise RequestError(400, f"malformed URL {raw!r}")
    if parts.username is not None or parts.password is not None:
        raise RequestError(400, "user information in a URL is not allowed")
    host = _check_host((parts.hostname or "").lower().rstrip("."), raw)
    if port == 0:
        raise RequestError(400, f"port 0 in {raw!r}")
    path = parts.path or "/"
    if parts.query or raw.endswith("?"):
        path = f"{path}?{parts.query}"
    return Target(scheme, host, port or _DEFAULT_PORTS[scheme], path)


def parse_authority(raw: str) -> tuple[str, int]:
    """CONNECT's ``host:port`` (RFC 9110 9.3.6); the port is required."""
    host, sep, port = raw.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    # (isdigit() alone takes superscripts and other scripts' digits, which int() refuses)
    if not sep or not _PORT.fullmatch(port) or not 0 < int(port) <= 65535:
        raise RequestError(400, f"CONNECT needs host:port, got {raw!r}")
    return _check_host(host.lower(), raw), int(port)

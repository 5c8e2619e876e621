"""How the services, as cache-aware clients, ask their proxy for ``https://`` URLs.

Through a proxy, aiohttp sends an ``https://`` request inside a CONNECT tunnel: the proxy
relays bytes it cannot read, so nothing is cached and every re-gather goes to the origin.
A Harvest cache (and Squid) also take an ``https://`` URL in absolute form (RFC 9112 3.2.2)
over plain HTTP, fetch it over TLS themselves, verifying the origin's certificate, and cache
it like any other: that is ``absolute``, the default. ``tunnel`` is for proxies that take
only CONNECT for HTTPS; the client then verifies the origin's certificate itself.
"""

from __future__ import annotations

import aiohttp

# The values of the services' https-via-proxy settings.
HTTPS_VIA_PROXY = ("absolute", "tunnel")


class AbsoluteFormRequest(aiohttp.ClientRequest):
    """A request that, through a proxy, asks for an ``https://`` URL in absolute form
    instead of opening a tunnel. (aiohttp asks ``is_ssl`` whether to tunnel, whether to
    wrap the connection in TLS and which form the request target takes: through a proxy,
    the answer here is no to all three; without one, it is aiohttp's.)"""

    def is_ssl(self) -> bool:
        return self.proxy is None and super().is_ssl()


def request_class(https_via_proxy: str) -> type[aiohttp.ClientRequest]:
    """The request class for a session whose ``https://`` requests go through a proxy as
    ``https_via_proxy`` says (one of HTTPS_VIA_PROXY)."""
    if https_via_proxy not in HTTPS_VIA_PROXY:
        raise ValueError(f"https via proxy: expected one of {HTTPS_VIA_PROXY}")
    return AbsoluteFormRequest if https_via_proxy == "absolute" else aiohttp.ClientRequest

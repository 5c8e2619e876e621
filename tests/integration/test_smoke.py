from __future__ import annotations

from aiohttp import web

from tests.support import Origin, ProxyClient


async def test_miss_then_hit(origin: Origin, client: ProxyClient) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text="hello", headers={"Cache-Control": "max-age=60"})

    origin.route("/a", handler)
    resp, body = await client.get(origin.url("/a"))
    assert resp.status == 200
    assert body == b"hello"
    assert "fwd=uri-miss" in resp.headers["Cache-Status"]
    resp, body = await client.get(origin.url("/a"))
    assert body == b"hello"
    assert resp.headers["Cache-Status"].startswith("test-cache; hit")
    assert origin.hits["/a"] == 1

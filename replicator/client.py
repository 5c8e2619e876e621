"""The replicator's HTTP clients, the only module that talks to ``aiohttp.ClientSession``:
``BrokerClient`` for the local broker's replica API (broker/replica_api.py) and ``PeerClient``
for the other members' replicators (replicator/server.py), whose requests are signed and
whose answers are checked (replicator/auth.py) before anything of them is used.

Every failure becomes a ``PeerError`` with a small fixed ``kind`` (it labels metrics):
``connect``, ``timeout``, ``status`` (an error answer), ``auth`` (a bad or missing
signature), ``protocol`` (an answer that is not what was asked for).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

import aiohttp
import yarl

from harvest_common.errors import WireError
from harvest_common.replication.version import Version
from harvest_common.replication.wire import ChangeList
from replicator import auth
from replicator.errors import AuthError, PeerError

TRANSFER_TYPE: Final = "application/x-harvest-replica"


def _failure(target: str, error: BaseException) -> PeerError:
    if isinstance(error, TimeoutError):
        return PeerError(target, "timeout", "no answer in time")
    if isinstance(error, aiohttp.ClientConnectionError):
        return PeerError(target, "connect", f"{type(error).__name__}: {error}")
    return PeerError(target, "protocol", f"{type(error).__name__}: {error}")


async def _body(response: aiohttp.ClientResponse, target: str) -> bytes:
    data = await response.read()
    if response.status >= 400:
        reason = " ".join(data[:300].decode("utf-8", "replace").split())
        raise PeerError(target, "status", f"answered {response.status}: {reason}", response.status)
    return data


def _json(data: bytes, target: str) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PeerError(target, "protocol", f"not JSON: {error}") from None


def _change_list(value: Any, target: str) -> ChangeList:
    try:
        return ChangeList.from_json(value)
    except WireError as error:
        raise PeerError(target, "protocol", str(error)) from None


class BrokerClient:
    """The local broker's replica API, with its admin token."""

    def __init__(
        self, session: aiohttp.ClientSession, base: str, token: str, timeout: float
    ) -> None:
        self._session = session
        self._base = base.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"BrokerClient({self._base!r})"

    async def _call(
        self,
        method: str,
        path: str,
        *,
        wait: float = 0.0,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
        data: bytes | None = None,
    ) -> bytes:
        url = f"{self._base}{path}"
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = TRANSFER_TYPE
        try:
            async with self._session.request(
                method,
                url,
                params=params,
                json=json_body,
                data=data,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self._timeout + wait),
            ) as response:
                return await _body(response, "broker")
        except PeerError:
            raise
        except (aiohttp.ClientError, TimeoutError) as error:
            raise _failure("broker", error) from error

    def _path(self, collection: str, what: str) -> str:
        return f"/api/replica/{quote(collection, safe='')}/{what}"

    async def changes(
        self, collection: str, after: int, limit: int, *, wait: float = 0.0
    ) -> ChangeList:
        """The changes after ``after``; with ``wait``, held until there is one (or it ends)."""
        params = {"after": str(after), "limit": str(limit), "wait": f"{wait:g}"}
        data = await self._call("GET", self._path(collection, "changes"), params=params, wait=wait)
        return _change_list(_json(data, "broker"), "broker")

    async def wanted(self, collection: str, offered: Sequence[tuple[str, Version]]) -> list[str]:
        """The oids of ``offered`` whose version is newer than the one held (or none is)."""
        body = {"changes": [[oid, version.to_json()] for oid, version in offered]}
        data = await self._call("POST", self._path(collection, "wanted"), json_body=body)
        answer = _json(data, "broker")
        wanted = answer.get("wanted") if isinstance(answer, dict) else None
        if not isinstance(wanted, list) or not all(isinstance(o, str) for o in wanted):
            raise PeerError("broker", "protocol", "wanted: not a list of oids")
        return wanted

    async def entries(self, collection: str, oids: Sequence[str]) -> bytes:
        """A packed transfer of the states of ``oids`` (those held)."""
        body = {"oids": list(oids)}
        return await self._call("POST", self._path(collection, "entries"), json_body=body)

    async def apply(self, collection: str, packed: bytes) -> dict[str, int]:
        """Apply a packed transfer; the broker's counts (upserted, removed, skipped)."""
        data = await self._call("POST", self._path(collection, "apply"), data=packed)
        answer = _json(data, "broker")
        if not isinstance(answer, dict):
            raise PeerError("broker", "protocol", "apply: not a JSON object")
        return {key: int(value) for key, value in answer.items()}

    async def leaves(self, collection: str) -> tuple[int, int, bytes]:
        """(bucket bits, seq, the leaf digests)."""
        url = f"{self._base}{self._path(collection, 'leaves')}"
        try:
            async with self._session.get(
                url, headers=self._headers, timeout=aiohttp.ClientTimeout(total=self._timeout)
            ) as response:
                data = await _body(response, "broker")
                bits = int(response.headers.get("X-Harvest-Bucket-Bits", "-1"))
                seq = int(response.headers.get("X-Harvest-Seq", "-1"))
        except PeerError:
            raise
        except ValueError as error:
            raise PeerError("broker", "protocol", f"leaves: {error}") from None
        except (aiohttp.ClientError, TimeoutError) as error:
            raise _failure("broker", error) from error
        return bits, seq, data

    async def buckets(self, collection: str, buckets: Sequence[int]) -> list[tuple[str, Version]]:
        params = {"b": ",".join(str(b) for b in buckets)}
        data = await self._call("GET", self._path(collection, "buckets"), params=params)
        return parse_bucket_entries(_json(data, "broker"), "broker")


def parse_bucket_entries(answer: Any, target: str) -> list[tuple[str, Version]]:
    rows = answer.get("entries") if isinstance(answer, dict) else None
    if not isinstance(rows, list):
        raise PeerError(target, "protocol", "buckets: no list of entries")
    try:
        return [(str(row[0]), Version.from_json(row[1])) for row in rows]
    except (WireError, IndexError, TypeError, KeyError) as error:
        raise PeerError(target, "protocol", f"buckets: {error}") from None


class PeerClient:
    """Signed requests to other members' replicators (at ``HOST:PORT``)."""

    def __init__(
        self, session: aiohttp.ClientSession, member: str, secret: bytes, timeout: float
    ) -> None:
        self._session = session
        self._member = member
        self._secret = secret
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"PeerClient(as {self._member!r})"

    async def request(
        self,
        address: str,
        method: str,
        path_qs: str,
        *,
        body: bytes = b"",
        content_type: str = "application/json",
    ) -> bytes:
        """The answer's body, once its signature is checked."""
        nonce = secrets.token_hex(16)  # the request's id: a replay of it is refused
        headers = auth.sign_request(
            self._secret, self._member, method, path_qs, body, time.time(), nonce
        )
        if body:
            headers["Content-Type"] = content_type
        # Sent as signed: not re-quoted on the way.
        url = yarl.URL(f"http://{address}{path_qs}", encoded=True)
        try:
            async with self._session.request(
                method,
                url,
                data=body or None,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self._timeout),
            ) as response:
                data = await _body(response, address)
                given = response.headers.get(auth.SIGNATURE)
        except PeerError:
            raise
        except (aiohttp.ClientError, TimeoutError) as error:
            raise _failure(address, error) from error
        try:
            auth.check_answer(self._secret, headers[auth.SIGNATURE], data, given)
        except AuthError as error:
            raise PeerError(address, "auth", str(error)) from None
        return data

    async def post_json(self, address: str, path: str, value: Any) -> Any:
        body = json.dumps(value, separators=(",", ":")).encode()
        data = await self.request(address, "POST", path, body=body)
        return _json(data, address) if data else None

    async def get_json(self, address: str, path_qs: str) -> Any:
        return _json(await self.request(address, "GET", path_qs), address)

    async def changes(self, address: str, group: str, after: int, limit: int) -> ChangeList:
        path = f"/replication/{quote(group, safe='')}/changes?after={after}&limit={limit}"
        return _change_list(await self.get_json(address, path), address)

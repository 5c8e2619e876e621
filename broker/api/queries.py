"""The query API: a page of results (of this broker, or of the brokers the HSR picks), and
one object.

::

    GET  /api/search?q=&limit=&offset=&case=0|1[&federated=1]    a page of results (JSON)
                    [&facets=1]                                    with the facets of the query
    GET  /api/objects/{oid}[?format=soif|json]                    one object
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from aiohttp import web

from broker import web as page
from broker.api.params import BadRequest, flag, integer
from broker.facets import Facets
from broker.federation import Answer, FederatedPage, Ranked
from broker.federation.merge import MAX_RESULTS
from broker.metrics import BrokerMetrics
from broker.search import Page, Result
from broker.services import Services
from harvest_common.soif import encode

SOIF_TYPE = "application/x-soif"
DEFAULT_LIMIT = 10
MAX_OFFSET = 100_000  # deeper pages cost the index more than any client needs
_OID = re.compile(r"[0-9a-f]{32}")


def result_json(r: Result) -> dict[str, Any]:
    return {
        "oid": r.oid,
        "url": r.url,
        "title": r.title,
        "gatherer": r.gatherer,
        "template": r.template,
        "score": r.score,
        "update_time": r.update_time,
        "snippets": [
            {"attribute": attribute, "html": page.marked_html(text)}
            for attribute, text in r.snippets
        ],
    }


def page_json(page_: Page) -> dict[str, Any]:
    """A page of results as the search API returns it."""
    return {
        "query": page_.query,
        "total": page_.total,
        "exact": page_.exact,
        "offset": page_.offset,
        "limit": page_.limit,
        "results": [result_json(r) for r in page_.results],
    }


def facets_json(found: Facets) -> dict[str, Any]:
    """The facets of a query as the search API returns them: each value with its count and
    the query term that narrows the query to it."""
    return {
        "exact": found.exact,
        "complete": found.complete,
        "facets": [
            {
                "name": facet.kind.name,
                "title": facet.kind.title,
                "attribute": facet.kind.attribute,
                "more": facet.more,
                "values": [
                    {"value": v.value, "label": v.label, "count": v.count, "term": v.term}
                    for v in facet.values
                ],
            }
            for facet in found.facets
        ],
    }


def _broker(broker: Ranked) -> dict[str, Any]:
    return {"name": broker.name, "url": broker.url}


def _answer(answer: Answer) -> dict[str, Any]:
    return {
        **_broker(answer.broker),
        "outcome": answer.outcome,
        "seconds": answer.seconds,
        "total": answer.total,
        "error": answer.error,
        "estimate": answer.broker.estimate,
        "reason": answer.broker.reason,
    }


def federated_json(page_: FederatedPage) -> dict[str, Any]:
    """A federated page as the search API returns it: each result with the broker it came
    from (and the others that hold its URL), and what each broker asked did."""
    return {
        "query": page_.query,
        "federated": True,
        "total": page_.total,
        "exact": False,
        "more": page_.more,
        "offset": page_.offset,
        "limit": page_.limit,
        "results": [
            {
                **result_json(m.result),
                "score": m.score,
                "broker_score": m.result.score,
                "broker": _broker(m.broker),
                "also": [_broker(b) for b in m.also],
            }
            for m in page_.results
        ],
        "brokers": [_answer(a) for a in page_.answers],
    }


class QueryApi:
    """The query handlers over one broker."""

    def __init__(self, services: Services, metrics: BrokerMetrics) -> None:
        self._services = services
        self._metrics = metrics

    async def search(self, request: web.Request) -> web.Response:
        params = request.query
        max_results = self._services.config.broker.max_results
        limit = min(integer(params, "limit", DEFAULT_LIMIT, 1, 10**9), max_results)
        case = flag(params, "case")
        text = params.get("q", "")
        faceted = flag(params, "facets")
        if flag(params, "federated"):
            if faceted:
                raise BadRequest("facets count this broker's objects: not with federated=1")
            # Each broker is asked for the results up to the page's end.
            offset = integer(params, "offset", 0, 0, MAX_RESULTS - limit)
            with self._metrics.query("api"):
                merged = await self._services.federated_search(
                    text, limit=limit, offset=offset, case_sensitive=case
                )
            self._metrics.federated(a.outcome for a in merged.answers)
            return web.json_response(federated_json(merged))
        offset = integer(params, "offset", 0, 0, MAX_OFFSET)
        with self._metrics.query("api"):
            found = await self._services.search(
                text, limit=limit, offset=offset, case_sensitive=case
            )
            answer = page_json(found)
            if faceted:
                counted = await self._services.facets(
                    text, chosen={}, case_sensitive=case, now=time.time()
                )
                answer["facets"] = facets_json(counted)
        return web.json_response(answer)

    async def object(self, request: web.Request) -> web.Response:
        key = request.match_info["oid"]
        shape = request.query.get("format", "soif")
        if shape not in ("soif", "json"):
            raise BadRequest(f"format must be soif or json, got {shape[:40]!r}")
        stored = await self._services.registry.get(key) if _OID.fullmatch(key) else None
        if stored is None:
            raise web.HTTPNotFound(
                text=json.dumps({"error": f"no object {key[:64]!r}"}),
                content_type="application/json",
            )
        if shape == "soif":
            return web.Response(body=encode(stored.record), headers={"Content-Type": SOIF_TYPE})
        record = stored.record
        return web.json_response(
            {
                "oid": stored.oid,
                "url": stored.url,
                "template": record.template,
                "gatherer": stored.gatherer,
                "collection": stored.collection,
                "update_time": stored.update_time,
                "expires": stored.expires,
                "seq": stored.seq,
                "attributes": {
                    name: value.decode("utf-8", "replace") for name, value in record.attributes
                },
            }
        )

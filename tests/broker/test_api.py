"""broker.api: the JSON API, the admin API, status, statistics and metrics of a real broker
listening on loopback, filled through the registry's staged pulls or from a real gatherer
export service."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import tantivy
from prometheus_client.parser import text_string_to_metric_families

from broker.app import Broker
from broker.config import from_mapping
from broker.errors import EngineError
from broker.oid import oid
from broker.sync import IndexSync
from gatherer.database import GathererDatabase
from harvest_common.soif import Delete, Record, decode
from tests.broker.test_collector import gatherer_service, refused_port, until
from tests.support import promtool_check

TOKEN = "admin-s3cret"
GATHERER = ("g1", "gatherer.example", "8500")
IDENTITY = "g1@gatherer.example:8500"
LONG = 10_000_000.0  # seconds: nothing expires during a test


def make(url: str, title: str, *, gatherer: bool = True, **attributes: str) -> Record:
    """A record with a Title, more attributes (underscores become dashes), and the
    Gatherer-* attributes of GATHERER unless ``gatherer`` is False."""
    pairs = [("Title", title.encode())]
    pairs += [(name.replace("_", "-"), value.encode()) for name, value in attributes.items()]
    if gatherer:
        pairs += [
            (name, value.encode())
            for name, value in zip(
                ("Gatherer-Name", "Gatherer-Host", "Gatherer-Port"), GATHERER, strict=True
            )
        ]
    return Record("FILE", url, tuple(pairs))


def broker_config(
    data: Path, collections: Iterable[Mapping[str, Any]] = (), **settings: Any
) -> Any:
    return from_mapping(
        {
            "broker": {"listen": "127.0.0.1:0", "data_dir": str(data), **settings},
            "collections": list(collections),
        }
    )


@asynccontextmanager
async def running(
    data: Path, collections: Iterable[Mapping[str, Any]] = (), **settings: Any
) -> AsyncIterator[Broker]:
    """A broker on an ephemeral loopback port, stopped when the block ends."""
    async with await Broker.start(broker_config(data, collections, **settings)) as broker:
        yield broker


def url_of(broker: Broker) -> str:
    host, port = broker.address
    return f"http://{host}:{port}"


async def load(
    broker: Broker,
    collection: str,
    items: Iterable[Any],
    *,
    complete: bool = False,
    ttl: float = LONG,
) -> None:
    """Apply ``items`` to ``collection`` as one staged pull and bring the index up to date."""
    async with broker.registry.begin(collection) as pull:
        await pull.add(list(items))
        await pull.commit(cursor="0", complete=complete, now=time.time(), default_ttl=ttl)
    await broker.catch_up()


async def pulled(broker: Broker, name: str, pulls: int = 1, within: float = 15.0) -> None:
    """Wait until ``name`` has finished ``pulls`` pulls, then for the index to catch up."""
    await until(lambda: broker.scheduler.status()[name].pulls >= pulls, within)
    await broker.catch_up()


async def put(db: GathererDatabase, record: Record) -> None:
    await db.put(
        record,
        md5=None,
        etag=None,
        last_modified=None,
        now=time.time(),
        time_to_live=LONG,
        refresh_rate=LONG,
    )


async def get_json(
    session: aiohttp.ClientSession, url: str, status: int = 200, **kwargs: Any
) -> Any:
    async with session.get(url, **kwargs) as response:
        assert response.status == status, await response.text()
        assert response.content_type == "application/json"
        return await response.json()


async def results(
    session: aiohttp.ClientSession, broker: Broker, query: str
) -> list[dict[str, Any]]:
    """The results of ``query`` through the API."""
    answer = await get_json(session, f"{url_of(broker)}/api/search", params={"q": query})
    found: list[dict[str, Any]] = answer["results"]
    return found


async def urls(session: aiohttp.ClientSession, broker: Broker, query: str) -> set[str]:
    """The URLs of the results of ``query`` through the API."""
    return {result["url"] for result in await results(session, broker, query)}


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with running(tmp_path / "b", admin_token=TOKEN, max_results=20) as started:
        yield started


# -- search ---------------------------------------------------------------------------------


async def test_search_answers_the_documented_shape(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    await load(
        broker,
        "c1",
        [
            make("http://a.example/cache", "Object cache design", Author="Wessels"),
            make("http://a.example/other", "Something else", Author="Danzig"),
        ],
    )
    answer = await get_json(session, f"{url_of(broker)}/api/search", params={"q": "Title: cache"})
    assert answer.keys() == {"query", "total", "exact", "offset", "limit", "results"}
    assert (answer["query"], answer["total"], answer["exact"]) == ("Title:cache", 1, True)
    assert (answer["offset"], answer["limit"]) == (0, 10)
    (result,) = answer["results"]
    assert result.keys() == {
        "oid",
        "url",
        "title",
        "gatherer",
        "template",
        "score",
        "update_time",
        "snippets",
    }
    assert result["oid"] == oid(IDENTITY, "http://a.example/cache")
    assert result["url"] == "http://a.example/cache"
    assert result["title"] == "Object cache design"
    assert (result["gatherer"], result["template"]) == (IDENTITY, "FILE")
    assert result["score"] > 0
    assert result["snippets"] == [
        {"attribute": "Title", "html": "Object <mark>cache</mark> design"}
    ]


async def test_snippets_are_escaped_html(broker: Broker, session: aiohttp.ClientSession) -> None:
    await load(broker, "c1", [make("http://x.example/", "<script>alert(1)</script> & cache")])
    answer = await get_json(session, f"{url_of(broker)}/api/search", params={"q": "cache"})
    (result,) = answer["results"]
    assert result["title"] == "<script>alert(1)</script> & cache"  # JSON carries the text
    (snippet,) = result["snippets"]
    assert snippet["html"] == "&lt;script&gt;alert(1)&lt;/script&gt; &amp; <mark>cache</mark>"


async def test_snippets_mark_only_the_words_an_approximate_word_became(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    # 52 words within two edits of "tree": more than it becomes (the nearest 40; "tread",
    # two edits and the longest, is left out).
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = [*sorted({f"t{c}ee" for c in letters} | {f"tre{c}" for c in letters}), "tread"]
    items = [make(f"http://w.example/{w}", f"about {w}") for w in words]
    await load(broker, "c1", [*items, make("http://w.example/both", "a tree by the tread")])
    await broker.index.refresh_vocabulary()
    answer = await get_json(
        session, f"{url_of(broker)}/api/search", params={"q": "Title: tree~2", "limit": "100"}
    )
    (both,) = [r for r in answer["results"] if r["url"] == "http://w.example/both"]
    assert both["snippets"][0]["html"] == "a <mark>tree</mark> by the tread"
    assert "http://w.example/tread" not in {r["url"] for r in answer["results"]}


async def test_pages_cover_every_result_once(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    await load(broker, "c1", [make(f"http://p.example/{i}", f"paging test {i}") for i in range(25)])
    seen: list[str] = []
    for offset in (0, 10, 20, 30):
        answer = await get_json(
            session,
            f"{url_of(broker)}/api/search",
            params={"q": "paging", "limit": "10", "offset": str(offset)},
        )
        assert (answer["total"], answer["offset"], answer["limit"]) == (25, offset, 10)
        seen += [r["url"] for r in answer["results"]]
    assert sorted(seen) == sorted(f"http://p.example/{i}" for i in range(25))


@pytest.mark.parametrize("damage", ["removed", "other layout"])
async def test_a_missing_or_foreign_index_is_rebuilt_from_the_registry_at_start(
    tmp_path: Path, damage: str
) -> None:
    data = tmp_path / "b"
    async with running(data) as broker:
        await load(broker, "c1", [make(f"http://r.example/{i}", f"kept {i}") for i in range(3)])
    index = data / "index"
    shutil.rmtree(index)
    if damage == "other layout":
        index.mkdir()
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("title", stored=True)
        other = tantivy.Index(builder.build(), path=str(index))
        writer = other.writer(15_000_000, 1)
        writer.add_document(tantivy.Document(title="a foreign object"))
        writer.commit()
        writer.wait_merging_threads()
    async with running(data) as broker:
        await asyncio.wait_for(broker.index_ready.wait(), timeout=30)
        found = await broker.search("kept", limit=10)
        assert found.total == 3
        assert await broker.index.count() == 3


async def test_a_new_index_is_filled_while_the_broker_serves_the_registry(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    data = tmp_path / "b"
    count = 5_000  # filling takes hundreds of times longer than one request
    async with running(data) as broker:
        await load(broker, "c1", [make(f"http://r.example/{i}", f"kept {i}") for i in range(count)])
    shutil.rmtree(data / "index")
    async with running(data, admin_token=TOKEN) as broker:
        base = url_of(broker)
        async with session.get(f"{base}/api/search", params={"q": "kept"}) as response:
            assert response.status == 503
            assert response.headers["Retry-After"] == "10"
            error = (await response.json())["error"]
        assert "the index is being filled from the registry" in error
        await until(lambda: broker.sync.filling is not None)
        async with session.get(f"{base}/api/search", params={"q": "kept"}) as response:
            assert response.status == 503
            assert f"of {count:,} objects" in (await response.json())["error"]
        # What comes from the registry is served meanwhile.
        one = oid(IDENTITY, "http://r.example/7")
        async with session.get(f"{base}/api/objects/{one}") as response:
            assert response.status == 200
        status = await get_json(session, f"{base}/api/status")
        assert status["objects"] == count
        assert status["index"]["ready"] is False
        assert status["index"]["filling"]["of"] == count
        metrics = await (await session.get(f"{base}/metrics")).text()
        assert "harvest_broker_index_ready 0.0" in metrics
        async with session.get(f"{base}/", params={"q": "kept"}) as response:
            assert response.status == 503
            assert "being filled" in await response.text()
        await asyncio.wait_for(broker.index_ready.wait(), timeout=60)
        answer = await get_json(session, f"{base}/api/search", params={"q": "kept"})
        assert answer["total"] == count
        status = await get_json(session, f"{base}/api/status")
        assert status["index"] == {
            "documents": count,
            "indexed_seq": count,
            "backlog": 0,
            "ready": True,
            "state": "ready",
            "filling": None,
        }
        metrics = await (await session.get(f"{base}/metrics")).text()
        assert "harvest_broker_index_ready 1.0" in metrics


async def test_a_failed_fill_is_reported_until_a_rebuild_succeeds(
    tmp_path: Path, session: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "b"
    async with running(data) as broker:
        await load(broker, "c1", [make(f"http://r.example/{i}", f"kept {i}") for i in range(3)])
    shutil.rmtree(data / "index")

    async def failing(self: IndexSync) -> None:
        raise EngineError("no space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(IndexSync, "after_opening", failing)
        async with running(data, admin_token=TOKEN) as broker:
            base = url_of(broker)
            await until(lambda: "could not be filled" in broker.index_state())
            async with session.get(f"{base}/api/search", params={"q": "kept"}) as response:
                assert response.status == 503
                error = (await response.json())["error"]
            assert "no space left on device" in error
            assert "POST /api/admin/rebuild" in error
            patched.undo()
            rebuilt = await call(session, "POST", f"{base}/api/admin/rebuild", 200)
            assert rebuilt["indexed"] == 3
            assert not broker.index.unfilled  # the next start does not fill it again
            answer = await get_json(session, f"{base}/api/search", params={"q": "kept"})
            assert answer["total"] == 3


async def test_update_time_and_file_size_compare_after_the_index_catches_up(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    await load(
        broker,
        "c1",
        [
            make("http://t.example/old", "dated", Update_Time="788918400", File_Size="10"),
            make("http://t.example/new", "dated", Update_Time="1793491200.5", File_Size="2000"),
            make("http://t.example/none", "dated"),
        ],
    )

    assert await urls(session, broker, "dated AND Update-Time >= 2026-11-01") == {
        "http://t.example/new"
    }
    assert await urls(session, broker, "dated AND Update-Time < 2000-01-01") == {
        "http://t.example/old"
    }
    assert await urls(session, broker, "dated AND File-Size > 100") == {"http://t.example/new"}
    assert await urls(session, broker, "dated AND NOT File-Size > 100") == {
        "http://t.example/old",
        "http://t.example/none",
    }


async def test_objects_are_found_by_their_urls_when_the_query_names_them(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    await load(
        broker,
        "c1",
        [
            make("http://www.cs.colorado.edu/harvest/", "Harvest home", Abstract="a system"),
            make("http://www.example.com/colorado/", "Elsewhere"),
            make("http://www.example.com/other/", "Colorado in the title"),
        ],
    )

    edu = "http://www.cs.colorado.edu/harvest/"
    assert await urls(session, broker, r"URL: /\.edu\//") == {edu}
    assert await urls(session, broker, 'URL: "cs.colorado.edu"') == {edu}
    assert await urls(session, broker, "URL: colorado") == {edu, "http://www.example.com/colorado/"}
    # A bare word searches the content, not the URL.
    assert await urls(session, broker, "colorado") == {"http://www.example.com/other/"}
    (home,) = await results(session, broker, "harvest")
    assert [s["attribute"] for s in home["snippets"]] == ["Title"]
    # The URL's snippet comes after the content's.
    (home,) = await results(session, broker, "harvest URL: harvest")
    assert [s["attribute"] for s in home["snippets"]] == ["Title", "URL"]


async def test_the_limit_is_capped_by_max_results(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    await load(broker, "c1", [make(f"http://m.example/{i}", f"many {i}") for i in range(30)])
    answer = await get_json(
        session, f"{url_of(broker)}/api/search", params={"q": "many", "limit": "1000"}
    )
    assert answer["limit"] == 20
    assert len(answer["results"]) == 20
    assert answer["total"] == 30


async def test_the_case_flag_makes_matching_case_sensitive(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    await load(
        broker,
        "c1",
        [
            make("http://c.example/upper", "Harvest Cache"),
            make("http://c.example/lower", "a cache"),
        ],
    )
    search = f"{url_of(broker)}/api/search"
    loose = await get_json(session, search, params={"q": "Title: Cache", "case": "0"})
    strict = await get_json(session, search, params={"q": "Title: Cache", "case": "1"})
    assert {r["url"] for r in loose["results"]} == {
        "http://c.example/upper",
        "http://c.example/lower",
    }
    assert [r["url"] for r in strict["results"]] == ["http://c.example/upper"]


@pytest.mark.parametrize(
    ("params", "word"),
    [
        ({"q": "x", "limit": "abc"}, "limit"),
        ({"q": "x", "limit": "0"}, "limit"),
        ({"q": "x", "limit": "-5"}, "limit"),
        ({"q": "x", "offset": "-1"}, "offset"),
        ({"q": "x", "offset": "1e3"}, "offset"),
        ({"q": "x", "offset": "100001"}, "offset"),
        ({"q": "x", "case": "yes"}, "case"),
    ],
)
async def test_bad_numbers_are_refused_with_400(
    broker: Broker, session: aiohttp.ClientSession, params: dict[str, str], word: str
) -> None:
    answer = await get_json(session, f"{url_of(broker)}/api/search", 400, params=params)
    assert word in answer["error"]


@pytest.mark.parametrize(
    ("query", "position", "reason"),
    [
        ("cache AND", 6, "AND needs a term after it"),
        ("", 0, "empty query"),
        ("Title: (cache", 7, "unclosed '('"),
    ],
)
async def test_a_query_that_does_not_parse_is_400_with_its_position(
    broker: Broker, session: aiohttp.ClientSession, query: str, position: int, reason: str
) -> None:
    answer = await get_json(session, f"{url_of(broker)}/api/search", 400, params={"q": query})
    assert answer["position"] == position
    assert answer["error"].startswith(reason)
    assert answer["query"] == query


# -- objects --------------------------------------------------------------------------------


async def test_an_object_is_served_as_soif_or_json(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    record = make("http://o.example/", "Über café", Keywords="one two")
    await load(broker, "c1", [record])
    key = oid(IDENTITY, record.url)
    async with session.get(f"{url_of(broker)}/api/objects/{key}") as response:
        assert response.status == 200
        assert response.content_type == "application/x-soif"
        assert decode(await response.read()) == [record]
    answer = await get_json(session, f"{url_of(broker)}/api/objects/{key}?format=json")
    assert answer["oid"] == key
    assert answer["url"] == record.url
    assert (answer["collection"], answer["gatherer"], answer["template"]) == (
        "c1",
        IDENTITY,
        "FILE",
    )
    assert answer["attributes"]["Title"] == "Über café"
    assert answer["attributes"]["Keywords"] == "one two"
    assert answer["expires"] > time.time()


@pytest.mark.parametrize("key", ["0" * 32, "not-an-oid", "A" * 32])
async def test_an_unknown_object_is_404(
    broker: Broker, session: aiohttp.ClientSession, key: str
) -> None:
    answer = await get_json(session, f"{url_of(broker)}/api/objects/{key}", 404)
    assert "no object" in answer["error"]


async def test_an_unknown_object_format_is_400(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    await get_json(session, f"{url_of(broker)}/api/objects/{'0' * 32}?format=xml", 400)


async def test_unknown_api_paths_answer_json(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    answer = await get_json(session, f"{url_of(broker)}/api/nothing", 404)
    assert answer == {"error": "Not Found"}


# -- status, statistics, metrics ------------------------------------------------------------


async def test_status_reports_objects_index_and_each_collections_schedule(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    async with gatherer_service(tmp_path / "g.db") as (db, source):
        for i in range(3):
            await put(db, make(f"http://s.example/{i}", f"status {i}"))
        collections = [
            {"name": "good", "source": source, "interval": 3600},
            {"name": "down", "source": f"http://127.0.0.1:{refused_port()}", "ttl": 60},
        ]
        async with running(tmp_path / "b", collections, name="Status Test") as broker:
            await pulled(broker, "good")
            await pulled(broker, "down")
            status = await get_json(session, f"{url_of(broker)}/api/status")
    assert status["name"] == "Status Test"
    assert status["version"]
    assert 0 <= status["uptime"] < 60
    assert status["objects"] == 3
    assert status["last_seq"] == 3
    assert status["index"] == {
        "documents": 3,
        "indexed_seq": 3,
        "backlog": 0,
        "ready": True,
        "state": "ready",
        "filling": None,
    }
    by_name = {c["name"]: c for c in status["collections"]}
    good, down = by_name["good"], by_name["down"]
    assert (good["kind"], good["source"], good["scheduled"]) == ("gatherer", source, True)
    assert (good["objects"], good["pulls"], good["failures"]) == (3, 1, 0)
    assert good["cursor"] is not None
    assert good["last_success"] is not None
    assert good["last_error"] is None
    assert good["next_due"] > time.time() + 3000
    assert good["last_result"]["items"] == 3
    assert good["last_result"]["upserted"] == 3
    assert (down["pulls"], down["failures"], down["consecutive_failures"]) == (1, 1, 1)
    assert down["last_error"]["kind"] == "connect"
    assert down["last_success"] is None
    assert (down["ttl"], down["effective_ttl"]) == (60, 60)
    assert good["effective_ttl"] == status["default_ttl"]


async def test_stats_and_metrics_count_queries_pulls_and_collections(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    secret_query = "Title: zebra-quagga-secret"
    async with gatherer_service(tmp_path / "g.db") as (db, source):
        await put(db, make("http://metrics.example/1", "metrics one"))
        collections = [{"name": "g1", "source": source}]
        async with running(tmp_path / "b", collections, admin_token=TOKEN) as broker:
            await pulled(broker, "g1")
            base = url_of(broker)
            await get_json(session, f"{base}/api/search", params={"q": "metrics"})
            await get_json(session, f"{base}/api/search", params={"q": secret_query})
            await get_json(session, f"{base}/api/search", 400, params={"q": "a AND"})
            async with session.get(f"{base}/?q=metrics") as response:
                assert response.status == 200
            async with session.get(f"{base}/bulk") as response:  # what another broker pulls
                assert response.status == 200
                await response.read()
            async with session.post(
                f"{base}/api/admin/gc", headers={"Authorization": f"Bearer {TOKEN}"}
            ) as response:
                assert response.status == 200
            stats = await get_json(session, f"{base}/api/stats")
            async with session.get(f"{base}/metrics") as response:
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain")
                text = await response.text()
    assert stats["objects"] == 1
    assert stats["queries"]["api"] == {"ok": 2, "syntax_error": 1, "error": 0}
    assert stats["queries"]["page"]["ok"] == 1
    assert stats["query_seconds"]["count"] == 4
    assert stats["gc"]["runs"] == 1
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("harvest_broker_queries_total", interface="api", outcome="ok") == 2
    assert value("harvest_broker_queries_total", interface="api", outcome="syntax_error") == 1
    assert value("harvest_broker_query_seconds_count", interface="api") == 3
    assert value("harvest_broker_pulls_total", collection="g1", outcome="success") == 1
    assert value("harvest_broker_pulls_total", collection="g1", outcome="failure") == 0
    assert value("harvest_broker_objects") == 1
    assert value("harvest_broker_collection_objects", collection="g1") == 1
    assert value("harvest_broker_index_backlog") == 0
    assert value("harvest_broker_gc_runs_total", outcome="ok") == 1
    assert value("harvest_broker_http_requests_total", route="/api/search", status="2xx") == 2
    assert value("harvest_broker_http_requests_total", route="/api/search", status="4xx") == 1
    await promtool_check(text)
    # Every metric the broker's dashboard and alerts use is one a broker exposes.
    exposed = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    used = _deploy_metrics()
    assert len(used) >= 12
    assert used <= exposed, used - exposed
    # Bounded labels: never a query or a URL.
    assert "zebra" not in text
    assert "metrics.example" not in text
    assert source not in text


def _deploy_metrics() -> set[str]:
    """The metrics named in deploy/grafana/harvest-broker.json and the broker alerts."""
    deploy = Path(__file__).resolve().parents[2] / "deploy"
    dashboard = json.loads((deploy / "grafana" / "harvest-broker.json").read_text())
    texts = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    texts += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    alerts = (deploy / "prometheus" / "alerts.yml").read_text()
    texts.append(alerts[alerts.index("- name: harvest-broker") :])
    return {
        name for text in texts for name in re.findall(r"\b(?:harvest_broker|process)_[a-z_]+", text)
    }


# -- admin ----------------------------------------------------------------------------------

ADMIN_CALLS = [
    ("POST", "/api/admin/collections"),
    ("DELETE", "/api/admin/collections/x"),
    ("POST", "/api/admin/collections/x/pull"),
    ("PUT", "/api/admin/default-ttl"),
    ("POST", "/api/admin/gc"),
    ("POST", "/api/admin/rebuild"),
    ("GET", "/api/admin/stats"),
]


@pytest.mark.parametrize(("method", "path"), ADMIN_CALLS)
async def test_admin_is_refused_without_a_configured_token(
    tmp_path: Path, session: aiohttp.ClientSession, method: str, path: str
) -> None:
    async with (
        running(tmp_path / "b") as broker,
        session.request(
            method, f"{url_of(broker)}{path}", headers={"Authorization": "Bearer anything"}
        ) as response,
    ):
        assert response.status == 403
        assert await response.json() == {"error": "admin disabled"}


@pytest.mark.parametrize(("method", "path"), ADMIN_CALLS)
@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer"]
)
async def test_admin_needs_the_right_bearer_token(
    broker: Broker,
    session: aiohttp.ClientSession,
    method: str,
    path: str,
    authorization: str | None,
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    async with session.request(method, f"{url_of(broker)}{path}", headers=headers) as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert "token" in (await response.json())["error"]


def admin(session: aiohttp.ClientSession) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


async def call(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    status: int,
    json: Any = None,
) -> Any:
    async with session.request(
        method, url, json=json, headers={"Authorization": f"Bearer {TOKEN}"}
    ) as response:
        assert response.status == status, await response.text()
        return await response.json()


async def test_admin_adds_pulls_and_removes_a_collection(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    async with (
        gatherer_service(tmp_path / "g.db") as (db, source),
        running(tmp_path / "b", admin_token=TOKEN) as broker,
    ):
        for i in range(4):
            await put(db, make(f"http://admin.example/{i}", f"admin {i}"))
        base = f"{url_of(broker)}/api/admin/collections"
        table = {"name": "added", "source": source, "interval": 3600}
        created = await call(session, "POST", base, 201, table)
        assert (created["name"], created["source"], created["scheduled"]) == (
            "added",
            source,
            True,
        )
        await call(session, "POST", base, 409, table)  # the name is taken
        await call(session, "POST", base, 409, {"name": "hsr", "source": source})
        # A pull asked to be waited for answers with its result, the index caught up.
        answer = await call(session, "POST", f"{base}/added/pull?wait=1&full=1", 200)
        assert answer["result"]["items"] == 4
        found = await get_json(session, f"{url_of(broker)}/api/search", params={"q": "admin"})
        assert found["total"] == 4
        triggered = await call(session, "POST", f"{base}/added/pull", 202)
        assert triggered == {"collection": "added", "full": False, "triggered": True}
        await call(session, "POST", f"{base}/nothing/pull", 404)
        # Removing it stops its pulls and forgets its objects.
        removed = await call(session, "DELETE", f"{base}/added", 200)
        assert removed == {"removed": "added", "objects_removed": 4}
        await call(session, "DELETE", f"{base}/added", 404)
        assert await broker.registry.count() == 0
        found = await get_json(session, f"{url_of(broker)}/api/search", params={"q": "admin"})
        assert found["total"] == 0
        assert "added" not in broker.scheduler.status()


async def test_admin_keeps_the_objects_of_a_collection_removed_with_keep(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    async with (
        gatherer_service(tmp_path / "g.db") as (db, source),
        running(tmp_path / "b", [{"name": "g1", "source": source}], admin_token=TOKEN) as broker,
    ):
        await put(db, make("http://keep.example/", "kept"))
        await call(session, "POST", f"{url_of(broker)}/api/admin/collections/g1/pull?wait=1", 200)
        removed = await call(
            session, "DELETE", f"{url_of(broker)}/api/admin/collections/g1?keep=1", 200
        )
        assert removed["objects_removed"] == 0
        assert await broker.registry.count() == 1


async def test_a_failed_pull_waited_for_is_502_with_its_kind(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    base = f"{url_of(broker)}/api/admin/collections"
    table = {"name": "down", "source": f"http://127.0.0.1:{refused_port()}"}
    await call(session, "POST", base, 201, table)
    answer = await call(session, "POST", f"{base}/down/pull?wait=1", 502)
    assert answer["kind"] == "connect"


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"name": "x"}, "source: required"),
        ({"name": "x", "source": "ftp://nowhere"}, "source"),
        ({"name": "x", "source": "http://a", "kind": "squid"}, "kind"),
        ({"name": "x", "source": "http://a", "interval": 1}, "interval"),
        ({"name": "x", "source": "http://a", "colour": "red"}, "colour"),
        ({"name": "x", "source": "http://a", "query": "Title: a"}, "query"),
        ({"name": "bad name!", "source": "http://a"}, "name"),
    ],
)
async def test_admin_checks_a_new_collection_as_the_configuration_does(
    broker: Broker, session: aiohttp.ClientSession, table: dict[str, Any], problem: str
) -> None:
    answer = await call(session, "POST", f"{url_of(broker)}/api/admin/collections", 400, table)
    assert any(problem in p for p in answer["problems"])
    assert broker.scheduler.status() == {}


async def test_admin_refuses_a_body_that_is_not_a_table(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    url = f"{url_of(broker)}/api/admin/collections"
    await call(session, "POST", url, 400, ["not", "a", "table"])
    async with session.post(url, data=b"{not json", headers=admin(session)) as response:
        assert response.status == 400


async def test_admin_default_ttl_applies_to_the_next_pulls(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    # Broker A's objects carry no Time-to-Live: broker B's expiry of them is its default TTL.
    async with running(tmp_path / "a") as source:
        await load(source, "c1", [make("http://ttl.example/", "lifetime", gatherer=False)])
        collections = [
            {"name": "from-a", "source": url_of(source), "kind": "broker"},
            {"name": "own-ttl", "source": url_of(source), "kind": "broker", "ttl": 77},
        ]
        async with running(tmp_path / "b", collections, admin_token=TOKEN) as broker:
            await pulled(broker, "from-a")
            base = url_of(broker)
            answer = await call(
                session, "PUT", f"{base}/api/admin/default-ttl", 200, {"seconds": 5000}
            )
            assert answer == {"default_ttl": 5000.0, "collections": ["from-a"]}
            for bad in ({"seconds": 0}, {"seconds": "soon"}, {"minutes": 5}, [5000]):
                await call(session, "PUT", f"{base}/api/admin/default-ttl", 400, bad)
            before = time.time()
            await call(
                session, "POST", f"{base}/api/admin/collections/from-a/pull?wait=1&full=1", 200
            )
            stored = await broker.registry.get(oid("from-a", "http://ttl.example/"))
            assert stored is not None
            assert before + 5000 - 1 <= stored.expires <= time.time() + 5000
            status = await get_json(session, f"{base}/api/status")
            assert status["default_ttl"] == 5000
            ttls = {c["name"]: c["effective_ttl"] for c in status["collections"]}
            assert ttls == {"from-a": 5000, "own-ttl": 77}


async def test_admin_gc_rebuild_and_stats(broker: Broker, session: aiohttp.ClientSession) -> None:
    await load(broker, "c1", [make(f"http://gc.example/{i}", f"gc {i}") for i in range(5)])
    await load(broker, "short", [make("http://gc.example/short", "short", gatherer=False)], ttl=1)
    base = url_of(broker)
    await asyncio.sleep(1.1)  # the short-lived object expires
    answer = await call(session, "POST", f"{base}/api/admin/gc", 200)
    assert answer == {"objects": 5, "removed": 1, "index_added": 0, "index_removed": 0}
    rebuilt = await call(session, "POST", f"{base}/api/admin/rebuild", 200)
    assert rebuilt["indexed"] == 5
    found = await get_json(session, f"{base}/api/search", params={"q": "gc"})
    assert found["total"] == 5
    stats = await call(session, "GET", f"{base}/api/admin/stats", 200)
    assert stats["objects"] == 5
    assert stats["gc"]["runs"] == 1
    assert stats["settings"]["max_results"] == 20
    assert stats["disk"]["registry_bytes"] > 0
    assert stats["disk"]["index_bytes"] > 0
    assert {c["name"] for c in stats["collections"]} >= {"c1"}


async def test_a_removal_is_applied_to_search_results(
    broker: Broker, session: aiohttp.ClientSession
) -> None:
    await load(broker, "c1", [make("http://d.example/1", "gone soon")])
    await load(broker, "c1", [Delete(make("http://d.example/1", "gone soon"))])
    found = await get_json(session, f"{url_of(broker)}/api/search", params={"q": "soon"})
    assert found["total"] == 0

"""broker.facets: the choices, terms and rankings as pure functions, and the counts of a real
broker's index and registry (tests/broker/search_demo.py's records): each count is what the
narrowed query finds, and what counting the records themselves says.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest

from broker.app import Broker
from broker.facets import (
    BUCKETS,
    DAY,
    FACETS,
    Bounds,
    Facet,
    FacetCounter,
    Facets,
    Value,
    candidates,
    choices,
    chosen_terms,
    commonest,
    offered,
    ranked,
    term,
    with_terms,
)
from broker.query.ast import Compare, Phrase, Word
from broker.query.parser import parse
from tests.broker.search_demo import DEMOS, Demo, demo_broker
from tests.broker.test_api import get_json, load, make, url_of

NOW = 1_795_000_000.0
KINDS = {kind.name: kind for kind in FACETS}


# -- pure ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        (
            {"gatherer": "Campus  web ", "type": "HTML", "date": "week"},
            {"gatherer": "Campus web", "type": "HTML", "date": "week"},
        ),
        ({"date": "fortnight", "type": "", "q": "cache"}, {}),  # no such bucket; empty
        ({"gatherer": "---", "type": "x" * 101}, {}),  # no word to narrow by; too long
        ({"type": 'Odd "quoted" \\ type'}, {"type": 'Odd "quoted" \\ type'}),
    ],
)
def test_choices_keep_known_facets_and_values_a_term_can_narrow_to(
    given: dict[str, str], kept: dict[str, str]
) -> None:
    assert choices(given) == kept


def test_terms_are_query_text_that_parses_to_the_narrowing() -> None:
    assert parse(term("gatherer", "Campus web", NOW)) == Phrase(("Campus", "web"), "Gatherer-Name")
    assert term("type", "HTML", NOW) == "Type:HTML"
    assert parse(term("type", "OR", NOW)) == Word("OR", "Type")  # quoted: not the operator
    assert parse(term("type", "x*", NOW)) == Word("x*", "Type")  # quoted: not a prefix
    odd = 'Odd "quoted" \\ type'
    assert parse(term("type", odd, NOW)) == Phrase(("Odd", '"quoted"', "\\", "type"), "Type")
    assert parse(term("date", "week", NOW)) == Compare("Update-Time", ">=", NOW - 7 * DAY)
    assert parse(term("date", "older", NOW)) == Compare("Update-Time", "<", NOW - 365 * DAY)
    # A bound is whole seconds: the same for every request within one.
    assert term("date", "month", NOW + 0.4) == term("date", "month", NOW)


def test_chosen_terms_come_in_facet_order_and_leave_one_facet_out_when_asked() -> None:
    chosen = choices({"date": "year", "gatherer": "Campus web"})
    terms = chosen_terms(chosen, NOW)
    assert terms == ['Gatherer-Name:"Campus web"', f"Update-Time>={int(NOW - 365 * DAY)}"]
    assert chosen_terms(chosen, NOW, but="gatherer") == terms[1:]


@pytest.mark.parametrize(
    ("query", "terms", "combined"),
    [
        ("  a OR b ", [], "a OR b"),
        ("a OR b", ["Type:HTML"], "(a OR b) AND Type:HTML"),
        ("", ["Type:HTML", "Update-Time<5"], "Type:HTML AND Update-Time<5"),
        (" ", [], ""),
    ],
)
def test_terms_are_anded_to_the_query(query: str, terms: list[str], combined: str) -> None:
    assert with_terms(query, terms) == combined


def test_the_commonest_values_and_how_a_facet_lists_them() -> None:
    assert commonest(["b", "a", "b", "c", "a", "b", "d"], 2) == (["b", "a"], True)
    assert commonest(["x"], 2) == (["x"], False)
    values = [
        Value("b", "b", "t", 3),
        Value("A", "A", "t", 3),
        Value("z", "z", "t", 0),
        Value("c", "c", "t", 0, chosen=True),
    ]
    listed, cut = ranked(values, KINDS["type"], 8)
    assert ([v.value for v in listed], cut) == (["A", "b", "c"], False)
    listed, cut = ranked(values, KINDS["type"], 1)
    assert ([v.value for v in listed], cut) == (["A", "c"], True)  # and the chosen one
    dates = [Value(b.key, b.label, "t", 1) for b in reversed(BUCKETS)]
    listed, _ = ranked(dates, KINDS["date"], 1)
    assert [v.value for v in listed] == ["week", "month", "year", "older"]
    assert candidates(["b", "a"], ["a", "c"], ["b"]) == ["b", "a", "c"]
    assert offered(" a \n b ") == "a b"


# -- counted by a real broker -------------------------------------------------------------


def truth(kept: Callable[[Demo], bool], now: float) -> dict[str, Counter[str]]:
    """What a facet should count: the demo records ``kept`` by gatherer, type and bucket."""
    found = [d for d in DEMOS if kept(d)]
    dates: Counter[str] = Counter()
    for d in found:
        for bucket in BUCKETS:
            younger = d.age_days * DAY <= bucket.seconds
            dates[bucket.key] += younger if bucket.op == ">=" else not younger
    return {
        "gatherer": Counter(d.gatherer for d in found),
        "type": Counter(d.type for d in found),
        "date": +dates,  # no bucket with no match
    }


def counts(found: Facets) -> dict[str, Counter[str]]:
    return {f.kind.name: Counter({v.value: v.count for v in f.values}) for f in found.facets}


def by_name(found: Facets) -> dict[str, Facet]:
    return {f.kind.name: f for f in found.facets}


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[tuple[Broker, float]]:
    now = time.time()
    async with demo_broker(tmp_path / "b", now) as started:
        yield started, now


async def test_each_count_is_what_the_narrowed_query_finds(broker: tuple[Broker, float]) -> None:
    started, now = broker
    found = await started.facets("cache", chosen={}, now=now)
    assert found.exact
    assert found.complete
    assert counts(found) == truth(lambda d: d.about_cache, now)
    for facet in found.facets:
        assert not facet.more  # four gatherers and four types: fewer than TOP
        for value in facet.values:
            narrowed = await started.search(with_terms("cache", [value.term]), limit=1)
            assert narrowed.total == value.count, value
    gatherers = [v.value for v in by_name(found)["gatherer"].values]
    assert gatherers == ["RFC archive", "Campus web", "Python docs", "SQLite docs"]


async def test_a_facet_offers_its_alternatives_beside_its_choice(
    broker: tuple[Broker, float],
) -> None:
    started, now = broker
    chosen = choices({"gatherer": "Campus web", "date": "year"})
    found = await started.facets("cache", chosen=chosen, now=now)
    within_year = 365.0

    # The gatherers of the query within the past year: the choice among them, others offered.
    expected = truth(lambda d: d.about_cache and d.age_days <= within_year, now)["gatherer"]
    gatherer = by_name(found)["gatherer"]
    assert counts(found)["gatherer"] == expected
    assert [v.value for v in gatherer.values if v.chosen] == ["Campus web"]
    # Types are counted within both choices; dates within the gatherer only.
    campus = lambda d: d.about_cache and d.gatherer == "Campus web"  # noqa: E731
    assert (
        counts(found)["type"]
        == truth(lambda d: campus(d) and d.age_days <= within_year, now)["type"]
    )
    assert counts(found)["date"] == truth(campus, now)["date"]
    assert [v.value for v in by_name(found)["date"].values if v.chosen] == ["year"]


async def test_a_query_of_choices_alone_is_counted_too(broker: tuple[Broker, float]) -> None:
    started, now = broker
    found = await started.facets("", chosen=choices({"type": "PDF"}), now=now)
    pdf = truth(lambda d: d.type == "PDF", now)
    assert counts(found)["gatherer"] == pdf["gatherer"]
    assert counts(found)["date"] == pdf["date"]
    # With no query beside the choice, the other types are counted in the whole collection.
    assert counts(found)["type"] == truth(lambda d: True, now)["type"]


def counter(started: Broker, bounds: Bounds) -> FacetCounter:
    return FacetCounter(
        started.registry, started.index, changed=started.changed.current, bounds=bounds
    )


async def test_values_and_time_are_bounded(broker: tuple[Broker, float]) -> None:
    started, now = broker
    two = counter(started, Bounds(top=2))
    found = await two.count("cache", chosen={}, now=now)
    gatherer = by_name(found)["gatherer"]
    assert [v.value for v in gatherer.values] == ["RFC archive", "Campus web"]
    assert gatherer.more
    # A value chosen outside the commonest is counted too.
    chosen = choices({"gatherer": "SQLite docs"})
    found = await two.count("cache", chosen=chosen, now=now)
    assert "SQLite docs" in [v.value for v in by_name(found)["gatherer"].values]

    no_time = counter(started, Bounds(seconds=0.0))
    found = await no_time.count("cache", chosen={}, now=now)
    assert not found.complete
    assert all(not f.values for f in found.facets)


async def test_values_the_best_matches_lack_come_from_the_whole_collection(
    broker: tuple[Broker, float],
) -> None:
    started, now = broker
    # The best match alone holds one gatherer and one type; the others are counted anyway.
    one = counter(started, Bounds(sample=1))
    found = await one.count("cache", chosen={}, now=now)
    assert counts(found) == truth(lambda d: d.about_cache, now)
    # Read once, and again after the registry changed (asked of no match at all here).
    none = counter(started, Bounds(sample=0))
    found = await none.count("cache", chosen={}, now=now)
    assert counts(found) == truth(lambda d: d.about_cache, now)
    news = make(
        "http://new.example/1", "cache news", gatherer=False, Gatherer_Name="New", Type="Audio"
    )
    await load(started, "more", [news])
    found = await none.count("cache", chosen={}, now=now)
    assert (counts(found)["gatherer"]["New"], counts(found)["type"]["Audio"]) == (1, 1)


async def test_a_query_checked_object_by_object_is_counted_as_an_estimate(
    broker: tuple[Broker, float],
) -> None:
    started, now = broker
    found = await started.facets("Title: /^Squid/", chosen={}, now=now)
    assert not found.exact
    # The index's candidates for the expression: at least the objects that match it.
    squid = truth(lambda d: d.title.startswith("Squid"), now)
    for name, counted in counts(found).items():
        assert counted.keys() >= squid[name].keys()
        assert all(counted[value] >= n for value, n in squid[name].items())
    case = await started.facets("Squid", chosen={}, case_sensitive=True, now=now)
    assert not case.exact


async def test_the_api_gives_the_facets_when_asked(broker: tuple[Broker, float]) -> None:
    started, now = broker
    base = url_of(started)
    async with aiohttp.ClientSession() as session:
        plain = await get_json(session, f"{base}/api/search", params={"q": "cache"})
        assert "facets" not in plain
        answer = await get_json(
            session, f"{base}/api/search", params={"q": "cache", "facets": "1", "limit": "2"}
        )
        assert answer["total"] == sum(d.about_cache for d in DEMOS)
        facets = answer["facets"]
        assert (facets["exact"], facets["complete"]) == (True, True)
        assert [f["name"] for f in facets["facets"]] == ["gatherer", "type", "date"]
        gatherer = facets["facets"][0]
        assert gatherer["attribute"] == "Gatherer-Name"
        first = gatherer["values"][0]
        assert first == {
            "value": "RFC archive",
            "label": "RFC archive",
            "count": truth(lambda d: d.about_cache, now)["gatherer"]["RFC archive"],
            "term": 'Gatherer-Name:"RFC archive"',
        }
        # The term narrows the query to the count.
        narrowed = await get_json(
            session, f"{base}/api/search", params={"q": f"cache AND {first['term']}"}
        )
        assert narrowed["total"] == first["count"]
        refused = await get_json(
            session,
            f"{base}/api/search",
            400,
            params={"q": "cache", "facets": "1", "federated": "1"},
        )
        assert "federated" in refused["error"]
        await get_json(session, f"{base}/api/search", 400, params={"q": "x", "facets": "yes"})

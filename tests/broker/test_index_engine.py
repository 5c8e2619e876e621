"""TantivyIndex on a real index in tmp_path: every query node returns exactly the expected
objects, writes become visible on commit, and the index survives reopening and a kill."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import tantivy

from broker.errors import EngineError
from broker.index import IndexedObject, TantivyIndex, needs_verification
from broker.index.translate import NEAR_LIMIT
from broker.query.ast import And, Compare, Node, Not, Or, Pattern, Phrase, Word

REPO = Path(__file__).resolve().parents[2]
FILLER = " ".join(f"filler{i}" for i in range(60))


def obj(
    oid: str,
    *attributes: tuple[str, str],
    update_time: float | None = None,
    file_size: int | None = None,
) -> IndexedObject:
    return IndexedObject(
        oid=oid,
        url=f"http://example.org/{oid}",
        attributes=attributes,
        update_time=update_time,
        file_size=file_size,
    )


OBJECTS = [
    obj(
        "cache-design",
        ("Title", "Object Cache Design"),
        ("Keywords", "cache\nproxy"),
        ("Abstract", "The object cache stores pages. A cache, a cache, a cache."),
        update_time=1_000_000_000,
        file_size=100,
    ),
    obj(
        "cache-mention",
        ("Title", "Network Notes"),
        ("Abstract", f"Routers and switches. {FILLER} One cache here. {FILLER}"),
        update_time=1_500_000_000,
        file_size=1_000,
    ),
    obj(
        "apart",
        ("Title", "Storage"),
        ("Abstract", "object storage beside a cache layer"),
        update_time=1_700_000_000,
        file_size=10_000,
    ),
    obj("email", ("Title", "E-mail Archive"), ("Abstract", "letters sent by electronic mail")),
    obj("mail-e", ("Title", "Mail E"), ("Abstract", "mail e and e then mail")),
    obj("harvest-0", ("Abstract", "harvest season")),
    obj("harvest-1", ("Abstract", "harvxst season")),  # one substitution from "harvest"
    obj("harvest-2", ("Abstract", "harxxst season")),  # two
    obj("harvest-3", ("Abstract", "hxrxxst season")),  # three
    obj("harvest-ins", ("Abstract", "harvests season")),  # one insertion
    obj("harvest-swap", ("Abstract", "havrest season")),  # a transposition: one edit
    obj(
        "archive",
        ("Title", "Software Archive"),
        ("Embed1-Title", "Gatherer Member Notes"),
        ("Embed1-Type", "README"),
        ("X.Custom", "dotted value"),
    ),
    obj("url-refs", ("URL-References", "http://www.cs.colorado.edu/harvest/\nftp://ftp.cs.edu/")),
    obj("upper", ("Title", "RFC 1945 Hypertext Transfer Protocol"), ("Keywords", "HTTP")),
    obj(
        "zeppelin-strong", ("Title", "Zeppelin"), ("Abstract", "zeppelin zeppelin airship zeppelin")
    ),
    obj("zeppelin-weak", ("Abstract", f"{FILLER} zeppelin {FILLER} {FILLER}")),
    obj(
        "numbers", ("Update-Time", "1082184280.609534"), ("MD5", "f7a35de558acc40c3c7441f55a547c98")
    ),
]
ALL = {o.oid for o in OBJECTS}


async def oids_of(index: TantivyIndex, query: Node) -> set[str]:
    results = await index.search(query, limit=100)
    assert results.total == len(results.hits)
    return {hit.oid for hit in results.hits}


def use_automata(index: TantivyIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the vocabulary from being refreshed, so that prefixes and approximate words go to
    tantivy's automaton queries (a search would otherwise start a refresh, which on a small
    index may finish first)."""
    monkeypatch.setattr(index._engine, "vocabulary_current", lambda: True)


@pytest.fixture
async def index(tmp_path: Path) -> AsyncIterator[TantivyIndex]:
    async with await TantivyIndex.open(tmp_path / "index") as opened:
        await opened.add(OBJECTS)
        await opened.commit()
        yield opened


# -- words -------------------------------------------------------------------------------------


async def test_bare_word_matches_any_attribute_in_any_case(index: TantivyIndex) -> None:
    expected = {"cache-design", "cache-mention", "apart"}
    assert await oids_of(index, Word("cache")) == expected
    assert await oids_of(index, Word("CACHE")) == expected
    assert await oids_of(index, Word("readme")) == {"archive"}  # an Embed attribute
    assert await oids_of(index, Word("nowhere")) == set()


@pytest.mark.parametrize("name", ["Title", "title", "TITLE", "tItLe"])
async def test_attribute_word_matches_that_attribute_only(index: TantivyIndex, name: str) -> None:
    assert await oids_of(index, Word("cache", attribute=name)) == {"cache-design"}


async def test_attributes_without_a_field_of_their_own(index: TantivyIndex) -> None:
    assert await oids_of(index, Word("member", attribute="embed1-title")) == {"archive"}
    assert await oids_of(index, Word("member", attribute="Embed1-Type")) == set()
    assert await oids_of(index, Word("dotted", attribute="x.custom")) == {"archive"}
    assert await oids_of(index, Phrase(("dotted", "value"), attribute="X.CUSTOM")) == {"archive"}


async def test_a_word_of_several_tokens_is_a_phrase(index: TantivyIndex) -> None:
    assert await oids_of(index, Word("e-mail")) == {"email"}
    assert await oids_of(index, Word("E-Mail", attribute="title")) == {"email"}
    assert await oids_of(index, Word("cs.colorado.edu", attribute="URL-References")) == {"url-refs"}
    assert await oids_of(index, Word("1082184280.609534", attribute="Update-Time")) == {"numbers"}
    assert await oids_of(index, Word("--")) == set()


async def test_phrase_needs_the_words_together_in_order(index: TantivyIndex) -> None:
    assert await oids_of(index, Phrase(("object", "cache"))) == {"cache-design"}
    assert await oids_of(index, Phrase(("cache", "object"))) == set()
    assert await oids_of(index, And((Word("object"), Word("cache")))) == {"cache-design", "apart"}
    assert await oids_of(index, Phrase(("object", "cache"), attribute="Title")) == {"cache-design"}
    assert await oids_of(index, Phrase(("cache", "stores"), attribute="Title")) == set()
    # Attribute values are not one text: a phrase does not run from one into the next.
    assert await oids_of(index, Phrase(("member", "notes"))) == {"archive"}
    assert await oids_of(index, Phrase(("notes", "readme"))) == set()


RUNNING_TEXT = [
    obj("html", ("Title", "Birds"), ("Abstract", "kestrel falcon notes")),
    obj("text", ("Partial-Text", "merlin falcon notes")),
    # Two attributes of running text: each keeps a field of its own.
    obj("mixed", ("Abstract", "merlin summary"), ("Full-Text", "merlin summary, then kestrel")),
]


@pytest.mark.parametrize("refreshed", [True, False], ids=["vocabulary", "automaton"])
async def test_running_text_attributes_are_told_apart(
    tmp_path: Path, refreshed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with await TantivyIndex.open(tmp_path / "index") as index:
        await index.add(RUNNING_TEXT)
        await index.commit()
        if refreshed:
            await index.refresh_vocabulary()
        else:
            use_automata(index, monkeypatch)
        assert await oids_of(index, Word("kestrel")) == {"html", "mixed"}
        assert await oids_of(index, Word("kestrel", attribute="Abstract")) == {"html"}
        assert await oids_of(index, Word("kestrel", attribute="full-text")) == {"mixed"}
        assert await oids_of(index, Word("kestrel", attribute="Partial-Text")) == set()
        assert await oids_of(index, Word("merlin", attribute="Partial-Text")) == {"text"}
        assert await oids_of(index, Word("merlin", attribute="Abstract")) == {"mixed"}
        assert await oids_of(index, Phrase(("falcon", "notes"), attribute="Abstract")) == {"html"}
        assert await oids_of(index, Phrase(("merlin", "falcon"), attribute="Abstract")) == set()
        assert await oids_of(index, Word("kestr", prefix=True, attribute="Abstract")) == {"html"}
        assert await oids_of(index, Word("kestr", prefix=True, attribute="Text")) == set()
        assert await oids_of(index, Word("merlim", errors=1, attribute="partial-text")) == {"text"}
        assert await oids_of(index, Word("kestrl", errors=1, attribute="Full-Text")) == {"mixed"}
        assert await oids_of(index, Word("kestrl", errors=1)) == {"html", "mixed"}
        # An attribute called "body" is not the shared field.
        assert await oids_of(index, Word("falcon", attribute="Body")) == set()


@pytest.mark.parametrize("refreshed", [True, False], ids=["vocabulary", "automaton"])
async def test_prefix(
    index: TantivyIndex, refreshed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if refreshed:
        await index.refresh_vocabulary()
    else:
        use_automata(index, monkeypatch)
    harv = {"harvest-0", "harvest-1", "harvest-ins"}
    assert await oids_of(index, Word("harv", prefix=True)) == harv
    assert await oids_of(index, Word("HARV", prefix=True, attribute="abstract")) == harv
    assert await oids_of(index, Word("harv", prefix=True, attribute="URL-References")) == {
        "url-refs"
    }
    assert await oids_of(index, Word("memb", prefix=True, attribute="Embed1-Title")) == {"archive"}
    assert await oids_of(index, Word("e-ma", prefix=True)) == {"email"}
    assert await oids_of(index, Word("1082", prefix=True)) == set()  # bookkeeping: named only
    assert await oids_of(index, Word("1082", prefix=True, attribute="update-time")) == {"numbers"}
    assert await oids_of(index, Word("zz", prefix=True)) == set()


@pytest.mark.parametrize("refreshed", [True, False], ids=["vocabulary", "automaton"])
async def test_approximate_words(
    index: TantivyIndex, refreshed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if refreshed:
        await index.refresh_vocabulary()
    else:
        use_automata(index, monkeypatch)
    one = {"harvest-0", "harvest-1", "harvest-ins", "harvest-swap"}
    two = one | {"harvest-2"}
    assert await oids_of(index, Word("harvest", errors=1)) == one
    assert await oids_of(index, Word("harvest", errors=2)) == two
    assert await oids_of(index, Word("harvest", errors=1, attribute="URL-References")) == {
        "url-refs"
    }
    assert await oids_of(index, Word("harvest", errors=2, attribute="Abstract")) == two
    assert await oids_of(index, Word("HARVEST", errors=1, attribute="abstract")) == one
    assert await oids_of(index, Word("gatherrr", errors=2, attribute="embed1-title")) == {"archive"}


async def test_an_approximate_word_becomes_its_nearest_words_up_to_the_limit(
    tmp_path: Path,
) -> None:
    # "tree", the 50 words one edit from it of the forms "tXee" and "treX", and "tread", two
    # edits away: more than the limit.
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = [*sorted({f"t{c}ee" for c in letters} | {f"tre{c}" for c in letters}), "tread"]
    assert len(words) == 52 > NEAR_LIMIT
    async with await TantivyIndex.open(tmp_path / "index") as index:
        await index.add([obj(word, ("Title", f"about {word}")) for word in words])
        await index.commit()
        await index.refresh_vocabulary()
        results = await index.search(Word("tree", errors=2), limit=100)
        found = {hit.oid for hit in results.hits}
        assert results.total == len(found) == NEAR_LIMIT
        # The word itself, then the one-edit words (the first in alphabetical order).
        assert "tree" in found
        assert "tread" not in found
        assert found == {"tree", *sorted(set(words) - {"tree", "tread"})[: NEAR_LIMIT - 1]}
        # The words it became, for the snippets to mark no others.
        assert results.near == {("tree", 2): frozenset(found)}


async def test_nearer_words_rank_first(tmp_path: Path) -> None:
    # One word each, in texts alike: only how far the word is from the query tells them apart.
    objects = [
        obj(name, ("Abstract", f"{word} season report"))
        for name, word in [("two", "harxxst"), ("exact", "harvest"), ("one", "harvests")]
    ]
    async with await TantivyIndex.open(tmp_path / "index") as index:
        await index.add(objects)
        await index.commit()
        await index.refresh_vocabulary()
        results = await index.search(Word("harvest", errors=2), limit=10)
        assert [hit.oid for hit in results.hits] == ["exact", "one", "two"]
        scores = [hit.score for hit in results.hits]
        assert scores[0] > scores[1] > scores[2]


async def test_approximate_results_are_ranked_once_the_vocabulary_is_current(
    index: TantivyIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_automata(index, monkeypatch)
    query = Word("zepelin", errors=1, attribute="Abstract")
    before = await index.search(query, limit=10)
    assert {hit.score for hit in before.hits} == {1.0}  # the automaton's constant score
    monkeypatch.undo()
    await index.refresh_vocabulary()
    after = await index.search(query, limit=10)
    assert [hit.oid for hit in after.hits] == ["zeppelin-strong", "zeppelin-weak"]
    assert after.hits[0].score > after.hits[1].score
    # A commit makes it stale until the next refresh.
    await index.add([obj("zeppelin-new", ("Abstract", "zepelin"))])
    await index.commit()
    use_automata(index, monkeypatch)
    stale = await index.search(query, limit=10)
    assert stale.total == 3
    assert {hit.score for hit in stale.hits} == {1.0}


# -- comparisons and booleans ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attribute", "op", "value", "expected"),
    [
        ("File-Size", ">", 1_000, {"apart"}),
        ("file-size", ">=", 1_000, {"cache-mention", "apart"}),
        ("FILE-SIZE", "<", 1_000, {"cache-design"}),
        ("File-Size", "<=", 1_000, {"cache-design", "cache-mention"}),
        ("File-Size", "=", 1_000, {"cache-mention"}),
        ("File-Size", "=", 999.5, set()),
        ("File-Size", ">", 999.5, {"cache-mention", "apart"}),
        ("File-Size", "<", 1000.5, {"cache-design", "cache-mention"}),
        ("File-Size", "<", 0, set()),
        ("File-Size", ">", -5, {"cache-design", "cache-mention", "apart"}),
        ("Update-Time", ">", 1_500_000_000, {"apart"}),
        ("update-time", ">=", 1_500_000_000, {"cache-mention", "apart"}),
        ("Update-Time", "<", 1_500_000_000, {"cache-design"}),
        ("Update-Time", "<=", 1_500_000_000.5, {"cache-design", "cache-mention"}),
        ("Update-Time", "=", 1_700_000_000, {"apart"}),
        ("File-Size", "<", float("inf"), {"cache-design", "cache-mention", "apart"}),
        ("File-Size", ">", float("inf"), set()),
        ("File-Size", ">=", 2.0**70, set()),
        ("File-Size", "<=", 0, set()),
        ("File-Size", ">", float("-inf"), {"cache-design", "cache-mention", "apart"}),
        ("Update-Time", "<", float("inf"), {"cache-design", "cache-mention", "apart"}),
        ("Update-Time", ">", float("nan"), set()),
        ("File-Size", "=", 100, {"cache-design"}),  # an int from the parser
        ("Title", ">", 0, set()),  # no numbers but in Update-Time and File-Size
    ],
)
async def test_compare(
    index: TantivyIndex, attribute: str, op: str, value: float, expected: set[str]
) -> None:
    node = Compare(attribute, op, value)  # type: ignore[arg-type]
    assert await oids_of(index, node) == expected


async def test_boolean_combinations(index: TantivyIndex) -> None:
    cache = Word("cache")
    assert await oids_of(index, And((cache, Word("object")))) == {"cache-design", "apart"}
    assert await oids_of(index, Or((Word("zeppelin"), Word("electronic")))) == {
        "zeppelin-strong",
        "zeppelin-weak",
        "email",
    }
    assert await oids_of(index, And((cache, Not(Word("object"))))) == {"cache-mention"}
    # (a OR b) AND NOT c
    query = And((Or((cache, Word("zeppelin"))), Not(Word("airship"))))
    assert await oids_of(index, query) == {
        "cache-design",
        "cache-mention",
        "apart",
        "zeppelin-weak",
    }
    assert await oids_of(index, Or((Word("airship"), Not(cache)))) == ALL - {
        "cache-design",
        "cache-mention",
        "apart",
    }
    assert await oids_of(index, Not(Word("season"))) == ALL - {
        o for o in ALL if o.startswith("harvest-")
    }
    assert await oids_of(index, And((Not(cache), Not(Word("season"))))) == ALL - {
        "cache-design",
        "cache-mention",
        "apart",
        *(o for o in ALL if o.startswith("harvest-")),
    }
    mixed = And((Compare("File-Size", "<", 5_000), Phrase(("object", "cache"))))
    assert await oids_of(index, mixed) == {"cache-design"}


# -- what the index can only narrow down -------------------------------------------------------


async def test_patterns_give_a_superset_to_verify(index: TantivyIndex) -> None:
    pattern = Pattern(r"^RFC [0-9]+ Hypertext", attribute="Title")
    assert needs_verification(pattern)
    assert await oids_of(index, pattern) == {"upper"}
    # Words cut by the regex's open parts are prefixes; no literal words: everything.
    assert "cache-design" in await oids_of(index, Pattern(r"cach(e|ing) Des", attribute="title"))
    assert await oids_of(index, Pattern(r"[a-z]+")) == ALL
    assert await oids_of(index, Pattern(r"Cache Design", attribute="Title")) == {"cache-design"}
    # Under NOT a pattern excludes nothing: the caller's verification does.
    assert await oids_of(index, Not(pattern)) == ALL


async def test_approximate_words_of_several_tokens_give_a_superset_to_verify(
    index: TantivyIndex,
) -> None:
    node = Word("e-maik", errors=1)
    assert needs_verification(node)
    assert await oids_of(index, node) >= {"email", "mail-e"}
    assert not needs_verification(Word("e-ma", prefix=True, attribute="Title"))
    assert needs_verification(Word("gatherer-memb", prefix=True, attribute="Embed1-Title"))
    assert await oids_of(index, Word("gatherer-memb", prefix=True, attribute="Embed1-Title")) == {
        "archive"
    }
    assert needs_verification(Word("e_mail", errors=1))  # "_" separates tokens too
    assert not needs_verification(Word("email", errors=1, prefix=True))


async def test_case_sensitive_terms_give_a_superset_to_verify(index: TantivyIndex) -> None:
    node = Word("HTTP", case_sensitive=True)
    assert needs_verification(node)
    assert needs_verification(And((Word("x"), Not(Phrase(("a", "b"), case_sensitive=True)))))
    exact = Or((Word("x", prefix=True), Not(Phrase(("a", "b"))), Compare("File-Size", ">", 1)))
    assert not needs_verification(exact)
    assert await oids_of(index, node) == {"upper"}
    assert await oids_of(index, Word("http", case_sensitive=True)) == {"upper"}
    assert await oids_of(index, And((Word("season"), Not(node)))) == {
        o for o in ALL if o.startswith("harvest-")
    }
    assert await oids_of(index, Not(Phrase(("transfer", "protocol"), case_sensitive=True))) == ALL


# -- ranking, paging, writes -------------------------------------------------------------------


async def test_ranking_puts_title_and_frequent_mentions_first(index: TantivyIndex) -> None:
    results = await index.search(Word("zeppelin"), limit=10)
    assert [hit.oid for hit in results.hits] == ["zeppelin-strong", "zeppelin-weak"]
    assert results.hits[0].score > results.hits[1].score > 0
    assert results.hits[0].snippets == ()
    results = await index.search(Word("cache"), limit=10)
    assert results.hits[0].oid == "cache-design"


async def ranked(tmp_path: Path, objects: list[IndexedObject], query: Node) -> list[str]:
    async with await TantivyIndex.open(tmp_path / "ranked") as index:
        await index.add(objects)
        await index.commit()
        await index.refresh_vocabulary()
        results = await index.search(query, limit=10)
        return [hit.oid for hit in results.hits]


async def test_a_word_counts_by_the_weight_of_its_attribute(tmp_path: Path) -> None:
    # The word in one attribute of each, the attributes alike in length; twice in the
    # Abstract, which unweighted would come first.
    def page(name: str, where: str, value: str) -> IndexedObject:
        values = dict.fromkeys(("Title", "Headings", "Abstract"), "river bank notes")
        values[where] = value
        return obj(name, *values.items())

    objects = [
        page("abstract", "Abstract", "zeppelin zeppelin notes"),
        page("title", "Title", "zeppelin bank notes"),
        page("headings", "Headings", "zeppelin bank notes"),
    ]

    assert await ranked(tmp_path, objects, Word("zeppelin")) == ["title", "headings", "abstract"]


async def test_words_near_each_other_rank_first(tmp_path: Path) -> None:
    objects = [
        obj("apart", ("Abstract", f"task {FILLER} groups {FILLER}")),
        obj("together", ("Abstract", f"task groups {FILLER} {FILLER}")),
        obj("reversed", ("Abstract", f"groups task {FILLER} {FILLER}")),
    ]
    found = await ranked(tmp_path, objects, And((Word("task"), Word("groups"))))
    assert (set(found[:2]), found[2]) == ({"together", "reversed"}, "apart")


async def test_an_approximate_word_ranks_the_nearer_word_first_however_rare_the_other(
    tmp_path: Path,
) -> None:
    # "asyncore" (two edits from "asyncoi") is rarer than "asyncio" (one, a swap): blended
    # with the commonest of the words, its rarity does not lift it over "asyncio".
    objects = [
        obj("asyncore", ("Title", "asyncore notes")),
        obj("asyncio", ("Title", "asyncio notes")),
        *(obj(f"other-{n}", ("Title", f"asyncio other {n}")) for n in range(3)),
    ]
    found = await ranked(tmp_path, objects, Word("asyncoi", errors=2))
    assert found.index("asyncio") < found.index("asyncore")


async def test_server_records_answer_only_queries_that_name_server_type(tmp_path: Path) -> None:
    objects = [
        obj("server", ("Name", "Physics broker"), ("Server-Type", "broker")),
        obj("page", ("Title", "Physics notes")),
    ]
    async with await TantivyIndex.open(tmp_path / "index") as index:
        await index.add(objects)
        await index.commit()
        assert await oids_of(index, Word("physics")) == {"page"}
        assert await oids_of(index, Word("broker", attribute="Name")) == set()
        named = And((Word("broker", attribute="server-type"), Word("physics")))
        assert await oids_of(index, named) == {"server"}
        either = Or((Word("broker", attribute="Server-Type"), Word("notes")))
        assert await oids_of(index, either) == {"server", "page"}
        excluded = And((Word("physics"), Not(Word("cache", attribute="Server-Type"))))
        assert await oids_of(index, excluded) == {"page"}


async def test_paging(index: TantivyIndex) -> None:
    query = Word("season")
    full = await index.search(query, limit=100)
    assert full.total == 6
    order = [hit.oid for hit in full.hits]
    pages = [await index.search(query, limit=4, offset=offset) for offset in (0, 4, 8)]
    assert [p.total for p in pages] == [6, 6, 6]
    assert [hit.oid for p in pages for hit in p.hits] == order
    assert [len(p.hits) for p in pages] == [4, 2, 0]
    counted = await index.search(query, limit=0)
    assert (counted.total, counted.hits) == (6, ())


async def test_writes_are_visible_after_commit(index: TantivyIndex) -> None:
    await index.add([obj("late", ("Title", "Quokka"))])
    assert await oids_of(index, Word("quokka")) == set()
    await index.commit()
    assert await oids_of(index, Word("quokka")) == {"late"}
    await index.remove(["late", "no-such-oid"])
    assert await oids_of(index, Word("quokka")) == {"late"}
    await index.commit()
    assert await oids_of(index, Word("quokka")) == set()
    assert await index.count() == len(OBJECTS)


async def test_adding_an_oid_again_replaces_the_object(index: TantivyIndex) -> None:
    await index.add([obj("email", ("Title", "Postal Service"))])
    await index.add(
        [obj("twice", ("Title", "first version")), obj("twice", ("Title", "second version"))]
    )
    await index.commit()
    assert await oids_of(index, Word("electronic")) == set()
    assert await oids_of(index, Word("postal")) == {"email"}
    assert await oids_of(index, Word("version")) == {"twice"}
    assert await oids_of(index, Word("first")) == set()
    assert await index.count() == len(OBJECTS) + 1


async def test_an_oid_added_again_before_a_commit_is_one_object(index: TantivyIndex) -> None:
    await index.add([obj("new", ("Title", "first draft"))])
    await index.add([obj("new", ("Title", "second draft"))])
    await index.commit()
    assert await oids_of(index, Word("draft")) == {"new"}
    assert await oids_of(index, Word("first")) == set()
    # And after a clear, an oid of the objects it removes is added once.
    await index.clear()
    await index.add([obj("email", ("Title", "kept draft"))])
    await index.add([obj("email", ("Title", "last draft"))])
    await index.commit()
    assert await index.count() == 1
    assert await oids_of(index, Word("draft")) == {"email"}
    assert await oids_of(index, Word("kept")) == set()


async def test_oids_count_clear(index: TantivyIndex) -> None:
    assert await index.oids() == ALL
    assert await index.count() == len(ALL)
    await index.add([obj("staged", ("Title", "added before the clear, never committed"))])
    await index.clear()
    # Until the commit, searches see the last commit's objects.
    assert await index.oids() == ALL
    assert await oids_of(index, Word("cache")) != set()
    await index.commit()
    assert await index.oids() == set()
    assert await index.count() == 0
    assert await oids_of(index, Word("cache")) == set()
    await index.refresh_vocabulary()
    assert await oids_of(index, Word("cach", prefix=True)) == set()


async def test_rollback_drops_what_the_last_commit_did_not_see(index: TantivyIndex) -> None:
    await index.add([obj("staged", ("Title", "cache"))])
    await index.remove(sorted(ALL)[:2])
    await index.rollback()
    await index.commit()
    assert await index.oids() == ALL
    await index.clear()
    await index.rollback()
    await index.add([obj("kept", ("Title", "kept"))])
    await index.commit()
    assert await index.oids() == ALL | {"kept"}
    await index.refresh_vocabulary()
    assert await oids_of(index, Word("kept", prefix=True)) == {"kept"}
    # A clear then a commit: the words of the objects that went are not nearest words. Had
    # the vocabulary kept them, these 51 one-edit words of "harvest" would rank before
    # "zharvest" (alphabetically) and leave it out of the nearest.
    letters = "abcdefghijklmnopqrstuvwxyz"
    gone = [f"harvest{c}" for c in letters] + [f"{c}harvest" for c in letters[:-1]]
    await index.add([obj(word, ("Title", word)) for word in gone])
    await index.commit()
    await index.refresh_vocabulary()
    assert len(await oids_of(index, Word("harvest", errors=1)) & set(gone)) <= NEAR_LIMIT
    await index.clear()
    await index.add([obj("after", ("Title", "zharvest"))])
    await index.commit()
    await index.refresh_vocabulary()
    assert await oids_of(index, Word("harvest", errors=1)) == {"after"}
    assert await oids_of(index, Word("kept", prefix=True)) == set()


async def test_reopening_keeps_what_was_committed(tmp_path: Path) -> None:
    async with await TantivyIndex.open(tmp_path) as index:
        await index.add(OBJECTS)
        await index.commit()
        await index.add([obj("uncommitted", ("Title", "Lost"))])
    async with await TantivyIndex.open(tmp_path) as index:
        assert await index.oids() == ALL
        expected = {"harvest-0", "harvest-1", "harvest-ins", "harvest-swap"}
        assert await oids_of(index, Word("harvest", errors=1)) == expected
        await index.refresh_vocabulary()
        assert await oids_of(index, Word("harvest", errors=1)) == expected


async def test_a_batch_with_an_object_that_cannot_be_indexed_is_not_written(
    index: TantivyIndex,
) -> None:
    bad = obj("bad", ("Title", "lone \ud800 surrogate"))
    with pytest.raises(EngineError):
        await index.add([obj("good", ("Title", "wombat")), bad, obj("email", ("Title", "x"))])
    await index.commit()
    assert await oids_of(index, Word("wombat")) == set()
    assert await oids_of(index, Word("electronic")) == {"email"}  # not replaced either


async def test_errors_are_engine_errors(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text("not an index")
    with pytest.raises(EngineError):
        await TantivyIndex.open(tmp_path)
    index = await TantivyIndex.open(tmp_path / "ok")
    with pytest.raises(EngineError):
        await TantivyIndex.open(tmp_path / "ok")  # one writer at a time
    with pytest.raises(EngineError):
        await index.search(Word("x"), limit=-1)
    with pytest.raises(EngineError):  # tantivy's automata go up to 2 errors, as ~1 and ~2
        await index.search(Word("harvest", errors=3), limit=1)
    await index.close()
    await index.close()
    with pytest.raises(EngineError):
        await index.search(Word("x"), limit=10)
    with pytest.raises(EngineError):
        await index.add([obj("a", ("Title", "a"))])


# -- concurrency and crashes -------------------------------------------------------------------


async def test_searches_during_writes_see_only_committed_objects(tmp_path: Path) -> None:
    # That they run off the loop is checked in every broker test (conftest.py).
    async with await TantivyIndex.open(tmp_path) as index:
        batches = [
            [obj(f"o{b}-{i}", ("Abstract", f"common words {FILLER} {b} {i}")) for i in range(200)]
            for b in range(10)
        ]
        committed = [0]
        totals: list[tuple[int, int]] = []

        async def write() -> None:
            for batch in batches:
                await index.add(batch)
                await index.commit()
                committed.append(committed[-1] + len(batch))

        async def search() -> None:
            while len(committed) <= len(batches):
                before = committed[-1]
                results = await index.search(Word("common"), limit=5)
                totals.append((before, results.total))
                # The commit may have swapped the searcher before write() saw it return.
                assert results.total % 200 == 0
                assert before <= results.total <= committed[-1] + 200

        await asyncio.gather(write(), search(), search())
        assert len(totals) > 10
        assert await index.count() == 2000


CRASH_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from broker.index import IndexedObject, TantivyIndex

    async def main() -> None:
        index = await TantivyIndex.open(Path(sys.argv[1]))
        for batch in range(10_000):
            objects = [
                IndexedObject(f"o{batch}-{i}", "http://x/",
                              (("Abstract", f"crash test words {batch} {i} " * 20),))
                for i in range(100)
            ]
            await index.add(objects)
            await index.commit()
            print(100 * (batch + 1), flush=True)

    asyncio.run(main())
    """
)


async def test_an_index_killed_while_writing_opens_with_its_last_commit(tmp_path: Path) -> None:
    directory = tmp_path / "index"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CRASH_SCRIPT, str(directory), stdout=subprocess.PIPE, cwd=REPO
    )
    assert child.stdout is not None
    reported = [int(await child.stdout.readline()) for _ in range(5)]
    os.kill(child.pid, signal.SIGKILL)  # somewhere in the next add or commit
    assert await child.wait() == -signal.SIGKILL
    async with await TantivyIndex.open(directory) as index:
        count = await index.count()
        assert count % 100 == 0
        assert count >= reported[-1]
        results = await index.search(Word("crash"), limit=1)
        assert results.total == count
        await index.add([obj("after", ("Title", "survivor"))])
        await index.commit()
        assert await index.count() == count + 1


async def test_an_index_of_another_layout_is_replaced_by_an_empty_one(tmp_path: Path) -> None:
    directory = tmp_path / "index"
    async with await TantivyIndex.open(directory) as index:
        assert index.unfilled
        await index.add(OBJECTS[:2])
        await index.commit()
    # Unfilled until its filler says otherwise (filling may be cut short, as by a crash).
    async with await TantivyIndex.open(directory) as index:
        assert index.unfilled
        await index.filled()
        assert not index.unfilled
    async with await TantivyIndex.open(directory) as index:
        assert not index.unfilled
        assert await index.count() == 2
    shutil.rmtree(directory)
    directory.mkdir()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("title", stored=True)
    writer = tantivy.Index(builder.build(), path=str(directory)).writer(15_000_000, 1)
    writer.add_document(tantivy.Document(title="an object of another layout"))
    writer.commit()
    # While another writer (another broker) holds it, the index is left alone.
    with pytest.raises(EngineError, match="another process"):
        await TantivyIndex.open(directory)
    assert (directory / "meta.json").exists()
    writer.wait_merging_threads()  # ends the writer and its lock
    async with await TantivyIndex.open(directory) as index:
        assert index.unfilled
        assert await index.count() == 0
        await index.add(OBJECTS[:1])
        await index.commit()
        assert await oids_of(index, Word("cache", attribute="Title")) == {"cache-design"}


async def test_an_unreadable_index_is_an_engine_error_not_replaced(tmp_path: Path) -> None:
    directory = tmp_path / "index"
    directory.mkdir()
    (directory / "meta.json").write_text("{not json")
    with pytest.raises(EngineError):
        await TantivyIndex.open(directory)
    assert (directory / "meta.json").read_text() == "{not json"

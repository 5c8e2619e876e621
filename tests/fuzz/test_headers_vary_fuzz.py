"""Fuzzing Headers, split_list and Vary: a Headers behaves like its list of fields under any
sequence of changes and lookups, and vary_key ignores what RFC 9111 4.1 lets it ignore."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_cache.http.headers import Headers, split_list
from harvest_cache.http.vary import vary_key, vary_names
from tests.fuzz.strategies import FUZZ, field_names, field_text, fields, latin1_text, soup

# -- split_list ----------------------------------------------------------------------------------

list_values = st.one_of(soup('"', "\\", ",", " ", "a", "b=c", max_size=12), st.text(max_size=20))


def unquoted_commas(member: str) -> bool:
    quoted = escaped = False
    for ch in member:
        if escaped:
            escaped = False
        elif ch == "\\" and quoted:
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            return True
    return False


@settings(FUZZ, max_examples=300)
@given(list_values)
def test_split_list_gives_trimmed_members_split_at_unquoted_commas(value: str) -> None:
    members = split_list(value)
    for m in members:
        assert m
        assert m == m.strip()
        assert not unquoted_commas(m), (value, members)
    if '"' not in value:
        assert members == [m.strip() for m in value.split(",") if m.strip()]
    # Joining the members again splits into the same members.
    assert split_list(", ".join(members)) == members


# -- Headers against a model: a plain list of fields ---------------------------------------------

_names = st.one_of(st.sampled_from(["A", "a", "B", "Vary", "vary", "VARY", "K\u212a"]), field_names)
# Operations: (kind, names, value); add and set take one name, lookup one, remove any.
_one = st.lists(_names, min_size=1, max_size=1)
_ops = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["add", "set"]), _one, field_text),
        st.tuples(st.just("remove"), st.lists(_names, max_size=3), st.just("")),
        st.tuples(st.just("lookup"), _one, st.just("")),
    ),
    max_size=12,
)


def _model_get_all(model: list[tuple[str, str]], name: str) -> list[str]:
    return [v for n, v in model if n.lower() == name.lower()]


@settings(FUZZ, max_examples=300)
@given(fields, _ops)
def test_headers_behave_like_their_list_of_fields(
    initial: list[tuple[str, str]], ops: list[tuple[str, list[str], str]]
) -> None:
    h = Headers(initial)
    model = list(initial)
    for kind, names, value in ops:
        if kind == "add":
            h.add(names[0], value)
            model.append((names[0], value))
        elif kind == "set":
            h.set(names[0], value)
            low = names[0].lower()
            model = [(n, v) for n, v in model if n.lower() != low] + [(names[0], value)]
        elif kind == "remove":
            h.remove(*names)
            drop = {n.lower() for n in names}
            model = [(n, v) for n, v in model if n.lower() not in drop]
        else:
            assert h.get_all(names[0]) == _model_get_all(model, names[0])
        # Every observation agrees with the model, whether the index was built or not.
        assert h.items() == model
        assert len(h) == len(model)
        assert set(h.names()) == {n.lower() for n, _ in model}
        for name, _ in model[:3]:
            values = _model_get_all(model, name)
            assert name in h
            assert h.get(name) == ", ".join(values)
            assert h.get_all(name) == values
            assert h.get_list(name) == [m for v in values for m in split_list(v)]
    copy = h.copy()
    assert copy == h
    wire = "".join(f"{n}: {v}\r\n" for n, v in model)
    if all(ord(c) < 256 for c in wire):  # (names off the wire are Latin-1; K\u212a is not)
        assert copy.encode() == wire.encode("latin-1")
    if model:
        copy.add("X-More", "1")
        assert copy != h  # the copy is independent
        assert h.items() == model


@FUZZ
@given(st.lists(st.tuples(latin1_text, latin1_text), max_size=5))
def test_from_raw_decodes_latin1(items: list[tuple[str, str]]) -> None:
    raw = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in items]
    assert Headers.from_raw(raw).items() == items


# -- Vary ----------------------------------------------------------------------------------------

_vary_fields = ["accept", "accept-encoding", "accept-language", "accept-charset", "cookie", "x-v"]
_vary_values = st.one_of(
    soup("gzip", "br", "en-US", "EN", "q=0.5", ";", " ; ", ",", "text/HTML", "*", max_size=8),
    field_text,
)


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(["*", "Accept", "ACCEPT-encoding", ""]), field_text)))
def test_vary_names_are_lowercased_sorted_and_unique_or_none(lines: list[str]) -> None:
    names = vary_names(Headers([("Vary", line) for line in lines]))
    members = [m for line in lines for m in split_list(line)]
    if "*" in members:
        assert names is None
    else:
        assert names is not None
        assert list(names) == sorted({m.lower() for m in members})


@settings(FUZZ, max_examples=300)
@given(
    st.lists(st.sampled_from(_vary_fields), unique=True, max_size=4).map(
        lambda n: tuple(sorted(n))
    ),
    st.lists(st.tuples(st.sampled_from(_vary_fields), _vary_values), max_size=6),
    st.data(),
)
def test_vary_key_ignores_whitespace_empty_members_and_line_splits(
    names: tuple[str, ...], sent: list[tuple[str, str]], data: st.DataObject
) -> None:
    key = vary_key(names, Headers(sent))
    assert isinstance(key, str)
    assert len(key.split("\n")) == max(1, len(names)) or not names
    # Re-spell the request the ways the module says do not matter: each line's members
    # re-joined with other whitespace and empty members, split over several lines, or all
    # lines of one name combined; field names in any case.
    respelled: list[tuple[str, str]] = []
    for name, value in sent:
        members = split_list(value)
        spelled = data.draw(st.sampled_from([name, name.upper(), name.title()]))
        if '"' in value:
            # A quoted string may run to the end of the line: whatever is added would be in it.
            respelled.append((spelled, value))
            continue
        if not members:
            respelled.append((spelled, data.draw(st.sampled_from(["", " ", ",", " , ,"]))))
            continue
        sep = data.draw(st.sampled_from([",", ", ", " ,\t", ",,", " , , "]))
        if data.draw(st.booleans()):
            respelled.extend((spelled, f" {m} ") for m in members)
        else:
            respelled.append(
                (spelled, sep.join(members) + data.draw(st.sampled_from(["", ",", " "])))
            )
    assert vary_key(names, Headers(respelled)) == key


@FUZZ
@given(
    st.sampled_from(["accept", "accept-encoding", "accept-language", "accept-charset"]),
    st.lists(
        st.tuples(
            st.sampled_from(["gzip", "en-US", "utf-8", "text/html"]),
            st.sampled_from(["q=1", "q=0.5", "level=1"]),
        ),
        min_size=1,
        max_size=3,
    ),
    st.sampled_from([";", " ;", "; ", " \t;\t "]),
)
def test_vary_key_drops_whitespace_around_parameters(
    name: str, members: list[tuple[str, str]], semicolon: str
) -> None:
    tight = ", ".join(f"{v};{p}" for v, p in members)
    loose = ", ".join(f"{v}{semicolon}{p}" for v, p in members)
    assert vary_key((name,), Headers([(name, loose)])) == vary_key(
        (name,), Headers([(name, tight)])
    )


@FUZZ
@given(
    st.sampled_from(["accept-encoding", "accept-language", "accept-charset"]),
    _vary_values.filter(str.isascii),  # (str.upper and str.lower are not inverses beyond ASCII)
)
def test_vary_key_ignores_case_where_values_are_case_insensitive(name: str, value: str) -> None:
    assert vary_key((name,), Headers([(name, value.upper())])) == vary_key(
        (name,), Headers([(name, value.lower())])
    )


@FUZZ
@given(st.sampled_from(_vary_fields))
def test_an_absent_field_never_matches_an_empty_one(name: str) -> None:
    assert vary_key((name,), Headers()) != vary_key((name,), Headers([(name, "")]))

"""The memo of request heads: bounded in entries and in head size."""

from __future__ import annotations

from harvest_cache.server.head_memo import MAX_HEAD, HeadMemo, ParsedHead


def parsed(n: int) -> ParsedHead:
    return (b"GET", b"http://h/%d" % n, "1.1", True, ((b"Host", b"h"),))


def head(n: int) -> bytes:
    return b"GET http://h/%d HTTP/1.1\r\nHost: h\r\n\r\n" % n


def test_a_head_is_found_by_its_exact_bytes() -> None:
    memo = HeadMemo()
    memo.add(head(1), parsed(1))
    assert memo.get(head(1)) == parsed(1)
    assert memo.get(head(1).lower()) is None
    assert memo.get(head(1) + b"\r\n") is None
    assert memo.get(head(2)) is None


def test_heads_over_the_size_bound_are_neither_kept_nor_looked_up() -> None:
    memo = HeadMemo()
    fits = head(1)[:-2] + b"X: " + b"p" * (MAX_HEAD - len(head(1)) - 5) + b"\r\n\r\n"
    over = fits[:-4] + b"p\r\n\r\n"
    assert (len(fits), len(over)) == (MAX_HEAD, MAX_HEAD + 1)
    memo.add(fits, parsed(1))
    memo.add(over, parsed(2))
    assert len(memo) == 1
    assert memo.get(fits) == parsed(1)
    assert memo.get(over) is None


def test_all_heads_are_forgotten_at_the_entry_bound() -> None:
    memo = HeadMemo()
    for n in range(4096):
        memo.add(head(n), parsed(n))
    assert len(memo) == 4096
    assert memo.get(head(0)) == parsed(0)
    memo.add(head(4096), parsed(4096))
    assert len(memo) == 1
    assert memo.get(head(0)) is None
    assert memo.get(head(4095)) is None
    assert memo.get(head(4096)) == parsed(4096)

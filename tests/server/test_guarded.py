"""The fast paths' guard: a step that fails abandons its fetch (one request lost, never a
client left waiting), whatever arguments the step takes, and passes them on unchanged."""

from __future__ import annotations

import logging

import pytest

from harvest_cache.server.guard import guarded


class Fetch:
    """A step-bearing fetch that records its calls and whether it was abandoned."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.calls: list[tuple[object, ...]] = []
        self.abandoned = 0

    @property
    def key(self) -> str:
        return "http://origin.test/k"

    def abandon(self) -> None:
        self.abandoned += 1

    def _step(self, *args: object) -> None:
        self.calls.append(args)
        if self.fail:
            raise RuntimeError("a bug")

    @guarded
    def bare(self) -> None:
        self._step()

    @guarded
    def one(self, chunk: bytes) -> None:
        self._step(chunk)

    @guarded
    def two(self, date: str, reason: str) -> None:
        self._step(date, reason)

    @guarded
    def defaulted(self, head: str, body: bytes = b"") -> None:
        self._step(head, body)

    @guarded
    def keyword(self, head: str, *, length: int) -> None:
        self._step(head, length)


def run_every_step(fetch: Fetch) -> None:
    fetch.bare()
    fetch.one(b"chunk")
    fetch.two("Tue, 01 Dec 2026 10:00:00 GMT", "Not Modified")
    fetch.defaulted("h")
    fetch.defaulted("h", b"body")
    fetch.keyword("h", length=3)


EXPECTED_CALLS = [
    (),
    (b"chunk",),
    ("Tue, 01 Dec 2026 10:00:00 GMT", "Not Modified"),
    ("h", b""),
    ("h", b"body"),
    ("h", 3),
]


def test_steps_of_every_shape_get_their_arguments_unchanged() -> None:
    fetch = Fetch(fail=False)
    run_every_step(fetch)
    assert fetch.calls == EXPECTED_CALLS
    assert fetch.abandoned == 0


def test_a_failing_step_of_any_shape_abandons_its_fetch_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fetch = Fetch(fail=True)
    with caplog.at_level(logging.ERROR, "harvest_cache"):
        run_every_step(fetch)  # (nothing escapes to the parser or the loop)
    assert fetch.calls == EXPECTED_CALLS
    assert fetch.abandoned == len(EXPECTED_CALLS)
    failures = [r for r in caplog.records if "failed for http://origin.test/k" in r.getMessage()]
    assert len(failures) == len(EXPECTED_CALLS)
    assert all(r.exc_info is not None for r in failures)


def test_a_wrong_call_is_still_a_type_error_at_the_call() -> None:
    """The plain wrappers take exactly the step's arguments, as the step itself would."""
    fetch = Fetch(fail=False)
    with pytest.raises(TypeError):
        fetch.one()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        fetch.bare(b"extra")  # type: ignore[call-arg]

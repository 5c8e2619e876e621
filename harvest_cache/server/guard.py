"""The guard of callback-driven steps: a bug in one must cost one request (its connections
closed), never leave a client waiting for ever."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar, cast

log = logging.getLogger("harvest_cache")
P = ParamSpec("P")


class Step(Protocol):
    """A fetch, as its guard sees it."""

    @property
    def key(self) -> str: ...

    def abandon(self) -> None: ...


S = TypeVar("S", bound=Step)


def guarded(step: Callable[Concatenate[S, P], None]) -> Callable[Concatenate[S, P], None]:
    """Run a step called from a parser or the loop; a bug in it must cost one request (its
    connections closed), never leave a client waiting for ever."""

    # Steps of no argument or one (most, and those run on every request) get a wrapper that
    # passes it as it is: packing arguments costs more than the guard itself.
    arity = _plain_arity(step)
    plain: Callable[..., None] = step
    if arity == 0:

        def run_bare(fetch: S) -> None:
            try:
                plain(fetch)
            except Exception:
                _failed(fetch)

        return cast(Callable[Concatenate[S, P], None], run_bare)
    if arity == 1:

        def run_one(fetch: S, arg: object) -> None:
            try:
                plain(fetch, arg)
            except Exception:
                _failed(fetch)

        return cast(Callable[Concatenate[S, P], None], run_one)

    def run(fetch: S, /, *args: P.args, **kwargs: P.kwargs) -> None:
        try:
            step(fetch, *args, **kwargs)
        except Exception:
            _failed(fetch)

    return run


def _plain_arity(step: Callable[..., None]) -> int | None:
    """How many arguments ``step`` takes after the fetch, if it takes only plain positional
    ones (no defaults, no keywords, no packing); else None."""
    code = getattr(step, "__code__", None)
    if code is None or getattr(step, "__defaults__", None) or code.co_kwonlyargcount:
        return None
    if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return None
    return int(code.co_argcount) - 1


def _failed(fetch: Step) -> None:
    log.exception("fast fetch failed for %s", fetch.key)
    fetch.abandon()

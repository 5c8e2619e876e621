"""The JSON API's request parameters and error bodies: a bad parameter is a 400 whose body
is ``{"error": reason}``."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from aiohttp import web

_INTEGER = re.compile(r"[0-9]{1,9}")


class BadRequest(web.HTTPBadRequest):
    """A 400 with a JSON body ``{"error": reason}``."""

    def __init__(self, reason: str, **extra: Any) -> None:
        super().__init__(
            text=json.dumps({"error": reason, **extra}), content_type="application/json"
        )


def json_error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


def integer(params: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    text = params.get(name)
    if text is None:
        return default
    if not _INTEGER.fullmatch(text) or not lo <= int(text) <= hi:
        raise BadRequest(f"{name} must be a whole number from {lo} to {hi}, got {text[:40]!r}")
    return int(text)


def flag(params: Mapping[str, str], name: str) -> bool:
    text = params.get(name, "0")
    if text not in ("0", "1"):
        raise BadRequest(f"{name} must be 0 or 1, got {text[:40]!r}")
    return text == "1"

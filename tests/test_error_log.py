"""The error log on stderr: text lines, or one JSON object per line."""

from __future__ import annotations

import json
import logging
import sys

from harvest_cache.cli import JsonLines


def record(message: str, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            info = sys.exc_info()
    return logging.LogRecord("harvest_cache", logging.WARNING, __file__, 1, message, (), info)


def test_json_lines_carry_time_level_logger_and_message() -> None:
    line = JsonLines().format(record('peer p1 is down: "refused"'))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "warning"
    assert entry["logger"] == "harvest_cache"
    assert entry["message"] == 'peer p1 is down: "refused"'
    assert entry["time"].endswith("Z")
    assert "exception" not in entry


def test_an_exception_stays_inside_its_line() -> None:
    line = JsonLines().format(record("failed", exc=True))
    assert "\n" not in line
    entry = json.loads(line)
    assert "ValueError: boom" in entry["exception"]

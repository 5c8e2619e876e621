"""Loads the hand-written records of Manual-Directory into the database's manual table.

Re-summarizing never touches these records; the export merges them over the generated ones.
Each run makes the table match the directory: new and edited templates are stored, templates
removed from the directory are dropped.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from gatherer.config import GathererConfig
from gatherer.database import GathererDatabase
from gatherer.errors import ConfigError
from gatherer.essence.manual import ManualRecord, parse_templates
from harvest_common.soif import Record


def read_templates(directory: Path) -> list[ManualRecord]:
    """Every template in ``directory``'s regular files (not hidden ones), in name order."""
    records: list[ManualRecord] = []
    problems: list[str] = []
    try:
        files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    except OSError as error:
        raise ConfigError(
            [f"{directory}: cannot read Manual-Directory: {error.strerror}"]
        ) from None
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
            records.extend(parse_templates(text, str(path)))
        except OSError as error:
            problems.append(f"{path}: cannot read: {error.strerror}")
        except ConfigError as error:
            problems.extend(error.problems)
    if problems:
        raise ConfigError(problems)
    return records


async def sync_manual(config: GathererConfig, db: GathererDatabase) -> int:
    """Make the manual table match Manual-Directory; returns how many records it holds."""
    directory = config.manual_directory
    manual = await asyncio.to_thread(read_templates, directory) if directory is not None else []
    wanted = {record.url: record for record in manual}
    for url in await db.manual_urls() - wanted.keys():
        await db.delete_manual(url)
    for record in wanted.values():
        await db.put_manual(record.url, Record(record.template, record.url, record.attributes))
    return len(wanted)

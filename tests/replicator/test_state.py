"""The member's saved cursors: round trips, a missing file, corrupt files refused, concurrent
saves leaving one valid file and no temporary files, and write failures reported."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from harvest_common.errors import ReplicatorError
from replicator.errors import StateError
from replicator.state import FILE, State


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != FILE)


async def test_a_missing_file_is_an_empty_state(tmp_path: Path) -> None:
    state = await State.load(tmp_path / "never-created")
    assert state.cursors == {}
    assert state.path == tmp_path / "never-created" / FILE
    assert not state.path.parent.exists()  # loading writes nothing


async def test_save_then_load_round_trips(tmp_path: Path) -> None:
    directory = tmp_path / "var" / "replicator"  # created by the first save
    state = await State.load(directory)
    state.group("hsr")["m2"] = 17
    state.group("hsr")["m3"] = 0
    state.group("docs")["m2"] = 2**40
    assert state.group("hsr") is state.group("hsr")
    await state.save()
    again = await State.load(directory)
    assert again.cursors == {"hsr": {"m2": 17, "m3": 0}, "docs": {"m2": 2**40}}
    assert json.loads(state.path.read_text()) == {"cursors": again.cursors}
    assert _leftovers(directory) == []


async def test_a_later_save_replaces_the_file(tmp_path: Path) -> None:
    state = State(tmp_path, {})
    state.group("hsr")["m2"] = 1
    await state.save()
    state.group("hsr")["m2"] = 2
    del state.cursors["hsr"]
    state.group("other")["m9"] = 3
    await state.save()
    assert (await State.load(tmp_path)).cursors == {"other": {"m9": 3}}


async def test_an_empty_group_is_kept(tmp_path: Path) -> None:
    state = State(tmp_path, {})
    state.group("hsr")
    await state.save()
    assert (await State.load(tmp_path)).cursors == {"hsr": {}}


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{not json",
        b'{"cursors": {"hsr": {"m2": 1}}',  # truncated
        b"\xff\xfe\x00garbage",  # not UTF-8
        b"[]",
        b"null",
        b"{}",
        b'{"cursors": []}',
        b'{"cursors": null}',
        b'{"cursors": {"hsr": [1, 2]}}',
        b'{"cursors": {"hsr": {"m2": -1}}}',
        b'{"cursors": {"hsr": {"m2": 1.5}}}',
        b'{"cursors": {"hsr": {"m2": "1"}}}',
        b'{"cursors": {"hsr": {"m2": true}}}',
        b'{"cursors": {"hsr": {"m2": null}}}',
    ],
)
async def test_a_corrupt_file_is_refused(tmp_path: Path, content: bytes) -> None:
    (tmp_path / FILE).write_bytes(content)
    with pytest.raises(StateError) as raised:
        await State.load(tmp_path)
    assert isinstance(raised.value, ReplicatorError)
    assert str(tmp_path / FILE) in str(raised.value)


async def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / FILE).mkdir()  # a directory where the file should be
    with pytest.raises(StateError, match="cannot read"):
        await State.load(tmp_path)


async def test_concurrent_saves_leave_one_valid_file(tmp_path: Path) -> None:
    state = State(tmp_path, {"hsr": {"m2": 0}})
    for i in range(5):
        state.group(f"g{i}")["m1"] = i
    await asyncio.gather(*(state.save() for _ in range(12)))
    assert (await State.load(tmp_path)).cursors == state.cursors
    assert _leftovers(tmp_path) == []


async def test_the_last_save_wins(tmp_path: Path) -> None:
    state = State(tmp_path, {})
    saves = []
    for i in range(8):
        state.group("hsr")["m2"] = i
        saves.append(asyncio.create_task(state.save()))
        await asyncio.sleep(0)  # the save takes its snapshot of the cursors now
    await asyncio.gather(*saves)
    assert (await State.load(tmp_path)).cursors == {"hsr": {"m2": 7}}
    assert _leftovers(tmp_path) == []


async def test_a_failed_write_is_a_state_error_and_leaves_no_temporary_file(
    tmp_path: Path,
) -> None:
    state = State(tmp_path, {"hsr": {"m2": 1}})
    (tmp_path / FILE).mkdir()  # the final rename cannot replace a directory
    with pytest.raises(StateError, match="cannot write"):
        await state.save()
    assert _leftovers(tmp_path) == []


async def test_a_directory_that_cannot_be_made_is_a_state_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    state = State(blocker / "sub", {})
    with pytest.raises(StateError):
        await state.save()
    assert blocker.read_text() == "not a directory"


async def test_a_save_after_a_failure_still_works(tmp_path: Path) -> None:
    state = State(tmp_path, {"hsr": {"m2": 1}})
    (tmp_path / FILE).mkdir()
    with pytest.raises(StateError):
        await state.save()
    (tmp_path / FILE).rmdir()
    await state.save()  # the lock was released
    assert (await State.load(tmp_path)).cursors == {"hsr": {"m2": 1}}


def test_repr_names_the_file(tmp_path: Path) -> None:
    assert repr(State(tmp_path, {})) == f"State({str(tmp_path / FILE)!r})"

"""replicator.cli: ``harvest-replicator`` — the configuration reference against the docs,
``check-config`` on good, bad and missing files, and ``serve`` as a real process next to a real
broker: its listening line, ``status`` against it, a clean stop on SIGTERM that saves the state,
and ``status`` against a port nothing listens on."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from replicator.cli import main
from replicator.config import MIN_SECRET
from tests.support import REPO, free_port, run_module

TOKEN = "broker-admin-token"
SECRET = "the-group-secret-of-the-cli-tests"
STARTUP = 30.0  # seconds a server may take to say where it listens
STOP = 20.0  # seconds a server may take to stop after SIGTERM
RUN = 30.0  # seconds a one-shot command may take


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def replicator_toml(
    data: Path, broker: str = "http://127.0.0.1:8501", member: str = "m1", hsr: str = ""
) -> str:
    registry = (
        f'[hsr]\nurl = "{hsr}"\ndescription = "mirrors of hsr and cs-papers"\n' if hsr else ""
    )
    return f"""{registry}[replicator]
id = "{member}"
listen = "127.0.0.1:0"
secret = "{SECRET}"
broker = "{broker}"
broker_token = "{TOKEN}"
data_dir = "{data}"


[[groups]]
collection = "hsr"

[[groups]]
collection = "cs-papers"
seeds = ["127.0.0.1:{free_port()}"]
"""


# config-reference -------------------------------------------------------------------------


def test_the_configuration_reference_is_in_sync_with_the_docs(
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    assert main(["config-reference"]) == 0
    out, err = capsysbinary.readouterr()
    assert err == b""
    documented = (REPO / "docs" / "replicator-configuration.md").read_bytes()
    assert out == documented, (
        "docs/replicator-configuration.md is stale: "
        "run `harvest-replicator config-reference > docs/replicator-configuration.md`"
    )


# check-config -----------------------------------------------------------------------------


def test_check_config_accepts_a_good_file_naming_the_member_and_groups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path / "replicator.toml", replicator_toml(tmp_path / "data"))
    assert main(["check-config", str(config)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out == f"{config}: member m1, groups: hsr, cs-papers\n"
    assert not (tmp_path / "data").exists()  # checking creates nothing


def test_check_config_lists_every_problem_by_key_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(
        tmp_path / "bad.toml",
        """[replicator]
colour = "red"
broker_token = "t"
routes = { m2 = "nowhere" }

[timing]
probe_interval = -1

[[groups]]
collection = "hsr"
seeds = "127.0.0.1:8502"

[[groups]]
seeds = []
""",
    )
    assert main(["check-config", str(config)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    problems = err.strip().splitlines()
    assert all(p.startswith(f"harvest-replicator: {config}: ") for p in problems), err
    expected = [
        "replicator.colour",  # unknown key
        "replicator.secret: required",  # missing secret
        "replicator.routes",  # bad route
        "timing.probe_interval",
        "groups[0].seeds",
        "groups[1].collection: required",
    ]
    for key in expected:
        assert any(key in p for p in problems), f"{key} not reported in {err}"
    assert len(problems) == len(expected), err


@pytest.mark.parametrize(
    ("replicator", "key", "reason"),
    [
        ('secret = "short"', "replicator.secret", f"at least {MIN_SECRET} characters"),
        (f'secret = "{SECRET}"\nroutes = ["m2"]', "replicator.routes", "table"),
        (
            f'secret = "{SECRET}"\nroutes = {{ m2 = "127.0.0.1:99999" }}',
            "replicator.routes",
            "HOST:PORT",
        ),
        (f'secret = "{SECRET}"\nroutes = {{ "no spaces" = "127.0.0.1:1" }}', "routes", "letters"),
        (f'secret = "{SECRET}"\nroutes = {{ "" = "127.0.0.1:1" }}', "routes", "member id"),
        ("", "replicator.secret", "required"),
    ],
    ids=["short-secret", "routes-not-a-table", "route-port", "route-id", "route-empty", "secret"],
)
def test_check_config_reports_one_problem_with_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], replicator: str, key: str, reason: str
) -> None:
    config = write(
        tmp_path / "bad.toml",
        f'[replicator]\nbroker_token = "t"\n{replicator}\n[[groups]]\ncollection = "hsr"\n',
    )
    assert main(["check-config", str(config)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    problems = err.strip().splitlines()
    assert len(problems) == 1, err
    assert key in problems[0]
    assert reason in problems[0]


def test_check_config_and_serve_of_a_missing_file_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.toml"
    for command in ("check-config", "serve"):
        assert main([command, str(missing)]) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert str(missing) in err


def test_serve_refuses_a_bad_configuration_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path / "bad.toml", '[replicator]\nsecret = "short"\n')
    assert main(["serve", str(config)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "replicator.secret" in err
    assert "replicator.broker_token: required" in err


def test_a_bad_command_line_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["reticulate"])
    assert exited.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


# serve and status, as processes -----------------------------------------------------------


async def cli(*args: str, within: float = RUN) -> tuple[int, str, str]:
    """Run ``harvest-replicator ARGS`` as a process; its exit status, stdout and stderr."""
    return await run_module("replicator", *args, within=within)


@asynccontextmanager
async def serving(
    module: str, config: Path, log: Path
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """``python -m MODULE serve CONFIG`` as a process, and the URL its first line says it
    listens on; killed at the end if still running."""
    with log.open("wb") as errors:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            module,
            "serve",
            str(config),
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
        )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), STARTUP)).decode()
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+)/$", line.strip())
        if not found:
            problem = await asyncio.to_thread(log.read_text)
            raise AssertionError(f"{module}: no address in {line!r}; log: {problem}")
        yield process, found.group(1)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def registration(hsr: str) -> dict[str, Any]:
    """The replicator named m1 in the HSR at ``hsr``, once it has registered (bounded)."""
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            async with session.get(f"{hsr}/api/hsr") as response:
                servers = (await response.json())["servers"]
            found = [s for s in servers if s["name"] == "m1"]
            if found:
                return dict(found[0])
            await asyncio.sleep(0.05)
    raise AssertionError("the replicator did not register at the HSR")


async def test_serve_answers_status_and_stops_on_sigterm_saving_its_state(
    tmp_path: Path,
) -> None:
    broker_config = write(
        tmp_path / "broker.toml",
        f"""[broker]
listen = "127.0.0.1:0"
data_dir = "{tmp_path / "broker"}"
admin_token = "{TOKEN}"
member = "m1"
""",
    )
    data = tmp_path / "replicator"
    async with serving("broker", broker_config, tmp_path / "broker.log") as (broker, broker_url):
        # The broker is also the HSR the member registers at.
        config = write(
            tmp_path / "replicator.toml", replicator_toml(data, broker_url, hsr=broker_url)
        )
        log = tmp_path / "replicator.log"
        async with serving("replicator", config, log) as (process, url):
            status, out, err = await cli("status", "--url", url)
            assert status == 0, err
            answer = json.loads(out)
            assert answer["member"] == "m1"
            assert answer["address"] == url.removeprefix("http://")
            groups = {group["collection"]: group for group in answer["groups"]}
            assert set(groups) == {"hsr", "cs-papers"}
            assert "m1" in [member["id"] for member in groups["hsr"]["members"]]

            registered = await registration(broker_url)
            assert registered["type"] == "replicator"
            assert registered["url"] == f"{url}/"

            # A URL that answers, but not as a replicator: exit 1, the status on stderr.
            status, out, err = await cli("status", "--url", f"{broker_url}/nothing")
            assert status == 1
            assert out == ""
            assert "answered 404" in err

            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), STOP) == 0
        broker.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(broker.wait(), STOP) == 0
    state = json.loads((data / "state.json").read_text())
    assert set(state["cursors"]) == {"hsr", "cs-papers"}
    assert "stopping" in log.read_text()


async def test_status_of_a_member_that_is_not_there_exits_1() -> None:
    status, out, err = await cli("status", "--url", f"http://127.0.0.1:{free_port()}")
    assert status == 1
    assert out == ""
    assert err.startswith("harvest-replicator: http://127.0.0.1:")
    assert "ClientConnectorError" in err

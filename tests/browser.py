"""Headless Chromium for the browser tests, driven over the DevTools protocol (aiohttp's
websocket client), started one way for every test that uses it.

Left alone, Chromium talks to outside hosts (network time, component updates, safe browsing,
variations), and through a proxy it makes the proxy resolve and fetch them. ``FLAGS`` (and one
switch ``command`` adds, as it names a path) turn all of that off and make Chromium's own
resolver answer only for loopback; with a proxy, ``<-loopback>`` sends loopback URLs through
it too (Chromium bypasses proxies for them by default). Chromium comes from Debian's
``chromium`` package (scripts/test.sh installs it): without it the tests fail saying so, they
do not skip.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

STEP = 15.0  # seconds any one browser step may take
START_SECONDS = 30.0

# The keys tests press: (code, Windows virtual key code, text typed).
KEYS = {"Tab": ("Tab", 9, ""), "Enter": ("Enter", 13, "\r"), "/": ("Slash", 191, "/")}

# Every browser test runs Chromium with these (besides its profile, port and proxy).
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-domain-reliability",
    "--no-pings",
    "--disable-quic",
    # Not covered by the switches above (seen with Chromium 156 through a proxy): the network
    # time service and the optimization guide's hints.
    "--disable-features=NetworkTimeServiceQuerying,OptimizationHints",
)


def command(profile: Path, proxy: str | None = None) -> list[str]:
    """The command line of a browser test's Chromium: FLAGS, a DevTools port of its choosing,
    the profile directory and, with ``proxy`` (``HOST:PORT``), every URL through that proxy."""
    path = shutil.which("chromium")
    if path is None:
        pytest.fail(
            "chromium is not on PATH: the browser tests need Debian's chromium package"
            " (scripts/test.sh installs it: apt-get install chromium)",
            pytrace=False,
        )
    argv = [
        path,
        *FLAGS,
        # The on-device model manifest is asked of the component updater at start (seen with
        # Chromium 156, whatever --disable-component-update says) unless a local one is
        # named: an empty directory, so that no model is looked for anywhere.
        f"--optimization-guide-manifest-override={profile / 'no-models'}",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
    ]
    if proxy is not None:
        argv += [f"--proxy-server=http://{proxy}", "--proxy-bypass-list=<-loopback>"]
    return [*argv, "about:blank"]


@contextmanager
def chromium(
    scratch: Path, proxy: str | None = None, trusted: tuple[Path, ...] = ()
) -> Iterator[int]:
    """A headless Chromium with its profile and log under ``scratch``, trusting the CA
    certificates (PEM files) ``trusted`` besides the system's; yields its DevTools port.
    Ended (its whole process group) at the end."""
    home = scratch / "home"
    nss = home / ".pki" / "nssdb"  # (where Chromium on Linux reads the user's CAs)
    nss.mkdir(parents=True)
    if trusted:
        _certutil("-N", "-d", f"sql:{nss}", "--empty-password")
        for n, pem in enumerate(trusted):
            _certutil("-A", "-d", f"sql:{nss}", "-t", "C,,", "-n", f"test CA {n}", "-i", str(pem))
    profile = scratch / "profile"
    (profile / "no-models").mkdir(parents=True)
    # Its singleton socket goes in TMPDIR: a directory of its own, removed at the end, with a
    # path short enough for a socket's name (pytest's are too long).
    with (
        tempfile.TemporaryDirectory(prefix="harvest-chromium-") as tmp,
        (scratch / "chromium.log").open("wb") as log,
    ):
        process = subprocess.Popen(
            command(profile, proxy),
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, "TMPDIR": tmp, "HOME": str(home)},
            start_new_session=True,  # its helpers (zygote, renderers) share its process group
        )
        try:
            yield _devtools_port(process, profile / "DevToolsActivePort")
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # the group of the process we started
                process.wait(10)


def _certutil(*args: str) -> None:
    """NSS's certutil (Debian's libnss3-tools; scripts/test.sh installs it)."""
    path = shutil.which("certutil")
    if path is None:
        pytest.fail(
            "certutil is not on PATH: the browser's CA tests need Debian's libnss3-tools"
            " (scripts/test.sh installs it)",
            pytrace=False,
        )
    subprocess.run([path, *args], check=True, capture_output=True, timeout=30)


def _devtools_port(process: subprocess.Popen[bytes], active: Path) -> int:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"chromium exited with {process.returncode}", pytrace=False)
        lines = active.read_text().splitlines() if active.exists() else []
        if lines and lines[0].isdigit():
            return int(lines[0])
        time.sleep(0.1)
    pytest.fail(f"chromium wrote no DevToolsActivePort within {START_SECONDS:g} s", pytrace=False)


class DevToolsError(Exception):
    """The browser answered a DevTools command with an error."""


class Tab:
    """One browser tab, driven over its DevTools websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self._ids)
        await self._ws.send_json({"id": number, "method": method, "params": params})
        async with asyncio.timeout(STEP):
            while True:  # events arrive in between: skip them
                message = await self._ws.receive_json()
                if message.get("id") == number:
                    if "error" in message:
                        raise DevToolsError(message["error"])
                    result: dict[str, Any] = message["result"]
                    return result

    async def evaluate(self, expression: str) -> Any:
        answer = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in answer, answer["exceptionDetails"]
        return answer["result"].get("value")

    async def wait_until(self, expression: str) -> None:
        """Poll ``expression`` in the page until it is true. A page navigating away while
        it is asked (a submitted form) answers with an error: not true yet."""
        for _ in range(int(STEP / 0.05)):
            try:
                if await self.evaluate(f"!!({expression})"):
                    return
            except DevToolsError as error:
                if "navigated" not in str(error):
                    raise
            await asyncio.sleep(0.05)
        raise AssertionError(f"not true within {STEP} s: {expression}")

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.loaded(f"location.href === {json.dumps(url)}")

    async def loaded(self, condition: str) -> None:
        await self.wait_until(f"({condition}) && document.readyState === 'complete'")

    async def fill(self, selector: str, value: str) -> None:
        await self.evaluate(
            f"document.querySelector({json.dumps(selector)}).value = {json.dumps(value)}"
        )

    async def press(self, key: str, *, shift: bool = False) -> None:
        """Press and release ``key`` (one of KEYS) as the keyboard does: the page sees the
        key events, and the browser does what the key does (moves the focus, submits)."""
        code, virtual, text = KEYS[key]
        common = {"key": key, "code": code, "windowsVirtualKeyCode": virtual}
        if shift:
            common["modifiers"] = 8
        try:
            await self.send("Input.dispatchKeyEvent", type="keyDown", text=text, **common)
            await self.send("Input.dispatchKeyEvent", type="keyUp", **common)
        except DevToolsError as error:  # the key navigated before the answer: what it is for
            if "navigated" not in str(error):
                raise

    async def type_text(self, text: str) -> None:
        """Type ``text`` into the focused element."""
        await self.send("Input.insertText", text=text)

    async def viewport(self, width: int, height: int) -> None:
        """Show the page as a screen ``width`` by ``height`` CSS pixels shows it."""
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=width < 600,
        )

    async def screenshot(self) -> bytes:
        """The viewport as a PNG image."""
        shot = await self.send("Page.captureScreenshot", format="png")
        return base64.b64decode(shot["data"])

    async def click(self, selector: str) -> None:
        try:
            await self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")
        except DevToolsError as error:  # the click navigated before the answer: what it is for
            if "navigated" not in str(error):
                raise


@asynccontextmanager
async def tab(port: int) -> AsyncIterator[Tab]:
    """A new tab in the browser, closed at the end."""
    devtools = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:
        async with session.put(f"{devtools}/json/new?about:blank") as response:
            target = await response.json()
        try:
            async with session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = Tab(ws)
                await page.send("Page.enable")
                yield page
        finally:
            async with session.get(f"{devtools}/json/close/{target['id']}") as response:
                await response.read()

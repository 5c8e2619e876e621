"""Several worker processes behind one cache: the supervisor and the workers' channel to it.

With ``server.workers`` N > 1, ``harvest-cache`` becomes a supervisor that starts N copies of
itself. Each worker binds the proxy port (and the ICP port) with SO_REUSEPORT, so the kernel
spreads connections and queries over them, and shares the disk tier (diskcache is safe for
several processes; the tier's own file lock orders commits). Each has its own memory tier.

What must stay one cache goes through the supervisor:

- Changes to the store (a new object or head, PURGE, invalidation by unsafe methods): a
  worker tells the supervisor, which tells the others to drop their memory copies, so that
  they read the newest from the shared disk tier (or fetch it again without one).
- Metrics and the cache manager: the supervisor owns ``admin.listen``; a scrape there returns
  the sum over the workers' own admin listeners (on loopback, ephemeral ports), plus the
  supervisor's ``harvest_cache_workers`` and ``harvest_cache_worker_restarts_total``. Admin
  actions are passed to every worker.
- Signals: SIGHUP (reload) and SIGUSR1 (reopen the access log) are passed on; SIGTERM and
  SIGINT make every worker drain and stop. A worker that dies otherwise is started again.

Each worker's channel is a socket pair of JSON lines: the worker announces its admin port
(``{"admin": port}``) and its changes (``{"changed": key}``: a refreshed head); the
supervisor sends the others' changes (``{"drop": key}``). A deletion (PURGE, or an unsafe
method's invalidation) and the replacement of a stored object are confirmed before the
response is complete, so that no worker serves an older copy afterwards: the worker sends
``{"deleted": key, "id": n}``, the supervisor sends the others ``{"drop": key, "ack": m}``,
each answers ``{"dropped": m}`` once its copy is gone, and when all have (or have died) the
supervisor answers ``{"confirmed": n}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from harvest_cache.config import Config
from harvest_cache.registration import registered

log = logging.getLogger("harvest_cache")

RESTART_DELAY = 1.0
_STOP_GRACE = 15.0  # seconds a worker has to drain (its own grace is 5) before it is killed
_SCRAPE_TIMEOUT = 10.0
# Longest a deletion waits for the other workers to drop their copies (a worker that is
# stuck must not stall every PURGE; it is restarted if it died).
CONFIRM_TIMEOUT = 2.0


# -- in a worker ----------------------------------------------------------------------------------


class Channel(asyncio.Protocol):
    """A worker's end of its supervisor channel, and its store's Sharers. ``dropped(key)`` is
    called for changes in other workers."""

    def __init__(self, dropped: Callable[[str], None]) -> None:
        self._dropped = dropped
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self._closing = False
        self._confirming: dict[int, asyncio.Future[None]] = {}
        self._next_id = 0

    @classmethod
    async def open(cls, fd: int, dropped: Callable[[str], None]) -> Channel:
        sock = socket.socket(fileno=fd)
        _, channel = await asyncio.get_running_loop().connect_accepted_socket(
            lambda: cls(dropped), sock
        )
        return channel

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            message = json.loads(line)
            if "drop" in message:
                self._dropped(message["drop"])
                if "ack" in message:
                    self.send({"dropped": message["ack"]})
            elif "confirmed" in message:
                waiter = self._confirming.pop(message["confirmed"], None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._release_waiters()
        if self._closing:
            return
        # The supervisor is gone: nobody would stop this worker or pass on its changes.
        log.error("the supervisor went away; stopping")
        os.kill(os.getpid(), signal.SIGTERM)

    def send(self, message: dict[str, Any]) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(json.dumps(message).encode() + b"\n")

    # -- Sharers ---------------------------------------------------------------------------------

    def changed(self, key: str) -> None:
        self.send({"changed": key})

    async def deleted(self, key: str) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        self._next_id += 1
        ident = self._next_id
        waiter = asyncio.get_running_loop().create_future()
        self._confirming[ident] = waiter
        self.send({"deleted": key, "id": ident})
        try:
            await asyncio.wait_for(waiter, CONFIRM_TIMEOUT)
        except TimeoutError:
            log.warning("the other workers did not confirm dropping %s in time", key)
        finally:
            self._confirming.pop(ident, None)

    def close(self) -> None:
        self._closing = True
        self._release_waiters()
        if self._transport is not None:
            self._transport.close()

    def _release_waiters(self) -> None:
        # (with no supervisor there is nobody left to confirm a deletion)
        for waiter in self._confirming.values():
            if not waiter.done():
                waiter.set_result(None)
        self._confirming.clear()


# -- the supervisor -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Worker:
    index: int
    process: asyncio.subprocess.Process
    channel: socket.socket
    writer: asyncio.StreamWriter | None = None
    admin_port: int = 0
    reader_task: asyncio.Task[None] | None = None


@dataclass(slots=True)
class _Deletion:
    """A worker's deletion, waiting for the others (by index) to drop their copies."""

    worker: _Worker
    ident: int
    waiting: set[int]


@dataclass(slots=True)
class Supervisor:
    """Runs ``count`` workers of the command ``argv`` (the cache's own, plus the worker flag)."""

    config: Config
    argv: list[str]
    count: int
    workers: dict[int, _Worker] = field(default_factory=dict)
    restarts: int = 0
    stopping: bool = False
    started: float = field(default_factory=time.time)
    all_gone: asyncio.Event = field(default_factory=asyncio.Event)
    deletions: dict[int, _Deletion] = field(default_factory=dict)
    _next_token: int = 0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        for sig in (signal.SIGHUP, signal.SIGUSR1):
            loop.add_signal_handler(sig, self._pass_on, sig)
        admin = await self._start_admin()
        listen = self.config.server.listen
        name = self.config.server.name or f"{socket.gethostname()}:{listen.port}"
        admin_port = None if self.config.admin.listen is None else self.config.admin.listen.port
        try:
            async with (
                registered(self.config, name, listen, admin_port),
                asyncio.TaskGroup() as group,
            ):
                for index in range(self.count):
                    group.create_task(self._keep(index))
                await stop.wait()
                log.info("stopping %d workers", self.count)
                self.stopping = True
                if not self.workers:
                    self.all_gone.set()
                for worker in list(self.workers.values()):
                    _signal(worker.process, signal.SIGTERM)
                group.create_task(self._reap())
        finally:
            if admin is not None:
                await admin.cleanup()

    def _pass_on(self, sig: signal.Signals) -> None:
        for worker in self.workers.values():
            _signal(worker.process, sig)

    async def _keep(self, index: int) -> None:
        """Run worker ``index``, starting it again when it dies, until the supervisor stops."""
        while not self.stopping:
            worker = await self._start(index)
            status = await worker.process.wait()
            self._forget(worker)
            if self.stopping:
                return
            self.restarts += 1
            log.error("worker %d exited with status %s; starting it again", index, status)
            await asyncio.sleep(RESTART_DELAY)

    async def _reap(self) -> None:
        """Kill the workers still running ``_STOP_GRACE`` seconds after being told to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.all_gone.wait(), _STOP_GRACE)
        for worker in list(self.workers.values()):
            if worker.process.returncode is None:
                log.error("worker %d did not stop in time; killing it", worker.index)
                worker.process.kill()

    async def _start(self, index: int) -> _Worker:
        ours, theirs = socket.socketpair()
        argv = [*self.argv, "--worker-channel", str(theirs.fileno())]
        process = await asyncio.create_subprocess_exec(
            *argv, pass_fds=(theirs.fileno(),), stdin=asyncio.subprocess.DEVNULL
        )
        theirs.close()
        worker = _Worker(index, process, ours)
        reader, writer = await asyncio.open_connection(sock=ours)
        worker.writer = writer
        worker.reader_task = asyncio.get_running_loop().create_task(self._listen(worker, reader))
        self.workers[index] = worker
        return worker

    def _forget(self, worker: _Worker) -> None:
        if self.workers.get(worker.index) is worker:
            del self.workers[worker.index]
        if self.stopping and not self.workers:
            self.all_gone.set()
        if worker.reader_task is not None:
            worker.reader_task.cancel()
        if worker.writer is not None:
            worker.writer.close()
        for token, deletion in list(self.deletions.items()):
            deletion.waiting.discard(worker.index)  # (a dead worker holds no copy)
            if deletion.worker is worker:
                del self.deletions[token]
            elif not deletion.waiting:
                self._confirm(token)

    async def _listen(self, worker: _Worker, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            message = json.loads(line)
            if "admin" in message:
                worker.admin_port = int(message["admin"])
            elif "changed" in message:
                self._tell_others(worker, {"drop": message["changed"]})
            elif "deleted" in message:
                self._next_token += 1
                token = self._next_token
                told = self._tell_others(worker, {"drop": message["deleted"], "ack": token})
                self.deletions[token] = _Deletion(worker, int(message["id"]), told)
                if not told:
                    self._confirm(token)
            elif "dropped" in message:
                deletion = self.deletions.get(message["dropped"])
                if deletion is not None:
                    deletion.waiting.discard(worker.index)
                    if not deletion.waiting:
                        self._confirm(message["dropped"])

    def _tell_others(self, worker: _Worker, message: dict[str, Any]) -> set[int]:
        """Send ``message`` to every worker but ``worker``; the indexes of those told."""
        out = json.dumps(message).encode() + b"\n"
        told = set()
        for other in self.workers.values():
            if other is not worker and other.writer is not None:
                other.writer.write(out)
                told.add(other.index)
        return told

    def _confirm(self, token: int) -> None:
        deletion = self.deletions.pop(token)
        writer = deletion.worker.writer
        if writer is not None and not writer.is_closing():
            writer.write(json.dumps({"confirmed": deletion.ident}).encode() + b"\n")

    # -- the admin listener: metrics summed over the workers -------------------------------------

    async def _start_admin(self) -> web.AppRunner | None:
        listen = self.config.admin.listen
        if listen is None:
            return None
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/cachemgr", self._manager)
        app.router.add_post("/cachemgr/{action:.*}", self._action)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        await web.TCPSite(runner, listen.host, listen.port, reuse_address=True).start()
        log.info("admin listener for %d workers on %s", self.count, listen)
        return runner

    async def _gather(
        self, method: str, path: str, headers: dict[str, str] | None = None
    ) -> list[tuple[int, int, str]]:
        """(worker index, status, body) from every worker's admin listener that answers."""
        ready = [w for w in self.workers.values() if w.admin_port]
        timeout = aiohttp.ClientTimeout(total=_SCRAPE_TIMEOUT)

        async def one(session: aiohttp.ClientSession, worker: _Worker) -> tuple[int, int, str]:
            url = f"http://127.0.0.1:{worker.admin_port}{path}"
            async with session.request(method, url, headers=headers) as response:
                return worker.index, response.status, await response.text()

        async with aiohttp.ClientSession(timeout=timeout) as session:
            results = await asyncio.gather(
                *(one(session, w) for w in ready), return_exceptions=True
            )
        return [r for r in results if isinstance(r, tuple)]

    async def _metrics(self, request: web.Request) -> web.Response:
        texts = [body for _, status, body in await self._gather("GET", "/metrics") if status == 200]
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Summed(texts, len(self.workers), self.restarts))
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def _manager(self, request: web.Request) -> web.Response:
        workers = {
            str(index): json.loads(body)
            for index, status, body in await self._gather("GET", "/cachemgr")
            if status == 200
        }
        return web.json_response(
            {
                "supervisor": {
                    "workers": self.count,
                    "running": len(self.workers),
                    "restarts": self.restarts,
                    "uptime_seconds": round(time.time() - self.started, 3),
                },
                "workers": workers,
            }
        )

    async def _action(self, request: web.Request) -> web.Response:
        path = request.path_qs
        auth = {"Authorization": request.headers.get("Authorization", "")}
        answers = await self._gather("POST", path, auth)
        if not answers:
            raise web.HTTPServiceUnavailable(text="no worker answered\n")
        # The best status among the workers (a purge succeeds if any worker held the object).
        status = min(status for _, status, _ in answers)
        return web.json_response(
            {str(index): _json_or_text(body) for index, _, body in answers}, status=status
        )


def _json_or_text(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body


def _signal(process: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    if process.returncode is None:
        process.send_signal(sig)


class _Summed:
    """The workers' metric families, each sample summed over them (a start time: the
    earliest; a limit: the largest), with the supervisor's own."""

    def __init__(self, texts: list[str], running: int, restarts: int) -> None:
        self._texts = texts
        self._running = running
        self._restarts = restarts

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
        for text in self._texts:
            for family in text_string_to_metric_families(text):
                if family.name not in families:
                    families[family.name] = Metric(family.name, family.documentation, family.type)
                    values[family.name] = {}
                samples = values[family.name]
                for sample in family.samples:
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    old = samples.get(key)
                    samples[key] = (
                        sample.value if old is None else _combine(sample.name, old, sample.value)
                    )
        for name, family in families.items():
            for (sample_name, labels), value in values[name].items():
                family.add_sample(sample_name, dict(labels), value)
            yield family
        workers = Metric("harvest_cache_workers", "Worker processes running.", "gauge")
        workers.add_sample("harvest_cache_workers", {}, self._running)
        yield workers
        restarts = Metric(
            "harvest_cache_worker_restarts", "Workers started again after dying.", "counter"
        )
        restarts.add_sample("harvest_cache_worker_restarts_total", {}, self._restarts)
        yield restarts


def _combine(name: str, old: float, new: float) -> float:
    if name.endswith("_start_time_seconds"):
        return min(old, new)
    if name.endswith("_max_fds") or name.endswith("_virtual_memory_max_bytes"):
        return max(old, new)
    return old + new


def worker_argv(argv: list[str]) -> list[str]:
    """The command that runs one worker: this program with the same arguments, its own admin
    listener on an ephemeral loopback port."""
    return [sys.executable, "-m", "harvest_cache", *argv, "--admin-listen", "127.0.0.1:0"]

"""The status process: serves the engine's HTTP endpoint from its own process.

Run by ``netdisco.engine.sidecar`` (``api_process = true``) as
``python -P statusd.py HOST PORT SOCKET MAX_BODY STALE_AFTER`` (``loop_stall``). Every
request costs aiohttp about 100 µs of CPU; in the engine's process that CPU is taken from the crawl,
so under heavy polling the status is served here instead, on another core:

* the engine pushes the rendered answers of its read routes (health, engine,
  spiders, each spider) over this process's stdin, one JSON line per change, and
  a heartbeat line at least every second; a GET of one of those paths is answered
  from memory;
* every other request (control, ``/metrics``, unknown paths) is passed on, as it
  came, to the engine's own application on a private Unix socket;
* if the engine has sent nothing for ``STALE_AFTER`` seconds (its loop is blocked),
  the read routes answer 503 ``engine_unresponsive`` rather than an old "ok";
* when stdin closes (the engine stopped or died), this process exits.

It imports nothing from netdisco (``-P`` keeps its directory off ``sys.path``), so it
starts in a fraction of the engine's start-up time; only ``netdisco/serving.py``
(which imports only aiohttp) is loaded by its path, so it binds like every server.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from aiohttp import ClientError, ClientSession, ClientTimeout, UnixConnector, web


def _load_serving() -> ModuleType:
    """``netdisco.serving`` (idle timeout, connection cap) by its path: importing the
    ``netdisco`` package would cost this process the engine's start-up time."""
    path = Path(__file__).resolve().parents[1] / "serving.py"
    spec = importlib.util.spec_from_file_location("_netdisco_serving", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


serving = _load_serving()

#: request headers passed on to the engine, and response headers passed back
PASSED_ON = ("Authorization", "Content-Type", "Accept", "X-Netdisco-Engine")
PASSED_BACK = ("Content-Type", "WWW-Authenticate", "Allow", "Retry-After", "Location", "Vary",
               "X-Netdisco-Engine")  # fmt: skip
#: netdisco.cluster.contract.ENGINE_HEADER (this process imports nothing from netdisco)
ENGINE_HEADER = "X-Netdisco-Engine"
#: how long a proxied request may take: ``stop`` waits for the spider's stop deadline
PROXY_TIMEOUT = ClientTimeout(total=600, connect=5)
#: the longest line the engine may send (every spider's status in one answer)
MAX_LINE = 64 * 1024 * 1024


@dataclass
class Snapshot:
    """The read routes' answers as the engine last sent them.

    Each batch of lines ends with a heartbeat carrying a sequence number. A control
    request's answer names the sequence that includes its effect (``X-Netdisco-Seq``),
    and is held back until that batch is here: whoever paused a spider sees it paused.
    """

    stale_after: float
    answers: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    updated: float = field(default_factory=time.monotonic)
    seq: int = 0
    engine: str | None = None  # the engine's id, as its heartbeats say
    waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)

    def apply(self, line: bytes) -> None:
        """One line from the engine: an answer, a removed path, or a heartbeat."""
        message = json.loads(line)
        self.updated = time.monotonic()
        path = message.get("path")
        if path is None:
            self.engine = str(message.get("engine") or "") or self.engine
            self._reached(int(message.get("seq", self.seq)))
        elif message.get("gone"):
            self.answers.pop(path, None)
        else:
            self.answers[path] = (int(message["status"]), message["body"].encode())

    def _reached(self, seq: int) -> None:
        self.seq = max(self.seq, seq)
        waiting = []
        for wanted, future in self.waiters:
            if wanted <= self.seq:
                if not future.done():
                    future.set_result(None)
            else:
                waiting.append((wanted, future))
        self.waiters = waiting

    async def wait_for(self, seq: int) -> None:
        """Until the batch ``seq`` has been applied (or the stale limit passed)."""
        if seq <= self.seq:
            return
        future = asyncio.get_running_loop().create_future()
        self.waiters.append((seq, future))
        # past the limit the answer still goes out: it is right, only the reads may lag
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(future, self.stale_after)

    def age(self) -> float:
        return time.monotonic() - self.updated


def error(status: int, code: str, message: str) -> web.Response:
    """The engine's one error shape, for the answers this process gives itself."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return web.Response(body=body, status=status, content_type="application/json")


class Front:
    """Answers read routes from the snapshot, passes the rest to the engine."""

    def __init__(self, snapshot: Snapshot, socket_path: str) -> None:
        self.snapshot = snapshot
        self.session = ClientSession(
            connector=UnixConnector(path=socket_path), timeout=PROXY_TIMEOUT, auto_decompress=False
        )

    async def handle(self, request: web.Request) -> web.StreamResponse:
        response = await self.answer(request)
        if self.snapshot.engine and ENGINE_HEADER not in response.headers:
            response.headers[ENGINE_HEADER] = self.snapshot.engine
        return response

    async def answer(self, request: web.Request) -> web.StreamResponse:
        reads = request.method in ("GET", "HEAD")
        answer = self.snapshot.answers.get(request.path) if reads else None
        if answer is None or "text/html" in request.headers.get("Accept", ""):  # a browser
            return await self.pass_on(request)
        asked = request.headers.get(ENGINE_HEADER)
        if asked is not None and self.snapshot.engine and asked != self.snapshot.engine:
            message = f"this is engine {self.snapshot.engine!r}, not {asked[:200]!r}"
            return error(409, "wrong_engine", message)
        if self.snapshot.age() > self.snapshot.stale_after:
            return error(
                503,
                "engine_unresponsive",
                f"the engine has not updated its status for {self.snapshot.age():.1f} s",
            )
        status, body = answer
        return web.Response(body=body, status=status, content_type="application/json")

    async def pass_on(self, request: web.Request) -> web.StreamResponse:
        try:
            data = await request.read()
        except web.HTTPException as exc:  # the body is over max_body
            return error(exc.status, "payload_too_large", exc.reason)
        headers = {k: v for k in PASSED_ON if (v := request.headers.get(k)) is not None}
        url = f"http://engine{request.path_qs}"
        try:
            async with self.session.request(
                request.method, url, data=data or None, headers=headers, allow_redirects=False
            ) as upstream:
                body = await upstream.read()
                back = {k: v for k in PASSED_BACK if (v := upstream.headers.get(k)) is not None}
                seq = upstream.headers.get("X-Netdisco-Seq")
                if seq is not None and seq.isdigit():
                    await self.snapshot.wait_for(int(seq))
                return web.Response(body=body, status=upstream.status, headers=back)
        except TimeoutError:
            return error(504, "engine_timeout", "the engine did not answer in time")
        except ClientError as exc:
            return error(502, "engine_unreachable", f"the engine did not answer: {exc}")


async def follow(snapshot: Snapshot, stopped: asyncio.Event) -> None:
    """Apply the engine's lines until stdin closes."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        try:
            snapshot.apply(line)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # never from the engine
            print(f"statusd: ignored a malformed line: {exc!r}", file=sys.stderr)
    stopped.set()


async def serve(host: str, port: int, socket_path: str, max_body: int, stale: float) -> int:
    snapshot = Snapshot(stale_after=stale)
    front = Front(snapshot, socket_path)
    app = web.Application(client_max_size=max_body)
    app.router.add_route("*", "/{tail:.*}", front.handle)
    runner = serving.runner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    try:
        await serving.BoundedSite(runner, host, port).start()
    except OSError as exc:
        print(json.dumps({"error": f"cannot serve HTTP on {host}:{port}: {exc.strerror}"}))
        return 1
    print(json.dumps({"port": runner.addresses[0][1]}), flush=True)
    stopped = asyncio.Event()
    following = asyncio.create_task(follow(snapshot, stopped))
    await stopped.wait()
    await following
    await runner.cleanup()
    await front.session.close()
    return 0


def main(argv: list[str]) -> int:
    # Ctrl-C reaches the whole process group; the engine drains its spiders then, and
    # its status must stay up meanwhile: this process ends when the engine closes stdin
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    host, port, socket_path, max_body, stale = argv
    return asyncio.run(serve(host, int(port), socket_path, int(max_body), float(stale)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

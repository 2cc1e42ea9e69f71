"""Pause, resume and stop spiders through the monitor, so the browser never holds the
engines' token.

``POST /netdiscovery/monitor/engines/{id}/spiders/{name}/{action}`` is checked here
(the monitor's own token, or a loopback socket when it has none; a browser's
cross-site POST is refused by its ``Origin``), then sent to the ``status_url`` the
engine advertised in ZooKeeper, with the engines' token and a timeout, so an
engine that is gone gives a clear error instead of a hung button. Anyone who may
write in ZooKeeper can advertise a node, so the token only goes to a
``status_url`` whose host and port are the node's registered ``host`` and
``port`` and whose host is loopback or in ``[control] engine_hosts``
(:func:`token_target`); any other is refused and logged.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import structlog

from monitor.settings import ControlSettings
from monitor.status import asking, check_engine, read_json, spiders_url
from netdisco.cluster.contract import EnginePayload
from netdisco.cluster.membership import Member
from netdisco.exceptions import AnswerTooLarge, ControlRefused, WrongEngine
from netdisco.values import is_loopback

log = structlog.get_logger(__name__)

ACTIONS = ("pause", "resume", "stop")


def check_caller(
    settings: ControlSettings | None, headers: Any, host: str, socket_host: str | None
) -> None:
    """Let a control request in, or raise ``ControlRefused`` saying why.

    ``host`` is the request's Host; ``socket_host`` the address it arrived on.
    """
    if settings is None:
        raise ControlRefused(
            403, "control_disabled", "control is off: the monitor has no [control]"
        )
    check_token(settings.token, headers, host, socket_host, "control")


def check_token(
    token: str | None, headers: Any, host: str, socket_host: str | None, what: str
) -> None:
    """The one gate of the monitor's write routes (``what``: control, deploy): a bearer
    ``token``, or with none a loopback socket and Host; never a cross-site browser."""
    origin = headers.get("Origin")
    if origin is not None and urlsplit(origin).netloc != host:
        raise ControlRefused(403, "cross_origin", f"{what} from another site ({origin}) is refused")
    if token is None:
        if socket_host is None or not is_loopback(socket_host):
            raise ControlRefused(
                403, f"{what}_needs_token", f"{what} without a token is served on loopback only"
            )
        if not is_loopback(urlsplit(f"//{host}").hostname or ""):
            raise ControlRefused(
                403, "bad_host", f"{what} is answered for loopback names, not {host!r}"
            )
        return
    given = presented(headers.get("Authorization", ""))
    if not given:
        raise ControlRefused(
            401, "unauthorized", f"{what} needs an 'Authorization: Bearer' token (or basic "
            "auth whose password is the token)"
        )  # fmt: skip
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise ControlRefused(403, "forbidden", f"the token is not valid for {what}")


def presented(authorization: str) -> str:
    """The token an Authorization header presents: a bearer token, or the password of
    HTTP basic auth (what Scrapyd's clients send: ``scrapyd-deploy``'s ``username`` and
    ``password`` in scrapy.cfg); "" for none."""
    scheme, _, given = authorization[:4096].partition(" ")
    if scheme.lower() == "bearer":
        return given.strip()
    if scheme.lower() != "basic":
        return ""
    try:
        decoded = base64.b64decode(given.strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return ""
    return decoded.partition(":")[2]


def token_target(payload: EnginePayload, allowed: tuple[str, ...]) -> str | None:
    """Why the engine token must not go to ``payload.status_url``, or None when it may."""
    parts = urlsplit(payload.status_url or "")
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return f"its status_url {payload.status_url!r} has no valid port"
    host = parts.hostname or ""
    if (host, port) != ((payload.host or "").lower(), payload.port):
        return (
            f"its status_url {payload.status_url!r} is not its registered host and port "
            f"({payload.host}:{payload.port})"
        )
    if not is_loopback(host) and host not in {h.lower() for h in allowed}:
        return f"{host!r} is neither loopback nor in [control] engine_hosts"
    return None


def _same_engine(resp: aiohttp.ClientResponse, engine_id: str) -> None:
    """``ControlRefused`` when another engine answered at ``engine_id``'s address."""
    try:
        check_engine(resp, engine_id)
    except WrongEngine as exc:
        log.warning("control_wrong_engine", engine_id=engine_id, reason=str(exc))
        raise ControlRefused(502, "wrong_engine", str(exc)) from None


class Control:
    """Sends one spider action to one engine of the view and returns its answer."""

    def __init__(
        self,
        settings: ControlSettings | None,
        members: Callable[[], list[Member]],
        proven: Callable[[Member], bool] = lambda member: True,
    ):
        self.settings = settings
        self.members = members
        self.proven = proven  # with the engine token: the node proves a cluster member wrote it
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _url(self, engine_id: str, spider: str, action: str) -> str:
        return f"{self.engine_base(engine_id)}spiders/{quote(spider, safe='')}/{action}"

    def engine_base(self, engine_id: str) -> str:
        """``http://host:port/netdiscovery/`` of an engine that may be sent the token."""
        member = next((m for m in self.members() if m.name == engine_id), None)
        if member is None:
            raise ControlRefused(404, "unknown_engine", f"no engine {engine_id!r} in the cluster")
        base = spiders_url(member.payload.status_url or "")
        if base is None:
            raise ControlRefused(
                502, "engine_unreachable", f"engine {engine_id!r} advertises no HTTP status URL"
            )
        assert self.settings is not None
        why = token_target(member.payload, self.settings.engine_hosts)
        if why is None and self.settings.engine_token and not self.proven(member):
            why = "its node does not prove that a member of the cluster wrote it (no valid proof)"
        if why:
            log.warning("control_target_refused", engine_id=engine_id, reason=why)
            raise ControlRefused(
                502, "engine_untrusted", f"engine {engine_id!r} is not sent the token: {why}"
            )
        return base.removesuffix("spiders")

    @contextlib.asynccontextmanager
    async def stream(
        self, engine_id: str, path: str, params: dict[str, str]
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A GET of ``path`` under the engine's ``/netdiscovery/``, with the engine token,
        left open for streaming (a connect timeout, no read timeout: a log follows)."""
        assert self.settings is not None
        url = self.engine_base(engine_id) + path
        token = self.settings.engine_token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.settings.timeout)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.get(url, headers=headers | asking(engine_id), params=params) as resp,
            ):
                _same_engine(resp, engine_id)
                yield resp
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            reason = f"engine {engine_id!r} cannot be reached: {type(exc).__name__}"
            raise ControlRefused(502, "engine_unreachable", reason) from None

    async def act(
        self, engine_id: str, spider: str, action: str, body: Any = None
    ) -> tuple[int, Any]:
        """The engine's status and JSON answer; ``ControlRefused`` if it could not be asked.

        ``action`` is one of :data:`ACTIONS` or ``failed/retry`` (with its JSON ``body``).
        """
        assert self.settings is not None
        url = self._url(engine_id, spider, action)
        token = self.settings.engine_token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        headers |= asking(engine_id)  # any other engine refuses it, acting on nothing
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=self.settings.timeout)
            self._session = aiohttp.ClientSession(timeout=timeout)
        try:
            async with self._session.post(url, headers=headers, json=body) as resp:
                _same_engine(resp, engine_id)
                body = await read_json(resp)
                status = resp.status
        except TimeoutError:
            wait = self.settings.timeout
            raise ControlRefused(
                504, "engine_timeout", f"engine {engine_id!r} did not answer within {wait} s"
            ) from None
        except (aiohttp.ClientError, ValueError, RecursionError, AnswerTooLarge) as exc:
            reason = f"engine {engine_id!r} cannot be reached: {type(exc).__name__}"
            raise ControlRefused(502, "engine_unreachable", reason) from None
        if status in (401, 403):
            message = body.get("error", {}).get("message") if isinstance(body, dict) else None
            reason = f"engine {engine_id!r} refused the monitor: {message or status}"
            raise ControlRefused(502, "engine_refused", reason)
        log.info("spider_control", engine_id=engine_id, spider=spider, action=action, status=status)
        return status, body

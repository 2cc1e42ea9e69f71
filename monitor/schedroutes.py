"""The monitor's schedule routes (docs/jobs.md, "Schedules"): list, create, enable or
disable, delete.

The list is open like the monitor's other GET routes; the writes are control
(:func:`monitor.jobroutes.caller`), with the same body cap as a job request.
"""

from __future__ import annotations

import time

from aiohttp import web

from monitor.jobroutes import caller, read_body
from monitor.schedules import Schedules, view
from netdisco.cluster.jobs import is_job_id
from netdisco.exceptions import ConfigError, ControlRefused

SCHEDULES: web.AppKey[Schedules] = web.AppKey("schedules")
BASE = "/netdiscovery/monitor/schedules"


def _id(request: web.Request) -> str:
    schedule_id = request.match_info["id"]
    if not is_job_id(schedule_id):
        raise ControlRefused(404, "unknown_schedule", f"{schedule_id[:40]!r} is not a schedule id")
    return schedule_id


async def list_schedules(request: web.Request) -> web.Response:
    """``GET .../schedules``: every schedule, oldest first, with ``next_run``."""
    return web.json_response({"schedules": await request.app[SCHEDULES].listing()})


async def create_schedule(request: web.Request) -> web.Response:
    """``POST .../schedules``: 201 with the schedule; 400 naming the field that is wrong."""
    caller(request)
    try:
        made = await request.app[SCHEDULES].create(await read_body(request))
    except ConfigError as exc:
        raise ControlRefused(400, "invalid_schedule", str(exc)) from None
    return web.json_response(view(made, time.time()), status=201)


async def patch_schedule(request: web.Request) -> web.Response:
    """``PATCH .../schedules/{id}`` ``{"enabled": bool}``: 200 with the schedule."""
    caller(request)
    schedule_id = _id(request)
    body = await read_body(request)
    if not isinstance(body, dict) or set(body) != {"enabled"}:
        raise ControlRefused(400, "invalid_schedule", 'enabled: send {"enabled": true|false}')
    if not isinstance(body["enabled"], bool):
        raise ControlRefused(400, "invalid_schedule", "enabled: expected true or false")
    done = await request.app[SCHEDULES].set_enabled(schedule_id, body["enabled"])
    return web.json_response(view(done, time.time()))


async def delete_schedule(request: web.Request) -> web.Response:
    """``DELETE .../schedules/{id}``: 200; the jobs it made stay."""
    caller(request)
    schedule_id = _id(request)
    await request.app[SCHEDULES].delete(schedule_id)
    return web.json_response({"deleted": schedule_id})


def add_routes(app: web.Application, schedules: Schedules) -> None:
    """The schedule routes on the monitor's app (after the job routes: they share the
    control settings)."""
    app[SCHEDULES] = schedules
    app.router.add_get(BASE, list_schedules)
    app.router.add_post(BASE, create_schedule)
    app.router.add_patch(BASE + "/{id}", patch_schedule)
    app.router.add_delete(BASE + "/{id}", delete_schedule)

"""A directory of files over HTTP (for the local benchmark scripts)."""

from __future__ import annotations

from aiohttp import web


def app(root: str) -> web.Application:
    application = web.Application()
    application.router.add_static("/", root)
    return application

"""Spiders that jobs start by module path (``spider_modules``): the site comes as ``-a site=``."""

from __future__ import annotations

from collections.abc import AsyncIterator

from netdisco import Request
from tests.netdisco.engine_site import SiteSpider


class Walk(SiteSpider):
    """The 200-page tree of ``engine_site``; ``-a speed=slow`` makes it run for a while."""

    name = "walk"
    site = ""
    speed = "fast"

    async def start(self) -> AsyncIterator[Request]:
        yield Request(f"{self.site}/{self.speed}/p/0", callback=self.parse)


class Crash(SiteSpider):
    """Kills its own process at its first page: the engine must not notice."""

    name = "crash"
    site = ""

    async def start(self) -> AsyncIterator[Request]:
        yield Request(f"{self.site}/fast/p/0", callback=self.boom)

    def boom(self, response: object) -> None:
        import os

        os._exit(3)

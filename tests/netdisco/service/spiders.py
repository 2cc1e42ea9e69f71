"""Spiders started by module path: they read the site's address from the environment."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

from netdisco import Middleware, Request, Spider
from tests.netdisco.engine_site import SiteSpider

SITE_ENV = "NETDISCO_TEST_SERVICE_SITE"


class Tree(SiteSpider):
    """The 200-page tree of ``engine_site``, fast pages."""

    name = "tree"
    speed = "fast"

    async def start(self) -> AsyncIterator[Request]:
        yield Request(f"{os.environ[SITE_ENV]}/{self.speed}/p/0", callback=self.parse)


class SlowTree(Tree):
    """The same tree, each page 50 ms late: it runs long enough to be caught running."""

    name = "slowtree"
    speed = "slow"


class Tagging(Middleware):
    """A middleware in an allowed module: a request body may name it."""

    async def process_request(self, request: Request, spider: Spider) -> Request | None:
        request.headers["X-Tag"] = "allowed"
        return None

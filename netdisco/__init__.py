"""netdisco: an asyncio crawler framework whose engines form a ZooKeeper-monitored cluster.

The data flow, step by step (each step is a module):

1. ``spider``: a Spider yields seed ``Request`` objects (``request``).
2. ``scheduler``: URLs are canonicalised, deduplicated, scoped, queued in the ``frontier``.
3. ``downloader``: requests are fetched politely (``robots``), with retries.
4. ``scraper``: the ``Response`` (``response``) goes to the spider's callback.
5. ``pipelines``: items flow through a reactivex Observable into the item pipelines;
   new requests go back to step 2.
6. ``crawler`` runs steps 1-5 for one spider and counts them (``stats``); the engine
   serves it over HTTP and keeps its znode in ZooKeeper current.
"""

from netdisco._version import __version__
from netdisco.crawl.crawler import Crawler, PushResult, SpiderState
from netdisco.crawl.pipelines import CallablePipeline, ConsolePipeline, JsonLinesPipeline, Pipeline
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.settings import Settings
from netdisco.crawl.spider import Spider
from netdisco.crawl.transport import DownloadHandler, MockHandler
from netdisco.exceptions import DropItem, NetdiscoError

__all__ = [
    "CallablePipeline",
    "ConsolePipeline",
    "Crawler",
    "DownloadHandler",
    "DropItem",
    "JsonLinesPipeline",
    "MockHandler",
    "NetdiscoError",
    "Pipeline",
    "PushResult",
    "Request",
    "Response",
    "Settings",
    "Spider",
    "SpiderState",
    "__version__",
]

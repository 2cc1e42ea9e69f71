"""Rendering pages in headless Chromium (``render = true`` or ``Request(render=True)``)."""

from netdisco.crawl.render.handler import RenderingHandler
from netdisco.crawl.render.pool import CHROMIUM_FLAGS, BrowserPool

__all__ = ["CHROMIUM_FLAGS", "BrowserPool", "RenderingHandler"]

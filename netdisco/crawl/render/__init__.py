"""Rendering pages in headless Chromium (``render = true`` or ``Request(render=True)``)."""

from netdisco.crawl.render.handler import RenderingHandler
from netdisco.crawl.render.pool import CHROMIUM_FLAGS, BrowserPool, check_available

__all__ = ["CHROMIUM_FLAGS", "BrowserPool", "RenderingHandler", "check_available"]

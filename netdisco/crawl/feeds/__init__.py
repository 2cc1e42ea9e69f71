"""Feeds: where a spider's items go, set in ``feeds`` (TOML, ``-s``) or ``-o``/``-O``."""

from netdisco.crawl.feeds.pipeline import FeedPipeline, feed_pipelines, fill_template
from netdisco.crawl.feeds.spec import FORMATS, FeedSpec, cli_feed, make_spec, parse_feeds

__all__ = [
    "FORMATS",
    "FeedPipeline",
    "FeedSpec",
    "cli_feed",
    "feed_pipelines",
    "fill_template",
    "make_spec",
    "parse_feeds",
]

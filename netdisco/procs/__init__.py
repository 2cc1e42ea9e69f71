"""``netdisco crawl -j N``: one crawl on N worker processes of this machine.

``parent.ProcessCrawl`` is the crawl the user sees (one progress line, one summary,
one set of feeds, one exit status); it starts a private ``redis-server`` on a Unix
socket (``server``), the workers' one frontier, whose hosts each worker owns a share
of (``frontiers.redis.owned``: one politeness per host), and N ``worker`` processes,
each a ``Crawler`` of that frontier that sends its items and counters back over
``channel``. docs/crawling.md says what a user sees, docs/architecture.md why it is
built so.
"""

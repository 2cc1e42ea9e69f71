"""One spider's crawl, in the order data flows through it.

``spider`` yields ``request``\\ s; ``scheduler`` checks them (``urls``) and queues
them in a frontier (``netdisco.frontiers``, through ``codec`` when shared);
``downloader`` fetches them politely (``robots``); ``scraper`` hands each
``response`` to its callback; items go through ``pipelines`` (``dedup`` for a
shared crawl); ``crawler`` runs it all with its ``stats`` and ``settings``;
``loader`` finds a spider class from ``FILE.py:Class``. No ZooKeeper and no HTTP
server here: those are the cluster and engine layers above.
"""

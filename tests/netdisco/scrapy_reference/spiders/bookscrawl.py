"""A CrawlSpider with rules: categories followed, books parsed."""

from urllib.parse import urlsplit

from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class BooksCrawlSpider(CrawlSpider):
    name = "bookscrawl"
    rules = (
        Rule(LinkExtractor(allow=r"/catalogue/category/"), follow=True),
        Rule(LinkExtractor(allow=r"/catalogue/book-\d+\.html"), callback="parse_book"),
    )

    def __init__(self, site=None, *args, **kwargs):
        self.start_urls = [f"{site}/catalogue/"]
        super().__init__(*args, **kwargs)

    def parse_book(self, response):
        yield {
            "title": response.css("h1::text").get(),
            "price": response.css("p.price::text").get(),
            "path": urlsplit(response.url).path,
        }

from urllib.parse import urlsplit

import scrapy
from scrapy.loader import ItemLoader

from bookproj.items import BookItem


class BooksSpider(scrapy.Spider):
    name = "books"

    def __init__(self, site=None, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.start_urls = [f"{site}/catalogue/category/{c}/" for c in ("poetry", "fiction")]

    def parse(self, response):
        for href in response.css("article h3 a::attr(href)").getall():
            yield response.follow(href, callback=self.parse_book)

    def parse_book(self, response):
        loader = ItemLoader(item=BookItem(), response=response)
        loader.add_css("title", "h1::text")
        loader.add_css("price", "p.price::text")
        loader.add_css("stock", "p.stock::text")
        loader.add_value("path", urlsplit(response.url).path)
        yield loader.load_item()

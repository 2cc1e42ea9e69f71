"""Scrapy's tutorial spider, with its ``-a tag`` argument (and the site as one)."""

import scrapy


class QuotesSpider(scrapy.Spider):
    name = "quotes"

    def __init__(self, site=None, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.start_urls = [f"{site}/quotes/page/1/"]

    def parse(self, response):
        tag = getattr(self, "tag", None)
        for quote in response.css("div.quote"):
            tags = quote.css("div.tags a.tag::text").getall()
            if tag is None or tag in tags:
                yield {
                    "text": quote.css("span.text::text").get(),
                    "author": quote.css("small.author::text").get(),
                    "tags": tags,
                }
        next_page = response.css("li.next a::attr(href)").get()
        if next_page is not None:
            yield response.follow(next_page, self.parse)

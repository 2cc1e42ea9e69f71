"""start_requests, callbacks by position with cb_kwargs, response.json(), the spider's
logger and closed(reason)."""

from pathlib import Path

import scrapy


class ApiSpider(scrapy.Spider):
    name = "api"

    def start_requests(self):
        first = f"{self.site}/api/quotes?page=1"
        yield scrapy.Request(first, self.parse_api, cb_kwargs={"page": 1})

    def parse_api(self, response, page):
        data = response.json()
        self.logger.info("page %s: %d quotes", page, len(data["quotes"]))
        for quote in data["quotes"]:
            yield {"page": page, "text": quote["text"], "author": quote["author"]}
            slug = quote["author_slug"]
            yield scrapy.Request(
                f"{self.site}/author/{slug}", self.parse_author, cb_kwargs={"slug": slug}
            )
        if data["has_next"]:
            yield scrapy.Request(
                f"{self.site}/api/quotes?page={page + 1}",
                self.parse_api,
                cb_kwargs={"page": page + 1},
            )

    def parse_author(self, response, slug):
        self.log(f"author {slug}")
        yield {
            "slug": slug,
            "name": response.css("h3.author-title::text").get().strip(),
            "born": response.css(".author-born-date::text").get(),
        }

    def closed(self, reason):
        Path(self.closed_file).write_text(reason)

import scrapy


class AuthorsSpider(scrapy.Spider):
    name = "authors"

    def parse(self, response):
        yield {"name": response.css("h3.author-title::text").get()}

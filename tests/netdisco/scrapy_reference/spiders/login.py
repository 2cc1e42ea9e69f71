"""async def start (Scrapy 2.13 on), FormRequest.from_response (a login form among two)
and FormRequest with a GET."""

import scrapy


class LoginSpider(scrapy.Spider):
    name = "login"

    async def start(self):
        yield scrapy.Request(f"{self.site}/login", callback=self.parse)

    def parse(self, response):
        yield scrapy.FormRequest.from_response(
            response,
            formid="login",
            formdata={"username": "alice", "password": "s3cret"},
            callback=self.after_login,
        )
        yield scrapy.FormRequest(
            f"{self.site}/search", formdata={"q": "life"}, method="GET", callback=self.parse_search
        )

    def after_login(self, response):
        for secret in response.css("li.secret::text").getall():
            yield {"secret": secret}
        for denied in response.css("p.denied::text").getall():
            yield {"denied": denied}

    def parse_search(self, response):
        for result in response.css("li.result::text").getall():
            yield {"result": result}

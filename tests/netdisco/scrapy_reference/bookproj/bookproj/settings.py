# Scrapy settings for bookproj project: what `scrapy startproject` writes (2.11 to 2.19),
# with the project's pipelines and one setting of its own.

BOT_NAME = "bookproj"

SPIDER_MODULES = ["bookproj.spiders"]
NEWSPIDER_MODULE = "bookproj.spiders"

ADDONS = {}

# Obey robots.txt rules
ROBOTSTXT_OBEY = True

# Concurrency and throttling settings
CONCURRENT_REQUESTS_PER_DOMAIN = 1
DOWNLOAD_DELAY = 0

# Enable or disable spider middlewares
SPIDER_MIDDLEWARES = {
    "scrapy.spidermiddlewares.depth.DepthMiddleware": None,
}

# Configure item pipelines
ITEM_PIPELINES = {
    "bookproj.pipelines.PricePipeline": 300,
    "bookproj.pipelines.StockPipeline": 400,
}

# Set settings whose default value is deprecated to a future-proof value
REQUEST_FINGERPRINTER_IMPLEMENTATION = "2.7"
TWISTED_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
FEED_EXPORT_ENCODING = "utf-8"

# the project's own: read by PricePipeline.from_crawler
PRICE_RATE = 2

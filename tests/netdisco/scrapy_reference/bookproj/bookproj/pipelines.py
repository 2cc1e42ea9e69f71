from itemadapter import ItemAdapter
from scrapy.exceptions import DropItem


class PricePipeline:
    def __init__(self, rate):
        self.rate = rate

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.settings.getint("PRICE_RATE", 1))

    def open_spider(self, spider):
        self.priced = 0

    def close_spider(self, spider):
        spider.logger.info(f"priced {self.priced} books")

    def process_item(self, item, spider):
        adapter = ItemAdapter(item)
        if not adapter.get("price"):
            raise DropItem(f"no price: {adapter.get('title')}")
        adapter["price"] = round(float(adapter["price"]) * self.rate, 2)
        self.priced += 1
        return item


class StockPipeline:
    def process_item(self, item, spider):
        item["available"] = item.get("stock", 0) > 0
        return item

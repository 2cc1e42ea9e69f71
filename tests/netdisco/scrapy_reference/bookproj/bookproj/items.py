import re

import scrapy
from itemloaders.processors import Join, MapCompose, TakeFirst


def parse_price(text):
    return text.replace("£", "").strip() or None


def parse_stock(text):
    found = re.search(r"\((\d+) available\)", text)
    return int(found.group(1)) if found else 0


class BookItem(scrapy.Item):
    title = scrapy.Field(input_processor=MapCompose(str.strip), output_processor=Join())
    price = scrapy.Field(input_processor=MapCompose(parse_price), output_processor=TakeFirst())
    stock = scrapy.Field(input_processor=MapCompose(parse_stock), output_processor=TakeFirst())
    available = scrapy.Field(output_processor=TakeFirst())
    path = scrapy.Field(output_processor=TakeFirst())

"""Spiders that the service tests start over HTTP (the engine's ``spider_modules``)."""

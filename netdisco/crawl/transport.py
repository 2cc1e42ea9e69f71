"""The default download handler: one request, one hop, over the spider's aiohttp session."""

from __future__ import annotations

import aiohttp

from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.settings import Settings
from netdisco.exceptions import InvalidURL, ResponseTooLarge


class AiohttpHandler:
    """Fetches a request without following redirects, stopping at ``max_response_size``."""

    def __init__(self, session: aiohttp.ClientSession, settings: Settings) -> None:
        self.session = session
        self.settings = settings

    async def fetch(self, request: Request) -> Response:
        """The response; aiohttp's network errors are raised as they are, for retries."""
        url = request.url
        try:
            async with self.session.request(
                request.method,
                url,
                headers=request.headers or None,
                data=request.body,
                proxy=request.proxy or self.settings.proxy,
                allow_redirects=False,
            ) as resp:
                data = await self._read(resp, url)
        except (aiohttp.InvalidURL, ValueError) as exc:
            raise InvalidURL(f"cannot request {url!r}: {exc}", url=url) from exc
        return Response(url, resp.status, resp.headers, data, request)

    async def _read(self, resp: aiohttp.ClientResponse, url: str) -> bytes:
        """The body, or ResponseTooLarge as soon as it passes ``max_response_size``."""
        limit = self.settings.max_response_size
        length = resp.content_length
        if limit and length is not None and length > limit:
            raise ResponseTooLarge(f"Content-Length {length} > {limit} bytes", url=url)
        if not limit or (length is not None and "Content-Encoding" not in resp.headers):
            return await resp.read()
        data = bytearray()
        async for chunk in resp.content.iter_any():
            data += chunk
            if len(data) > limit:
                raise ResponseTooLarge(f"body passed {limit} bytes", url=url)
        return bytes(data)

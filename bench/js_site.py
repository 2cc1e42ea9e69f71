"""A site of N pages whose links exist only after JavaScript runs (for render_bench.py)."""

from __future__ import annotations

from aiohttp import web

SCRIPT = """
const links = JSON.parse(document.body.dataset.links);
document.getElementById("links").innerHTML =
  links.map(href => `<a href="${href}">${href}</a>`).join("");
"""


def app(pages: str) -> web.Application:
    """Page n links to 2n+1 and 2n+2 (a binary tree: every page reachable from /p/0)."""
    count = int(pages)

    async def page(request: web.Request) -> web.Response:
        number = int(request.match_info["number"])
        children = [f'"/p/{c}"' for c in (2 * number + 1, 2 * number + 2) if c < count]
        body = (
            '<!doctype html><html><head><script src="/app.js"></script></head>'
            f"<body data-links='[{','.join(children)}]'><h1>page {number}</h1>"
            '<div id="links"></div><script>render()</script></body></html>'
        )
        return web.Response(text=body, content_type="text/html")

    async def script(request: web.Request) -> web.Response:
        return web.Response(text=f"function render() {{{SCRIPT}}}", content_type="text/javascript")

    application = web.Application()
    application.router.add_get("/p/{number:\\d+}", page)
    application.router.add_get("/app.js", script)
    return application

"""The loopback site the Scrapy-shaped spiders crawl, with Scrapy and with netdisco.

Quotes in pages and in a JSON API, author pages, a login form and a search form, and a
book catalogue with categories. Everything is made from the tables below, so that both
crawlers see the same bytes (``regenerate.py`` serves it to Scrapy, the tests to netdisco).
"""

from __future__ import annotations

import html
import json

from aiohttp import web

AUTHORS = {
    "albert-einstein": ("Albert Einstein", "March 14, 1879"),
    "jane-austen": ("Jane Austen", "December 16, 1775"),
    "mark-twain": ("Mark Twain", "November 30, 1835"),
}
QUOTES = [
    ("The world as we have created it is a process of our thinking.", "albert-einstein",
     ["change", "thinking"]),
    ("It is our choices that show what we truly are.", "jane-austen", ["choices"]),
    ("There are only two ways to live your life.", "albert-einstein", ["life", "miracles"]),
    ("The person, be it gentleman or lady, who has not pleasure in a good novel.", "jane-austen",
     ["books", "humor"]),
    ("Imperfection is beauty, madness is genius.", "mark-twain", ["be-yourself"]),
    ("Try not to become a man of success.", "albert-einstein", ["adulthood", "success"]),
    ("It is better to be hated for what you are.", "mark-twain", ["life", "love"]),
]  # fmt: skip
PER_PAGE = 3
BOOKS = {  # number -> title, price text, stock text, category
    1: ("A Light in the Attic", "£51.77", " In stock (22 available) ", "poetry"),
    2: ("Tipping the Velvet", "£53.74", " In stock (20 available) ", "historical"),
    3: ("Soumission", "£50.10", " In stock (20 available) ", "fiction"),
    4: ("Sharp Objects", "", " Out of stock ", "fiction"),
    5: ("Sapiens", "£54.23", " In stock (1 available) ", "history"),
    6: ("The Requiem Red", "£22.65", " In stock (19 available) ", "poetry"),
}
SECRETS = ["the cake is a lie", "the butler did it"]
LOGIN = {"csrf": "tok-7f3a", "username": "alice", "password": "s3cret", "lang": "en",
         "action": "login"}  # fmt: skip


def _page(body: str, title: str = "") -> web.Response:
    text = f"<!DOCTYPE html><html><head><title>{title}</title></head><body>{body}</body></html>"
    return web.Response(text=text, content_type="text/html")


def _pages() -> int:
    return (len(QUOTES) + PER_PAGE - 1) // PER_PAGE


async def quotes(request: web.Request) -> web.Response:
    number = int(request.match_info["n"])
    chosen = QUOTES[(number - 1) * PER_PAGE : number * PER_PAGE]
    if not chosen:
        raise web.HTTPNotFound()
    parts = []
    for text, slug, tags in chosen:
        links = "".join(f'<a class="tag" href="/tag/{t}/">{t}</a>' for t in tags)
        parts.append(
            f'<div class="quote"><span class="text">\u201c{html.escape(text)}\u201d</span>'
            f'<span>by <small class="author">{AUTHORS[slug][0]}</small> '
            f'<a href="/author/{slug}">(about)</a></span><div class="tags">{links}</div></div>'
        )
    if number < _pages():
        parts.append(f'<ul class="pager"><li class="next"><a href="/quotes/page/{number + 1}/">'
                     "Next</a></li></ul>")  # fmt: skip
    return _page("".join(parts), f"Quotes {number}")


async def api(request: web.Request) -> web.Response:
    number = int(request.query.get("page", "1"))
    chosen = QUOTES[(number - 1) * PER_PAGE : number * PER_PAGE]
    data = {
        "page": number,
        "has_next": number < _pages(),
        "quotes": [{"text": t, "author": AUTHORS[s][0], "author_slug": s, "tags": tags}
                   for t, s, tags in chosen],
    }  # fmt: skip
    return web.Response(text=json.dumps(data), content_type="application/json")


async def author(request: web.Request) -> web.Response:
    name, born = AUTHORS[request.match_info["slug"]]
    body = (f'<h3 class="author-title">{name}\n    </h3>'
            f'<span class="author-born-date">{born}</span>')  # fmt: skip
    return _page(body, name)


async def login_form(request: web.Request) -> web.Response:
    return _page(
        '<form id="search" action="/search" method="get"><input name="q"></form>'
        '<form id="login" action="/login" method="post">'
        f'<input type="hidden" name="csrf" value="{LOGIN["csrf"]}">'
        '<input name="username"><input type="password" name="password">'
        '<input type="checkbox" name="remember" value="1">'
        '<select name="lang"><option value="en">English</option>'
        '<option value="fr">Français</option></select>'
        '<input type="submit" name="action" value="login">'
        '<input type="submit" name="action" value="register"></form>',
        "Login",
    )


async def login(request: web.Request) -> web.Response:
    form = dict(await request.post())
    if form != LOGIN:
        return _page(f'<p class="denied">{html.escape(json.dumps(form))}</p>', "Denied")
    return _page("".join(f'<li class="secret">{s}</li>' for s in SECRETS), "Welcome")


async def search(request: web.Request) -> web.Response:
    wanted = request.query.get("q", "")
    found = [text for text, _, tags in QUOTES if wanted in tags]
    return _page("".join(f'<li class="result">{html.escape(t)}</li>' for t in found), "Search")


def _book_link(number: int) -> str:
    link = f'<a href="/catalogue/book-{number}.html">{BOOKS[number][0]}</a>'
    return f"<article><h3>{link}</h3></article>"


async def catalogue(request: web.Request) -> web.Response:
    categories = sorted({book[3] for book in BOOKS.values()})
    links = "".join(f'<li><a href="/catalogue/category/{c}/">{c}</a></li>' for c in categories)
    return _page(f"<ul>{links}</ul>" + _book_link(1), "Catalogue")


async def category(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    books = "".join(_book_link(n) for n, book in BOOKS.items() if book[3] == name)
    return _page(books + '<a href="/catalogue/">home</a>', name)


async def book(request: web.Request) -> web.Response:
    title, price, stock, kind = BOOKS[int(request.match_info["n"])]
    body = (f"<h1>{title}</h1><p class=\"price\">{price}</p><p class=\"stock\">{stock}</p>"
            f'<a href="/catalogue/category/{kind}/">{kind}</a>')  # fmt: skip
    return _page(body, title)


def make_app() -> web.Application:
    """The site as an aiohttp application."""
    app = web.Application()
    app.add_routes([
        web.get("/quotes/page/{n:\\d+}/", quotes),
        web.get("/api/quotes", api),
        web.get("/author/{slug}", author),
        web.get("/login", login_form),
        web.post("/login", login),
        web.get("/search", search),
        web.get("/catalogue/", catalogue),
        web.get("/catalogue/category/{name}/", category),
        web.get("/catalogue/book-{n:\\d+}.html", book),
    ])  # fmt: skip
    return app


async def serve() -> tuple[web.AppRunner, str]:
    """The site on a free loopback port: its runner (to clean up) and its base URL."""
    runner = web.AppRunner(make_app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"

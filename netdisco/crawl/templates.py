"""``netdisco new``: a spider file to start from, runnable, typed and lint-clean as written.

Each template is a complete module: ``netdisco crawl FILE.py:Class`` runs it at once, and
it passes ``ruff`` and ``mypy --strict`` unchanged (a test runs both on what it writes),
so a newcomer starts from code the tools accept.
"""

from __future__ import annotations

import json
import keyword
import re
from urllib.parse import urlsplit

from netdisco.exceptions import ConfigError

TEMPLATES = ("basic", "crawl")

_HEAD = '''"""The {name} spider: netdisco crawl {file}:{cls} -o items.jsonl"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from netdisco import Request, Response, Spider


class {cls}(Spider):
    name = "{name}"
    start_urls = ({url},)
    allowed_domains = ({host},)

    def parse(self, response: Response) -> Iterator[dict[str, Any] | Request]:
        """One item per page; {what}."""
        yield {{
            "url": response.url,
            "title": response.css("title::text").get(),
        }}
'''
_FOLLOW = """        yield from response.follow_all(css="a", callback=self.parse)
"""


def render(name: str, url: str, template: str = "basic") -> tuple[str, str]:
    """``(file name, source)`` of a new spider ``name`` starting at ``url``."""
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name) or keyword.iskeyword(name):
        raise ConfigError("NAME", f"expected a name of letters, digits and _, got {name!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("URL", f"expected an http:// or https:// URL, got {url!r}")
    if template not in TEMPLATES:
        raise ConfigError("--template", f"expected one of {', '.join(TEMPLATES)}")
    cls = "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)
    file = f"{name.lower()}.py"
    what = "the links it has are followed" if template == "crawl" else "add your selectors"
    url_text, host = json.dumps(url), json.dumps(parts.hostname)  # Python literals, "-quoted
    source = _HEAD.format(name=name.lower(), file=file, cls=cls, url=url_text, host=host, what=what)
    return file, source + (_FOLLOW if template == "crawl" else "")

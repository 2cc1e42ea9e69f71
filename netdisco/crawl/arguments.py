"""Spider arguments: ``-a name=value``, ``args = {...}`` in engine.toml, ``"args"`` over HTTP.

As in Scrapy, an argument becomes a keyword argument of the spider's constructor when
its ``__init__`` names it (or takes ``**kwargs``, as ``Spider.__init__`` does, which sets
them as attributes), and an attribute otherwise. Values are strings: the spider converts
them. Names must be identifiers that do not begin with an underscore and do not shadow a
method, a property or one of ``Spider``'s own attributes (``name``, ``start_urls``,
``custom_settings``, ...), and their number and size are bounded, so that an HTTP body
can neither replace ``parse`` nor fill the engine's memory.
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Mapping
from typing import Any

from netdisco.crawl.spider import Spider
from netdisco.exceptions import ConfigError, SpiderLoadError

MAX_ARGS = 64
MAX_NAME = 64
MAX_VALUE = 8192
_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def check_args(
    args: Any, spider_class: type[Spider] | None = None, *, key: str = "args.{name}"
) -> dict[str, str]:
    """``args`` checked (see the module docstring); errors name ``key`` with ``{name}``
    filled in (``-a {name}``, ``spiders[0].args.{name}``). Without ``spider_class`` only
    what needs no class is checked (a file is read before its spiders are imported)."""
    table = key.replace(".{name}", "").replace(" {name}", "")
    if not isinstance(args, Mapping):
        raise ConfigError(table, f'expected a table of name = "value" strings, got {args!r}')
    if len(args) > MAX_ARGS:
        raise ConfigError(table, f"at most {MAX_ARGS} arguments, got {len(args)}")
    for name, value in args.items():
        where = key.replace("{name}", str(name))
        problem = _name_problem(name, spider_class) or _value_problem(value)
        if problem is not None:
            raise ConfigError(where, problem)
    return dict(args)


def _name_problem(name: Any, spider_class: type[Spider] | None) -> str | None:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        return f"an argument name must be a Python identifier, got {name!r}"
    if name.startswith("_") or len(name) > MAX_NAME:
        return f"an argument name must not begin with '_' nor pass {MAX_NAME} characters"
    if hasattr(Spider, name):
        return f"would replace Spider.{name}; spider arguments cannot change it"
    found = None if spider_class is None else inspect.getattr_static(spider_class, name, None)
    if callable(found) or isinstance(found, property | classmethod | staticmethod):
        return f"would replace the spider's method {name}"
    return None


def _value_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"expected a string (the spider converts it), got {value!r}"
    if len(value) > MAX_VALUE:
        return f"longer than {MAX_VALUE} characters"
    return None


def make_spider(spider_class: type[Spider], args: Mapping[str, str] | None = None) -> Spider:
    """An instance of ``spider_class`` given ``args``: keyword arguments of its ``__init__``
    where it takes them, attributes otherwise. A constructor that raises is a
    ``SpiderLoadError`` naming the class."""
    args = dict(args or {})
    params = inspect.signature(spider_class.__init__).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    keywords = {name: value for name, value in args.items()
                if takes_all or (name in params and params[name].kind in _KEYWORD)}  # fmt: skip
    try:
        spider = spider_class(**keywords)
    except Exception as exc:
        raise SpiderLoadError(f"{spider_class.__name__}(**{keywords!r}) failed: {exc!r}") from exc
    for name, value in args.items():
        if name not in keywords:
            setattr(spider, name, value)
    return spider

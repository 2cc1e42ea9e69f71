"""HTML forms as requests: ``FormRequest`` and ``FormRequest.from_response``, as in Scrapy.

A form's fields are read with lxml's form elements (the parser parsel already built for
the page), the way a browser submits them: unchecked boxes and the buttons not clicked
left out, a ``<select>`` with nothing selected sending its first option. ``formdata``
overrides or adds fields; the first submit button is clicked unless ``dont_click``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import urlencode, urlsplit, urlunsplit

from lxml.html import FormElement, HtmlElement
from parsel.csstranslator import css2xpath

from netdisco.crawl.request import Request

if TYPE_CHECKING:
    from netdisco.crawl.response import Response

#: what ``formdata`` may be: a mapping or pairs, a value a string or a list of them
FormData: TypeAlias = "Mapping[str, Any] | Iterable[tuple[str, Any]]"
#: a form's inputs that are sent (Scrapy's choice: no buttons, checked boxes only)
_INPUTS = (
    "descendant::textarea|descendant::select|descendant::input[not(@type) or @type[not(re:test(.,"
    ' "^(?:submit|image|reset)$", "i")) and (../@checked or not(re:test(., "^(?:checkbox|radio)$",'
    ' "i")))]]'
)
#: a form's submit buttons, in document order
_CLICKABLES = (
    'descendant::input[re:test(@type, "^(submit|image)$", "i")]'
    '|descendant::button[not(@type) or re:test(@type, "^submit$", "i")]'
)
_NS = {"re": "http://exslt.org/regular-expressions"}


class FormRequest(Request):
    """A request that submits ``formdata``: as a ``POST`` body (the default when there is
    formdata and no method), or as the query of a ``GET``."""

    __slots__ = ()

    def __init__(self, url: str, *args: Any, formdata: FormData | None = None, **kwargs: Any):
        explicit = "method" in kwargs or any(isinstance(arg, str) for arg in args)
        super().__init__(url, *args, **kwargs)
        if formdata is None:
            return
        if not explicit:
            self.method = "POST"
        query = urlencode(_pairs(formdata), doseq=True)
        if self.method.upper() == "POST":
            self.body = query.encode()
            self.headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        else:
            parts = urlsplit(self.url)
            joined = f"{parts.query}&{query}" if parts.query else query
            self.url = urlunsplit(parts._replace(query=joined))

    @classmethod
    def from_response(
        cls,
        response: Response,
        formname: str | None = None,
        formid: str | None = None,
        formnumber: int = 0,
        formdata: FormData | None = None,
        clickdata: Mapping[str, Any] | None = None,
        dont_click: bool = False,
        formxpath: str | None = None,
        formcss: str | None = None,
        **kwargs: Any,
    ) -> FormRequest:
        """A request that submits a form of ``response`` (the first, or the one named by
        ``formname``, ``formid``, ``formxpath``, ``formcss`` or ``formnumber``), its fields
        filled as the page has them, then ``formdata``."""
        if formcss is not None:
            formxpath = css2xpath(formcss)
        form = _find_form(response, formname, formid, formnumber, formxpath)
        given = dict(_pairs(formdata or {}))
        values: list[tuple[str, Any]] = [pair for pair in _fields(form) if pair[0] not in given]
        if not dont_click:
            clicked = _clicked(form, clickdata)
            if clicked is not None and clicked[0] not in given:
                values.append(clicked)
        values.extend((name, value) for name, value in given.items() if value is not None)
        method = kwargs.pop("method", form.method or "GET").upper()
        url = kwargs.pop("url", None) or _action(response, form)
        return cls(url, method=method, formdata=values, **kwargs)


def _pairs(data: FormData) -> list[tuple[str, Any]]:
    items = data.items() if isinstance(data, Mapping) else data
    return [(str(name), value) for name, value in items]


def _find_form(
    response: Response, name: str | None, ident: str | None, number: int, xpath: str | None
) -> FormElement:
    root: HtmlElement = response.selector.root
    forms = root.xpath("//form")
    if not forms:
        raise ValueError(f"no <form> element found in {response}")
    for attribute, value in (("name", name), ("id", ident)):
        if value is not None:
            found = root.xpath(f"//form[@{attribute}=$value]", value=value)
            if found:
                return found[0]
    if xpath is not None:
        for element in root.xpath(xpath):
            if element.tag == "form":
                return element
            ancestor = next(element.iterancestors("form"), None)
            if ancestor is not None:
                return ancestor
        raise ValueError(f"no <form> element found with {xpath}")
    if not 0 <= number < len(forms):
        raise IndexError(f"form number {number} not found in {response}")
    chosen: FormElement = forms[number]
    return chosen


def _fields(form: FormElement) -> list[tuple[str, Any]]:
    """The fields a browser would send, in document order (no button)."""
    pairs: list[tuple[str, Any]] = []
    for element in form.xpath(_INPUTS, namespaces=_NS):
        name = element.get("name")
        if not name:
            continue
        if element.tag == "select":
            value = element.value
            if value is None and not element.multiple:
                options = element.value_options
                value = options[0] if options else None
            if value is None:
                continue
        else:
            value = element.value if element.tag == "textarea" else element.get("value", "")
        if isinstance(value, Iterable) and not isinstance(value, str):
            pairs.extend((name, v) for v in value)
        else:
            pairs.append((name, "" if value is None else value))
    return pairs


def _clicked(form: FormElement, clickdata: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """The submit button clicked: the first, or the one ``clickdata`` describes (its
    attributes, or ``nr``: its index among the form's buttons)."""
    buttons = [b for b in form.xpath(_CLICKABLES, namespaces=_NS) if b.get("name")]
    if not buttons:
        return None
    if clickdata is None:
        chosen = buttons[0]
    elif "nr" in clickdata:
        chosen = buttons[int(clickdata["nr"])]
    else:
        wanted = {k: str(v) for k, v in clickdata.items()}
        matches = [b for b in buttons if all(b.get(k) == v for k, v in wanted.items())]
        if not matches:
            raise ValueError(f"no clickable element matching clickdata {dict(clickdata)!r}")
        chosen = matches[0]
    return chosen.get("name"), chosen.get("value", "")


def _action(response: Response, form: FormElement) -> str:
    action = form.get("action")
    if action is None or not action.strip():
        return response.url
    return response.urljoin(action.strip())

"""The HTML Standard's encoding sniffing (``netdisco.crawl.encoding``): the order of the
steps, the prescan's rules, and html5lib-tests' encoding cases."""

from __future__ import annotations

import pytest
import webencodings

from netdisco import Request, Response
from netdisco.crawl.encoding import sniff
from tests.html5lib_encoding import cases
from tests.netdisco.sites import TEXTS

#: needs a script run (document.write) to see the declaration: a crawler reads markup
NEEDS_SCRIPT = {"tests1.dat:54"}


def page(body: bytes, content_type: str = "text/html") -> Response:
    url = "http://a.test/"
    return Response(url, 200, {"Content-Type": content_type}, body, Request(url))


@pytest.mark.parametrize(
    ("body", "content_type", "encoding", "reason"),
    [
        (b"\xef\xbb\xbf<p>x", "text/html; charset=iso-8859-2", "utf-8", "bom"),
        (b'<meta charset="utf-8"><p>x', "text/html; charset=latin1", "windows-1252", "header"),
        (b'<meta charset="UTF-16"><p>ascii', "text/html", "utf-8", "meta"),
        (b'<meta charset="x-user-defined"><p>x', "text/html", "windows-1252", "meta"),
        (b'<meta charset="bogus"><meta charset="iso-8859-2">', "text/html", "iso-8859-2", "meta"),
        (b"<!--" + b"x" * 8192 + b'--><meta charset="koi8-r">', "text/html", "koi8-r", "meta"),
        (
            b'<meta http-equiv="Content-Type" content="text/html; charset=sjis">',
            "",
            "shift_jis",
            "meta",
        ),
        (b'<meta content="text/html; charset=sjis">', "", "windows-1252", "default"),
        (b'<!-- <meta charset="koi8-r"> -->', "", "windows-1252", "default"),
        (b"<p>plain ASCII", "text/html; charset=no-such-label", "windows-1252", "default"),
        ("<p>naïve — ok</p>".encode(), "text/html", "utf-8", "detected"),
    ],
)
def test_the_steps_in_order(body: bytes, content_type: str, encoding: str, reason: str) -> None:
    response = page(body, content_type)
    assert response.text is not None
    assert (response.encoding, response.encoding_reason) == (encoding, reason)


def test_a_meta_utf16_on_an_ascii_page_reads_as_utf8() -> None:
    response = page('<meta charset="UTF-16"><p>café</p>'.encode())
    assert response.css("p::text").get() == "café"


def test_an_undeclared_legacy_page_is_read_in_a_web_encoding() -> None:
    body = f"<html><body><p>{TEXTS['latin-1']}</p></body></html>".encode("cp1252")
    response = page(body)
    assert response.css("p::text").get() == TEXTS["latin-1"]
    assert response.encoding_reason == "detected"
    assert webencodings.lookup(response.encoding or "") is not None  # never johab


def test_html5lib_encoding_cases() -> None:
    failed = []
    every = list(cases())
    for name, body, label in every:
        expected = webencodings.lookup(label)
        assert expected is not None, label
        if sniff(body).encoding.name != expected.name and name not in NEEDS_SCRIPT:
            failed.append((name, label, sniff(body)))
    assert failed == []
    assert len(every) == 83

"""Scrapy on html5lib-tests' encoding cases (tests/html5lib_encoding.py), served with no
charset: does ``HtmlResponse.encoding`` name the encoding the HTML Standard picks?

    PYTHONPATH=. /tmp/scrapyvenv/bin/python bench/html5lib_encoding_scrapy.py

Names are compared as Python codecs (Scrapy names codecs, the data WHATWG labels).
"""

from __future__ import annotations

import codecs

import scrapy
import webencodings
from scrapy.http import HtmlResponse

from tests.html5lib_encoding import cases


def same(python_name: str, label: str) -> bool:
    """Whether a Python codec name is the WHATWG encoding ``label`` names."""
    expected = webencodings.lookup(label)
    return codecs.lookup(python_name).name == codecs.lookup(expected.codec_info.name).name


if __name__ == "__main__":
    every = list(cases())
    passed = sum(
        same(HtmlResponse("http://a.test/", body=body).encoding, label) for _, body, label in every
    )
    print(f"scrapy {scrapy.__version__}: {passed}/{len(every)} = {100 * passed / len(every):.1f} %")

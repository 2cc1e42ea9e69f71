"""Finding the user's spider from ``FILE.py:Class`` or ``module:Class``, and saying why not."""

from __future__ import annotations

from pathlib import Path

import pytest

from netdisco.crawl.loader import load_spider
from netdisco.exceptions import SpiderLoadError
from tests.netdisco.sites import EXAMPLES


def test_file_reference() -> None:
    spider = load_spider(f"{EXAMPLES / 'local_site.py'}:Catalogue")
    assert (spider.__name__, spider.name) == ("Catalogue", "catalogue")
    assert load_spider(f"{EXAMPLES / 'local_site.py'}:Catalogue") is spider  # loaded once


def test_module_reference() -> None:
    spider = load_spider("tests.netdisco.sites:PageSpider")
    assert spider.name == "pages"


def _write(tmp_path: Path, source: str) -> str:
    path = tmp_path / "spiders.py"
    path.write_text(source)
    return str(path)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no_colon.py", "expected FILE.py:Class or module:Class"),
        ("spiders.py:", "expected FILE.py:Class or module:Class"),
        (":Class", "expected FILE.py:Class or module:Class"),
        ("/no/such/file.py:Spider", "no such file: /no/such/file.py"),
        ("no_such_module_here:Spider", "cannot import module 'no_such_module_here'"),
        ("tests.netdisco.sites:Missing", "Missing is not a netdisco Spider subclass"),
        ("tests.netdisco.sites:Site", "Site is not a netdisco Spider subclass"),
        ("tests.netdisco.sites:FAST", "FAST is not a netdisco Spider subclass"),
    ],
)
def test_bad_references(ref: str, message: str) -> None:
    with pytest.raises(SpiderLoadError, match=message):
        load_spider(ref)


def test_file_that_fails_to_load(tmp_path: Path) -> None:
    path = _write(tmp_path, "import netdisco\nraise RuntimeError('boom at import')\n")
    with pytest.raises(SpiderLoadError, match=r"error while loading .*boom at import"):
        load_spider(f"{path}:Anything")
    broken = _write(tmp_path, "class Oops(:\n")
    with pytest.raises(SpiderLoadError, match=r"error while loading .*SyntaxError"):
        load_spider(f"{broken}:Oops")


def test_module_that_fails_to_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "explodes_on_import.py").write_text("1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        SpiderLoadError, match=r"error while importing .explodes_on_import.: ZeroDivisionError"
    ):
        load_spider("explodes_on_import:Spider")

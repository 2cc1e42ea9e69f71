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
        ("tests.netdisco.sites:Missing", "sites has no class .Missing.; it has: "),
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
    with pytest.raises(SpiderLoadError, match=r"error while loading (.|\n)*SyntaxError"):
        load_spider(f"{broken}:Oops")


def test_a_syntax_error_is_shown_with_its_file_line_and_caret(tmp_path: Path) -> None:
    """As Python shows it, not as the repr of a SyntaxError and its tuple."""
    broken = _write(tmp_path, "class Shop:\n    def parse(self, response)\n        pass\n")
    with pytest.raises(SpiderLoadError) as caught:
        load_spider(f"{broken}:Shop")
    assert str(caught.value).splitlines() == [
        f"error while loading {broken}: ",
        f'  File "{broken}", line 2',
        "    def parse(self, response)",
        "                             ^",
        "SyntaxError: expected ':'",
    ]


def test_module_that_fails_to_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "explodes_on_import.py").write_text("1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        SpiderLoadError, match=r"error while importing .explodes_on_import.: ZeroDivisionError"
    ):
        load_spider("explodes_on_import:Spider")


SPIDER = "from netdisco import Spider\n{extra}\nclass Catalogue(Spider):\n    name = 'c'\n"


def test_a_spider_file_imports_the_module_beside_it(tmp_path: Path) -> None:
    (tmp_path / "helpers_beside.py").write_text("PRICE = 3\n")
    path = tmp_path / "catalogue_beside.py"
    path.write_text(SPIDER.format(extra="from helpers_beside import PRICE"))
    assert load_spider(f"{path}:Catalogue").name == "c"


def test_module_reference_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "catalogue_in_cwd.py").write_text(SPIDER.format(extra=""))
    monkeypatch.chdir(tmp_path)
    assert load_spider("catalogue_in_cwd:Catalogue").name == "c"


def test_a_missing_class_is_named_as_missing(tmp_path: Path) -> None:
    path = tmp_path / "catalogue.py"
    path.write_text(SPIDER.format(extra=""))
    with pytest.raises(SpiderLoadError) as caught:
        load_spider(f"{path}:Catalog")
    assert str(caught.value) == "catalogue.py has no class 'Catalog'; it has: Catalogue"


def test_a_missing_module_names_the_file_that_imports_it(tmp_path: Path) -> None:
    (tmp_path / "helper_imports_scrapy.py").write_text("import os\nimport scrapy\n")
    path = tmp_path / "uses_helper.py"
    path.write_text(SPIDER.format(extra="import helper_imports_scrapy"))
    with pytest.raises(SpiderLoadError) as caught:
        load_spider(f"{path}:Catalogue")
    message = str(caught.value)
    assert f"{tmp_path / 'helper_imports_scrapy.py'}, line 2 imports 'scrapy'" in message
    assert "import netdisco as scrapy" in message
    (tmp_path / "needs_lib.py").write_text("import no_such_lib_anywhere\n")
    with pytest.raises(SpiderLoadError, match="put the directory that holds no_such_lib_anywhere"):
        load_spider(f"{tmp_path / 'needs_lib.py'}:X")

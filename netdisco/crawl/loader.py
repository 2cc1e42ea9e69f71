"""Find the user's spider class from ``FILE.py:Class`` or ``module:Class``.

As ``scrapy runspider`` and engines do, a spider file imports the modules beside it and
those of the current directory (a project's root, whose package the file imports): both
are on ``sys.path`` while it loads, and ``module:Class`` is found from the current
directory too. Each failure names what is missing: a class (with the spider classes there
are), or a module (with the file that imports it, and what to do).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

from netdisco.crawl.spider import Spider
from netdisco.exceptions import SpiderLoadError


def load_spider(ref: str) -> type[Spider]:
    """The Spider subclass named by ``ref``; a clear ``SpiderLoadError`` otherwise."""
    target, sep, class_name = ref.rpartition(":")
    if not sep or not target or not class_name:
        raise SpiderLoadError(f"{ref!r}: expected FILE.py:Class or module:Class")
    is_file = target.endswith(".py")
    module = _load_file(target) if is_file else _import(target)
    spider = getattr(module, class_name, None)
    if spider is None:
        where = Path(target).name if is_file else f"module {target}"
        found = ", ".join(spider_classes(module)) or "no Spider subclass"
        raise SpiderLoadError(f"{where} has no class {class_name!r}; it has: {found}")
    if not (isinstance(spider, type) and issubclass(spider, Spider)):
        raise SpiderLoadError(f"{ref!r}: {class_name} is not a netdisco Spider subclass"
                              + _scrapy_hint(spider))  # fmt: skip
    return spider


def spider_classes(module: object) -> list[str]:
    """The names of the Spider subclasses ``module`` defines (or, if none, imports)."""
    found = {
        name: value
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, Spider) and value is not Spider
    }
    own = [name for name, cls in found.items() if cls.__module__ == getattr(module, "__name__", "")]
    return sorted(own or found)


def _scrapy_hint(value: object) -> str:
    bases = getattr(value, "__mro__", ())
    if any(getattr(base, "__module__", "").startswith("scrapy") for base in bases):
        return " (it is a Scrapy spider: write `import netdisco as scrapy`, docs/scrapy.md)"
    return ""


@contextlib.contextmanager
def on_path(directory: str | Path) -> Iterator[None]:
    """``directory`` first on ``sys.path`` while the block runs (unless it is there)."""
    entry = str(directory)
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        if added and entry in sys.path:
            sys.path.remove(entry)


def _import(name: str) -> object:
    try:
        with on_path(os.getcwd()):
            return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.startswith(exc.name):  # the module itself
            raise SpiderLoadError(f"cannot import module {name!r}: {exc}") from exc
        raise SpiderLoadError(missing_module(exc, name)) from exc
    except ImportError as exc:
        raise SpiderLoadError(f"cannot import module {name!r}: {exc}") from exc
    except Exception as exc:  # the module itself failed: say which, not a traceback
        raise SpiderLoadError(f"error while importing {name!r}: {import_failure(exc)}") from exc


def _load_file(path_text: str) -> object:
    path = Path(path_text).resolve()
    if not path.is_file():
        raise SpiderLoadError(f"no such file: {path_text}")
    name = f"netdisco_spider_{path.stem}_{abs(hash(path)):x}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SpiderLoadError(f"cannot load {path_text}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with on_path(os.getcwd()), on_path(path.parent):  # the file's directory first
            spec.loader.exec_module(module)
    except ModuleNotFoundError as exc:
        del sys.modules[name]
        raise SpiderLoadError(missing_module(exc, path_text)) from exc
    except Exception as exc:
        del sys.modules[name]
        raise SpiderLoadError(f"error while loading {path_text}: {import_failure(exc)}") from exc
    return module


def import_failure(exc: BaseException) -> str:
    """Why user code did not import, as Python says it: a ``SyntaxError`` with its file,
    its line and a caret under the place (not the tuple its repr holds), a Scrapy name
    netdisco lacks with what to do, any other error as ``Type: message``."""
    if isinstance(exc, SyntaxError):
        return "\n" + "".join(traceback.format_exception_only(exc)).rstrip()
    if isinstance(exc, ImportError) and (exc.name or "").partition(".")[0] == "scrapy":
        wanted = re.search(r"cannot import name '([^']+)'", str(exc))
        lacked = f"{exc.name}.{wanted[1]}" if wanted else str(exc.name)
        where = _where(exc) or "the spider"
        return f"{where} imports {lacked}: {_scrapy_hint_for(lacked)}"
    return "".join(traceback.format_exception_only(exc)).strip()


def missing_module(exc: ModuleNotFoundError, loading: str) -> str:
    """``No module named 'x'``, with the file and line that import it and what to do."""
    top = (exc.name or "?").partition(".")[0]
    if top == "scrapy":
        hint = _scrapy_hint_for(exc.name or top)
    else:
        hint = (f"install it (pip install), or put the directory that holds {top} on "
                "PYTHONPATH: the spider file's own directory and the current directory "
                f"({os.getcwd()}) are the only ones searched")  # fmt: skip
    where = _where(exc) or loading
    return f"error while loading {loading}: {where} imports {exc.name!r}, not found: {hint}"


def _where(exc: BaseException) -> str:
    """The file and line of user code where ``exc`` was raised ("" when none)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    return f"{frames[-1].filename}, line {frames[-1].lineno}" if frames else ""


def _scrapy_hint_for(name: str) -> str:
    """What to do about ``scrapy.x.Name``: netdisco's own name for it when there is one
    (``import scrapy`` is mapped only beside scrapy.cfg), else that there is none."""
    from netdisco.crawl.scrapyproject import scrapy_modules  # it imports this module

    modules = scrapy_modules()
    module, _, attribute = name.rpartition(".")
    has = name in modules or (module in modules and hasattr(modules[module], attribute))
    if has and sys.modules.get("scrapy") is not modules["scrapy"]:
        return ("netdisco runs Scrapy spiders without Scrapy: in a spider file write "
                "`import netdisco as scrapy` (and `from netdisco import ...` for scrapy's "
                "submodules, docs/scrapy.md); in a Scrapy project run `netdisco crawl "
                "NAME` in the directory of scrapy.cfg, which maps `import scrapy`")  # fmt: skip
    provided = ", ".join(sorted(modules))
    return (f"netdisco has no counterpart of {name} (its Scrapy modules: {provided}; "
            "docs/scrapy.md says what each holds): remove that import and the code that "
            "uses it, or run this spider with Scrapy itself")  # fmt: skip

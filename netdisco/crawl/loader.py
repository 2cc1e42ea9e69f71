"""Find the user's spider class from ``FILE.py:Class`` or ``module:Class``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from netdisco.crawl.spider import Spider
from netdisco.exceptions import SpiderLoadError


def load_spider(ref: str) -> type[Spider]:
    """The Spider subclass named by ``ref``; a clear ``SpiderLoadError`` otherwise."""
    target, sep, class_name = ref.rpartition(":")
    if not sep or not target or not class_name:
        raise SpiderLoadError(f"{ref!r}: expected FILE.py:Class or module:Class")
    module = _load_file(target) if target.endswith(".py") else _import(target)
    spider = getattr(module, class_name, None)
    if not (isinstance(spider, type) and issubclass(spider, Spider)):
        raise SpiderLoadError(f"{ref!r}: {class_name} is not a netdisco Spider subclass")
    return spider


def _import(name: str) -> object:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise SpiderLoadError(f"cannot import module {name!r}: {exc}") from exc
    except Exception as exc:  # the module itself failed: say which, not a traceback
        raise SpiderLoadError(f"error while importing {name!r}: {exc!r}") from exc


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
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise SpiderLoadError(f"error while loading {path_text}: {exc!r}") from exc
    return module

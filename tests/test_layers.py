"""The layers of docs/architecture.md, enforced: no import crosses a layer upwards.

Every module of ``netdisco`` and ``monitor`` is parsed (not imported), so lazy
imports inside functions and ``TYPE_CHECKING`` imports count too.
"""

from __future__ import annotations

import ast
import functools
import gc
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

BASE = {"netdisco._version", "netdisco.exceptions", "netdisco.values", "netdisco.schema",
        "netdisco.serving", "netdisco._tasks", "netdisco._fence",
        "netdisco.logs"}  # fmt: skip

#: layer -> the layers it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "base": set(),
    "cluster": {"base"},
    "frontiers": {"base"},  # and cluster, from CLUSTER_USERS_IN_FRONTIERS only
    "crawl": {"base", "frontiers"},
    "projects": {"base", "cluster"},
    "engine": {"base", "cluster", "frontiers", "crawl", "projects"},
    "monitor": {"base", "cluster", "projects"},
    "top": {"base", "cluster", "frontiers", "crawl", "engine", "projects", "top"},
}

#: the one frontier module that may use the cluster layer: it watches the registry
CLUSTER_USERS_IN_FRONTIERS = {"netdisco.frontiers.redis.recovery"}


def layer(module: str) -> str | None:
    """The layer a module of ours belongs to; None for third-party modules."""
    if module in BASE or module == "netdisco":
        return "base" if module in BASE else "top"
    parts = module.split(".")
    if parts[0] == "monitor":
        return "monitor"
    if parts[0] != "netdisco":
        return None
    if parts[1] in ("cluster", "frontiers", "crawl", "engine", "projects"):
        return parts[1]
    return "top"  # cli, demo, testing, _servers, _polling, __init__


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def parse(text: str) -> ast.Module:
    """``ast.parse`` once per text, with the garbage collector held off meanwhile.

    A leaked socket of an earlier test, collected in the middle of the parse, warns,
    and the warning's traceback parses source itself: CPython 3.11 then fails the
    outer parse with "SystemError: AST constructor recursion depth mismatch".
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(text)
    finally:
        if enabled:
            gc.enable()


def imports(path: Path, source: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in a file, relative ones resolved."""
    tree = parse(path.read_text(encoding="utf-8"))
    package = source if path.name == "__init__.py" else source.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def violations(path: Path, source: str | None = None) -> list[str]:
    """Each import in ``path`` (module ``source``) that its layer may not make."""
    source = source or module_name(path)
    own = layer(source)
    assert own is not None
    bad = []
    for line, target in imports(path, source):
        theirs = layer(resolve(target))
        if theirs is None or theirs == own:
            continue
        if theirs == "cluster" and own == "frontiers" and source in CLUSTER_USERS_IN_FRONTIERS:
            continue
        if theirs not in ALLOWED[own]:
            bad.append(f"{path.relative_to(ROOT)}:{line}: {own} imports {theirs} ({target})")
    return bad


def resolve(dotted: str) -> str:
    """The module a dotted import target names (``a.b.Name`` -> ``a.b``)."""
    parts = dotted.split(".")
    while len(parts) > 1 and not _is_module(".".join(parts)):
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def sources() -> list[Path]:
    return sorted([*ROOT.glob("netdisco/**/*.py"), *ROOT.glob("monitor/**/*.py")])


def test_every_module_belongs_to_a_layer() -> None:
    assert len(sources()) > 40
    for path in sources():
        assert layer(module_name(path)) is not None, path


def test_no_import_crosses_a_layer_upwards() -> None:
    problems = [problem for path in sources() for problem in violations(path)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("source", "statement"),
    [
        ("netdisco/crawl/downloader.py", "from netdisco.engine.engine import SpiderEngine"),
        ("netdisco/crawl/crawler.py", "from netdisco.cluster import registry"),
        ("netdisco/cluster/registry.py", "import netdisco.engine.api"),
        ("netdisco/frontiers/memory.py", "from netdisco.crawl.request import Request"),
        ("netdisco/frontiers/redis/frontier.py", "from netdisco.cluster.zk import Bridge"),
        ("monitor/watcher.py", "from netdisco.crawl import settings"),
        ("netdisco/exceptions.py", "from netdisco.cluster.contract import EventType"),
    ],
)
def test_an_upward_import_added_by_hand_is_caught(
    tmp_path: Path, source: str, statement: str
) -> None:
    """The check fails for each kind of upward import (the file is copied, not edited)."""
    original = ROOT / source
    copy = original.parent / f"_layer_probe_{original.name}"
    text = original.read_text(encoding="utf-8")
    copy.write_text(f"{text}\n\ndef _probe() -> None:\n    {statement}\n", encoding="utf-8")
    try:
        found = violations(copy, module_name(original))
    finally:
        copy.unlink()
    assert found, f"{statement!r} in {source} was not caught"
    assert all(statement.split()[1] in problem for problem in found), found


#: a module aims at about 400 lines, and may reach this when that keeps one concept in one
#: file: modules are split by concept, never to meet a number
MODULE_LINES = 600


def test_no_module_over_600_lines_and_no_function_over_40() -> None:
    """Short modules and functions keep the data flow readable (the house rule, enforced)."""
    long_modules, long_functions = [], []
    for path in sources():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MODULE_LINES:
            long_modules.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > 40:
                    long_functions.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not long_modules, long_modules
    assert not long_functions, long_functions


def is_testing(module: str) -> bool:
    return module == "netdisco.testing" or module.startswith("netdisco.testing.")


def imports_of_testing(path: Path, source: str | None = None) -> list[str]:
    """Each import of ``netdisco.testing`` in ``path`` (none are allowed outside it)."""
    source = source or module_name(path)
    if is_testing(source):
        return []
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [
        f"{shown}:{line}: imports {target}"
        for line, target in imports(path, source)
        if is_testing(resolve(target))
    ]


def test_no_shipped_module_imports_netdisco_testing() -> None:
    """Test helpers stay out of production: netdisco, monitor, the demo and the examples."""
    shipped = [*sources(), *sorted(ROOT.glob("examples/**/*.py"))]
    problems = [problem for path in shipped for problem in imports_of_testing(path)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "statement",
    [
        "from netdisco.testing import free_port",
        "import netdisco.testing",
        "from netdisco.testing.http import serve",
        "from netdisco import testing",
    ],
)
def test_an_import_of_netdisco_testing_added_by_hand_is_caught(
    statement: str, tmp_path: Path
) -> None:
    """The copy is read as the module it copies, from outside the tree: a file written
    into the tree would race the tests that walk it (run in parallel)."""
    original = ROOT / "netdisco/demo/story.py"
    copy = tmp_path / "story.py"
    text = original.read_text(encoding="utf-8")
    copy.write_text(f"{text}\n\ndef _probe() -> None:\n    {statement}\n", encoding="utf-8")
    found = imports_of_testing(copy, module_name(original))
    assert found, f"{statement!r} was not caught"


def test_importing_every_shipped_module_leaves_netdisco_testing_out() -> None:
    """Imported for real, in a fresh interpreter: the CLI, the demo, the monitor, all of it."""
    names = [name for name in map(module_name, sources()) if not is_testing(name)]
    script = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] == ['netdisco', 'testing']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout

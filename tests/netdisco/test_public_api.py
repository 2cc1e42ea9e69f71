"""``netdisco``'s public surface: what ``__all__`` names, and what README and examples import."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import netdisco

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_resolves_to_its_defining_object() -> None:
    for name in netdisco.__all__:
        value = getattr(netdisco, name)
        assert value is not None, name
        module = getattr(value, "__module__", None)
        if module is not None and module.startswith("netdisco."):
            assert getattr(sys.modules[module], name) is value, name


def test_the_docstring_names_every_public_name() -> None:
    doc = netdisco.__doc__ or ""
    missing = [n for n in netdisco.__all__ if n != "__version__" and f"``{n}``" not in doc]
    assert not missing, f"not documented in netdisco's docstring: {missing}"


def test_an_unknown_name_is_an_attribute_error() -> None:
    assert not hasattr(netdisco, "NoSuchThing")


def test_import_netdisco_leaves_the_engine_layer_unloaded() -> None:
    """The monitor imports ``netdisco`` (its base modules) and must not pay for the engine."""
    script = (
        "import sys, netdisco\n"
        "print(sorted(m for m in sys.modules if m.startswith('netdisco.engine')))\n"
        "from netdisco import SpiderEngine\n"
        "print(SpiderEngine.__module__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.split("\n")[:2] == ["[]", "netdisco.engine.engine"], result.stdout


def top_level_imports(text: str) -> set[str]:
    """Every name of ``from netdisco import ...`` statements in Python source."""
    names = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module == "netdisco" and not node.level:
            names |= {alias.name for alias in node.names}
    return names


def test_readme_and_examples_import_only_public_names_from_netdisco() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    names: set[str] = set()
    for block in blocks:
        names |= {n for line in block.splitlines() for n in _from_netdisco(line)}
    for path in sorted((ROOT / "examples").glob("*.py")):
        names |= top_level_imports(path.read_text(encoding="utf-8"))
    assert names, "README and examples import nothing from netdisco?"
    assert names <= set(netdisco.__all__), names - set(netdisco.__all__)


def _from_netdisco(line: str) -> list[str]:
    match = re.match(r"\s*from netdisco import (.+)", line)
    return [n.strip() for n in match[1].strip("()").split(",") if n.strip()] if match else []


def listed_modules() -> list[str]:
    text = (ROOT / "docs" / "internals.md").read_text(encoding="utf-8")
    return re.findall(r"^\| `([\w.*]+)` \|", text, flags=re.MULTILINE)


def test_docs_internals_lists_every_module() -> None:
    rows = listed_modules()
    exact = {row for row in rows if not row.endswith(".*")}
    packages = tuple(row[:-1] for row in rows if row.endswith(".*"))  # the package and below
    unlisted = []
    for path in sorted([*ROOT.glob("netdisco/**/*.py"), *ROOT.glob("monitor/**/*.py")]):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        module = ".".join(parts)
        if module not in exact and not f"{module}.".startswith(packages):
            unlisted.append(module)
    assert not unlisted, f"add these to docs/internals.md: {unlisted}"
    assert len(rows) == len(set(rows)), "a module is listed twice"

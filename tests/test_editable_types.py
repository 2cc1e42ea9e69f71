"""After the README's editable install, mypy in a project outside the checkout finds
``netdisco`` and its types (a path entry, not setuptools' import hook).

A virtual environment of its own, the checkout installed into it with the README's
command (its ``-e`` and flags; dependencies left out, mypy only reads netdisco's
sources), then ``mypy --strict`` on a small application that embeds an engine, and a
wrong use of the API that mypy must catch.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = """\
from netdisco import CrawlResult, EngineSettings, Spider, SpiderEngine


class Titles(Spider):
    name = "titles"


async def crawl(engine: SpiderEngine, url: str) -> CrawlResult:
    return await engine.crawl(Titles, [url])


engine = SpiderEngine(EngineSettings(http=False, advertise_url="http://127.0.0.1:8080/x"))
"""
WRONG = "from netdisco import SpiderEngine\n\nport: str = SpiderEngine().port\n"


def readme_install_flags() -> list[str]:
    """The README's ``pip install ... -e`` line, as arguments after ``pip install``, its
    paths made absolute (``'.[test]'``: the checkout; its extras would need the index)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if re.match(r"pip install .*-e ", ln))
    args = [str(ROOT / a) if a == "requirements.lock" else a for a in shlex.split(line)[2:]]
    args[args.index("-e") + 1] = str(ROOT)
    return args


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.timeout(400)
def test_mypy_finds_netdisco_after_the_readmes_editable_install(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    assert run(sys.executable, "-m", "venv", str(venv), cwd=tmp_path).returncode == 0
    python = str(venv / "bin" / "python")
    flags = readme_install_flags()
    assert "--config-settings" in flags, flags
    done = run(python, "-m", "pip", "install", "-q", "--no-deps", *flags, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    project = tmp_path / "app"
    project.mkdir()
    (project / "app.py").write_text(APP)
    (project / "wrong.py").write_text(WRONG)
    mypy = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable"]
    checked = run(*mypy, python, "app.py", "wrong.py", cwd=project)  # one pass: netdisco once
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert not [line for line in errors if line.startswith("app.py")], checked.stdout
    assert [line for line in errors if line.startswith("wrong.py")], checked.stdout
    assert "Incompatible types in assignment" in checked.stdout, checked.stdout
    assert "Cannot find implementation" not in checked.stdout, checked.stdout

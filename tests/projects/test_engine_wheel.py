"""An installed (not editable) engine: its netdisco repacked into a wheel uv installs."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import uv

from netdisco.projects.install import engine_wheel


def _installed(site: Path) -> metadata.Distribution:
    """A distribution as pip leaves it in site-packages, with a script outside it."""
    info = site / "netdiscovery-9.9.dist-info"
    info.mkdir(parents=True)
    (site / "netdisco").mkdir()
    (site / "netdisco" / "__init__.py").write_text("VERSION = '9.9'\n")
    (site / "netdisco" / "__pycache__").mkdir()
    (site / "netdisco" / "__pycache__" / "x.pyc").write_bytes(b"")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: netdiscovery\nVersion: 9.9\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text(
        "netdisco/__init__.py,,\nnetdisco/__pycache__/x.pyc,,\n../../bin/netdisco,,\n"
        "netdiscovery-9.9.dist-info/METADATA,,\nnetdiscovery-9.9.dist-info/WHEEL,,\n"
        "netdiscovery-9.9.dist-info/INSTALLER,,\nnetdiscovery-9.9.dist-info/RECORD,,\n"
    )
    return metadata.PathDistribution(info)


def test_the_repacked_wheel_installs_and_imports(tmp_path: Path) -> None:
    built = engine_wheel(_installed(tmp_path / "site"), tmp_path / "engine")
    assert built.name == "netdiscovery-9.9-py3-none-any.whl"
    with zipfile.ZipFile(built) as wheel:
        names = set(wheel.namelist())
    assert "netdisco/__init__.py" in names
    assert not any("__pycache__" in n or n.startswith("..") or "INSTALLER" in n for n in names)
    assert engine_wheel(_installed(tmp_path / "other"), tmp_path / "engine") == built  # once
    venv = tmp_path / "venv"
    uv_bin = str(uv.find_uv_bin())
    subprocess.run(
        [uv_bin, "venv", "-q", "--python", sys.executable, str(venv)], check=True, timeout=60
    )
    python = str(venv / "bin" / "python")
    subprocess.run([uv_bin, "pip", "install", "-q", "--python", python, str(built)],
                   check=True, timeout=60)  # fmt: skip
    code = (
        "import netdisco as n, importlib.metadata as m; print(n.VERSION, m.version('netdiscovery'))"
    )
    done = subprocess.run(
        [python, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["9.9", "9.9"], done.stderr

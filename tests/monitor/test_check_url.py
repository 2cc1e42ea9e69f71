"""Where ``netdisco-monitor check`` looks: flag, then environment over the TOML file."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from monitor.cli import _check_url


def args(config: Path | None = None, url: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(url=url, config=config)


def test_defaults() -> None:
    assert _check_url(args()) == "http://127.0.0.1:8316"


def test_file_then_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "monitor.toml"
    config.write_text('[http]\nhost = "0.0.0.0"\nport = 9001\n')
    assert _check_url(args(config)) == "http://127.0.0.1:9001"
    monkeypatch.setenv("NETDISCO_MONITOR_HTTP_PORT", "9002")
    assert _check_url(args(config)) == "http://127.0.0.1:9002"


def test_url_flag_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETDISCO_MONITOR_HTTP_PORT", "9002")
    assert _check_url(args(url="http://10.1.2.3:80/")) == "http://10.1.2.3:80"

"""Every ``netdisco ...`` command a page of the dashboard or a document names exists.

The Schedules page once named ``netdisco schedules add`` (the command is ``netdisco jobs
schedule add``): each command named in ``monitor/static/*.html``, in README.md and in
``docs/*.md`` is walked through the real argument parser, word by word, down to the
command that takes the rest as its arguments.
"""

from __future__ import annotations

import argparse
import html
import re
from pathlib import Path

import pytest

from netdisco.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "monitor" / "static").glob("*.html"))
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: ``netdisco WORDS`` in a page's <code> or a document's `code`
_NAMED = re.compile(r"(?:<code>|`)netdisco ((?:[a-z][a-z-]* ?)+)")
#: a document's shell blocks, whose lines may start with ``netdisco WORDS``
_SHELL = re.compile(r"^```(?:sh|bash|console)\n(.*?)^```", re.M | re.S)
_LINE = re.compile(r"^\s*(?:\$ )?netdisco ((?:[a-z][a-z-]* ?)+)", re.M)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def unknown_command(words: list[str]) -> str | None:
    """Where ``netdisco WORDS`` stops being a command (None: it is one)."""
    parser, path = build_parser(), ["netdisco"]
    for word in words:
        choices = _subcommands(parser)
        if not choices:
            return None  # a command: the rest are its arguments
        if word not in choices:
            return f"{' '.join(path)} has no command {word!r} (it has: {', '.join(choices)})"
        parser = choices[word]
        path.append(word)
    return None


def named(path: Path) -> list[list[str]]:
    text = html.unescape(path.read_text("utf-8"))
    shell = [m for block in _SHELL.finditer(text) for m in _LINE.finditer(block.group(1))]
    return [match.group(1).split() for match in [*_NAMED.finditer(text), *shell]]


@pytest.mark.parametrize("path", PAGES + DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_named_exists(path: Path) -> None:
    wrong = [said for words in named(path) if (said := unknown_command(words))]
    assert not wrong, wrong


def test_a_wrong_command_is_caught() -> None:
    assert unknown_command(["schedules", "add"]) is not None
    assert unknown_command(["jobs", "schedule", "add"]) is None
    assert named(PAGES[0]) or any(named(page) for page in PAGES)

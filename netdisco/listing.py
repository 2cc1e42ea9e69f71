"""``netdisco list``: the spiders of the project in the current directory, as ``scrapy
list`` prints them. A Scrapy project's (scrapy.cfg here or above): their names, one a line,
as ``netdisco crawl NAME`` takes them. A netdisco project's (pyproject.toml or
requirements.txt here): each name with the ``module:Class`` that ``netdisco crawl`` takes,
found as ``netdisco deploy`` finds them, so the list is what a deploy would run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from netdisco.crawl.scrapyproject import find_project, project_spiders
from netdisco.exceptions import ConfigError
from netdisco.projects.archive import inspect, pack


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    listing = commands.add_parser(
        "list",
        parents=[common],
        help="the spiders of the project here, as scrapy list prints them",
        description="Prints the spiders of the Scrapy project around the current directory "
        "(scrapy.cfg here or above) by name, one a line; or those of the netdisco project "
        "here (pyproject.toml or requirements.txt) by name and module:Class.",
    )
    listing.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    """Print the spiders; a directory with no project is an error saying where to look."""
    here = Path.cwd()
    project = find_project(here)
    if project is not None:
        print("\n".join(sorted(project_spiders(project))))
        return 0
    if not ((here / "pyproject.toml").is_file() or (here / "requirements.txt").is_file()):
        raise ConfigError(
            str(here),
            "no project here: netdisco list reads a Scrapy project (scrapy.cfg here or in a "
            "directory above) or a netdisco project (pyproject.toml or requirements.txt "
            "here); cd into one. A single spider file runs as netdisco crawl FILE.py:Class",
        )
    data = pack(here)
    names = inspect(data, len(data)).names
    width = max(len(name) for name in names.values())
    for ref, name in sorted(names.items(), key=lambda pair: pair[1]):
        print(f"{name:<{width}}  {ref}")
    return 0

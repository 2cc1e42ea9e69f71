"""What a command job's records hold when read back: a job node and a version node are
anyone's who may write ZooKeeper, so their commands and arguments are checked again."""

from __future__ import annotations

import json

import pytest

from netdisco.cluster.jobs import job_request, parse_job
from netdisco.exceptions import ProjectUnavailable
from netdisco.projects.store import parse_version

NODE = job_request({"project": "shell", "command": "items", "argv": ["5"]}).to_dict()
VERSION = {"size": 10, "chunks": 1, "kind": "directory", "spiders": []}


def test_a_command_job_reads_back_as_written() -> None:
    job = parse_job(NODE["id"], json.dumps(NODE).encode())
    assert job is not None
    assert (job.kind, job.spider, job.argv, job.project) == ("command", "items", ("5",), "shell")


@pytest.mark.parametrize(
    "argv", [["a\x00b"], ["x"] * 65, "rm -rf /", [["nested"]], ["x" * 1025]], ids=str
)
def test_a_job_node_with_hostile_arguments_is_no_job(argv: object) -> None:
    assert parse_job(NODE["id"], json.dumps(NODE | {"argv": argv}).encode()) is None


def test_a_command_job_node_without_a_project_is_a_spider_job() -> None:
    job = parse_job(NODE["id"], json.dumps(NODE | {"project": None}).encode())
    assert job is not None
    assert job.kind == "spider"  # held to a spider's allow-list, never run as a command


def test_a_version_of_commands_only_reads_back() -> None:
    body = VERSION | {"commands": {"items": ["./crawl.sh", "items"], "walk": ["node", "w.js"]}}
    version = parse_version("/p", "a" * 64, json.dumps(body).encode(), 1)
    assert version.commands == {"items": ("./crawl.sh", "items"), "walk": ("node", "w.js")}
    assert version.spiders == ()


@pytest.mark.parametrize(
    "commands",
    [
        {},  # and no spider: nothing to run
        {"run": ["/bin/sh", "-c", "id"]},
        {"run": ["../up.sh"]},
        {"run": []},
        {"run": "./crawl.sh"},
        {"run": ["./crawl.sh", "a\nb"]},
        {"../x": ["./crawl.sh"]},
        {f"c{n}": ["./crawl.sh"] for n in range(101)},
    ],
    ids=str,
)
def test_a_version_node_with_commands_out_of_bounds_is_refused(commands: object) -> None:
    with pytest.raises(ProjectUnavailable):
        parse_version("/p", "a" * 64, json.dumps(VERSION | {"commands": commands}).encode(), 1)

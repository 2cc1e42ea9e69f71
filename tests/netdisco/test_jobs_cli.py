"""``netdisco jobs``: its options before or after the sub-command, and one line on stderr
with exit 1 whenever the monitor is down or refuses (2 stays for bad usage)."""

from __future__ import annotations

import argparse
import asyncio
import socket

import pytest
from aiohttp import web

from netdisco.cli import build_parser, main
from netdisco.testing.http import serve

#: one of each sub-command, with what it needs
EVERY = [
    ["list"], ["show", "abc"], ["cancel", "abc"], ["rerun", "abc"], ["log", "abc"],
    ["start", "-", "mod:Spider"], ["schedule", "list"], ["schedule", "delete", "abc"],
    ["schedule", "enable", "abc"], ["schedule", "add", "-", "mod:Spider", "--every", "1h"],
]  # fmt: skip


def _leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [parser]
    return [leaf for sub in subs for child in sub.choices.values() for leaf in _leaves(child)]


def _jobs_parser() -> argparse.ArgumentParser:
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    jobs: argparse.ArgumentParser = commands.choices["jobs"]
    return jobs


def test_every_sub_command_takes_the_monitor_options() -> None:
    leaves = _leaves(_jobs_parser())
    assert len(leaves) >= len(EVERY)
    for leaf in leaves:
        assert {"--monitor", "--token-env"} <= set(leaf._option_string_actions), leaf.prog


@pytest.mark.parametrize("where", ["before", "after"])
def test_monitor_and_token_options_before_or_after_the_sub_command(where: str) -> None:
    options = ["--monitor", "http://127.0.0.1:1", "--token-env", "MY_TOKEN"]
    argv = ["jobs", *options, "list"] if where == "before" else ["jobs", "list", *options]
    args = build_parser().parse_args(argv)
    assert (args.monitor, args.token_env) == ("http://127.0.0.1:1", "MY_TOKEN")
    defaults = build_parser().parse_args(["jobs", "schedule", "list"])
    assert defaults.token_env == "NETDISCO_MONITOR_TOKEN"
    assert defaults.monitor.startswith("http://")


def test_after_wins_over_before() -> None:
    argv = ["jobs", "--monitor", "http://a:1", "show", "x", "--monitor", "http://b:2"]
    assert build_parser().parse_args(argv).monitor == "http://b:2"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(main, argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv", EVERY, ids=" ".join)
async def test_a_monitor_that_is_down_is_one_line_and_exit_1(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    code, err = await _run(["jobs", *argv, "--monitor", url], capsys)
    assert code == 1
    assert err.count("\n") == 1, err
    assert err.startswith(f"netdisco jobs: error: cannot reach the monitor at {url}")


async def _refusing(request: web.Request) -> web.StreamResponse:
    if request.path.endswith("/log") or request.method == "DELETE":
        return web.Response(status=502, text="<html>\n<b>Bad gateway</b>\n</html>")
    body = {"error": {"code": "forbidden", "message": "control is off"}}
    return web.json_response(body, status=403)


@pytest.mark.parametrize("argv", EVERY, ids=" ".join)
async def test_a_refusing_monitor_is_one_line_and_exit_1(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _refusing)
    async with serve(app) as url:
        code, err = await _run(["jobs", *argv, "--monitor", url], capsys)
    assert code == 1
    assert err.count("\n") == 1, err
    said = "502: <html> <b>Bad gateway</b> </html>" if argv[0] == "log" or "delete" in argv \
        else "403: control is off"  # fmt: skip
    assert err == f"netdisco jobs: error: the monitor answered {said}\n"


@pytest.mark.parametrize(
    "argv",
    [["list", "extra"], ["start", "-"], ["frobnicate"], ["start", "-", "m:C", "-a", "noequals"],
     ["list", "--monitor", "ftp://x"]],
)  # fmt: skip
def test_bad_usage_is_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["jobs", *argv])
    except SystemExit as exc:  # argparse's own refusal
        code = int(str(exc.code))
    assert code == 2
    assert "Traceback" not in capsys.readouterr().err


async def test_jobs_run_posts_a_command_job_with_every_argument_after_its_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    posted: list[object] = []

    async def create(request: web.Request) -> web.Response:
        posted.append(await request.json())
        return web.json_response({"jobs": [{"id": "0123456789ab"}]}, status=201)

    app = web.Application()
    app.router.add_post("/netdiscovery/monitor/jobs", create)
    async with serve(app) as url:
        argv = ["jobs", "run", "--monitor", url, "-s", "stop_deadline=3", "--on", "e1", "--"]
        argv += ["shop", "quotes", "--monitor", "x", "it's; rm -rf /", "-s"]
        code, _ = await _run(argv, capsys)
    assert code == 0
    assert posted == [
        {
            "project": "shop",
            "command": "quotes",
            "argv": ["--monitor", "x", "it's; rm -rf /", "-s"],
            "settings": {"stop_deadline": "3"},
            "on": ["e1"],
            "on_lost": "fail",
        }
    ]

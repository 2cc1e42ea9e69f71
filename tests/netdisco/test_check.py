"""``netdisco check CONFIG`` and ``netdisco-monitor check CONFIG`` against a real ZooKeeper
and Redis: all ok, then each problem named on a line of its own."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_acl, make_digest_acl

from monitor.cli import main as monitor_main
from netdisco import check as netdisco_check
from netdisco.cli import main
from netdisco.cluster.check import Check, trust
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.engine.config import EngineConfig
from netdisco.testing import free_port

SPIDER = """
from netdisco import Spider

class Walk(Spider):
    name = "walk"
    start_urls = ("http://127.0.0.1:9/",)
    custom_settings = {{"frontier": "{frontier}"}}
"""


def _engine_toml(tmp_path: Path, zk_hosts: str, redis_url: str, **engine: str) -> Path:
    spider = tmp_path / "walk.py"
    spider.write_text(SPIDER.format(frontier=redis_url))
    table = {"port": str(free_port()), "feeds_dir": f'"{tmp_path / "feeds"}"',
             "spider_modules": '["netdisco.crawl.spider"]', **engine}  # fmt: skip
    lines = [f"{key} = {value}" for key, value in table.items()]
    config = tmp_path / "engine.toml"
    config.write_text(
        "[engine]\n" + "\n".join(lines) + f'\n[zookeeper]\nhosts = "{zk_hosts}"\n'
        f'[[spiders]]\nspider = "{spider}:Walk"\n'
    )
    return config


def _check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    """``netdisco check ARGV --timeout 1``: its exit status and lines, once it is known
    that every check was given that timeout (the decided bound, not a measured one)."""
    capsys.readouterr()
    given: list[float] = []
    checks = netdisco_check.engine_checks

    def recorded(config: EngineConfig, timeout: float) -> list[Check]:
        given.append(timeout)
        return checks(config, timeout)

    started = time.monotonic()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(netdisco_check, "engine_checks", recorded)
        code = main(["check", *argv, "--timeout", "1"])
    assert given == [1.0]
    assert time.monotonic() - started < 30  # only a hang: each check is bounded by 1 s
    return code, capsys.readouterr().out.splitlines()


def test_a_good_engine_config_is_ok_line_by_line(
    tmp_path: Path, zk_hosts: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = _check(capsys, str(_engine_toml(tmp_path, zk_hosts, redis_url)))
    assert code == 0, lines
    # no digest, no token: said plainly, and no reason not to start
    (trust,) = [line for line in lines if not line.startswith("ok: ")]
    assert trust.startswith("warning: cluster trust: no digest and no engine token"), trust
    assert "SIGKILLed engine read as engine_left" in trust
    said = "\n".join(lines)
    for what in ("spiders[0].spider", "spider_modules netdisco.crawl.spider",
                 f"zookeeper {zk_hosts.partition('/')[0]}", "redis redis://",
                 "engine port 127.0.0.1:", "feeds_dir "):  # fmt: skip
        assert f"ok: {what}" in said, said


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_each_problem_of_an_engine_config_is_named(
    tmp_path: Path, zk_hosts: str, capsys: pytest.CaptureFixture[str], taken_port: int
) -> None:
    (tmp_path / "plain-file").write_text("")
    config = _engine_toml(
        tmp_path, f"127.0.0.1:{free_port()}", f"redis://127.0.0.1:{free_port()}/0",
        port=str(taken_port), feeds_dir=f'"{tmp_path / "plain-file" / "feeds"}"',
        spider_modules='["no_such_module_here"]',
    )  # fmt: skip
    with config.open("a") as handle:
        handle.write(f'[[spiders]]\nspider = "{tmp_path / "walk.py"}:Nope"\n')
    code, lines = _check(capsys, str(config))
    assert code == 1
    problems = [line for line in lines if line.startswith("problem: ")]
    assert len(problems) == 6, lines
    said = "\n".join(problems)
    assert "spiders[1].spider: " in said
    assert "Nope" in said
    assert "spider_modules no_such_module_here: does not import: ModuleNotFoundError" in said
    assert "zookeeper 127.0.0.1:" in said
    assert "connection refused (nothing listens there: is the port right?)" in said
    assert "redis redis://127.0.0.1:" in said
    assert "unreachable" in said
    assert f"engine port 127.0.0.1:{taken_port}: cannot bind" in said
    assert f"feeds_dir {tmp_path / 'plain-file' / 'feeds'}: " in said
    assert "ok: spiders[0].spider" in "\n".join(lines)


def test_a_missing_chroot_is_named(
    tmp_path: Path, zk_server: object, zk_hosts: str, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = zk_hosts + "-missing"
    code, lines = _check(capsys, str(_engine_toml(tmp_path, hosts, "memory")))
    assert code == 1
    chroot = "/" + hosts.partition("/")[2]
    assert f"the chroot {chroot} in zookeeper.hosts is missing" in "\n".join(lines)


@pytest.fixture
def admin(zk_hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.mark.parametrize(
    ("owner", "said"),
    [
        ("open", "lets anyone create or delete engine nodes although a digest is configured"),
        ("other", "does not let digest identity 'eng' create and delete engine nodes"),
        ("eng", None),
    ],
)
def test_the_root_acl_is_judged_with_the_digest_identity(
    tmp_path: Path, zk_hosts: str, admin: KazooClient, owner: str, said: str | None,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    acl = [make_acl("world", "anyone", all=True)] if owner == "open" else [
        make_acl("world", "anyone", read=True), make_digest_acl(owner, "pw", all=True)]  # fmt: skip
    admin.create("/netdiscovery", acl=acl)
    monkeypatch.setenv("CHECK_DIGEST", "eng:pw")
    config = _engine_toml(tmp_path, zk_hosts, "memory")
    text = config.read_text().replace("[zookeeper]\n", '[zookeeper]\ndigest_env = "CHECK_DIGEST"\n')
    config.write_text(text)
    code, lines = _check(capsys, str(config))
    zk_line = next(line for line in lines if "zookeeper" in line)
    if said is None:
        assert (code, zk_line.endswith("digest auth; /netdiscovery lets this identity register"))\
            == (0, True), lines  # fmt: skip
    else:
        assert code == 1
        assert zk_line.startswith("problem: zookeeper"), zk_line
        assert said in zk_line, zk_line


def test_an_invalid_config_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "engine.toml"
    config.write_text("[engine]\nport = 'eighty'\n")
    assert main(["check", str(config)]) == 2
    assert "engine.port" in capsys.readouterr().err


def _monitor_toml(tmp_path: Path, zk_hosts: str, port: int, state: Path) -> Path:
    config = tmp_path / "monitor.toml"
    config.write_text(
        f'[zookeeper]\nhosts = "{zk_hosts}"\n[http]\nport = {port}\n'
        f'[alerts]\nstate_file = "{state}"\n'
    )
    return config


def test_the_monitor_check_shares_the_checks(
    tmp_path: Path, zk_hosts: str, capsys: pytest.CaptureFixture[str], taken_port: int
) -> None:
    good = _monitor_toml(tmp_path, zk_hosts, free_port(), tmp_path / "state.json")
    capsys.readouterr()
    assert monitor_main(["check", str(good), "--timeout", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line[:4] for line in lines] == ["warn"] + ["ok: "] * 3, lines
    assert "ok: state_file directory" in lines[-1]
    bad = _monitor_toml(tmp_path, f"127.0.0.1:{free_port()}", taken_port, tmp_path / "s.json")
    assert monitor_main(["check", str(bad), "--timeout", "1"]) == 1
    said = capsys.readouterr().out
    assert said.count("problem: ") == 2, said
    assert f"problem: monitor port 127.0.0.1:{taken_port}: cannot bind" in said
    assert "problem: zookeeper 127.0.0.1:" in said


def test_zookeeper_refused_is_told_from_silent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], taken_port: int
) -> None:
    """A port nothing listens on is refused at once and said so; a server that takes the
    connection but never answers is waited for, and said to give no answer."""
    refused = f"127.0.0.1:{free_port()}"
    config = _engine_toml(tmp_path, refused, "memory://")
    _, lines = _check(capsys, str(config))
    said = next(line for line in lines if line.startswith("problem: zookeeper"))
    assert said == (f"problem: zookeeper {refused}: unreachable: {refused} connection refused"
                    " (nothing listens there: is the port right?)")  # fmt: skip
    config = _engine_toml(tmp_path, f"127.0.0.1:{taken_port}", "memory://")
    _, lines = _check(capsys, str(config))
    said = next(line for line in lines if line.startswith("problem: zookeeper"))
    assert said.endswith("unreachable (no answer within 1 s)"), said


def test_a_spider_module_with_a_syntax_error_is_shown_as_python_shows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file, the line and a caret under the place: not a SyntaxError's repr."""
    (tmp_path / "broken_spiders.py").write_text(
        "from netdisco import Spider\n\nclass Shop(Spider):\n    def parse(self, response)\n"
        "        yield {}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = _engine_toml(tmp_path, f"127.0.0.1:{free_port()}", "memory://",
                          spider_modules='["broken_spiders"]')  # fmt: skip
    _, lines = _check(capsys, str(config))
    start = next(i for i, line in enumerate(lines) if "spider_modules broken_spiders" in line)
    assert lines[start] == "problem: spider_modules broken_spiders: does not import: "
    assert lines[start + 1 : start + 5] == [
        f'  File "{tmp_path / "broken_spiders.py"}", line 4',
        "    def parse(self, response)",
        "                             ^",
        "SyntaxError: expected ':'",
    ]


@pytest.mark.parametrize(
    ("digest", "token", "said"),
    [
        (True, True, "ok: cluster trust: digest ACL and proven"),
        (False, True, "warning: cluster trust: no digest: any client"),
        (True, False, "warning: cluster trust: no engine token"),
    ],
)
def test_check_says_what_the_cluster_trusts(digest: bool, token: bool, said: str) -> None:
    settings = ZooKeeperSettings(hosts="127.0.0.1:1", digest_env="X" if digest else None)
    assert trust(settings, "t0ken" if token else None, prefix="zookeeper").line().startswith(said)

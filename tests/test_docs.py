"""Every fenced code block of README.md and docs/*.md, run or loaded as a reader would.

Conventions the documents follow (and this test enforces):

* ```` ```python ````: run as a program (``python FILE``) in the document's working
  directory; it must run clean (no warning or error in its log). A block whose first
  line is ``# NAME.py`` is saved as ``NAME.py`` there, so later blocks of the same
  document can import it or name it (``netdisco crawl NAME.py:Class``).
* ```` ```sh ```` (a script) and ```` ```console ```` (commands after ``$ ``): run by
  ``bash -eo pipefail`` in that directory, with the package's ``netdisco`` commands
  first on ``PATH``. Background jobs (``&``) are killed with the shell's process group
  when the block ends. A block preceded by ``<!-- not run: REASON -->`` is skipped; the
  marker must give a reason (installing packages, system services as root, docker).
* ```` ```toml ````: the first line is ``# NAME.toml``; the file is saved there and
  loaded through the real loader its name picks: ``*engine.toml`` through
  ``netdisco.engine.config`` (and its ``[zookeeper]`` table through the engine's
  ``zookeeper_settings``), ``*monitor.toml`` through ``monitor.config``,
  ``*settings.toml`` as the settings file of ``netdisco crawl --config``. A wrong key
  fails.
* ```` ```text ````: output or diagrams, skipped. Any other language (or none) fails.

Addresses: ``127.0.0.1:8000`` is the example site (``examples/local_site.py``, also
what ``LOCAL_SITE_URL`` names here), ``127.0.0.1:2181`` ZooKeeper, ``127.0.0.1:6379``
Redis; the ports 8715, 8716 (engines) and 8316 (the monitor) are free ports. The test
starts its own servers on loopback and writes their addresses in place of these before
a block runs. ``netdisco dev up``'s ports 8320-8324 are the five from a free base that
the test gives it (``NETDISCO_DEV_PORT_BASE``), and whatever a document's blocks left
up is taken down again (``netdisco dev down``) when it ends, passed or failed. Each
document's blocks run in order in one temporary directory holding a
link to the checkout's ``examples/``, as if it were the checkout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from monitor import config as monitor_config
from netdisco import dev
from netdisco.crawl import settings as crawl_settings
from netdisco.engine.config import parse_config
from netdisco.engine.hosted import zookeeper_settings
from netdisco.testing import RedisServer, ZooKeeperServer, free_port, wait_port
from tests.netdisco.test_dev import free_base

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"python", "sh", "console", "toml", "text"}
BLOCK_TIMEOUT = 40.0
FENCE = re.compile(r"^```(.*)$")
NOT_RUN = re.compile(r"^<!--\s*not run\b:?\s*(.*?)\s*-->$")
ENGINE_PORTS = re.compile(r"\b(8715|8716|8316)\b")
DEV_PORTS = re.compile(r"\b832([0-4])\b")
#: items a document's blocks must have written: each product once, across these files
EXACT = {"README.md": {"cluster-engine-*.jsonl": 30, "job-items.jsonl": 30}}
#: files a document's blocks must have produced (a crawl that silently fetched nothing fails)
PRODUCED = {
    "README.md": {
        "items.jsonl": 30,
        "items.csv": 10,
        "catalogue.jsonl": 10,
        "books.py": 10,
        "rules.jsonl": 30,
        "sitemap.jsonl": 30,
    },
    "scrapy.md": {"products.jsonl": 30},
    "crawling.md": {
        "out/items.jsonl": 15,
        "out/items.csv": 15,
        "all.jsonl": 15,
        "out/five.jsonl": 4,
        "out/books.jsonl": 31,
        "out/cached.jsonl": 30,
        "out/rules.jsonl": 30,
        "out/sitemap.jsonl": 30,
    },
}


@dataclasses.dataclass(frozen=True)
class Block:
    document: str
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    not_run: str | None  # the reason given, or None when the block is to run

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"

    @property
    def filename(self) -> str | None:
        """``NAME.ext`` from a first line ``# NAME.ext``, if there is one."""
        first = self.text.split("\n", 1)[0]
        match = re.fullmatch(r"#\s*([\w.-]+\.(?:py|toml))\s*", first)
        return match.group(1) if match else None


def blocks(text: str, document: str) -> list[Block]:
    """The fenced blocks of a Markdown text; a marker without a reason, a block in an
    unknown language or an unclosed fence is an error naming the line."""
    found: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        start, language = index, match.group(1).strip()
        if language not in LANGUAGES:
            raise ValueError(f"{document}:{start + 1}: code block language {language!r} unknown")
        end = next((i for i in range(start + 1, len(lines)) if lines[i] == "```"), None)
        if end is None:
            raise ValueError(f"{document}:{start + 1}: code block never closed")
        before = next((lines[i] for i in range(start - 1, -1, -1) if lines[i].strip()), "")
        marker = NOT_RUN.match(before.strip())
        reason = None
        if marker is not None:
            reason = marker.group(1)
            if not reason:
                raise ValueError(f"{document}:{start + 1}: 'not run' marker without a reason")
        body = "\n".join(lines[start + 1 : end]) + "\n"
        found.append(Block(document, start + 1, language, body, reason))
        index = end + 1
    return found


# -- the servers the blocks talk to -----------------------------------------------------


@dataclasses.dataclass
class Servers:
    site_port: int
    zk_hosts: str  # host:port (no chroot)
    redis: str  # host:port

    dev_base: int  # netdisco dev up's first port

    def substitute(self, text: str, chroot: str, ports: dict[str, int]) -> str:
        text = DEV_PORTS.sub(lambda m: str(self.dev_base + int(m.group(1))), text)
        text = text.replace("127.0.0.1:2181", f"{self.zk_hosts}{chroot}")
        text = text.replace("127.0.0.1:6379", self.redis)
        text = re.sub(r"\b8000\b", str(self.site_port), text)
        return ENGINE_PORTS.sub(lambda m: str(ports.setdefault(m.group(1), free_port())), text)


@pytest.fixture(scope="module")
def servers(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Servers]:
    """The example site (a process, as ``python examples/local_site.py`` starts it),
    Redis and the session's ZooKeeper."""
    port = free_port()
    log = tmp_path_factory.mktemp("site") / "site.log"
    with log.open("wb") as handle:
        site = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "local_site.py"), "--port", str(port)],
            stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    redis = RedisServer()
    try:
        redis.start()
        wait_port("127.0.0.1", port)
        yield Servers(port, zk_server.hosts, f"{redis.host}:{redis.port}", free_base())
    finally:
        redis.close()
        site.terminate()
        site.wait(10)


def make_chroot(hosts: str) -> str:
    chroot = f"/docs-{uuid.uuid4().hex[:10]}"
    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()
    return chroot


# -- running one block ------------------------------------------------------------------


def environment(servers: Servers, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    env["XDG_STATE_HOME"] = str(home / ".state")  # engines' jobs_dir: not the user's
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["LOCAL_SITE_URL"] = f"http://127.0.0.1:{servers.site_port}/"
    env[dev.PORT_BASE_ENV] = str(servers.dev_base)
    return env


def run(argv: list[str], block: Block, cwd: Path, env: dict[str, str], stdin: str = "") -> str:
    """Run ``argv`` in its own session; kill the session's leftovers when it ends.

    Output goes to a file, not a pipe: a background job that outlives the shell would
    hold a pipe open.
    """
    log = cwd / f".block-{block.line}.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=out,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            process.communicate(stdin, timeout=BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # background jobs of the block
    output = log.read_text()[-4000:]
    assert process.returncode != -signal.SIGKILL, f"{block.where}: not done in time\n{output}"
    assert process.returncode == 0, f"{block.where}: exit {process.returncode}\n{output}"
    return log.read_text()


def load_toml(block: Block, path: Path) -> None:
    """Through the loader a real ``netdisco``/``netdisco-monitor`` would use on it."""
    name = path.name
    if name.endswith("engine.toml"):
        data = tomllib.loads(path.read_text())
        parse_config(data, environ={})
        if "zookeeper" in data:
            zookeeper_settings(data["zookeeper"])
    elif name.endswith("monitor.toml"):
        monitor_config.load_config(path, env={})
    elif name.endswith("settings.toml"):
        settings = crawl_settings.from_mapping(tomllib.loads(path.read_text()))
        crawl_settings.check_recrawl(settings)
    else:
        pytest.fail(f"{block.where}: {name}: name it *engine.toml, *monitor.toml or *settings.toml")


#: a log line at warning level or above, as a terminal or JSON lines show it
WARNED = re.compile(
    r'^.*(?:\[(?:warning|error|critical) *\]|"level": ?"(?:warning|error)").*$', re.M
)


def execute(block: Block, text: str, cwd: Path, env: dict[str, str]) -> None:
    name = block.filename
    if block.language == "python":
        script = cwd / (name or f"block_{block.line}.py")
        script.write_text(text)
        warned = WARNED.findall(run([sys.executable, script.name], block, cwd, env))
        assert not warned, f"{block.where}: an example runs clean, and it warned: {warned}"
    elif block.language in ("sh", "console"):
        if block.language == "console":
            commands = [ln[2:] for ln in text.splitlines() if ln.startswith("$ ")]
            assert commands, f"{block.where}: a console block without '$ ' commands"
            text = "\n".join(commands) + "\n"
        run(["bash", "-eo", "pipefail", "-s"], block, cwd, env, stdin=text)
    elif block.language == "toml":
        assert name is not None, f"{block.where}: no '# NAME.toml' first line"
        (cwd / name).write_text(text)
        load_toml(block, cwd / name)


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_block_runs(document: Path, servers: Servers, tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    chroot = make_chroot(servers.zk_hosts)
    ports: dict[str, int] = {}
    # dev up's five ports, free now: picked at the module's start they may be taken since
    servers = dataclasses.replace(servers, dev_base=free_base())
    env = environment(servers, tmp_path)
    try:
        for block in blocks(document.read_text(), document.name):
            if block.language == "text" or block.not_run is not None:
                continue
            execute(block, servers.substitute(block.text, chroot, ports), tmp_path, env)
    finally:
        if (tmp_path / dev.DEFAULT_DIR).exists():
            argv = [sys.executable, "-m", "netdisco.cli", "dev", "down"]
            subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, timeout=60)
    for name, least in PRODUCED.get(document.name, {}).items():
        assert line_count(tmp_path / name) >= least, f"{document.name}: {name} too short"
    for pattern, count in EXACT.get(document.name, {}).items():
        assert distinct_urls(tmp_path, pattern) == count, f"{document.name}: {pattern}"


def distinct_urls(directory: Path, pattern: str) -> int:
    """Items of the files ``pattern`` names, each URL once (a duplicate fails)."""
    urls = [
        json.loads(line)["url"]
        for path in sorted(directory.glob(pattern))
        for line in path.read_text().splitlines()
    ]
    assert len(urls) == len(set(urls)), f"{pattern}: a URL twice in {sorted(urls)}"
    return len(urls)


# -- the conventions themselves ---------------------------------------------------------


def test_a_marker_needs_a_reason_and_a_language_must_be_known() -> None:
    good = "<!-- not run: needs docker -->\n```sh\ndocker compose up\n```\n"
    assert blocks(good, "x.md")[0].not_run == "needs docker"
    with pytest.raises(ValueError, match="without a reason"):
        blocks("<!-- not run -->\n```sh\nmake\n```\n", "x.md")
    with pytest.raises(ValueError, match="unknown"):
        blocks("```yaml\na: 1\n```\n", "x.md")
    with pytest.raises(ValueError, match="unknown"):
        blocks("```\nplain\n```\n", "x.md")


def test_a_wrong_key_in_a_toml_block_fails(tmp_path: Path) -> None:
    block = Block("x.md", 1, "toml", "", None)
    for name, text in [
        ("a-engine.toml", '[[spiders]]\nspider = "a.py:A"\n[spiders.settings]\nconcurency = 1\n'),
        ("a-engine.toml", '[zookeeper]\nhost = "127.0.0.1:2181"\n'),
        ("a-monitor.toml", "[http]\nprot = 1\n"),
        ("a-settings.toml", "max_page = 1\n"),
    ]:
        (tmp_path / name).write_text(text)
        with pytest.raises(Exception, match=r"concurency|host|prot|max_page"):
            load_toml(block, tmp_path / name)


def test_every_document_parses_and_names_only_files_in_the_repository() -> None:
    """Links are relative and lead to a file of the checkout: nothing outside it."""
    for document in DOCUMENTS:
        text = document.read_text()
        assert blocks(text, document.name) or document.name != "README.md"
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if target.startswith(("http://", "https://", "#")):
                continue
            path = (document.parent / target.split("#")[0]).resolve()
            assert path.is_relative_to(ROOT), f"{document.name}: {target} leaves the repository"
            assert path.exists(), f"{document.name}: {target} does not exist"

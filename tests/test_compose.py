"""compose/ without a Docker engine (`make compose-check` runs it): what it takes from this package.

The YAML parses; every command of a service built from our Dockerfile is a
console script of this distribution whose real argument parser accepts it; the
configuration files it mounts load with the real loaders under the service's
environment; every ``NETDISCO_*`` variable it sets changes what the code reads;
and the ports agree between the configs, the published ports, the health checks
and the services they point at.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from monitor import cli as monitor_cli
from monitor.config import load_config as load_monitor_config
from netdisco import cli as netdisco_cli
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.crawl import settings as crawl_settings
from netdisco.demo.site import ITEMS_ENV, SITE_ENV, SPIDERS
from netdisco.engine.config import EngineConfig, load_config
from netdisco.exceptions import ConfigError

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "compose"
ZOOKEEPER_PORT = 2181  # the official image's client port
REDIS_PORT = 6379
MAILPIT_SMTP_PORT = 1025
STATE_FILE_ENV = "NETDISCO_MONITOR_ALERTS_STATE_FILE"


@pytest.fixture(scope="module")
def stack() -> dict[str, Any]:
    data = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result = stack["services"]
    assert isinstance(result, dict)
    return result


def ours(services: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The services that run this package's image."""
    return {name: s for name, s in services.items() if "build" in s}


def engines(services: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in ours(services).items() if "engine" in s["command"]}


def mounted(service: Mapping[str, Any], target: str) -> Path:
    """The file in compose/ that a service mounts at ``target``."""
    for volume in service.get("volumes", []):
        source, _, rest = volume.partition(":")
        if rest.split(":")[0] == target:
            return COMPOSE / str(source)
    raise AssertionError(f"nothing is mounted at {target}")


def config_path(command: list[str]) -> str:
    return command[command.index("--config") + 1]


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    """The service's environment as the container sees it (``${VAR:?...}`` given a value)."""
    env = {key: str(value) for key, value in service.get("environment", {}).items()}
    return {
        key: re.sub(r"\$\{\w+:\?[^}]*\}", "a-token-from-the-shell", v) for key, v in env.items()
    }


def published(service: Mapping[str, Any]) -> list[int]:
    """Container ports of the ``ports`` entries (``[ip:]host:container``)."""
    return [int(entry.rsplit(":", 1)[1]) for entry in service.get("ports", [])]


def test_the_expected_services_exist(services: dict[str, dict[str, Any]]) -> None:
    assert {"zookeeper", "redis", "mailpit", "monitor", "site"} <= set(services)
    assert len(engines(services)) >= 3
    image, _, tag = services["zookeeper"]["image"].partition(":")
    assert image == "zookeeper"  # the official image
    assert tuple(int(part) for part in tag.split(".")[:2]) >= (3, 8)


def test_every_command_is_an_entry_point_its_parser_accepts(
    services: dict[str, dict[str, Any]],
) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    commands = [s["command"] for s in ours(services).values()]
    commands += [s["healthcheck"]["test"][1:] for s in ours(services).values()]
    checked = 0
    for command in commands:
        if command[0] == "python":  # an HTTP probe, checked below
            continue
        assert command[0] in scripts, command
        if command[0] == "netdisco":
            netdisco_cli.build_parser().parse_args(command[1:])
        elif command[1:2] == ["check"]:
            monitor_cli._check_parser().parse_args(command[2:])
        else:
            monitor_cli._run_parser().parse_args(command[1:])
        checked += 1
    assert checked >= len(ours(services)) + 1  # every service, plus the monitor's check


def load_engine(service: Mapping[str, Any], env: Mapping[str, str]) -> EngineConfig:
    path = mounted(service, config_path(service["command"]))
    return load_config(path, environ=env)


def spider_settings(config: EngineConfig) -> list[crawl_settings.Settings]:
    return [entry.settings() for entry in config.spiders]


def test_engine_configs_load_and_every_variable_is_read(
    services: dict[str, dict[str, Any]],
) -> None:
    ids = set()
    for name, service in engines(services).items():
        env = environment(service)
        config = load_engine(service, env)
        assert config.engine.id == name  # stable across restarts: the service name
        assert config.engine.advertise == name  # status_url reachable by the monitor
        assert config.engine.token  # not on loopback: control needs the token
        ids.add(config.engine.id)
        ZooKeeperSettings.from_mapping(config.zookeeper or {})
        for spider in config.spiders:
            assert spider.spider.split(":")[1] in {c.__name__ for c in SPIDERS.values()}
        for key in env:
            if key in (SITE_ENV, ITEMS_ENV):
                continue  # read by the demo spiders, checked below
            without = {k: v for k, v in env.items() if k != key}
            try:
                other = load_engine(service, without)
            except ConfigError:
                continue  # refused without it (the token token_env names): it is read
            assert (other.engine, spider_settings(other)) != (
                config.engine,
                spider_settings(config),
            ), f"{name}: {key} changes nothing the engine reads"
    assert len(ids) == len(engines(services))


def test_engine_ports_and_probes_agree(services: dict[str, dict[str, Any]]) -> None:
    for name, service in engines(services).items():
        config = load_engine(service, environment(service))
        assert published(service) == [config.engine.port], name
        probe = " ".join(service["healthcheck"]["test"])
        assert f"127.0.0.1:{config.engine.port}/netdiscovery/health" in probe


def test_engines_reach_zookeeper_redis_and_the_site(services: dict[str, dict[str, Any]]) -> None:
    site_bind = services["site"]["command"][-1]
    assert services["site"]["command"][-2] == "--site"
    site_port = int(site_bind.rsplit(":", 1)[1])
    assert f":{site_port}/" in " ".join(services["site"]["healthcheck"]["test"])
    for name, service in engines(services).items():
        env = environment(service)
        config = load_engine(service, env)
        zk = ZooKeeperSettings.from_mapping(config.zookeeper or {})
        assert zk.hosts == f"zookeeper:{ZOOKEEPER_PORT}", name
        for settings in spider_settings(config):
            frontier = urlsplit(settings.frontier)
            assert (frontier.hostname, frontier.port or REDIS_PORT) == ("redis", REDIS_PORT)
        site = urlsplit(env[SITE_ENV])
        assert (site.hostname, site.port) == ("site", site_port)
        assert env[ITEMS_ENV].startswith("/srv/out/")  # the directory the image lets it write
        for dependency in ("zookeeper", "redis", "site"):
            assert dependency in service["depends_on"]


def monitor_env(service: Mapping[str, Any], state_dir: Path) -> dict[str, str]:
    """The container's environment, with the state file (whose directory the monitor checks
    at start) moved from the image's volume into a directory that exists here."""
    return {**environment(service), STATE_FILE_ENV: str(state_dir / "monitor-state.json")}


def test_monitor_config_ports_mail_and_variables(
    services: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    service = services["monitor"]
    path = mounted(service, config_path(service["command"]))
    check = service["healthcheck"]["test"]
    assert config_path(check) == config_path(service["command"])
    env = monitor_env(service, tmp_path)
    config = load_monitor_config(path, env=env)
    assert config.zookeeper.hosts == f"zookeeper:{ZOOKEEPER_PORT}"
    assert published(service) == [config.http.port]
    assert config.email is not None
    assert (config.email.host, config.email.port) == ("mailpit", MAILPIT_SMTP_PORT)
    state_file = Path(tomllib.loads(path.read_text())["alerts"]["state_file"])
    assert any(v.endswith(f":{state_file.parent}") for v in service["volumes"])
    for key in environment(service):
        without = {k: v for k, v in env.items() if k != key}
        assert load_monitor_config(path, env=without) != config, f"{key} changes nothing"


def test_the_dockerfile_copies_what_exists_and_exposes_the_ports(
    services: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    dockerfile = (COMPOSE / "Dockerfile").read_text()
    for build in (s["build"] for s in ours(services).values()):
        assert (COMPOSE / build["context"] / build["dockerfile"]).resolve() == (
            COMPOSE / "Dockerfile"
        )
    for line in dockerfile.splitlines():
        if line.startswith("COPY ") and not line.startswith("COPY --from="):  # not a stage
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source
    exposed = {int(p) for line in dockerfile.splitlines() if line.startswith("EXPOSE ")
               for p in line.split()[1:]}  # fmt: skip
    monitor_port = load_monitor_config(
        mounted(services["monitor"], "/etc/netdisco/monitor.toml"),
        env=monitor_env(services["monitor"], tmp_path),
    ).http.port
    assert {8715, monitor_port} <= exposed

"""The compose stack as ``make compose-check`` runs it: docker-compose 1.29 on the host network.

The stack file is ``docker-compose.yml`` with ``docker-compose.check.yml`` on top, as
``docker-compose config`` merges them, less the ``ports`` entries: a container on the host
network publishes nothing, and docker-compose 1.29 refuses to create one that has any
(an override can add to a list but not empty it).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
PROJECT = "netdisco"
LABEL = f"com.docker.compose.project={PROJECT}"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_CA = HERE / "build-ca" / "ca-bundle.crt"
# what the stack listens on: (service, port); the address comes from extra_hosts
LISTENS = [("zookeeper", 2181), ("redis", 6379), ("mailpit", 1025), ("mailpit", 8025),
           ("site", 8080), ("monitor", 8316), ("engine-1", 8715), ("engine-2", 8715),
           ("engine-3", 8715)]  # fmt: skip
# loopback only, whatever the environment says about proxies
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get_json(url: str) -> Any:
    with _OPENER.open(url, timeout=5) as response:
        return json.load(response)


def docker(*args: str) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])}: {result.stderr.strip()[-1000:]}")
    return result.stdout


class Stack:
    """The merged stack file in a private temporary directory, and commands on it."""

    def __init__(self, base: str, token: str) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="netdisco-compose-check-"))
        self.file = self.tmp / "stack.yml"
        self.env = {**os.environ, "NETDISCO_TOKEN": token, "NETDISCO_CHECK_BASE": base}
        self.hosts: dict[str, str] = {}

    def compose(self, *args: str, file: bool = True) -> str:
        files = ["-f", str(self.file)] if file else []
        if not file:
            files = ["-f", str(HERE / "docker-compose.yml")]
            files += ["-f", str(HERE / "docker-compose.check.yml")]
        command = ["docker-compose", "--no-ansi", "-p", PROJECT, *files, *args]
        result = subprocess.run(command, capture_output=True, text=True, env=self.env, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"docker-compose {args[0]}: {result.stderr.strip()[-1500:]}")
        return result.stdout

    def render(self) -> dict[str, Any]:
        """Merge the two files, drop ``ports``, keep the service names' addresses."""
        data = yaml.safe_load(self.compose("config", file=False))
        for service in data["services"].values():
            service.pop("ports", None)
        extra = data["services"]["monitor"]["extra_hosts"]
        pairs = extra.items() if isinstance(extra, dict) else (e.split(":") for e in extra)
        self.hosts = {name: address for name, address in pairs}
        self.file.touch(mode=0o600)  # it holds the token
        self.file.write_text(yaml.safe_dump(data))
        assert isinstance(data, dict)
        return data

    def url(self, service: str, port: int, path: str) -> str:
        return f"http://{self.hosts[service]}:{port}{path}"

    def build(self) -> None:
        """Build every image; pip in the build stage trusts the host's CA bundle."""
        if HOST_CA_BUNDLE.is_file():
            shutil.copyfile(HOST_CA_BUNDLE, BUILD_CA)
        try:
            self.compose("build")
        finally:
            BUILD_CA.unlink(missing_ok=True)

    def taken(self) -> list[str]:
        """The listen addresses that something else on this machine already holds."""
        taken = []
        for service, port in LISTENS:
            with socket.socket() as sock:
                try:
                    sock.bind((self.hosts[service], port))
                except OSError:
                    taken.append(f"{self.hosts[service]}:{port} ({service})")
        return taken

    def container(self, service: str) -> str:
        found = docker("ps", "-aq", "--filter", f"label={LABEL}", "--filter",
                       f"label=com.docker.compose.service={service}").split()  # fmt: skip
        if len(found) != 1:
            raise RuntimeError(f"{len(found)} containers for {service}")
        return found[0]

    def health(self) -> dict[str, str]:
        """service -> health status (or state, for a container without a health check)."""
        ids = docker("ps", "-aq", "--filter", f"label={LABEL}").split()
        if not ids:
            return {}
        fmt = (
            '{{index .Config.Labels "com.docker.compose.service"}} '
            "{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}"
        )
        lines = docker("inspect", "--format", fmt, *ids).splitlines()
        return dict(line.split(" ", 1) for line in lines if line)

    def items(self, engines: list[str]) -> Iterator[dict[str, Any]]:
        """Every item every engine wrote (a killed engine's container is still there)."""
        for service in engines:
            target = self.tmp / "items" / service
            target.mkdir(parents=True)
            docker("cp", f"{self.container(service)}:/srv/out/items", str(target))
            for path in sorted(target.glob("items/*.jsonl")):
                for line in path.read_text().splitlines():
                    yield json.loads(line)

    def leftovers(self) -> list[str]:
        """Containers, networks and volumes of the project still there."""
        left = []
        for kind in ("container", "network", "volume"):
            names = docker(kind, "ls", "-aq" if kind == "container" else "-q",
                           "--filter", f"label={LABEL}").split()  # fmt: skip
            left += [f"{kind} {name}" for name in names]
        return left

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

"""What ``make compose-check`` needs on the host: Debian packages, a Docker engine, a base image.

Registries cannot be reached from the machines this runs on, so the Debian base image
every check image is built on is made here: ``debootstrap`` of the host's own Debian
release from the mirror in its APT sources, imported with ``docker import`` and kept
under a tag, so that the next run finds it and skips this step.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PACKAGES = {
    "docker.io": "dockerd",
    "docker-compose": "docker-compose",
    "debootstrap": "debootstrap",
}
APT_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
APT_LOCK = ["-o", "DPkg::Lock::Timeout=900"]  # others may be installing packages too
DOCKERD_LOG = Path("/var/log/netdisco-compose-dockerd.log")


def run(*cmd: str, quiet: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; its output is kept (and shown only if it fails)."""
    result = subprocess.run(cmd, capture_output=quiet, text=True, env=APT_ENV, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip()[-2000:]
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {result.returncode}: {detail}")
    return result


def install_packages() -> str:
    """Install what is missing (``apt-get update`` once first); say what was done."""
    missing = [pkg for pkg, binary in PACKAGES.items() if shutil.which(binary) is None]
    if not missing:
        return "already installed: " + ", ".join(PACKAGES)
    run("apt-get", *APT_LOCK, "update", "-q")
    run("apt-get", *APT_LOCK, "install", "-y", "-q", "--no-install-recommends", *missing)
    return "installed " + ", ".join(missing)


@dataclass
class Dockerd:
    """The Docker engine: the running one, or one started here (and stopped by ``stop``)."""

    process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def running() -> bool:
        return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0

    def start(self) -> str:
        if self.running():
            return "a Docker engine was already running: using it"
        # no default bridge and no iptables rules: every container of the check uses the
        # host network, so nothing needs a bridge on a private range
        with DOCKERD_LOG.open("ab") as log:
            self.process = subprocess.Popen(
                ["dockerd", "--bridge=none", "--iptables=false", "--storage-driver=overlay2"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while not self.running():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dockerd did not start; see {DOCKERD_LOG}")
            time.sleep(0.5)
        return f"started dockerd (pid {self.process.pid}, log {DOCKERD_LOG})"

    def stop(self) -> str:
        if self.process is None:
            return "left the Docker engine running (it was not started here)"
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return f"stopped dockerd (pid {self.process.pid}), which this check had started"


def os_release() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines())
    return {key: value.strip('"') for key, value in (p for p in pairs if len(p) == 2)}


def _source_entries() -> list[tuple[str, list[str]]]:
    """(URI, suites) of every ``deb`` entry in /etc/apt/sources.list and sources.list.d."""
    entries: list[tuple[str, list[str]]] = []
    root = Path("/etc/apt")
    for path in [root / "sources.list", *sorted((root / "sources.list.d").glob("*.list"))]:
        if path.is_file():
            for line in path.read_text().splitlines():
                words = [w for w in line.split("#")[0].split() if not w.startswith("[")]
                if len(words) >= 3 and words[0] == "deb":
                    entries.append((words[1], [words[2]]))
    for path in sorted((root / "sources.list.d").glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields = dict(
                (k.strip(), v.strip())
                for k, _, v in (line.partition(":") for line in stanza.splitlines())
                if not k.startswith("#")
            )
            if "deb" in fields.get("Types", "").split() and fields.get("Enabled", "yes") == "yes":
                for uri in fields.get("URIs", "").split():
                    entries.append((uri, fields.get("Suites", "").split()))
    return entries


def debian_sources(codename: str) -> list[str]:
    """The host's Debian lines for ``codename``: the mirror first (its ``main`` component)."""
    lines = [
        f"deb {uri} {suite} main"
        for uri, suites in _source_entries()
        for suite in suites
        if suite == codename or suite.startswith(f"{codename}-")
    ]
    mirrors = [line for line in lines if line.split()[2] == codename]
    if not mirrors:
        raise RuntimeError(f"no Debian mirror for {codename} in /etc/apt/sources.list*")
    return mirrors[:1] + [line for line in lines if line not in mirrors]


def image_exists(tag: str) -> bool:
    probe = ["docker", "image", "inspect", tag]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def base_image() -> tuple[str, str]:
    """The base image's tag, and what was done: found in the cache, or debootstrapped."""
    codename = os_release()["VERSION_CODENAME"]
    tag = f"netdisco-check/debian:{codename}"
    if image_exists(tag):
        return tag, f"base image {tag} cached: debootstrap skipped"
    started = time.monotonic()
    sources = debian_sources(codename)
    mirror = sources[0].split()[1]
    with tempfile.TemporaryDirectory(prefix="netdisco-base-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        run("debootstrap", "--variant=minbase", codename, str(rootfs), mirror)
        (rootfs / "etc/apt/sources.list").write_text("\n".join(sources) + "\n")
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (rootfs / leftover).glob("*"):
                if path.is_file():
                    path.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["docker", "import", "-", tag], stdin=tar.stdout, capture_output=True, check=False
        )
        if tar.wait() != 0 or imported.returncode != 0:
            raise RuntimeError(f"docker import failed: {imported.stderr.decode()[-500:]}")
    took = time.monotonic() - started
    return tag, f"base image {tag} built: debootstrap {codename} from {mirror} ({took:.0f} s)"

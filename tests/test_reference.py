"""docs/configuration.md is what the settings classes declare (regenerate it with
``python docs/make_configuration.py``), and every setting is documented."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from monitor.config import SECTIONS
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.crawl.settings import SECTIONS as CRAWL_SECTIONS
from netdisco.crawl.settings import Settings
from netdisco.engine.config import EngineSettings
from netdisco.frontiers.redis.options import RedisOptions

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_configuration_md_is_generated_from_the_code() -> None:
    spec = importlib.util.spec_from_file_location(
        "make_configuration", DOCS / "make_configuration.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    written = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert written == module.render(), "run: python docs/make_configuration.py"


@pytest.mark.parametrize(
    "cls", [Settings, EngineSettings, ZooKeeperSettings, RedisOptions, *SECTIONS.values()]
)
def test_every_setting_has_a_doc_and_a_section(cls: type) -> None:
    for f in dataclasses.fields(cls):
        assert f.metadata.get("doc"), f"{cls.__name__}.{f.name} has no doc"
        assert f.metadata.get("section"), f"{cls.__name__}.{f.name} has no section"


def test_crawl_settings_are_grouped_in_the_documented_sections() -> None:
    sections = [f.metadata["section"] for f in dataclasses.fields(Settings)]
    assert set(sections) == set(CRAWL_SECTIONS)
    assert sections == sorted(sections, key=CRAWL_SECTIONS.index)  # declared in order

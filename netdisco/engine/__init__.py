"""The engine layer: several crawlers in one loop, served over HTTP, registered.

``engine`` runs the crawlers and their lifecycle; ``api`` serves them
(docs/http-api.md); ``metrics`` exposes them to Prometheus; ``config`` reads
the engine's TOML file.
"""

from netdisco.engine.config import EngineConfig, EngineSettings, load_config
from netdisco.engine.engine import SpiderEngine
from netdisco.engine.lifecycle import EngineState

__all__ = ["EngineConfig", "EngineSettings", "EngineState", "SpiderEngine", "load_config"]

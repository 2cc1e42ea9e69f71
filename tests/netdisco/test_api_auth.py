"""Control without a token is refused on any socket that is not loopback.

An application may mount the engine's routes on its own (public) site, where the
engine's start-up check never runs; the per-request check covers that case.
Which address a socket is bound to is pure logic, so a fake transport stands in.
"""

from __future__ import annotations

from unittest import mock

import pytest
from aiohttp.test_utils import make_mocked_request

from netdisco.engine import SpiderEngine
from netdisco.engine.api import authorize, create_app
from netdisco.engine.config import EngineSettings
from netdisco.exceptions import ApiError


def control_request(sockname: object) -> object:
    engine = SpiderEngine(EngineSettings(port=0, token_env=None))
    transport = mock.Mock()
    transport.get_extra_info.return_value = sockname
    return make_mocked_request(
        "POST", "/netdiscovery/spiders/a/pause", app=create_app(engine), transport=transport
    )


@pytest.mark.parametrize("sockname", [("127.0.0.1", 8715), ("::1", 8715, 0, 0), "/run/x.sock"])
def test_loopback_control_needs_no_token(sockname: object) -> None:
    assert authorize(control_request(sockname)) is not None  # type: ignore[arg-type]


@pytest.mark.parametrize("sockname", [("10.0.0.5", 8715), ("0.0.0.0", 80), None])
def test_public_control_without_token_is_refused(sockname: object) -> None:
    with pytest.raises(ApiError) as caught:
        authorize(control_request(sockname))  # type: ignore[arg-type]
    assert caught.value.status == 403


class Behind:
    """The status process as the app sees it: a loopback flag and a publish call."""

    def __init__(self, loopback: bool) -> None:
        self.loopback = loopback

    async def publish(self) -> int:
        return 0


@pytest.mark.parametrize("loopback", [True, False])
def test_behind_the_status_process_the_public_address_decides(loopback: bool) -> None:
    """The app then listens on a private Unix socket; what counts is the address the
    status process serves clients on, not that socket."""
    engine = SpiderEngine(EngineSettings(port=0, token_env=None))
    transport = mock.Mock()
    transport.get_extra_info.return_value = "/tmp/netdisco-api-x/engine.sock"
    app = create_app(engine, behind=Behind(loopback))
    request = make_mocked_request(
        "POST", "/netdiscovery/spiders/a/pause", app=app, transport=transport
    )
    if loopback:
        assert authorize(request) is engine
    else:
        with pytest.raises(ApiError) as caught:
            authorize(request)
        assert caught.value.status == 403

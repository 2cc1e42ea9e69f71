"""``netdisco.testing.wait_for`` and ``zookeeper_mode``: the harnesses' shared helpers."""

from __future__ import annotations

import pytest

from netdisco.testing import ZooKeeperServer, free_port, wait_for, zookeeper_mode


def test_wait_for_returns_the_first_answer_and_names_the_last_error() -> None:
    answers = iter([None, ValueError("not yet"), "ready"])

    def probe() -> str | None:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert wait_for("an answer", probe, 5, every=0.01) == "ready"
    with pytest.raises(RuntimeError, match=r"no the end within 0 s \(last error: boom\)"):
        wait_for("the end", lambda: (_ for _ in ()).throw(OSError("boom")), 0.05, 0.01,
                 error=RuntimeError)  # fmt: skip


def test_zookeeper_mode_of_a_server_and_of_nothing(zk_server: ZooKeeperServer) -> None:
    assert zookeeper_mode(zk_server.host, zk_server.port) == "standalone"
    assert zookeeper_mode("127.0.0.1", free_port()) is None

"""A bootstrap address where something accepts connections but never answers as Kafka
would (another service's port, a firewall that holds connections): the one-line error
says that nothing answered in time, instead of ending on an empty reason."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from dprobe.cli import main


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


@pytest.mark.parametrize("command", [["topics", "list"], ["cluster", "show"]])
def test_no_answer_is_said_with_the_time_waited(
    silent_port: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    monkeypatch.setenv("DPROBE_KAFKA_REQUEST_TIMEOUT_MS", "1000")
    assert main(["--bootstrap", f"127.0.0.1:{silent_port}", *command]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dprobe {command[0]}: cannot reach Kafka at 127.0.0.1:{silent_port}: ")
    assert (
        "no answer within 1 s (kafka.request_timeout_ms): is a Kafka broker listening there?" in err
    )
    assert len(err.splitlines()) == 1

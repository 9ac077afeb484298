"""A lag poller that ends by an unexpected error ends ``dprobe lag`` (exit 1, so its
service restarts) instead of serving the last values as if they were fresh."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest
from prometheus_client import CollectorRegistry

from dprobe import cli
from dprobe.config import LagSettings
from dprobe.sinks.consumer_lag import ConsumerLag
from dprobe.sinks.lag_exporter import LagExporter


async def _broken_refresh(self: ConsumerLag) -> dict[tuple[str, int], int]:
    raise ValueError("a reply this code did not expect")


async def test_the_exporter_reports_a_poller_that_ended(monkeypatch) -> None:
    monkeypatch.setattr(ConsumerLag, "refresh", _broken_refresh)
    settings = LagSettings(groups=("a", "b"), interval_s=0.05)
    async with LagExporter(settings, CollectorRegistry()) as exporter:
        with pytest.raises(RuntimeError, match=r"poller of [ab] failed"):
            await asyncio.wait_for(exporter.wait(), timeout=10)


async def test_an_exporter_whose_pollers_run_keeps_waiting(monkeypatch) -> None:
    async def fine(self: ConsumerLag) -> dict[tuple[str, int], int]:
        return {}

    monkeypatch.setattr(ConsumerLag, "refresh", fine)
    async with LagExporter(LagSettings(interval_s=0.05), CollectorRegistry()) as exporter:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(exporter.wait(), timeout=0.5)


def test_dprobe_lag_exits_1_when_polling_fails(monkeypatch, capsys) -> None:
    async def reachable(kafka: object) -> bool:
        return True

    monkeypatch.setattr("dprobe.kafka_auth.check_credentials", reachable)
    monkeypatch.setattr(ConsumerLag, "refresh", _broken_refresh)
    code = cli.main(["lag", "--group", "g", "--interval", "0.05", "--metrics-port", "0"])
    assert code == 1
    assert "dprobe lag: stopped: consumer lag poller of g failed" in capsys.readouterr().err


def _coordinator_not_ready(
    times: int, calls: list[float]
) -> Callable[[ConsumerLag], Awaitable[dict[tuple[str, int], int]]]:
    """A refresh that answers as a group coordinator still loading, ``times`` times."""
    from aiokafka.errors import GroupCoordinatorNotAvailableError

    async def refresh(self: ConsumerLag) -> dict[tuple[str, int], int]:
        calls.append(asyncio.get_running_loop().time())
        if len(calls) <= times:
            raise GroupCoordinatorNotAvailableError("Unable to get coordinator id for g")
        return {}

    return refresh


async def test_a_coordinator_not_ready_yet_is_waited_for_not_counted(monkeypatch, caplog) -> None:
    """A new cluster creates its offsets topic when a group is first asked about: the
    first answers say the coordinator is not available. That is waited for (a few
    seconds), not reported as a failed refresh."""
    calls: list[float] = []
    monkeypatch.setattr(ConsumerLag, "refresh", _coordinator_not_ready(2, calls))
    lag = ConsumerLag(LagSettings().kafka, "g", [], interval_s=60)
    with caplog.at_level("INFO", logger="dprobe.sinks.consumer_lag"):
        async with lag:
            for _ in range(100):
                if len(calls) == 3:
                    break
                await asyncio.sleep(0.05)
    assert len(calls) == 3  # retried within the tick, not 60 s later
    assert lag.errors == 0
    assert _lines_of_dprobe(caplog, above="DEBUG") == []


async def test_a_coordinator_that_stays_away_is_a_failed_refresh(monkeypatch, caplog) -> None:
    calls: list[float] = []
    monkeypatch.setattr(ConsumerLag, "refresh", _coordinator_not_ready(100, calls))
    monkeypatch.setattr("dprobe.sinks.consumer_lag.SETTLE_WAITS_S", (0.01, 0.01))
    lag = ConsumerLag(LagSettings().kafka, "g", [], interval_s=60)
    with caplog.at_level("WARNING", logger="dprobe.sinks.consumer_lag"):
        async with lag:
            for _ in range(100):
                if lag.errors:
                    break
                await asyncio.sleep(0.05)
    assert len(calls) == 3 and lag.errors == 1
    assert "refresh failed: GroupCoordinatorNotAvailableError" in _lines_of_dprobe(caplog)[0]


def _lines_of_dprobe(caplog: pytest.LogCaptureFixture, above: str = "NOTSET") -> list[str]:
    """The messages dprobe's own loggers wrote above level ``above``: the Kafka client of
    a test before (a consumer still trying a broker that is gone) may log meanwhile."""
    least = logging.getLevelName(above)
    return [
        r.getMessage() for r in caplog.records if r.name.startswith("dprobe") and r.levelno > least
    ]

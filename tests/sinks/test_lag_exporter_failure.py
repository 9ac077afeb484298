"""A lag poller that ends by an unexpected error ends ``dprobe lag`` (exit 1, so its
service restarts) instead of serving the last values as if they were fresh."""

from __future__ import annotations

import asyncio

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

"""``dprobe topics`` on the real broker: every topic with the configured partitions (the
scaling events with one), and a warning naming the fix for a topic created too small."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from dprobe.cli import main
from tests.topic_admin import create_topics

pytestmark = pytest.mark.integration


def test_topics_create_makes_every_topic_and_warns_about_a_small_one(
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}."
    monkeypatch.setenv("DPROBE_KAFKA_TOPIC_PREFIX", prefix)
    # a collector started first made Kafka auto-create the samples topic with one partition
    asyncio.run(create_topics(kafka_bootstrap, {f"{prefix}samples": (1, {})}))
    base = ["--bootstrap", kafka_bootstrap, "topics"]
    assert main([*base, "list"]) == 0
    listed = capsys.readouterr()
    assert f"{prefix}jobs\tmissing" in listed.out and "run `dprobe topics create`" in listed.err
    with caplog.at_level(logging.WARNING, logger="dprobe.streams.provision"):
        assert main([*base, "create", "--partitions", "3", "--app-id", f"{prefix}app"]) == 0
    out = capsys.readouterr().out
    lines = dict(line.split("\t") for line in out.strip().splitlines())
    assert lines[f"{prefix}jobs"] == "3 partition(s)"
    assert lines[f"{prefix}features"] == "3 partition(s)"
    assert lines[f"{prefix}scaling-events"] == "1 partition(s)"
    assert lines[f"{prefix}samples"] == "1 partition(s)"  # left as it was, with a warning
    # the worker's internal topics too, its changelogs listed with their partitions (not
    # "missing" because the broker's metadata did not hold them yet): the hosts table's
    # as the samples topic, the windows table's as worker.partitions, planning's one
    app = f"{prefix}app"
    assert lines[f"{app}-tenant-updates"] == "3 partition(s)"
    assert lines[f"{app}-hosts-changelog"] == "1 partition(s)"
    assert lines[f"{app}-windows-changelog"] == "3 partition(s)"
    assert lines[f"{app}-planning-changelog"] == "1 partition(s)"
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert f"topic {prefix}samples has 1 partition(s)" in warning
    assert "fewer than worker.partitions=3" in warning


def test_a_scaling_events_topic_made_with_more_partitions_is_warned_of(
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A scheduler's consumer that subscribed before the worker ran made Kafka auto-create
    the scaling-events topic with the broker's default partitions (here 3): plans are no
    longer in order for consumers that read them as they come."""
    prefix = f"t{uuid.uuid4().hex[:8]}."
    monkeypatch.setenv("DPROBE_KAFKA_TOPIC_PREFIX", prefix)
    asyncio.run(create_topics(kafka_bootstrap, {f"{prefix}scaling-events": (3, {})}))
    base = ["--bootstrap", kafka_bootstrap, "topics"]
    with caplog.at_level(logging.WARNING, logger="dprobe.streams.provision"):
        assert main([*base, "create", "--app-id", f"{prefix}app"]) == 0
    out = capsys.readouterr().out
    lines = dict(line.split("\t") for line in out.strip().splitlines())
    assert lines[f"{prefix}scaling-events"] == "3 partition(s)"  # as it was
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    about = [w for w in warnings if f"topic {prefix}scaling-events" in w]
    assert len(about) == 1
    assert "has 3 partitions, more than the 1 it is created with" in about[0]
    assert "plan_seq order" in about[0]
    assert not any(f"topic {prefix}cluster" in w for w in warnings)  # created with one


def test_list_refuses_partitions_which_only_create_uses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`list` shows the partitions each topic has: a count given to it changed nothing."""
    assert main(["--bootstrap", "127.0.0.1:1", "topics", "list", "--partitions", "8"]) == 2
    err = capsys.readouterr().err
    assert "dprobe topics: --partitions applies to `dprobe topics create`" in err
    assert "cannot reach" not in err  # refused before any broker is asked


def test_list_of_another_app_id_says_how_to_create_its_topics(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command it suggests creates the missing topics it listed: those of that app id,
    not the default app id's."""
    prefix = f"t{uuid.uuid4().hex[:8]}."
    monkeypatch.setenv("DPROBE_KAFKA_TOPIC_PREFIX", prefix)
    assert main(["--bootstrap", kafka_bootstrap, "topics", "list", "--app-id", f"{prefix}a"]) == 0
    out, err = capsys.readouterr()
    assert f"{prefix}a-planning\tmissing" in out
    assert f"run `dprobe topics create --app-id {prefix}a`" in err


@pytest.mark.parametrize("partitions", [2, 3])
def test_a_planning_topic_of_more_than_one_partition_exits_2(
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    partitions: int,
) -> None:
    """Made by auto-create or by hand: the worker's one planner reads one partition (its
    table and window marks are partition 0's), so no worker of the app id may start."""
    prefix = f"t{uuid.uuid4().hex[:8]}."
    app = f"{prefix}app"
    monkeypatch.setenv("DPROBE_KAFKA_TOPIC_PREFIX", prefix)
    asyncio.run(create_topics(kafka_bootstrap, {f"{app}-planning": (partitions, {})}))
    argv = ["--bootstrap", kafka_bootstrap, "topics", "create", "--app-id", app]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"dprobe topics: topic {app}-planning has {partitions} partition(s) but the planning "
        "topic has one"
    )
    assert len(err.splitlines()) == 1

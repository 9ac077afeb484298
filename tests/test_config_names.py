"""Names the broker or the operating system would refuse are refused by the settings first:
topic names and prefixes, consumer groups, environment variable names, empty paths.

Kafka's rule for a topic name (letters, digits, '.', '_', '-'; at most 249; not '.' or
'..') is restated here from Kafka's documentation, not taken from the code under test.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dprobe.cli import main
from dprobe.config import (
    ArchiveSettings,
    CollectorSettings,
    ConfigError,
    KafkaSettings,
    LagSettings,
    ReplaySettings,
    WorkerSettings,
    check_topic_name,
    load,
)
from dprobe.errors import UsageError
from dprobe.traces.replay_kafka import topics_for


def _kafka_accepts(name: str) -> bool:
    legal = re.fullmatch(r"[A-Za-z0-9._-]+", name) is not None
    return legal and len(name) <= 249 and name not in (".", "..")


NAMES = ["dprobe.samples", "a", "A-b_c.9", ".", "..", "", "a b", "../x", "a/b", "é"]
NAMES += ["x" * 249, "x" * 250]


@pytest.mark.parametrize("name", NAMES)
def test_a_topic_name_is_refused_exactly_when_kafka_would_refuse_it(name: str) -> None:
    if _kafka_accepts(name):
        check_topic_name("--topic", name)
    else:
        with pytest.raises(ConfigError, match="--topic"):
            check_topic_name("--topic", name)


@pytest.mark.parametrize("prefix", ["../", "a b", "dprobe/", "x" * 240])
def test_a_topic_prefix_that_makes_illegal_names_is_refused_by_every_service(prefix: str) -> None:
    # the longest name dprobe builds from a prefix is PREFIX + "scaling-events"
    assert not _kafka_accepts(prefix + "scaling-events")
    with pytest.raises(ConfigError, match=r"kafka\.topic_prefix"):
        load(KafkaSettings, env={"DPROBE_KAFKA_TOPIC_PREFIX": prefix})
    with pytest.raises(ConfigError, match=r"replay\.topic_prefix"):
        load(ReplaySettings, env={}, cli={"topic_prefix": prefix})


def test_the_prefixes_in_use_are_accepted() -> None:
    assert (
        load(KafkaSettings, env={"DPROBE_KAFKA_TOPIC_PREFIX": "a"}).topic("samples") == "asamples"
    )
    assert load(ReplaySettings, env={}, cli={"topic_prefix": "dprobe."}).into_live_topics


def test_an_empty_topic_prefix_is_refused_naming_where_it_was_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Topics named plain ``samples``, ``jobs``, ``cluster`` would mix with other
    applications' topics; an empty variable is a template's slip, not a choice."""
    with pytest.raises(ConfigError, match=r"kafka\.topic_prefix must not be empty"):
        load(KafkaSettings, env={"DPROBE_KAFKA_TOPIC_PREFIX": ""})
    with pytest.raises(ConfigError, match=r"replay\.topic_prefix must not be empty"):
        load(ReplaySettings, env={"DPROBE_REPLAY_TOPIC_PREFIX": ""})
    toml = tmp_path / "dprobe.toml"
    toml.write_text('[kafka]\ntopic_prefix = ""\n')
    assert main(["--config", str(toml), "config", "check"]) == 2
    err = capsys.readouterr().err
    assert "kafka.topic_prefix must not be empty" in err and str(toml) in err


def test_replay_topic_overrides_are_checked_and_not_given_twice() -> None:
    s = ReplaySettings()
    assert topics_for(s, ["jobs=my.jobs", "my.samples"]) == {
        "samples": "my.samples",
        "jobs": "my.jobs",
        "cluster": "dprobe-replay.cluster",
    }
    with pytest.raises(UsageError, match="already 'a'"):
        topics_for(s, ["samples=a", "samples=b"])
    with pytest.raises(UsageError, match="already 'a'"):  # the bare form names the main kind
        topics_for(s, ["a", "samples=b"])
    with pytest.raises(UsageError, match="Kafka topic names hold only"):
        topics_for(s, ["cluster=a b"])
    with pytest.raises(UsageError, match="jobs and samples would go to one topic 'x'"):
        topics_for(s, ["samples=x", "jobs=x"])
    with pytest.raises(UsageError, match=r"would go to one topic 'dprobe-replay\.jobs'"):
        topics_for(s, ["dprobe-replay.jobs"])  # the samples into the jobs topic


def test_lag_refuses_an_empty_group_or_topic_given_among_others(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="none empty"):
        load(LagSettings, env={}, cli={"groups": ("", "dprobe-worker")})
    with pytest.raises(ConfigError, match=r"lag\.topics: an empty name is not"):
        load(LagSettings, env={}, cli={"topics": ("",)})
    toml = tmp_path / "dprobe.toml"
    toml.write_text('[lag]\ngroups = ["dprobe-worker", " "]\n')
    with pytest.raises(ConfigError, match="none empty"):
        load(LagSettings, env={}, file=toml)
    # a comma-separated environment value may end in a comma or hold spaces
    lag = load(LagSettings, env={"DPROBE_LAG_GROUPS": " dprobe-worker, w2,"})
    assert lag.groups == ("dprobe-worker", "w2")


def test_an_empty_path_is_refused_rather_than_read_as_the_current_folder() -> None:
    with pytest.raises(ConfigError, match="expected a path, got an empty string"):
        load(ArchiveSettings, env={}, cli={"out_dir": ""})
    with pytest.raises(ConfigError, match="expected a path"):
        load(ArchiveSettings, env={"DPROBE_ARCHIVE_OUT_DIR": " "})
    # an optional path set empty means "not set", as before
    assert load(CollectorSettings, env={"DPROBE_COLLECTOR_TENANT_MAP": ""}).tenant_map is None


@pytest.mark.parametrize("var", ["SLURM JOB", "", "1ACCOUNT", "A=B"])
def test_tenant_env_vars_must_be_environment_variable_names(var: str) -> None:
    with pytest.raises(ConfigError, match="not an environment variable name"):
        load(CollectorSettings, env={}, cli={"tenant_env_vars": (var,)})
    ok = load(CollectorSettings, env={}, cli={"tenant_env_vars": ("SLURM_JOB_ACCOUNT", "_T1")})
    assert ok.tenant_env_vars == ("SLURM_JOB_ACCOUNT", "_T1")


@pytest.mark.parametrize(
    ("cls", "name", "value", "words"),
    [
        (WorkerSettings, "plan_horizon_s", 1e308, "at most 10000000 seconds"),
        (WorkerSettings, "window_s", 2e7, "at most 10000000 seconds"),
        (WorkerSettings, "producer_linger_ms", 1e11, "at most 10000000000 milliseconds"),
        (WorkerSettings, "flow_edges_s", "60,1e9", "at most 10000000 seconds"),
        (WorkerSettings, "plan_headroom", 1e308, r"plan_headroom must be within \[0, 10\]"),
        (WorkerSettings, "capacity_gpus", 10**18, "capacity_gpus at most 10000000"),
        (WorkerSettings, "max_message_bytes", 2**31, "at most 2147483647"),
        (WorkerSettings, "level_l1_max_mem_bytes", 1e300, r"within \[0, 2\*\*53\]"),
        (ReplaySettings, "partitions", 10**18, r"replay\.partitions must be within"),
        (ArchiveSettings, "compression_level", 23, r"within \[-131072, 22\]"),
        (WorkerSettings, "batch_max", 10**7, r"batch_max must be within \[1, 1000000\]"),
        (WorkerSettings, "producer_buffer_messages", 10**8, r"within \[1, 10000000\]"),
        (WorkerSettings, "forget_tenant_after_s", 3.2e8, r"at most 315360000 seconds \(3650"),
    ],
)
def test_a_value_far_beyond_any_use_is_refused_naming_the_setting(
    cls: type, name: str, value: object, words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        load(cls, env={}, cli={name: value})


def test_the_longest_values_in_use_are_accepted() -> None:
    year = 365 * 86_400.0  # forgetting a silent tenant after a year is a fair choice
    s = load(WorkerSettings, env={}, cli={"forget_tenant_after_s": year, "plan_headroom": 10.0})
    assert (s.forget_tenant_after_s, s.plan_headroom) == (year, 10.0)
    s = load(WorkerSettings, env={}, cli={"plan_horizon_s": 1e7})
    assert s.plan_horizon_s == 1e7
    for level in (-5, 0, 1, 22):  # zstd's fast levels and its default are levels too
        archive = load(ArchiveSettings, env={}, cli={"compression_level": level})
        assert archive.compression_level == level


def test_a_negative_duration_is_named_by_its_own_rule_not_the_upper_bound() -> None:
    with pytest.raises(ConfigError) as info:
        load(WorkerSettings, env={}, cli={"grace_s": -2e7})
    assert "grace_s >= 0" in str(info.value) and "at most" not in str(info.value)


def test_items_of_a_list_setting_are_trimmed_like_those_of_a_comma_list(tmp_path: Path) -> None:
    toml = tmp_path / "dprobe.toml"
    toml.write_text('[lag]\ngroups = ["dprobe-worker ", " w2"]\ntopics = ["dprobe.samples "]\n')
    lag = load(LagSettings, env={}, file=toml)
    assert lag.groups == ("dprobe-worker", "w2") and lag.topics == ("dprobe.samples",)


def test_collect_refuses_a_topic_kafka_would_refuse_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "snaps.jsonl"
    argv = ["--bootstrap", "127.0.0.1:1", "collect", "--topic", "a/b", "--output", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "dprobe collect: --topic 'a/b': Kafka topic names hold only letters, "
        "digits, '.', '_' and '-'"
    ]
    assert not out.exists()


@pytest.mark.parametrize(
    "bootstrap", ["kafka 1:9092", "http://kafka-1:9092", "user@kafka:9092", "k?x:1", "k#x:1"]
)
def test_a_bootstrap_server_that_is_no_host_name_is_refused(bootstrap: str) -> None:
    with pytest.raises(ConfigError, match="is no host name or address"):
        load(KafkaSettings, env={}, cli={"bootstrap": bootstrap})


@pytest.mark.parametrize(
    "bootstrap",
    [
        "k1:9092, k2:9092",
        "[::1]:9092",
        "::1",
        "[::1]",
        "[fe80::1%eth0]:9092",
        "kafka-1",
        "10.0.0.1:9093",
    ],
)
def test_bootstrap_lists_in_use_are_accepted(bootstrap: str) -> None:
    assert load(KafkaSettings, env={}, cli={"bootstrap": bootstrap}).bootstrap == bootstrap


def _flags_named_unlike_their_setting() -> list[tuple[type, str, str]]:
    """(settings, key a flag's name spells, the setting it sets) for every flag of
    `dprobe collect`, `dprobe worker` and `dprobe lag` whose name is not its setting's."""
    import argparse
    import dataclasses

    from dprobe.cli import build_parser, flag_names

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for command, cls in (
        ("collect", CollectorSettings),
        ("worker", WorkerSettings),
        ("lag", LagSettings),
    ):
        names = {f.name for f in dataclasses.fields(cls)}
        for dest, flag in flag_names(sub.choices[command]).items():
            key = flag.lstrip("-").replace("-", "_")
            if dest in names and key != dest:
                found.append((cls, key, dest))
    return found


@pytest.mark.parametrize(("cls", "key", "setting"), _flags_named_unlike_their_setting())
def test_a_flag_s_name_used_as_a_key_is_told_the_setting_it_sets(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    cls: type,
    key: str,
    setting: str,
) -> None:
    """`--gpus` sets synthetic_gpus: `gpus = 2` in the file, or DPROBE_COLLECTOR_GPUS, is
    refused (or ignored) with the setting's own name, not some other near spelling."""
    import logging

    section = cls.section
    f = tmp_path / "d.toml"
    f.write_text(f"[{section}]\n{key} = 1\n")
    with pytest.raises(ConfigError) as err:
        load(cls, env={}, file=f)
    assert f"unknown settings: {key} (did you mean {setting}?)" in str(err.value)
    monkeypatch.setattr("dprobe.config._warned_env", set())
    var = f"DPROBE_{section.upper()}_{key.upper()}"
    with caplog.at_level(logging.WARNING, logger="dprobe.config"):
        load(cls, env={var: "1"})
    assert f"did you mean DPROBE_{section.upper()}_{setting.upper()}?" in caplog.text

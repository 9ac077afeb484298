"""Settings precedence (CLI > env > TOML > default), validation and secret masking."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dprobe.config import (
    CollectorSettings,
    ConfigError,
    KafkaSettings,
    Secret,
    WorkerSettings,
    load,
)


def _toml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "dprobe.toml"
    p.write_text(text)
    return p


def test_precedence_cli_over_env_over_file_over_default(tmp_path: Path) -> None:
    f = _toml(
        tmp_path,
        '[worker]\nwindow_s = 30\ngrace_s = 3\npartitions = 8\n[kafka]\nbootstrap = "file:1"\n',
    )
    env = {"DPROBE_WORKER_GRACE_S": "5", "DPROBE_WORKER_WINDOW_S": "45"}
    s = load(WorkerSettings, cli={"window_s": 10, "grace_s": None}, env=env, file=f)
    assert s.window_s == 10.0  # CLI
    assert s.grace_s == 5.0  # env beats file
    assert s.partitions == 8  # file beats default
    assert s.app_id == "dprobe-worker"  # default
    assert s.kafka.bootstrap == "file:1"
    s2 = load(
        WorkerSettings, cli={"bootstrap": "cli:2"}, env={"DPROBE_KAFKA_BOOTSTRAP": "env:3"}, file=f
    )
    assert s2.kafka.bootstrap == "cli:2"


def test_settings_are_frozen() -> None:
    s = load(WorkerSettings, env={})
    with pytest.raises(AttributeError):
        s.window_s = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"DPROBE_WORKER_WINDOW_S": "abc"}, "DPROBE_WORKER_WINDOW_S"),
        ({"DPROBE_WORKER_WINDOW_S": "nan"}, "finite"),
        ({"DPROBE_WORKER_WINDOW_S": "-1"}, "window_s"),
        ({"DPROBE_WORKER_PARTITIONS": "1.5"}, "integer"),
        ({"DPROBE_WORKER_FETCH_PARTITION_BYTES": "1000"}, "fetch_partition_bytes"),
        ({"DPROBE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "sasl_mechanism"),
        ({"DPROBE_WORKER_GUARANTEED_GPUS": "-8"}, "guaranteed_gpus"),
        ({"DPROBE_WORKER_GUARANTEED_GPUS": "72"}, "guaranteed_gpus"),
        ({"DPROBE_WORKER_CAPACITY_GPUS": "-8"}, "capacity_gpus"),
        ({"DPROBE_WORKER_NODE_GPUS": "0"}, "node_gpus"),
        ({"DPROBE_WORKER_CAPACITY_GPUS": "4"}, "node_gpus"),
    ],
)
def test_invalid_values_name_the_setting(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load(WorkerSettings, env=env)


def test_unknown_file_settings_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="windw_s"):
        load(WorkerSettings, env={}, file=_toml(tmp_path, "[worker]\nwindw_s = 3\n"))


def test_missing_and_broken_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load(WorkerSettings, env={}, file=tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match=r"dprobe\.toml"):
        load(WorkerSettings, env={}, file=_toml(tmp_path, "[worker\n"))


def test_security_settings_pass_through_and_secrets_are_masked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = {
        "DPROBE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "DPROBE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "DPROBE_KAFKA_SASL_USERNAME": "svc",
        "DPROBE_KAFKA_SASL_PASSWORD": "hunter2",
    }
    s = load(CollectorSettings, env=env)
    kw = s.kafka.client_kwargs()
    assert kw["security_protocol"] == "SASL_PLAINTEXT"
    assert kw["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kw["sasl_plain_username"] == "svc"
    assert kw["sasl_plain_password"] == "hunter2"
    assert "hunter2" not in repr(s)
    assert "hunter2" not in str(s.kafka)
    with caplog.at_level(logging.INFO):
        logging.getLogger("t").info("settings: %s", s)
    assert "hunter2" not in caplog.text
    assert s.kafka.sasl_password == Secret("hunter2")


def test_tuple_and_path_settings(tmp_path: Path) -> None:
    s = load(
        CollectorSettings,
        env={"DPROBE_COLLECTOR_TENANT_ENV_VARS": "TEAM, VC"},
        cli={"spool_dir": "~/spool"},
    )
    assert s.tenant_env_vars == ("TEAM", "VC")
    assert s.spool_dir == Path.home() / "spool"
    assert KafkaSettings().topic("samples") == "dprobe.samples"

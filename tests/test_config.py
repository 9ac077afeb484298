"""Settings precedence (CLI > env > TOML > default), validation and secret masking."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import certifi
import pytest

from dprobe.config import (
    SERVICES,
    ArchiveSettings,
    BrokerSettings,
    CollectorSettings,
    ConfigError,
    KafkaSettings,
    ReplaySettings,
    Secret,
    WorkerSettings,
    load,
)

ROOT = Path(__file__).resolve().parents[1]
EVERY = SERVICES


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
        (
            {"DPROBE_KAFKA_SASL_USERNAME": "svc", "DPROBE_KAFKA_SASL_PASSWORD": "x"},
            "kafka.sasl_username, kafka.sasl_password set, but kafka.security_protocol is "
            "PLAINTEXT",
        ),
        ({"DPROBE_WORKER_GUARANTEED_GPUS": "-8"}, "guaranteed_gpus"),
        ({"DPROBE_WORKER_GUARANTEED_GPUS": "72"}, "guaranteed_gpus"),
        ({"DPROBE_WORKER_CAPACITY_GPUS": "-8"}, "capacity_gpus"),
        ({"DPROBE_WORKER_NODE_GPUS": "0"}, "node_gpus"),
        ({"DPROBE_WORKER_CAPACITY_GPUS": "4"}, "node_gpus"),
        ({"DPROBE_WORKER_APP_ID": "a b/c"}, "app_id"),
        ({"DPROBE_WORKER_LAG_INTERVAL_S": "0"}, "lag_interval_s"),
        ({"DPROBE_WORKER_COMMIT_INTERVAL_S": "0"}, "commit_interval_s"),
        ({"DPROBE_WORKER_PRODUCER_BUFFER_MESSAGES": "0"}, "producer_buffer_messages"),
        ({"DPROBE_WORKER_DATA_DIR": "/tmp/{x}"}, "data_dir"),
    ],
)
def test_invalid_values_name_the_setting(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load(WorkerSettings, env=env)


def test_unknown_file_settings_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="windw_s"):
        load(WorkerSettings, env={}, file=_toml(tmp_path, "[worker]\nwindw_s = 3\n"))


def test_missing_and_broken_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: no such file"):
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


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[replay]\nspeed = 1" + "0" * 400, r"\[replay\] speed: expected a finite number"),
        ("[worker]\nwindow_s = -1" + "0" * 400, r"\[worker\] window_s: expected a finite number"),
        (
            "[replay]\ngpus_per_host = 1" + "0" * 400,
            r"\[replay\] gpus_per_host: expected a 64-bit integer",
        ),
    ],
)
def test_a_number_too_large_for_a_setting_is_a_config_error(
    tmp_path: Path, text: str, needle: str
) -> None:
    cls = WorkerSettings if "[worker]" in text else ReplaySettings
    with pytest.raises(ConfigError, match=needle) as info:
        load(cls, env={}, file=_toml(tmp_path, text + "\n"))
    assert len(str(info.value)) < 200  # one readable line, not the 400 digits


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[kafka]\nclient_id = ["a", "b"]', r"\[kafka\] client_id: expected a string, got a list"),
        ("[kafka]\nclient_id = { a = 1 }", r"\[kafka\] client_id: expected a string, got a table"),
        ('[kafka]\nsasl_password = ["x"]', r"\[kafka\] sasl_password: expected a string"),
        ('[collector]\nspool_dir = ["/a"]', r"\[collector\] spool_dir: expected a string"),
        ('[replay]\ntopic_prefix = ["r."]', r"\[replay\] topic_prefix: expected a string"),
        ("[kafka]\nbootstrap = []", r"\[kafka\] bootstrap: .*at least one"),
        ('[kafka]\nbootstrap = ["a:1", 2]', r"\[kafka\] bootstrap: .*HOST:PORT strings"),
        ('[kafka]\nbootstrap = ["a:1,b:2"]', r"\[kafka\] bootstrap: .*HOST:PORT strings"),
    ],
)
def test_a_list_or_table_for_a_string_setting_is_a_config_error(
    tmp_path: Path, text: str, needle: str
) -> None:
    with pytest.raises(ConfigError, match=needle):
        load(
            ReplaySettings if "[replay]" in text else CollectorSettings,
            env={},
            file=_toml(tmp_path, text + "\n"),
        )


def test_a_list_of_bootstrap_servers_is_the_comma_list(tmp_path: Path) -> None:
    # the same servers as infra/systemd/collector.toml's "kafka-1:9092,kafka-2:9092"
    f = _toml(tmp_path, '[kafka]\nbootstrap = ["kafka-1:9092", " kafka-2:9092"]\n')
    assert load(WorkerSettings, env={}, file=f).kafka.bootstrap == "kafka-1:9092,kafka-2:9092"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "[replya]\nspeed = 5\n",
            r"unknown section\(s\) \[replya\] \(did you mean \[replay\]\?\); known: \[archive\], ",
        ),
        ("speed = 5\n[replay]\ntick_s = 5\n", r"top-level key\(s\) speed .* in a section"),
        ("kafka = 5\n", r"config file \S*dprobe\.toml: \[kafka\] must be a table, not a number"),
    ],
)
@pytest.mark.parametrize("cls", EVERY)
def test_unknown_sections_and_top_level_keys_are_rejected(
    tmp_path: Path, cls: type, text: str, needle: str
) -> None:
    with pytest.raises(ConfigError, match=needle):
        load(cls, env={}, file=_toml(tmp_path, text))


@pytest.mark.parametrize("cls", EVERY)
def test_every_section_is_accepted_by_every_service(tmp_path: Path, cls: type) -> None:
    # one file for all services: each reads its own section and leaves the others
    text = "".join(f"[{c.section}]\n" for c in EVERY)
    load(cls, env={}, file=_toml(tmp_path, text))


@pytest.mark.parametrize("cls", EVERY)
def test_the_shipped_settings_files_load(tmp_path: Path, cls: type) -> None:
    for shipped in ("collector.toml", "worker.toml"):
        load(cls, env={}, file=ROOT / "infra" / "systemd" / shipped)
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```toml\n[kafka]", 1)[1].split("```", 1)[0]  # "## Settings"
    block = block.replace("/etc/dprobe/ca.pem", certifi.where())  # a CA file that exists
    load(cls, env={}, file=_toml(tmp_path, "[kafka]" + block))


CREDENTIALS = 'sasl_mechanism = "PLAIN"\nsasl_username = "ops"\nsasl_password = "pw"\n'


@pytest.mark.parametrize(
    ("toml", "error"),
    [
        (
            CREDENTIALS + 'ssl_cafile = "{missing}"',
            r"kafka\.ssl_cafile: .*nowhere\.pem: no such file",
        ),
        (CREDENTIALS + 'ssl_cafile = "{garbage}"', r"kafka\.ssl_cafile, .*cannot load them"),
        (
            CREDENTIALS + 'ssl_cafile = "{ca}"\nssl_certfile = "{missing}"',
            r"kafka\.ssl_certfile: .*no such",
        ),
        (
            'sasl_mechanism = "SCRAM-SHA-999"\nsasl_username = "ops"\nsasl_password = "pw"',
            r"sasl_mechanism must be one of PLAIN, SCRAM",
        ),
        ('sasl_mechanism = "PLAIN"\nsasl_username = "ops"', r"sasl_password are required"),
    ],
)
def test_tls_and_sasl_settings_that_cannot_work_exit_2_naming_them(
    tmp_path: Path, toml: str, error: str
) -> None:
    """A client given them would fail deep inside the Kafka library (a traceback without
    the file's name, exit 1; a collector would restart in a loop): refuse them up front."""
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    body = toml.format(missing=tmp_path / "nowhere.pem", garbage=garbage, ca=certifi.where())
    text = f'[kafka]\nsecurity_protocol = "SASL_SSL"\n{body}\n'
    with pytest.raises(ConfigError, match=error):
        load(KafkaSettings, env={}, file=_toml(tmp_path, text))


def test_a_byte_order_mark_is_read_past(tmp_path: Path) -> None:
    f = _toml(tmp_path, "\ufeff[replay]\nspeed = 5\n")
    assert load(ReplaySettings, env={}, file=f).speed == 5.0


@pytest.mark.parametrize(("value", "ok"), [(4097, True), (4098, False), (0, False)])
def test_gpus_per_host_is_bounded_by_the_schemas_gpu_index(value: int, ok: bool) -> None:
    env = {"DPROBE_REPLAY_GPUS_PER_HOST": str(value)}
    if ok:
        assert load(ReplaySettings, env=env).gpus_per_host == value
    else:
        with pytest.raises(ConfigError, match=r"replay\.gpus_per_host must be within \[1, 4097\]"):
            load(ReplaySettings, env=env)


def test_the_shipped_worker_settings_are_what_its_unit_expects() -> None:
    s = load(WorkerSettings, env={}, file=ROOT / "infra" / "systemd" / "worker.toml")
    unit = (ROOT / "infra" / "systemd" / "dprobe-worker.service").read_text()
    assert s.data_dir == Path("/var/lib/dprobe-worker") and "StateDirectory=dprobe-worker" in unit
    stop_s = float(unit.split("TimeoutStopSec=", 1)[1].split()[0])
    assert s.shutdown_timeout_s + 5 <= stop_s  # the worker's own deadline comes first


def test_the_shipped_collector_settings_stop_within_its_unit_s_timeout() -> None:
    import inspect

    from dprobe.collectors.sender import KafkaSender

    s = load(CollectorSettings, env={}, file=ROOT / "infra" / "systemd" / "collector.toml")
    unit = (ROOT / "infra" / "systemd" / "dprobe-collector.service").read_text()
    stop_s = float(unit.split("TimeoutStopSec=", 1)[1].split()[0])
    client_close_s = inspect.signature(KafkaSender.stop).parameters["timeout_s"].default
    # the slowest stop docs/collector.md gives (neither Kafka nor NVML answering), with
    # time to spare for the process to start stopping and exit before systemd kills it
    slowest = s.shutdown_timeout_s + client_close_s + 2 * s.nvml_timeout_s
    assert slowest + 5 <= stop_s


def test_an_invalid_value_s_error_says_where_it_was_given(tmp_path: Path) -> None:
    f = _toml(tmp_path, "[worker]\nwindow_s = 0\n")
    with pytest.raises(ConfigError) as err:
        load(WorkerSettings, env={}, file=f)
    assert str(err.value) == (
        "worker.window_s must be > 0 and worker.grace_s >= 0 "
        f"(given: window_s = 0 in [worker] of config file {f}, line 2)"
    )
    with pytest.raises(ConfigError) as err:
        load(WorkerSettings, env={"DPROBE_WORKER_GRACE_S": "-5"}, cli={"window_s": 30.0})
    assert str(err.value).endswith(
        "(given: window_s = 30.0 on the command line; "
        "DPROBE_WORKER_GRACE_S='-5' in the environment)"
    )


def test_an_error_line_names_the_flag_a_value_came_from() -> None:
    with pytest.raises(ConfigError) as err:
        load(WorkerSettings, env={}, cli={"window_s": -5.0}, flags={"window_s": "--window"})
    assert str(err.value).endswith("(given: --window -5.0)")
    with pytest.raises(ConfigError) as err:  # a value without a known flag: named as before
        load(WorkerSettings, env={}, cli={"window_s": -5.0}, flags={"grace_s": "--grace"})
    assert str(err.value).endswith("(given: window_s = -5.0 on the command line)")


@pytest.mark.parametrize(
    "bootstrap",
    [
        "k1:x",
        "k1:9092,,k2:9092",
        "k1:0",
        "k1:65536",
        ":9092",
        "[::1]x",
        "k1:-1",
        "k1:9092;k2:9092",  # not a bare IPv6 address: a client resolves it as one host
    ],
)
def test_a_bootstrap_server_that_is_not_host_port_is_refused(bootstrap: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(KafkaSettings, env={}, cli={"bootstrap": bootstrap})
    assert str(err.value).startswith("kafka.bootstrap: server ")
    assert "is not HOST:PORT" in str(err.value)


@pytest.mark.parametrize(
    "bootstrap",
    [
        "k1:9092",
        "k1:9092, k2:9093",
        "k1",
        "[::1]:9092",
        "[::1]",
        "::1",
        "10.0.0.1:1",
        "fe80::1",
        "[fe80::1%eth0]:9092",
    ],
)
def test_every_bootstrap_form_a_kafka_client_reads_is_taken(bootstrap: str) -> None:
    from aiokafka.conn import collect_hosts

    assert load(KafkaSettings, env={}, cli={"bootstrap": bootstrap}).bootstrap == bootstrap
    assert collect_hosts(bootstrap)  # and the client reads it too


def test_a_bare_ipv6_address_with_a_zone_is_refused_with_its_bracketed_form() -> None:
    from aiokafka.conn import collect_hosts

    with pytest.raises(ValueError):  # what the client would do with it at start
        collect_hosts("fe80::1%eth0")
    with pytest.raises(ConfigError) as err:
        load(KafkaSettings, env={}, cli={"bootstrap": "k1:9092,fe80::1%eth0"})
    assert str(err.value).startswith(
        "kafka.bootstrap: server 'fe80::1%eth0': write an IPv6 address with a zone in "
        "brackets, [fe80::1%eth0]:9092 (given: "
    )


def test_a_secret_in_an_error_line_is_never_shown() -> None:
    env = {
        "DPROBE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "DPROBE_KAFKA_SASL_MECHANISM": "PLAIN",
        "DPROBE_KAFKA_SASL_PASSWORD": "hunter2",
    }
    with pytest.raises(ConfigError, match="sasl_password are required") as err:
        load(KafkaSettings, env=env)
    assert "hunter2" not in str(err.value) and "(hidden)" in str(err.value)


def test_a_misspelt_environment_variable_is_logged_with_the_likely_name(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("dprobe.config._warned_env", set())  # each is logged once a process
    env = {"DPROBE_WORKER_WINDOWS": "30", "DPROBE_KAFKA_HEAP": "1g"}  # the second: kafka.sh's
    with caplog.at_level(logging.WARNING, logger="dprobe.config"):
        assert load(WorkerSettings, env=env).window_s == 60.0
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "environment variable DPROBE_WORKER_WINDOWS names no worker setting: ignored; "
        "did you mean DPROBE_WORKER_WINDOW_S?"
    ]


def test_rate_limits_that_let_no_quota_move_are_logged_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan moves GPUs between tenants: a rate limit of 0 on either side freezes them all."""
    monkeypatch.setattr("dprobe.config._warned_env", set())
    up_off = {"DPROBE_WORKER_PLAN_SCALE_UP_MAX_PERCENT": "0"}
    with caplog.at_level(logging.WARNING, logger="dprobe.config"):
        load(WorkerSettings, env={})
        load(WorkerSettings, env=up_off)  # 4 nodes still
        load(WorkerSettings, env={"DPROBE_WORKER_PLAN_SCALE_UP_MAX_NODES": "0"})  # 100 % still
        assert caplog.records == []
        for _ in range(2):
            load(WorkerSettings, env={**up_off, "DPROBE_WORKER_PLAN_SCALE_UP_MAX_NODES": "0"})
        load(WorkerSettings, env={"DPROBE_WORKER_PLAN_SCALE_DOWN_MAX_PERCENT": "0"})
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith(
        "worker.plan_scale_up_max_percent and plan_scale_up_max_nodes are 0: no quota grows"
    )
    assert lines[1].startswith("worker.plan_scale_down_max_percent is 0: no quota shrinks")
    assert all(line.endswith("no scaling event will ever move quota") for line in lines)


def test_a_variable_of_a_misspelt_section_is_logged_with_the_likely_name(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("dprobe.config._warned_env", set())
    # the last three are not near any section: a job's tenant, the test traces, a test knob
    env = {
        "DPROBE_WORKR_WINDOW_S": "30",
        "DPROBE_TENANT": "vc1",
        "DPROBE_TRACE_DIR": "/data",
        "DPROBE_TEST_WORKER_LOG_LEVEL": "DEBUG",
    }
    with caplog.at_level(logging.WARNING, logger="dprobe.config"):
        assert load(WorkerSettings, env=env).window_s == 60.0
        load(WorkerSettings, env=env)  # told once a process
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "environment variable DPROBE_WORKR_WINDOW_S names no section: ignored; "
        "did you mean DPROBE_WORKER_WINDOW_S?"
    ]


def test_replay_speed_max_reads_as_as_fast_as_possible_from_file_and_environment(
    tmp_path: Path,
) -> None:
    """``--speed max`` has the same spelling in the file and the environment."""
    f = _toml(tmp_path, '[replay]\nspeed = "max"\n')
    assert load(ReplaySettings, env={}, file=f).speed == 0.0
    assert load(ReplaySettings, env={"DPROBE_REPLAY_SPEED": "Max"}).speed == 0.0
    assert load(ReplaySettings, env={"DPROBE_REPLAY_SPEED": "600"}).speed == 600.0
    assert load(ReplaySettings, env={"DPROBE_REPLAY_SPEED": "inf"}).speed == 0.0  # as --speed inf
    said = "expected a number or 'max', got"
    with pytest.raises(ConfigError, match=f"DPROBE_REPLAY_SPEED: {said} 'fast'"):
        load(ReplaySettings, env={"DPROBE_REPLAY_SPEED": "fast"})
    with pytest.raises(ConfigError, match=rf"\[replay\] speed: {said} True"):
        load(ReplaySettings, env={}, file=_toml(tmp_path, "[replay]\nspeed = true\n"))


def test_a_config_file_whose_path_holds_braces_reads(tmp_path: Path) -> None:
    folder = tmp_path / "cfg{x}"
    folder.mkdir()
    f = _toml(folder, "[worker]\nwindow_s = 30\ngrace_s = -1\n")
    with pytest.raises(ConfigError, match=r"grace_s = -1 in \[worker\] of config file .*cfg\{x\}"):
        load(WorkerSettings, env={}, file=f)


def test_tls_files_count_only_where_the_protocol_reads_them(tmp_path: Path) -> None:
    """A shared file that names a CA for production still serves a PLAINTEXT test setup."""
    env = {"DPROBE_KAFKA_SSL_CAFILE": str(tmp_path / "nowhere.pem")}
    assert load(KafkaSettings, env=env).ssl_cafile == tmp_path / "nowhere.pem"
    with pytest.raises(ConfigError, match="no such file"):
        load(KafkaSettings, env={**env, "DPROBE_KAFKA_SECURITY_PROTOCOL": "SSL"})


@pytest.mark.parametrize(
    ("value", "ok"), [("6", True), ("60", True), ("5.9", False), ("1801", False)]
)
def test_the_session_timeout_is_one_kafka_accepts(value: str, ok: bool) -> None:
    env = {"DPROBE_WORKER_SESSION_TIMEOUT_S": value}
    if ok:
        assert load(WorkerSettings, env=env).session_timeout_s == float(value)
    else:
        with pytest.raises(ConfigError, match=r"session_timeout_s must be within \[6, 1800\]"):
            load(WorkerSettings, env=env)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[worker]\nwindow_s = true\n", "[worker] window_s: expected a number, got True"),
        ("[lag]\ngroups = [1, 2]\n", "[lag] groups: expected a string, got a number"),
        ("[kafka]\nbootstrap = 5\n", "[kafka] bootstrap: expected a string, got a number"),
        ("[worker]\napp_id = false\n", "[worker] app_id: expected a string, got a boolean"),
        ("[worker]\nwindow_s = [60]\n", "[worker] window_s: expected a number, got a list"),
        (
            "[worker]\npartitions = { n = 8 }\n",
            "[worker] partitions: expected an integer, got a table",
        ),
        ("[worker]\nseed = 2026-01-01\n", "[worker] seed: expected an integer, got a date"),
        ("[worker]\ngrace_s = 07:30:00\n", "[worker] grace_s: expected a number, got a time"),
        ("[worker]\nlevel_weights = 1\n", "[worker] level_weights: expected a list, got a number"),
        ("[worker]\napp_id = 2026-01-01\n", "[worker] app_id: expected a string, got a date"),
        (
            '[worker.kafka]\nbootstrap = "k:1"\n',
            "[worker] kafka: Kafka settings go in the [kafka] table",
        ),
    ],
)
def test_a_value_of_the_wrong_toml_type_is_refused(tmp_path: Path, text: str, message: str) -> None:
    from dprobe.config import LagSettings

    f = _toml(tmp_path, text)
    cls = LagSettings if "[lag]" in text else WorkerSettings
    with pytest.raises(ConfigError) as err:
        load(cls, env={}, file=f)
    assert str(err.value).startswith(f"config file {f}: {message}")


@pytest.mark.parametrize(
    ("cls", "env", "message"),
    [
        (KafkaSettings, {"DPROBE_KAFKA_REQUEST_TIMEOUT_MS": "0"}, "kafka.request_timeout_ms"),
        (ArchiveSettings, {"DPROBE_ARCHIVE_GROUP_ID": " "}, "archive.group_id"),
        (WorkerSettings, {"DPROBE_WORKER_LEVEL_L3_MIN_UTIL_PCT": "101"}, "worker.level_l3_min"),
        (BrokerSettings, {"DPROBE_BROKER_START_TIMEOUT_S": "-1"}, "broker.start_timeout_s"),
        (BrokerSettings, {"DPROBE_BROKER_HEAP": "abc"}, "broker.heap must be a JVM heap size"),
        (BrokerSettings, {"DPROBE_BROKER_STATE_DIR": "/etc/passwd/x"}, "broker.state_dir: "),
        (BrokerSettings, {"DPROBE_BROKER_LIB_DIR": "/etc/passwd"}, "broker.lib_dir: "),
        (BrokerSettings, {"DPROBE_BROKER_SASL_USER": "u"}, "broker.sasl_user needs broker.sasl"),
        # a collector that could never send, or never flush on SIGTERM, or never spool
        (CollectorSettings, {"DPROBE_COLLECTOR_SEND_BATCH_MAX": "0"}, "collector.send_batch_max"),
        (
            CollectorSettings,
            {"DPROBE_COLLECTOR_SHUTDOWN_TIMEOUT_S": "-1"},
            "collector.shutdown_timeout_s",
        ),
        (
            CollectorSettings,
            {"DPROBE_COLLECTOR_SPOOL_DIR": "/etc/passwd/x"},
            "collector.spool_dir: ",
        ),
        (CollectorSettings, {"DPROBE_COLLECTOR_STATE_DIR": "/etc/passwd"}, "collector.state_dir: "),
    ],
)
def test_a_setting_that_cannot_work_is_refused_naming_it(
    cls: type, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load(cls, env=env)
    assert str(err.value).startswith(message)
    ((key, value),) = env.items()
    assert str(err.value).endswith(f"(given: {key}={value!r} in the environment)")


def test_a_local_broker_password_without_its_user_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"broker\.sasl_password needs broker\.sasl_user") as err:
        load(BrokerSettings, env={"DPROBE_BROKER_SASL_PASSWORD": "pw"})
    assert "pw" not in str(err.value)


def test_the_heap_sizes_a_user_writes_are_taken() -> None:
    for heap in ("512m", "2g", "1G", "1048576"):
        assert load(BrokerSettings, env={"DPROBE_BROKER_HEAP": heap}).heap == heap


@pytest.mark.parametrize("section", ["collector", "worker", "lag"])
@pytest.mark.parametrize("addr", ["", " "])
def test_an_empty_metrics_address_is_refused_not_every_interface(section: str, addr: str) -> None:
    """An empty address binds /metrics on every interface: a cleared variable must not."""
    import socket

    from dprobe.config import LagSettings

    cls = {"collector": CollectorSettings, "worker": WorkerSettings, "lag": LagSettings}[section]
    key = f"DPROBE_{section.upper()}_METRICS_ADDR"
    with socket.create_server((addr.strip(), 0)) as probe:  # what binding it would do
        assert probe.getsockname()[0] == "0.0.0.0"
    with pytest.raises(ConfigError) as err:
        load(cls, env={key: addr})
    assert str(err.value).startswith(f"{section}.metrics_addr is empty")
    assert str(err.value).endswith(f"(given: {key}={addr!r} in the environment)")
    assert load(cls, env={key: "0.0.0.0"}).metrics_addr == "0.0.0.0"


def _path_settings() -> list[tuple[type, str]]:
    import dataclasses
    import typing

    found = []
    for cls in SERVICES:
        for f in dataclasses.fields(cls):
            hint = typing.get_type_hints(cls)[f.name]
            if hint is Path or Path in typing.get_args(hint):
                found.append((cls, f.name))
    return found


@pytest.mark.parametrize(("cls", "name"), _path_settings())
def test_a_path_holding_a_nul_character_is_refused_naming_it(
    tmp_path: Path, cls: type, name: str
) -> None:
    """TOML can spell a NUL (\\u0000); no file system takes it, so it is no path."""
    import os

    bad = str(tmp_path / "a\0b")
    with pytest.raises(ValueError, match="null"):  # what the OS calls would say later
        os.stat(bad)
    spelt = bad.replace("\0", "\\u0000")
    f = _toml(tmp_path, f'[{cls.section}]\n{name} = "{spelt}"\n')
    with pytest.raises(ConfigError) as err:
        load(cls, env={}, file=f)
    assert f"[{cls.section}] {name}: expected a path, got one holding a NUL character" in str(
        err.value
    )


def test_the_local_broker_s_own_variables_are_not_warned_of(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """infra/kafka/kafka.sh reads DPROBE_KAFKA_* variables of its own (README, "The local
    Kafka broker"): they are no client setting, and not ignored either."""
    import re

    monkeypatch.setattr("dprobe.config._warned_env", set())
    script = (ROOT / "infra" / "kafka" / "kafka.sh").read_text()
    names = set(re.findall(r"\bDPROBE_KAFKA_[A-Z_]+", script))
    fields = set(KafkaSettings.__dataclass_fields__)
    own = {n for n in names if n.removeprefix("DPROBE_KAFKA_").lower() not in fields}
    assert "DPROBE_KAFKA_STOP_TIMEOUT_S" in own
    with caplog.at_level(logging.WARNING, logger="dprobe.config"):
        load(KafkaSettings, env=dict.fromkeys(own, "1"))
    assert caplog.records == []


@pytest.mark.parametrize("seed", [-1, -(2**63), 0, 2**32, 2**63 - 1])
def test_the_worker_takes_a_seed_exactly_when_its_forecaster_does(seed: int) -> None:
    """A seed the forecaster's generators refuse is refused by the settings, exit 2,
    instead of a traceback once the worker has connected."""
    pytest.importorskip("torch")
    from dprobe.models.forecast.registry import make_forecaster

    try:
        make_forecaster("dprobe-mmoe", seed=seed)
        builds = True
    except ValueError:
        builds = False
    env = {"DPROBE_WORKER_SEED": str(seed)}
    if builds:
        assert load(WorkerSettings, env=env).seed == seed
    else:
        with pytest.raises(ConfigError, match=r"^worker\.seed must be >= 0"):
            load(WorkerSettings, env=env)


@pytest.mark.parametrize(
    ("value", "ok"), [("-1", False), ("-0.5", False), ("0", True), ("5", True)]
)
def test_the_producer_linger_is_one_kafka_takes(value: str, ok: bool) -> None:
    """Kafka's producer ``linger.ms`` takes 0 or more (its documented valid values)."""
    env = {"DPROBE_WORKER_PRODUCER_LINGER_MS": value}
    if ok:
        assert load(WorkerSettings, env=env).producer_linger_ms == float(value)
    else:
        with pytest.raises(ConfigError, match=r"^worker\.producer_linger_ms must be >= 0"):
            load(WorkerSettings, env=env)


@pytest.mark.parametrize("cls", [c for c in SERVICES if "kafka" in c.__dataclass_fields__])
def test_a_kafka_setting_under_a_service_s_prefix_is_told_its_shared_name(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, cls: type
) -> None:
    """Kafka settings are DPROBE_KAFKA_* for every service: DPROBE_WORKER_KAFKA_BOOTSTRAP
    (and DPROBE_WORKER_KAFKA alone) is ignored, and the warning names the variable meant."""
    monkeypatch.setattr("dprobe.config._warned_env", set())
    own = f"DPROBE_{cls.section.upper()}_KAFKA"
    env = {f"{own}_{name.upper()}": "x" for name in KafkaSettings.__dataclass_fields__}
    env[own] = "x"
    with caplog.at_level(logging.WARNING, logger="dprobe.config"):
        load(cls, env=env)
    lines = {r.getMessage().split(" ")[2]: r.getMessage() for r in caplog.records}
    assert set(lines) == set(env)
    for name in KafkaSettings.__dataclass_fields__:
        shared = f"DPROBE_KAFKA_{name.upper()}"
        assert lines[f"{own}_{name.upper()}"].endswith(
            f"did you mean {shared}? (Kafka settings are shared by every service)"
        )
    assert "Kafka settings are DPROBE_KAFKA_*" in lines[own]


@pytest.mark.parametrize("cls", [c for c in SERVICES if "kafka" in c.__dataclass_fields__])
def test_a_kafka_setting_in_a_service_s_table_is_told_its_table(tmp_path: Path, cls: type) -> None:
    """`bootstrap` under [collector] is refused naming the [kafka] table it belongs in."""
    for key in ("bootstrap", "kafka_bootstrap", "client_id", "sasl_password"):
        f = _toml(tmp_path, f'[{cls.section}]\n{key} = "x"\n')
        with pytest.raises(ConfigError) as err:
            load(cls, env={}, file=f)
        name = key.removeprefix("kafka_")
        assert f"unknown settings: {key} (did you mean {name} in [kafka]?)" in str(err.value)


@pytest.mark.parametrize("name", ["archive.env", "lag.env"])
def test_every_variable_a_shipped_env_file_names_is_a_setting(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The variables of infra/systemd/*.env, commented-out examples included, load with
    no warning (each names a setting) and no refusal."""
    import re

    from dprobe.config import LagSettings

    monkeypatch.setattr("dprobe.config._warned_env", set())
    text = (ROOT / "infra" / "systemd" / name).read_text()
    env = dict(re.findall(r"^#?(DPROBE_[A-Z_]+)=(.*)$", text, flags=re.MULTILINE))
    assert len(env) >= 4
    env = {k: "pw" if v == "..." else v for k, v in env.items()}
    cls = ArchiveSettings if name == "archive.env" else LagSettings
    with caplog.at_level(logging.WARNING, logger="dprobe.config"):
        load(cls, env=env)
    assert caplog.records == []


@pytest.mark.parametrize(
    ("speed", "interval_s", "said"),
    [
        (1e100, 10.0, "collector.clock_speed must be at most 1e+06"),
        (1e7, 1e7, "collector.clock_speed must be at most 1e+06"),
        (1e5, 10.0, "takes a snapshot every 0.1 ms of wall time at interval_s 10"),
    ],
)
def test_a_clock_too_fast_for_the_collector_is_refused(
    speed: float, interval_s: float, said: str
) -> None:
    # 1e100 stamped the first snapshot 1e98 s ahead and then spun, deaf to SIGTERM
    with pytest.raises(ConfigError, match=re.escape(said)):
        CollectorSettings(backend="synthetic", clock_speed=speed, interval_s=interval_s)


@pytest.mark.parametrize(("speed", "interval_s"), [(600.0, 60.0), (720.0, 120.0), (1e6, 1e4)])
def test_the_clocks_the_docs_and_the_demo_use_are_taken(speed: float, interval_s: float) -> None:
    s = CollectorSettings(backend="synthetic", clock_speed=speed, interval_s=interval_s)
    assert (s.clock_speed, s.interval_s) == (speed, interval_s)


def test_every_misplaced_key_and_unknown_section_of_a_file_is_named_at_once(
    tmp_path: Path,
) -> None:
    """A key outside any section no longer hides a misspelt section further down (nor a
    service's table given as a value): each is a problem of its own, in one error."""
    text = 'speed = 5\nworker = "x"\n[colector]\ninterval_s = 1\n'
    with pytest.raises(ConfigError) as caught:
        load(WorkerSettings, env={}, file=_toml(tmp_path, text))
    problems = caught.value.problems
    assert len(problems) == 3, problems
    assert "[worker] must be a table, not a string" in problems[0]
    assert "top-level key(s) speed outside any section" in problems[1]
    assert "unknown section(s) [colector] (did you mean [collector]?)" in problems[2]


@pytest.mark.parametrize(
    ("cls", "section", "name", "value", "bound"),
    [
        (CollectorSettings, "collector", "clock_speed", "0", "> 0"),
        (CollectorSettings, "collector", "send_timeout_s", "0", "> 0"),
        (CollectorSettings, "collector", "nvml_timeout_s", "-1", "> 0"),
        (WorkerSettings, "worker", "commit_interval_s", "0", "> 0 seconds"),
        (WorkerSettings, "worker", "lag_interval_s", "0", "> 0 seconds"),
        (WorkerSettings, "worker", "source_idle_s", "-1", ">= 0 seconds"),
        (WorkerSettings, "worker", "window_host_shards", "0", "within [1, 4096]"),
        (WorkerSettings, "worker", "job_book_shards", "5000", "within [1, 4096]"),
        (WorkerSettings, "worker", "tenant_index_shards", "0", "within [1, 4096]"),
        (ArchiveSettings, "archive", "flush_records", "0", "> 0"),
        (ArchiveSettings, "archive", "flush_bytes", "0", "> 0"),
        (ArchiveSettings, "archive", "flush_interval_s", "0", "> 0"),
    ],
)
def test_a_bound_names_only_the_setting_that_broke_it(
    cls: type, section: str, name: str, value: str, bound: str
) -> None:
    env = {f"DPROBE_{section.upper()}_{name.upper()}": value}
    with pytest.raises(ConfigError) as err:
        load(cls, env=env)
    assert str(err.value).startswith(f"{section}.{name} must be {bound} (given: ")


def test_a_refusal_shows_the_value_given_unrounded() -> None:
    with pytest.raises(ConfigError, match=r"got 1000001\.0 \(given: "):
        load(CollectorSettings, env={"DPROBE_COLLECTOR_CLOCK_SPEED": "1000001"})
    with pytest.raises(ConfigError, match=r"got 10000001\.0$"):
        load(CollectorSettings, env={"DPROBE_COLLECTOR_SHUTDOWN_TIMEOUT_S": "10000001"})

"""``dprobe config check`` and ``dprobe config show``: a settings file checked as every
service would check it, and the settings a service would run with, with their origins."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from dprobe.cli import main

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ["kafka", "broker", "collector", "worker", "archive", "lag", "replay"]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in [k for k in os.environ if k.startswith("DPROBE_") and k != "DPROBE_TRACE_DIR"]:
        monkeypatch.delenv(key)


def _refused(bad: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[list, list]:
    """``config check`` of a file holding ``text``, which must exit 2: its lines on
    stdout and on stderr."""
    bad.write_text(text)
    assert main(["config", "check", "--config", str(bad)]) == 2
    out, err = capsys.readouterr()
    return out.splitlines(), err.splitlines()


@pytest.mark.parametrize("shipped", sorted((ROOT / "infra" / "systemd").glob("*.toml")))
def test_every_shipped_settings_file_checks_ok(
    shipped: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--config", str(shipped), "config", "check"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"[{s}] ok" for s in SECTIONS]
    # the shipped files name example brokers, which a user must replace
    bootstrap = tomllib.loads(shipped.read_text()).get("kafka", {}).get("bootstrap")
    if bootstrap is None:
        assert err == ""
    else:
        hosts = ", ".join(server.rsplit(":", 1)[0] for server in bootstrap.split(","))
        assert err == (
            f"dprobe config: warning: kafka.bootstrap names {hosts}: example host names, as "
            "in the shipped settings files; set your brokers' addresses\n"
        )
        assert "example" in hosts


def test_a_file_wide_problem_is_told_once_with_the_likely_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    out, err = _refused(bad, "[replya]\nspeed = 5\n\n[worker]\nwindow_s = 30\n", capsys)
    assert out == []
    assert err == [
        f"dprobe config: every service refused: config file {bad}: unknown section(s) "
        "[replya] (did you mean [replay]?); known: [archive], [broker], [collector], "
        "[kafka], [lag], [replay], [worker]"
    ]
    text = "[worker]\nwindw_s = 30\nzzz = 1\nkafk = 1\n\n[kafka]\nbootstrap = 'k1:9092'\n"
    out, err = _refused(bad, text, capsys)
    assert out == [f"[{s}] ok" for s in SECTIONS if s != "worker"]
    # kafka is a field of the worker's settings, but one set in [kafka]: never suggested
    assert err == [
        f"dprobe config: [worker] refused: config file {bad}: [worker] has unknown "
        "settings: kafk (line 4), windw_s (did you mean window_s?) (line 2), zzz (line 3)"
    ]


def test_a_kafka_problem_is_told_once_for_the_services_it_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, lines = _refused(tmp_path / "bad.toml", "[kafka]\nbootstrap = 'k1:x'\n", capsys)
    assert out == ["[broker] ok"]  # the local broker's settings hold no client settings
    assert len(lines) == 1
    assert lines[0].startswith(
        "dprobe config: [kafka], [collector], [worker], [archive], [lag], [replay] refused: "
        "kafka.bootstrap: server 'k1:x' is not HOST:PORT"
    )


def test_check_names_every_refused_service_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    out, lines = _refused(bad, "[worker]\nwindow_s = -1\n\n[lag]\ngroups = []\n", capsys)
    assert out == [f"[{s}] ok" for s in SECTIONS if s not in ("worker", "lag")]
    assert len(lines) == 2
    assert lines[0].startswith("dprobe config: [worker] refused: worker.window_s must be > 0")
    assert f"window_s = -1 in [worker] of config file {bad}" in lines[0]
    assert lines[1].startswith("dprobe config: [lag] refused: lag.groups must name")


def test_check_names_every_bad_value_of_a_section_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user fixing a file learns of every refused setting at once, each on its own line,
    not one per run."""
    bad = tmp_path / "bad.toml"
    text = (
        '[collector]\ninterval_s = -1\ncompression = "brotli"\nmetrics_port = 70000\n'
        'tenants = "four"\n\n[kafka]\nrequest_timeout_ms = 0\ntopic_prefix = "a b"\n'
    )
    out, err = _refused(bad, text, capsys)
    assert out == ["[broker] ok"]

    def given(line: int) -> str:
        return f"in [collector] of config file {bad}, line {line})"

    kafka = "dprobe config: [kafka], [collector], [worker], [archive], [lag], [replay] refused: "
    assert err == [
        f"{kafka}kafka.topic_prefix 'a b': Kafka topic names hold only letters, digits, '.', "
        f"'_' and '-' (given: topic_prefix = 'a b' in [kafka] of config file {bad}, line 9)",
        f"{kafka}kafka.request_timeout_ms must be >= 1 (given: request_timeout_ms = 0 in "
        f"[kafka] of config file {bad}, line 8)",
        f"dprobe config: [collector] refused: config file {bad}: [collector] tenants: "
        "expected an integer, got 'four' (line 5)",
        "dprobe config: [collector] refused: collector.interval_s must be at least 0.01 s: "
        "a shorter one keeps a core busy reading and sending snapshots (given: "
        f"interval_s = -1 {given(2)}",
        "dprobe config: [collector] refused: collector.compression must be zstd, lz4, gzip, "
        f"snappy or none (given: compression = 'brotli' {given(3)}",
        "dprobe config: [collector] refused: collector.metrics_port must be within "
        f"[0, 65535] (given: metrics_port = 70000 {given(4)}",
    ]
    # the service itself refuses the file for all of them too, on its one line
    assert main(["--config", str(bad), "collect", "--once"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "kafka.request_timeout_ms must be >= 1" in line
    assert "tenants: expected an integer" in line
    assert "collector.metrics_port must be within [0, 65535]" in line


def test_a_value_put_aside_for_the_check_never_adds_a_problem_of_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Settings that are only wrong together are told once: a refused SASL mechanism is
    not followed by 'a SASL protocol needs a mechanism', nor a refused node size by a
    complaint about the capacity."""
    text = (
        '[kafka]\nsecurity_protocol = "SASL_PLAINTEXT"\nsasl_mechanism = "GSSAPI"\n'
        'sasl_username = "u"\nsasl_password = "p"\n\n'
        "[worker]\nnode_gpus = 128\nwindow_s = 0\n"
    )
    out, err = _refused(tmp_path / "bad.toml", text, capsys)
    assert out == ["[broker] ok"]
    assert [line.split(" refused: ")[1].split(" (given")[0] for line in err] == [
        "kafka.sasl_mechanism must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, not 'GSSAPI'",
        "worker.window_s must be > 0 and worker.grace_s >= 0",
        "worker.node_gpus must be within [1, worker.capacity_gpus], worker.guaranteed_gpus "
        "within [0, worker.capacity_gpus] and capacity_gpus at most 10000000",
    ]


def test_check_also_makes_the_checks_a_service_makes_on_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    text = f'[worker]\nmodel = "nope"\n\n[collector]\ntenant_map = "{tmp_path}/no.toml"\n'
    _, err = _refused(bad, text, capsys)
    assert err == [
        f"dprobe config: [collector] refused: tenant map {tmp_path}/no.toml: no such file",
        "dprobe config: [worker] refused: worker.model: unknown forecaster 'nope'; choose "
        "from dprobe-mmoe, dprobe-mmoe-jobs, last-value, moving-average, holt-winters, "
        "seasonal-naive, recent-peak, job-aware",
    ]
    # and dprobe worker refuses the same file for the same reason
    assert main(["--config", str(bad), "worker"]) == 2
    assert "worker.model: unknown forecaster 'nope'" in capsys.readouterr().err


def test_check_refuses_an_nvml_proc_root_that_is_no_procfs_as_collect_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    _, err = _refused(bad, f'[collector]\nbackend = "nvml"\nproc_root = "{tmp_path}"\n', capsys)
    said = f"collector.proc_root: {tmp_path} is not a procfs (no stat file in it)"
    assert len(err) == 1 and err[0].startswith(f"dprobe config: [collector] refused: {said}")
    assert main(["--config", str(bad), "collect", "--once"]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["check"], ["show", "kafka"]])
def test_a_tls_file_refused_is_one_line_without_the_kafka_clients_progress(
    tmp_path: Path, argv: list[str]
) -> None:
    # aiokafka says "Loading SSL CA from ..." at INFO each time a service's settings load
    # the files: six such lines for `check` (one per service) came before the reason
    import os
    import subprocess
    import sys

    (tmp_path / "ca.pem").write_text("not a certificate\n")
    conf = tmp_path / "tls.toml"
    conf.write_text(f'[kafka]\nsecurity_protocol = "SSL"\nssl_cafile = "{tmp_path}/ca.pem"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPROBE_")}
    cmd = [sys.executable, "-m", "dprobe.cli", "--config", str(conf), "config", *argv]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert res.returncode == 2
    (line,) = res.stderr.splitlines()
    assert line.startswith("dprobe config: ") and "kafka.ssl_cafile" in line


def test_show_gives_each_value_and_where_it_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "w.toml"
    f.write_text(
        '[worker]\ncapacity_gpus = 128\n\n[kafka]\nsecurity_protocol = "SASL_PLAINTEXT"\n'
        'sasl_mechanism = "PLAIN"\nsasl_username = "dprobe"\nsasl_password = "hunter2"\n'
    )
    monkeypatch.setenv("DPROBE_WORKER_WINDOW_S", "30")
    argv = ["--config", str(f), "config", "show", "worker", "--bootstrap", "k1:9092", "--json"]
    assert main(argv) == 0
    out, _ = capsys.readouterr()
    assert "hunter2" not in out
    doc = json.loads(out)
    assert list(doc) == ["worker", "kafka"]
    w, k = doc["worker"], doc["kafka"]
    assert w["capacity_gpus"] == {"value": 128, "from": f"config file {f}"}
    assert w["window_s"] == {"value": 30.0, "from": "environment DPROBE_WORKER_WINDOW_S"}
    assert w["grace_s"] == {"value": 10.0, "from": "default"}
    assert k["bootstrap"] == {"value": "k1:9092", "from": "--bootstrap on the command line"}
    assert k["sasl_password"] == {"value": "***", "from": f"config file {f}"}
    assert k["ssl_cafile"] == {"value": None, "from": "default"}
    # the text form says the same, line by line
    assert main(["--config", str(f), "config", "show", "worker"]) == 0
    text, _ = capsys.readouterr()
    assert "hunter2" not in text
    assert re.search(r"^window_s = 30\.0 +# environment DPROBE_WORKER_WINDOW_S$", text, re.M)
    assert re.search(r"^# ssl_cafile \(not set\) +# default$", text, re.M)


# values of every kind a setting holds, some only TOML's escapes can write
ODD_ENV = {
    "DPROBE_KAFKA_CLIENT_ID": 'w\U0001f600 "x" \\ \u00e9',  # beyond U+FFFF, quote, backslash
    "DPROBE_KAFKA_BOOTSTRAP": "k1:9092,[::1]:9093",
    "DPROBE_WORKER_LEVEL_WEIGHTS": "0.2,0.4,0.6,1.0",
    "DPROBE_WORKER_PLAN_URGENT_FIRST": "false",
    "DPROBE_LAG_GROUPS": "g1,g2",
    "DPROBE_COLLECTOR_TENANT_ENV_VARS": "SLURM_JOB_ACCOUNT",
    "DPROBE_REPLAY_SPEED": "1e+20",
}


@pytest.mark.parametrize("service", SECTIONS)
def test_what_show_prints_is_a_settings_file_that_gives_the_same_settings(
    service: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in ODD_ENV.items():
        monkeypatch.setenv(key, value)
    assert main(["config", "show", service, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["config", "show", service]) == 0
    written = tmp_path / "shown.toml"
    written.write_text(capsys.readouterr().out, encoding="utf-8")
    tomllib.loads(written.read_text(encoding="utf-8"))  # valid TOML, comments and all
    for key in ODD_ENV:
        monkeypatch.delenv(key)
    assert main(["--config", str(written), "config", "show", service, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert list(again) == list(first)
    for section in first:
        values = {k: v["value"] for k, v in again[section].items()}
        assert values == {k: v["value"] for k, v in first[section].items()}
        assert {v["from"] for v in again[section].values()} <= {"default", f"config file {written}"}
    if "kafka" in again:  # every service but the local broker talks to Kafka
        assert again["kafka"]["client_id"]["value"] == ODD_ENV["DPROBE_KAFKA_CLIENT_ID"]


def test_a_password_is_shown_masked_and_as_a_comment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DPROBE_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("DPROBE_KAFKA_SASL_MECHANISM", "PLAIN")
    monkeypatch.setenv("DPROBE_KAFKA_SASL_USERNAME", "dprobe")
    monkeypatch.setenv("DPROBE_KAFKA_SASL_PASSWORD", "hunter2")
    assert main(["config", "show", "kafka"]) == 0
    text = capsys.readouterr().out
    assert "hunter2" not in text
    assert re.search(
        r'^# sasl_password = "\*\*\*" \(hidden\) +# environment DPROBE_KAFKA_SASL_PASSWORD$',
        text,
        re.M,
    )
    # read back, the file holds no password: the service asks for one, it does not use ***
    assert "sasl_password" not in tomllib.loads(text)["kafka"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["config", "show"],
            "dprobe config: show needs the SERVICE whose settings to show "
            "(see: dprobe config --help)",
        ),
        (
            ["config", "check", "worker"],
            "dprobe config: check takes no SERVICE nor --json: it checks every service "
            "(see: dprobe config --help)",
        ),
    ],
)
def test_a_missing_or_extra_service_is_bad_usage(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == expected


def test_check_says_which_environment_variables_no_service_reads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt variable in a unit's environment file is ignored by the service (which
    logs it on start): the check before deploying says so too, once, and still passes."""
    import dprobe.config

    monkeypatch.setattr(dprobe.config, "_warned_env", set())  # as in a new process
    monkeypatch.setenv("DPROBE_COLLECTOR_INTERVALS", "3")
    assert main(["config", "check"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [f"[{s}] ok" for s in SECTIONS]
    assert captured.err.splitlines() == [
        "dprobe config: warning: environment variable DPROBE_COLLECTOR_INTERVALS names no "
        "collector setting: ignored; did you mean DPROBE_COLLECTOR_INTERVAL_S?",
        "dprobe config: no settings file given (--config FILE or DPROBE_CONFIG): checked the "
        "defaults and the environment only",
    ]


def test_show_says_what_an_empty_host_id_stands_for(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    assert main(["config", "show", "collector"]) == 0
    [line] = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("host_id")]
    assert re.fullmatch(r'host_id = ""\s+# default: the host name, here (.+)', line)
    assert line.endswith(f"here {socket.gethostname()}")


@pytest.mark.parametrize(("host", "size"), [("h" * 252, 252), ("\u00e9" * 126, 252)])
def test_config_check_refuses_a_host_id_too_long_for_its_seq_file(
    host: str, size: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The collector's seq file is seq-<host>, and a file name holds 255 bytes: config
    check refuses what the collector would, before it is deployed."""
    out, err = _refused(tmp_path / "c.toml", f'[collector]\nhost_id = "{host}"\n', capsys)
    assert "[collector] ok" not in out
    assert f"collector.host_id is {size} bytes long in UTF-8, at most 251" in "\n".join(err)


def test_config_check_takes_a_host_id_of_251_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "c.toml"
    good.write_text(f'[collector]\nhost_id = "{"h" * 251}"\n')
    assert main(["config", "check", "--config", str(good)]) == 0

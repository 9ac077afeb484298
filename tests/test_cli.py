"""The CLI contract: every sub-command exists with --help; stubs exit 2; bad settings exit 2;
--version; a reader that goes away ends a command quietly."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys

import pytest

from dprobe.cli import COMMANDS, main


def _dprobe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dprobe.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_top_level_help_lists_every_command() -> None:
    res = _dprobe("--help")
    assert res.returncode == 0
    for name in COMMANDS:
        assert name in res.stdout


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_explains_itself(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert f"dprobe {name}" in out
    assert len(out.splitlines()) > 3


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_descriptions_name_settings_not_code_constants(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([name, "--help"])
    out = capsys.readouterr().out
    # the description: after the usage block, before the first argument group
    description = out.split("\n\n", 1)[1].split("options:")[0].split("positional arguments:")[0]
    constants = set(re.findall(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b", description))
    # Kafka's security protocols are values a user sets (kafka.security_protocol)
    kafka_values = {"SASL_PLAINTEXT", "SASL_SSL"}
    assert {c for c in constants - kafka_values if not c.startswith(("DPROBE_", "KAFKA_"))} == set()
    assert "``" not in description  # reST literals read as `x`


def test_events_help_quotes_the_join_wait_it_uses(capsys: pytest.CaptureFixture[str]) -> None:
    from dprobe.commands.events import JOIN_WAIT_S

    with pytest.raises(SystemExit):
        main(["events", "--help"])
    assert f"longer than {JOIN_WAIT_S:g} s is said" in capsys.readouterr().out


def test_unknown_command_is_bad_usage() -> None:
    res = _dprobe("frobnicate")
    assert res.returncode == 2
    assert "invalid choice" in res.stderr


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["worker", "--window", "abc"],
            "dprobe worker: argument --window: invalid float value: 'abc' "
            "(see: dprobe worker --help)",
        ),
        ([], "dprobe: the following arguments are required: COMMAND (see: dprobe --help)"),
        (
            ["events", "--no-such-flag"],
            "dprobe events: unrecognized arguments: --no-such-flag (see: dprobe events --help)",
        ),
        (
            ["--no-such-flag", "events"],
            "dprobe: unrecognized arguments: --no-such-flag (see: dprobe --help)",
        ),
        (  # "x" is also a value before the command: still the command's own error
            ["--bootstrap", "x", "worker", "x"],
            "dprobe worker: unrecognized arguments: x (see: dprobe worker --help)",
        ),
    ],
)
def test_bad_usage_is_one_line_naming_the_command_and_its_help(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [expected]


@pytest.mark.parametrize(
    ("argv", "bootstrap", "config", "level"),
    [
        (["events"], None, None, "INFO"),
        (["--bootstrap", "a:1", "events"], "a:1", None, "INFO"),
        (["events", "--bootstrap", "b:2", "--config", "d.toml"], "b:2", "d.toml", "INFO"),
        # after the command wins, as the later of two flags does
        (
            ["--bootstrap", "a:1", "--log-level", "DEBUG", "events", "--bootstrap", "b:2"],
            "b:2",
            None,
            "DEBUG",
        ),
        (["--log-level", "DEBUG", "events", "--log-level", "ERROR"], None, None, "ERROR"),
    ],
)
def test_global_options_are_accepted_before_and_after_the_command(
    argv: list[str], bootstrap: str | None, config: str | None, level: str
) -> None:
    from dprobe.cli import build_parser

    args = build_parser().parse_args(argv)
    assert (args.bootstrap, args.config, args.log_level) == (bootstrap, config, level)


def test_bad_setting_in_environment_exits_2_naming_it() -> None:
    import os

    env = {**os.environ, "DPROBE_BROKER_PORT": "not-a-port"}
    res = _dprobe("broker", "status", env=env)
    assert res.returncode == 2
    assert "DPROBE_BROKER_PORT" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--port", "0"], "broker.port must be within [1, 65535]"),
        (["--port", "70000"], "broker.port must be within [1, 65535]"),
        (["--controller-port", "-1"], "broker.controller_port must be within [1, 65535]"),
        (["--port", "9093"], "broker.port and broker.controller_port must differ"),
    ],
)
def test_broker_ports_out_of_range_exit_2(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["broker", "status", *flags]) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [f"dprobe broker: {message} (given: {flags[0]} {flags[1]})"]
    assert out == ""


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"dprobe {importlib.metadata.version('dprobe')}\n"


def test_a_reader_that_went_away_ends_the_command_quietly(tmp_path) -> None:
    # like `dprobe collect --once | head -1` once head has exited: stdout is a pipe
    # nobody reads any more
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        res = subprocess.run(
            [sys.executable, "-m", "dprobe.cli", "collect", "--backend", "synthetic", "--once"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)},
            check=False,
        )
    finally:
        os.close(write_end)
    assert res.returncode == 141, res.stderr  # what a shell shows for a tool SIGPIPE ended
    assert res.stderr == ""


def test_a_bootstrap_server_without_a_numeric_port_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--bootstrap", "k1:9092,nohost:x", "events"]) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        "dprobe events: kafka.bootstrap: server 'nohost:x' is not HOST:PORT (the port is a "
        "number from 1 to 65535) (given: --bootstrap 'k1:9092,nohost:x')"
    ]
    assert out == ""


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["events", "--group", ""], "dprobe events: --group must name a consumer group"),
        (
            ["worker", "--data-dir", "/etc/passwd/x"],
            "dprobe worker: worker.data_dir /etc/passwd/x is not writable: /etc/passwd is a "
            "file, not a folder",
        ),
        (
            ["lag", "--group", ""],
            "dprobe lag: lag.groups must name at least one consumer group, none empty "
            "(given: --group '')",
        ),
    ],
)
def test_a_group_or_folder_that_cannot_work_exits_2_naming_it(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--bootstrap", "127.0.0.1:1", *argv]) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [line]
    assert out == ""


def test_an_unknown_forecaster_exits_2_before_kafka_is_asked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DPROBE_WORKER_MODEL", "nope")
    assert main(["--bootstrap", "127.0.0.1:1", "worker", "--metrics-port", "0"]) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        "dprobe worker: worker.model: unknown forecaster 'nope'; choose from dprobe-mmoe, "
        "dprobe-mmoe-jobs, last-value, moving-average, holt-winters, seasonal-naive, "
        "recent-peak, job-aware"
    ]
    assert out == ""


def test_a_prefix_of_a_commands_own_flag_is_that_flag_not_a_global_option() -> None:
    from dprobe.cli import build_parser

    # --con starts both broker's --controller-port and the global --config
    args = build_parser().parse_args(["broker", "--con", "9999", "status"])
    assert args.controller_port == 9999 and args.config is None
    # a prefix only a global option has is still that option after the command
    args = build_parser().parse_args(["events", "--boot", "k:1"])
    assert args.bootstrap == "k:1"


@pytest.mark.parametrize(
    ("one_shot", "level", "shown"),
    [(True, "INFO", ["warned"]), (True, "DEBUG", None), (False, "INFO", None)],
)
def test_a_one_shot_command_hides_the_kafka_clients_progress_reports(
    one_shot: bool, level: str, shown: list[str] | None, caplog: pytest.LogCaptureFixture
) -> None:
    """``dprobe cluster show`` at the default level: the client's INFO lines (subscribed
    topics, metadata) are not shown beside the command's own; its warnings are; a service
    (``worker``) or ``--log-level DEBUG`` shows them all; the logger is restored after."""
    import logging

    from dprobe.cli import _client_progress_hidden

    caplog.set_level(logging.DEBUG)
    client = logging.getLogger("aiokafka.consumer.subscription_state")
    before = logging.getLogger("aiokafka").level
    sender = logging.getLogger("aiokafka.producer.sender")
    retry = "Got error produce response on topic-partition %s, retrying. Error: %s"
    with _client_progress_hidden(one_shot, level):
        client.info("progress")
        client.warning("warned")
        sender.warning(retry, "tp", "NotLeaderForPartitionError")
    retried = retry % ("tp", "NotLeaderForPartitionError")
    got = [r.getMessage() for r in caplog.records]
    assert got == (shown or ["progress", "warned", retried])  # None: all of them
    assert logging.getLogger("aiokafka").level == before
    assert not sender.filters


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--helios", "x", "--sweep", "--latencies", "-1,900"], "--latencies: need"),
        (["simulate", "--helios", "x", "--move-latency", "-1e3"], "--move-latency must be a"),
        (["simulate", "--helios", "x", "--move-latency", "-.5"], "--move-latency must be a"),
    ],
)
def test_a_value_that_starts_like_a_negative_number_reaches_the_commands_check(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse would take `-1,900` for a flag ("expected one argument"); it is the value
    the command then refuses, naming why."""
    assert main([*argv, "--chart", ""]) == 2
    err = capsys.readouterr().err
    assert message in err and "expected one argument" not in err


@pytest.mark.parametrize("taken", ["port", "controller-port"])
def test_broker_start_on_a_port_in_use_exits_2_naming_the_setting(
    taken: str, tmp_path: os.PathLike[str]
) -> None:
    """Checked before anything is fetched or formatted: nothing is left in the state dir."""
    import socket

    with socket.socket() as held, socket.socket() as free:
        held.bind(("127.0.0.1", 0))
        held.listen()
        free.bind(("127.0.0.1", 0))  # a port nobody listens on (bound, so none takes it)
        ports = {"port": held.getsockname()[1], "controller-port": free.getsockname()[1]}
        if taken == "controller-port":
            ports = {"port": ports["controller-port"], "controller-port": ports["port"]}
        state = os.path.join(tmp_path, "broker")
        res = _dprobe(
            "broker", "start", "--port", str(ports["port"]),
            "--controller-port", str(ports["controller-port"]), "--state-dir", state,
        )  # fmt: skip
    assert res.returncode == 2, res.stderr
    what = "port" if taken == "port" else "controller port"
    assert f"{what} {ports[taken]} on 127.0.0.1 is already in use" in res.stderr
    assert (
        f"choose another with --{taken} (DPROBE_BROKER_{taken.upper().replace('-', '_')}"
        in res.stderr
    )
    assert not os.path.exists(os.path.join(state, "data", "meta.properties"))

"""The command-line contract of ``dprobe replay`` and ``dprobe archive``: exit codes, one-line
reasons on stderr, skipped rows counted, ``--strict`` fatal."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from dprobe import schema
from tests.streams.helpers import consume, consume_all


def _dprobe(*args: str, replay_prefix: str | None = None) -> subprocess.CompletedProcess[str]:
    import os

    env = dict(os.environ)
    if replay_prefix:
        env["DPROBE_REPLAY_TOPIC_PREFIX"] = replay_prefix
    return subprocess.run(
        [sys.executable, "-m", "dprobe.cli", "--log-level", "WARNING", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def _replay_minutes(
    bootstrap: str, tmp_path: Path, *, speed: str
) -> subprocess.CompletedProcess[str]:
    """Replay 600 minutes of one tenant (one point a minute from epoch 0) at ``speed``
    into topics of their own."""
    f = tmp_path / "demand.csv"
    f.write_text("ts,tenant,demand_gpus\n" + "".join(f"{60 * i},a,1\n" for i in range(600)))
    prefix = f"bar{uuid.uuid4().hex[:8]}."
    return _dprobe(
        "--bootstrap", bootstrap, "replay", str(f), "--format", "demand-csv",
        "--speed", speed, replay_prefix=prefix,
    )  # fmt: skip


def test_negative_speed_is_bad_usage(tmp_path: Path) -> None:
    done = _dprobe("replay", str(tmp_path), "--format", "demand-csv", "--speed", "-1")
    assert done.returncode == 2
    assert "--speed: must be >= 0 or 'max'" in done.stderr


def test_missing_trace_is_bad_input_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    done = _dprobe("--bootstrap", "127.0.0.1:1", "replay", str(missing), "--format", "demand-csv")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"dprobe replay: {missing}: no such file or folder"]


def test_archive_folder_is_out_else_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dprobe.cli import build_parser
    from dprobe.commands.archive import archive_settings

    monkeypatch.delenv("DPROBE_CONFIG", raising=False)
    monkeypatch.delenv("DPROBE_ARCHIVE_OUT_DIR", raising=False)
    parse = build_parser().parse_args
    assert archive_settings(parse(["archive"])).out_dir == Path("archive")

    config = tmp_path / "dprobe.toml"
    config.write_text('[archive]\nout_dir = "/data/from-file"\n')
    from_file = parse(["--config", str(config), "archive"])
    assert archive_settings(from_file).out_dir == Path("/data/from-file")

    monkeypatch.setenv("DPROBE_ARCHIVE_OUT_DIR", str(tmp_path / "from-env"))
    assert archive_settings(from_file).out_dir == tmp_path / "from-env"
    flag = parse(["--config", str(config), "archive", "--out", str(tmp_path / "flag")])
    assert archive_settings(flag).out_dir == tmp_path / "flag"


@pytest.mark.integration
def test_malformed_rows_skipped_and_counted_or_fatal_with_strict(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    f = tmp_path / "demand.csv"
    f.write_text("ts,tenant,demand_gpus\n0,a,2\n60,a,x\n120,a,3\n")
    prefix = f"cli{uuid.uuid4().hex[:8]}."
    done = _dprobe(
        "--bootstrap", kafka_bootstrap, "replay", str(f), "--format", "demand-csv",
        "--speed", "max", "--no-progress", replay_prefix=prefix,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"skipped malformed row: {f}:3: demand_gpus: not a number: 'x'" in done.stderr
    assert "replayed 4 records (1 jobs, 3 samples)" in done.stderr
    assert "1 malformed row(s) skipped" in done.stderr
    import asyncio

    raws = asyncio.run(consume(kafka_bootstrap, f"{prefix}samples", until=3, timeout_s=30))
    assert sorted(schema.decode_snapshot(r).ts for r in raws) == [0.0, 60.0, 120.0]

    again = f"cli{uuid.uuid4().hex[:8]}."
    strict = _dprobe(
        "--bootstrap", kafka_bootstrap, "replay", str(f), "--format", "demand-csv",
        "--strict", "--no-progress", replay_prefix=again,
    )  # fmt: skip
    assert strict.returncode == 2
    # found once the replay was under way: it says what it had sent, and that is delivered
    assert strict.stderr.strip().splitlines()[-1] == (
        f"dprobe replay: {f}:3: demand_gpus: not a number: 'x'; stopped after 2 records "
        "sent (event time 1970-01-01 00:00:00 UTC), those sent are delivered: a rerun into "
        "the same topics sends them again"
    )
    raws = asyncio.run(consume(kafka_bootstrap, f"{again}samples", until=1, timeout_s=30))
    assert [schema.decode_snapshot(r).ts for r in raws] == [0.0]


@pytest.mark.integration
def test_replays_write_to_their_own_topics_unless_told_to_go_live(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Replayed history in the live topics is late data for live workers: by default a
    replay goes to dprobe-replay.* and says how to run a worker on it; writing into the
    live topics takes --prefix and earns a warning."""
    import asyncio
    import os

    f = tmp_path / "demand.csv"
    f.write_text("ts,tenant,demand_gpus,quota_gpus\n0,a,2,8\n60,a,3,8\n")
    args = ("--bootstrap", kafka_bootstrap, "replay", str(f), "--format", "demand-csv")
    done = _dprobe(*args, "--speed", "max", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "into dprobe-replay.cluster, dprobe-replay.jobs, dprobe-replay.samples" in done.stderr
    assert (
        f"DPROBE_KAFKA_TOPIC_PREFIX=dprobe-replay. dprobe --bootstrap {kafka_bootstrap} worker"
    ) in done.stderr
    assert "warning" not in done.stderr
    # the default topic may hold earlier replays' reports (one partition): this one is last
    raws = asyncio.run(consume_all(kafka_bootstrap, "dprobe-replay.cluster", timeout_s=30))
    assert schema.decode_cluster_report(raws[-1]).quotas == {"a": 8.0}

    live = f"live{uuid.uuid4().hex[:8]}."
    env = {**os.environ, "DPROBE_KAFKA_TOPIC_PREFIX": live}
    went_live = subprocess.run(
        [sys.executable, "-m", "dprobe.cli", *args, "--prefix", live, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert went_live.returncode == 0, went_live.stderr
    assert "are live topics: workers already past" in went_live.stderr
    assert "already existed" not in went_live.stderr  # fresh topics
    raws = asyncio.run(consume(kafka_bootstrap, f"{live}samples", until=2, timeout_s=30))
    assert sorted(schema.decode_snapshot(r).ts for r in raws) == [0.0, 60.0]


@pytest.mark.integration
def test_the_progress_bar_ends_on_the_event_time_reached(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The bar shows the event time of the records it counts; at the end it shows that
    of the last record, not that of its last update (600 minutes: 09:59, not 08:19)."""
    done = _replay_minutes(kafka_bootstrap, tmp_path, speed="max")
    assert done.returncode == 0, done.stderr
    assert "replayed 601 records (1 jobs, 600 samples), 9.98 h of event time" in done.stderr
    *_, bar, _ = done.stderr.replace("\r", "\n").strip().splitlines()
    assert bar.startswith("601msg [") and bar.endswith(", 1970-01-01 09:59]"), bar


@pytest.mark.integration
@pytest.mark.parametrize("hours", [[], ["--hours", "6"], ["--hours", "inf"]])
def test_a_fast_shifted_replay_stamps_no_snapshot_after_its_record(
    kafka_bootstrap: str, tmp_path: Path, hours: list[str]
) -> None:
    """At 600x with --shift-to-now the replay ends now: every snapshot is stamped at or
    before its Kafka record's time (a worker dead-letters snapshots stamped more than
    max_clock_skew_s ahead), and the last one about when it was sent; also when --hours
    asks for more hours than the trace holds (here 6 of 1)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer

    f = tmp_path / "demand.csv"
    f.write_text("ts,tenant,demand_gpus\n" + "".join(f"{60 * i},a,2\n" for i in range(61)))
    prefix = f"shift{uuid.uuid4().hex[:8]}."
    done = _dprobe(
        "--bootstrap", kafka_bootstrap, "replay", str(f), "--format", "demand-csv",
        "--speed", "600", "--shift-to-now", "--no-progress", *hours, replay_prefix=prefix,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    async def stamped() -> list[tuple[float, float]]:
        consumer = AIOKafkaConsumer(
            f"{prefix}samples", bootstrap_servers=kafka_bootstrap,
            auto_offset_reset="earliest", group_id=None,
        )  # fmt: skip
        out: list[tuple[float, float]] = []
        async with consumer:
            while len(out) < 61:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                for records in batch.values():
                    out += [
                        (schema.decode_snapshot(r.value).ts, r.timestamp / 1000) for r in records
                    ]
        return out

    pairs = sorted(asyncio.run(stamped()))
    assert len(pairs) == 61
    assert all(ts <= record + 1.0 for ts, record in pairs), max(t - r for t, r in pairs)
    last_ts, last_record = pairs[-1]
    assert last_record - last_ts < 5.0  # it ends about now
    assert pairs[-1][0] - pairs[0][0] == 3600.0  # every time moved by the same amount


def test_the_worker_to_run_on_a_replay_is_named_before_the_replay_starts(tmp_path: Path) -> None:
    """A replay at a trace's speed runs for an hour or more: the command of the worker that
    reads it is printed when it starts (here it then fails: nothing listens there)."""
    f = tmp_path / "demand.csv"
    f.write_text("ts,tenant,demand_gpus\n0,a,2\n60,a,3\n")
    res = _dprobe("--bootstrap", "127.0.0.1:1", "replay", str(f), "--format", "demand-csv")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("replaying ")
    assert (
        "a worker reads them with: DPROBE_KAFKA_TOPIC_PREFIX=dprobe-replay. dprobe "
        "--bootstrap 127.0.0.1:1 worker --app-id dprobe-replay-worker "
        "--data-dir ~/.cache/dprobe/dprobe-replay-worker --metrics-port 0"
    ) in lines[1:-1]  # the Kafka it was given, not the default one
    assert lines[-1].startswith("dprobe replay: cannot reach Kafka at 127.0.0.1:1")


@pytest.mark.integration
@pytest.mark.parametrize(
    ("sig", "code", "how"),
    [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "stopped (SIGTERM)")],
)
def test_an_interrupted_replay_counts_what_it_sent_without_a_progress_bar(
    kafka_bootstrap: str, tmp_path: Path, sig: str, code: int, how: str
) -> None:
    """Ctrl-C or a service manager's stop: the count it prints is what reached the topics,
    also with --no-progress."""
    import asyncio
    import os
    import signal
    import time

    from tests.streams.helpers import consume_all

    f = tmp_path / "demand.csv"
    f.write_text("ts,tenant,demand_gpus\n" + "".join(f"{t},a,{t % 5 + 1}\n" for t in range(600)))
    prefix = f"int{uuid.uuid4().hex[:8]}."
    flags = ["--format", "demand-csv", "--tick", "1", "--speed", "2", "--no-progress"]
    cli = [
        sys.executable,
        "-m",
        "dprobe.cli",
        "--log-level",
        "WARNING",
        "--bootstrap",
        kafka_bootstrap,
    ]
    with subprocess.Popen(
        [*cli, "replay", str(f), "--prefix", prefix, *flags],
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    ) as proc:
        assert proc.stderr is not None
        started = time.monotonic()
        for line in proc.stderr:  # wait until it is sending
            if line.startswith("replaying "):
                break
        time.sleep(4.0)
        proc.send_signal(getattr(signal, sig))
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == code, err
        assert time.monotonic() - started < 60
    said = err.strip().splitlines()[-1]
    assert said.startswith(f"dprobe replay: {how} after "), err
    sent = int(said.split(f"{how} after ", 1)[1].split()[0])
    assert sent > 0
    got = sum(
        len(asyncio.run(consume_all(kafka_bootstrap, f"{prefix}{kind}")))
        for kind in ("samples", "jobs")
    )
    assert got == sent


def test_a_topic_override_into_a_live_topic_is_warned_about(tmp_path: Path) -> None:
    f = tmp_path / "demand.csv"
    f.write_text("ts,tenant,demand_gpus\n0,a,2\n60,a,3\n")
    args = ("--bootstrap", "127.0.0.1:1", "replay", str(f), "--format", "demand-csv")
    res = _dprobe(*args, "--topic", "samples=dprobe.samples", "--no-progress")
    assert res.returncode == 2  # nothing listens there; the warning came first
    assert "warning: dprobe.samples is a live topic" in res.stderr
    res = _dprobe(*args, "--topic", "samples=my.samples", "--no-progress")
    assert "live topic" not in res.stderr


async def test_a_send_that_fails_at_once_is_a_replay_error() -> None:
    from dprobe.traces.replay import ReplayError, replay
    from dprobe.traces.replay_record import ReplayRecord

    class Refusing:
        async def send(self, topic: str, value: bytes, key: bytes | None = None):  # type: ignore[no-untyped-def]
            raise RuntimeError("MessageSizeTooLargeError")

    rec = ReplayRecord(kind="samples", ts=0.0, key=b"h", value=b"{}")
    with pytest.raises(ReplayError, match=r"sending to t failed: .*MessageSizeTooLarge"):
        await replay([rec], Refusing(), {"samples": "t"})


@pytest.mark.parametrize(
    ("fmt", "flags", "message"),
    [
        ("demand-csv", ["--time-unit", "60"], "--time-unit applies only with --format jobs-csv"),
        ("dprobe-parquet", ["--tick", "30"],
         "--tick does not apply with --format dprobe-parquet (an archive replays its own records)"),
        ("dprobe-parquet", ["--gpus-per-host", "4"],
         "--gpus-per-host does not apply with --format dprobe-parquet"),
    ],
)  # fmt: skip
def test_a_flag_the_format_would_ignore_is_refused_before_kafka(
    tmp_path: Path, fmt: str, flags: list[str], message: str
) -> None:
    trace = tmp_path / "d.csv"
    trace.write_text("ts,tenant,demand_gpus\n0,a,1\n")
    done = _dprobe("replay", str(trace), "--format", fmt, *flags, "--bootstrap", "127.0.0.1:1")
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"dprobe replay: {message}")


def test_a_stray_quote_under_strict_names_its_line_before_kafka(tmp_path: Path) -> None:
    f = tmp_path / "demand.csv"
    f.write_text('ts,tenant,demand_gpus\n0,a,"2\n60,a,3\n120,a,4\n')
    done = _dprobe(
        "--bootstrap", "127.0.0.1:1", "replay", str(f), "--format", "demand-csv", "--strict",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"dprobe replay: {f}:2: a quote opened on this line is not closed"
    ]


@pytest.mark.parametrize(
    ("fmt", "name", "text", "column"),
    [
        ("demand-csv", "d.csv", "ts,tenant,demand_gpus,demand_gpus\n0,a,1,9\n", "demand_gpus"),
        ("demand-csv", "d.csv", "ts,tenant,demand_gpus,ts\n0,a,1,60\n", "ts"),
        ("demand-csv", "d.csv", "ts,tenant,demand_gpus,quota_gpus,quota_gpus\n0,a,1,2,3\n",
         "quota_gpus"),
        # Helios headers are read in any case: Time and time are one column
        ("helios-vc", "vcA.csv", "Time,running_gpu_num,pending_gpu_num,time\n"
         "2020-05-01 00:00:00,1,0,2020-05-02 00:00:00\n", "time"),
        ("jobs-csv", "j.csv", "job_id,user,num_gpu,submit_time,duration,duration\n1,a,1,0,5,9\n",
         "duration"),
    ],
)  # fmt: skip
def test_a_header_naming_a_column_it_reads_twice_is_exit_2_naming_line_1(
    tmp_path: Path, fmt: str, name: str, text: str, column: str
) -> None:
    """Which of two demand_gpus columns is the demand? Refused, rather than one of them
    taken without a word."""
    f = tmp_path / name
    f.write_text(text)
    done = _dprobe("--bootstrap", "127.0.0.1:1", "replay", str(f), "--format", fmt)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"dprobe replay: {f}:1: header names column {column} twice"), line


def test_columns_a_reader_does_not_read_may_repeat(tmp_path: Path) -> None:
    from dprobe.traces.demand_series import read_demand_csv
    from dprobe.traces.jobs_csv import read_jobs

    d = tmp_path / "d.csv"
    d.write_text("ts,tenant,demand_gpus,note,note\n0,a,1,x,y\n")
    assert [p.demand_gpus for p in read_demand_csv(d)] == [1.0]
    j = tmp_path / "j.csv"
    j.write_text("job_id,user,num_gpu,submit_time,duration,note,note\n1,a,2,0,5,x,y\n")
    assert [j.num_gpu for j in read_jobs(j)] == [2]


@pytest.mark.integration
def test_the_note_on_earlier_data_names_only_topics_that_hold_records(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Topics a worker created while waiting for the replay are empty: no note about
    earlier data. A second replay into the same topics gets the note."""
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    prefix = f"wait{uuid.uuid4().hex[:8]}."

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            await admin.create_topics(
                [NewTopic(f"{prefix}{k}", 1, 1) for k in ("samples", "jobs", "cluster")]
            )
        finally:
            await admin.close()

    asyncio.run(create())
    f = tmp_path / "demand.csv"
    f.write_text("ts,tenant,demand_gpus\n0,a,2\n60,a,3\n")
    args = ("--bootstrap", kafka_bootstrap, "replay", str(f), "--format", "demand-csv")
    first = _dprobe(*args, "--prefix", prefix, "--no-progress")
    assert first.returncode == 0, first.stderr
    assert "note: " not in first.stderr.replace("note: event time starts", "")
    again = _dprobe(*args, "--prefix", prefix, "--no-progress")
    assert again.returncode == 0, again.stderr
    assert (
        f"note: {prefix}jobs, {prefix}samples already held records: a worker that has read them"
    ) in again.stderr


@pytest.mark.integration
def test_the_progress_bar_keeps_up_with_the_event_time_of_a_sparse_trace(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """One record a minute, 200 minutes a second: every bar written while the replay runs
    shows the event time of the record it counts (record N is minute N - 2: the pending
    job comes first), not one that stands still for hundreds of records."""
    import re

    done = _replay_minutes(kafka_bootstrap, tmp_path, speed="12000")
    assert done.returncode == 0, done.stderr
    bars = re.findall(r"(\d+)msg \[[^\]]*, 1970-01-01 (\d\d):(\d\d)\]", done.stderr)
    assert len(bars) >= 3, done.stderr  # about one every half second
    for count, hh, mm in bars:
        assert abs(int(hh) * 60 + int(mm) - (int(count) - 2)) <= 1, (count, hh, mm)


def test_an_interrupt_before_delivery_was_confirmed_does_not_say_everything_was_delivered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second Ctrl-C while the replay waits for Kafka to take what it sent (a broker
    that went away) stops the wait: the replay then says how many records Kafka
    confirmed, not that every record sent was delivered."""
    from dprobe import cli
    from dprobe.traces import replay_kafka

    async def stuck(records, settings, topics, *, on_record, **kw):  # type: ignore[no-untyped-def]
        for i, rec in enumerate(records):
            on_record(rec)
            if i == 1 and kw.get("on_delivered") is not None:
                kw["on_delivered"](2)  # the first two are confirmed
            if i == 2:
                break
        raise KeyboardInterrupt  # the wait for the third is interrupted

    monkeypatch.setattr(replay_kafka, "replay_to_kafka", stuck)
    f = tmp_path / "demand.csv"
    f.write_text("ts,tenant,demand_gpus\n" + "".join(f"{60 * i},a,1\n" for i in range(5)))
    args = ["--bootstrap", "127.0.0.1:1", "replay", str(f), "--format", "demand-csv"]
    assert cli.main([*args, "--no-progress", "--prefix", "stuck."]) == 130
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.startswith("dprobe replay: interrupted after 3 records sent"), said
    assert "those sent are delivered" not in said
    assert "2 of them delivered" in said and "127.0.0.1:1" in said


def test_a_time_unit_a_header_in_seconds_does_not_take_is_refused_before_kafka(
    tmp_path: Path,
) -> None:
    """A jobs trace whose header names submit_time_s and duration_s is read in seconds:
    --time-unit would change nothing, so it is refused (as by simulate and evaluate)."""
    jobs = tmp_path / "sec.csv"
    rows = "".join(f"{i},a,1,{600 * i},300\n" for i in range(3))
    jobs.write_text("job_id,user,num_gpu,submit_time_s,duration_s\n" + rows)
    base = ("--bootstrap", "127.0.0.1:1", "replay", str(jobs), "--format", "jobs-csv")
    done = _dprobe(*base, "--time-unit", "60")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"dprobe replay: {jobs}:1: --time-unit does not apply: the header names "
        "submit_time_s and duration_s, which are read in seconds"
    ]
    without = _dprobe(*base)  # read, in seconds: it gets as far as Kafka, which is not there
    assert "--time-unit" not in without.stderr and "127.0.0.1:1" in without.stderr

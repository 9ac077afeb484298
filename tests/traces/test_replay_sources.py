"""What each replay format becomes: demand series and job traces as snapshots and job
events that carry the demand, in event-time order, with malformed rows skipped or fatal."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from pathlib import Path

import pytest

from dprobe import schema
from dprobe.errors import UsageError
from dprobe.traces.replay_demand import DemandLayout
from dprobe.traces.replay_record import ReplayRecord
from dprobe.traces.replay_sources import first_hours, open_source
from tests.streams.helpers import reference_windows

HEAD = "Time,running_gpu_num,pending_gpu_num,total_gpu_num\n"


def _decode(recs: list[ReplayRecord]) -> tuple[list[schema.HostSnapshot], list[schema.JobEvent]]:
    snaps = [schema.decode_snapshot(r.value) for r in recs if r.kind == "samples"]
    jobs = [schema.decode_job_event(r.value) for r in recs if r.kind == "jobs"]
    return snaps, jobs


def _running_by_ts(snaps: list[schema.HostSnapshot], tenant: str) -> dict[float, int]:
    out: dict[float, int] = defaultdict(int)
    for s in snaps:
        if s.host.startswith(f"replay-{tenant}-"):
            out[s.ts] += sum(1 for p in s.procs if p.tenant == tenant)
    return dict(out)


def test_helios_minutes_become_running_hosts_and_a_pending_job(tmp_path: Path) -> None:
    f = tmp_path / "vcX.csv"
    f.write_text(
        HEAD
        + "2020-05-01 00:00:00,3,0,16\n"
        + "2020-05-01 00:01:00,10,8,16\n"
        + "2020-05-01 00:02:00,10,8,16\n"
        # a 3-minute gap: the last value holds, one snapshot per 60 s tick
        + "2020-05-01 00:05:00,20,2,16\n"
    )
    recs, total = open_source(f, "helios-vc")
    recs = list(recs)
    assert total is None
    assert [r.ts for r in recs] == sorted(r.ts for r in recs)
    snaps, jobs = _decode(recs)
    t0 = 1588291200.0  # 2020-05-01 00:00 UTC
    assert _running_by_ts(snaps, "vcX") == {
        t0: 3,
        t0 + 60: 10,
        t0 + 120: 10,
        t0 + 180: 10,
        t0 + 240: 10,
        t0 + 300: 20,
    }
    # fleet sized by the quota (16 GPUs = 2 hosts), grown for 20 running GPUs, never shrunk
    hosts_at = defaultdict(set)
    for s in snaps:
        hosts_at[s.ts].add(s.host)
        assert all(p.mem_used >= 0.9 * 80e9 for p in s.procs)  # whole-GPU processes
        assert s.interval_s == 60.0
    assert [len(hosts_at[t0 + 60 * k]) for k in range(6)] == [2, 2, 2, 2, 2, 3]
    seqs = defaultdict(list)
    for s in snaps:
        seqs[s.host].append(s.seq)
    assert all(v == list(range(len(v))) for v in seqs.values())
    # pending: re-submitted only when it changes
    assert [(j.ts - t0, j.event, j.job, j.gpus) for j in jobs] == [
        (0.0, "submit", "vcX/pending", 0),
        (60.0, "submit", "vcX/pending", 8),
        (300.0, "submit", "vcX/pending", 2),
    ]
    # the worker's window rules (independent reference): busy GPUs = running GPUs
    ref = reference_windows(snaps, 60.0)
    assert {k[1] - t0: v["gpus_busy"] for k, v in ref.items()} == {
        0.0: 3,
        60.0: 10,
        120.0: 10,
        180.0: 10,
        240.0: 10,
        300.0: 20,
    }
    assert all(v["effective_demand_gpus"] == v["gpus_busy"] for v in ref.values())


def test_two_tenants_merge_in_event_time_order(tmp_path: Path) -> None:
    (tmp_path / "vcA.csv").write_text(
        HEAD + "2020-05-01 00:00:00,8,0,8\n2020-05-01 00:02:00,8,0,8\n"
    )
    (tmp_path / "vcB.csv").write_text(
        HEAD + "2020-05-01 00:01:00,4,4,8\n2020-05-01 00:03:00,1,0,8\n"
    )
    recs = list(open_source(tmp_path, "helios-vc")[0])
    assert [r.ts for r in recs] == sorted(r.ts for r in recs)
    snaps, _ = _decode(recs)
    assert {p.tenant for s in snaps for p in s.procs} == {"vcA", "vcB"}
    assert set(_running_by_ts(snaps, "vcB").values()) == {4, 1}


def test_quotas_become_cluster_reports_when_they_change(tmp_path: Path) -> None:
    (tmp_path / "vcA.csv").write_text(
        HEAD + "2020-05-01 00:00:00,8,0,16\n2020-05-01 00:01:00,8,0,16\n"
        "2020-05-01 00:02:00,8,0,24\n"
    )
    (tmp_path / "vcB.csv").write_text(HEAD + "2020-05-01 00:01:00,4,4,8\n")
    recs = list(open_source(tmp_path, "helios-vc")[0])
    reports = [schema.decode_cluster_report(r.value) for r in recs if r.kind == "cluster"]
    t0 = reports[0].ts
    # reference: a report at each change of a VC's total_gpu_num, with the latest quota of
    # every VC seen so far (one key on a compacted topic: the last report must hold them
    # all); capacity = those quotas summed
    assert [(r.ts - t0, r.quotas, r.capacity_gpus) for r in reports] == [
        (0.0, {"vcA": 16.0}, 16.0),
        (60.0, {"vcA": 16.0, "vcB": 8.0}, 24.0),
        (120.0, {"vcA": 24.0, "vcB": 8.0}, 32.0),
    ]
    assert {r.key for r in recs if r.kind == "cluster"} == {b"replay"}
    no_quota = tmp_path / "d.csv"
    no_quota.write_text("ts,tenant,demand_gpus\n0,a,2\n")
    assert not [r for r in open_source(no_quota, "demand-csv")[0] if r.kind == "cluster"]


def test_demand_csv_rounds_to_whole_gpus_with_custom_layout(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text("ts,tenant,demand_gpus\n0,a,2.5\n60,a,5.4\n")
    recs = list(open_source(f, "demand-csv", layout=DemandLayout(tick_s=30, gpus_per_host=4))[0])
    snaps, jobs = _decode(recs)
    assert _running_by_ts(snaps, "a") == {0.0: 3, 30.0: 3, 60.0: 5}
    assert {len(s.gpus) for s in snaps} == {4}
    assert [j.gpus for j in jobs] == [0]  # demand-csv has no pending split


def test_malformed_rows_skipped_with_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text(
        "ts,tenant,demand_gpus\n"
        "0,a,1\n"
        "60,a,lots\n"  # line 3
        "120,a,2\n"
        "180,,3\n"  # line 5
        "100,a,9\n"  # line 6: time goes backwards
        "240,a,4\n"
    )
    bad: list[str] = []
    recs = list(open_source(f, "demand-csv", on_bad=bad.append)[0])
    assert [m.split(": ")[0] for m in bad] == [f"{f}:3", f"{f}:5", f"{f}:6"]
    assert "backwards" in bad[2]
    snaps, _ = _decode(recs)
    points = {t: n for t, n in _running_by_ts(snaps, "a").items() if t in (0.0, 120.0, 240.0)}
    assert points == {0.0: 1, 120.0: 2, 240.0: 4}


def test_malformed_row_in_a_gzip_helios_file_keeps_the_tenant(tmp_path: Path) -> None:
    import gzip

    f = tmp_path / "vcZ.csv.gz"
    with gzip.open(f, "wt") as fh:
        fh.write(HEAD + "2020-05-01 00:00:00,1,0,8\nnot a time,1,0,8\n2020-05-01 00:01:00,2,0,8\n")
    bad: list[str] = []
    snaps, _ = _decode(list(open_source(f, "helios-vc", on_bad=bad.append)[0]))
    assert len(bad) == 1 and bad[0].startswith(f"{f}:3: ")
    assert sorted(_running_by_ts(snaps, "vcZ").values()) == [1, 2]


def test_strict_stops_at_the_first_malformed_row(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text("ts,tenant,demand_gpus\n0,a,1\n60,a,-4\n120,a,oops\n")
    recs, _ = open_source(f, "demand-csv", strict=True)
    with pytest.raises(UsageError, match=r"d\.csv:3: demand_gpus"):
        list(recs)


def test_a_bad_header_is_fatal_even_without_strict(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text("when,who,how_many\n0,a,1\n")
    with pytest.raises(UsageError, match="header lacks"):
        list(open_source(f, "demand-csv", on_bad=lambda m: None)[0])


JOBS = (
    "job_id,user,num_gpu,submit_time,duration,model_name\n"
    "1,vc_a,8,0,10,resnet50\n"
    "2,vc_a,2,5,1,\n"
    "3,vc_b,x,5,1,bert\n"  # line 4: malformed
    "4,vc_b,4,7,3,bert\n"
)


def test_jobs_csv_events_start_at_submit_and_running_telemetry(tmp_path: Path) -> None:
    f = tmp_path / "jobs.csv"
    f.write_text(JOBS)
    bad: list[str] = []
    recs = list(open_source(f, "jobs-csv", on_bad=bad.append)[0])  # minutes by default
    assert len(bad) == 1 and bad[0].startswith(f"{f}:4: ")
    assert [r.ts for r in recs] == sorted(r.ts for r in recs)
    snaps, jobs = _decode(recs)
    assert [(j.ts, j.event, j.job) for j in jobs] == [
        (0.0, "submit", "1"),
        (0.0, "start", "1"),
        (300.0, "submit", "2"),
        (300.0, "start", "2"),
        (360.0, "finish", "2"),
        (420.0, "submit", "4"),
        (420.0, "start", "4"),
        (600.0, "finish", "1"),
        (600.0, "finish", "4"),
    ]
    assert jobs[0].model == "resnet50" and jobs[2].model is None and jobs[0].gpus == 8
    running_a = _running_by_ts(snaps, "vc_a")
    assert running_a[0.0] == 8 and running_a[300.0] == 10 and running_a[360.0] == 8
    assert running_a[600.0] == 0
    assert _running_by_ts(snaps, "vc_b")[420.0] == 4


@pytest.mark.slow  # replays a year and a half of snapshots: a minute or more
def test_a_job_submitted_over_a_year_after_every_other_ended_is_an_error_or_skipped(
    tmp_path: Path,
) -> None:
    # a digit too many in submit_time: the tenants' hosts would send idle snapshots every
    # tick for 162 years up to it
    f = tmp_path / "jobs.csv"
    f.write_text(
        "job_id,user,num_gpu,submit_time,duration\n"
        "1,a,2,0,60\n"
        "2,a,2,85550000,60\n"  # line 3: minutes, 162 years on
        "3,b,2,10,500000\n"  # runs 347 days; job 4 comes 62 days after it ends
        "4,b,2,590000,5\n"
    )
    with pytest.raises(UsageError, match=rf"{f.name}:3: submitted 59,000 days after"):
        open_source(f, "jobs-csv", strict=True)
    bad: list[str] = []
    recs = list(open_source(f, "jobs-csv", on_bad=bad.append)[0])
    assert [b.split(": ")[0] for b in bad] == [f"{f}:3"]
    _, jobs = _decode(recs)
    assert {j.job for j in jobs} == {"1", "3", "4"}


def test_first_hours_of_event_time(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text("ts,tenant,demand_gpus\n" + "".join(f"{60 * k},a,1\n" for k in range(200)))
    recs = list(first_hours(open_source(f, "demand-csv")[0], 1.0))
    assert max(r.ts for r in recs) == 3540.0
    assert math.isclose(min(r.ts for r in recs), 0.0)


def test_unknown_archive_path_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no dprobe archive files"):
        open_source(tmp_path, "dprobe-parquet")


def test_a_duplicate_job_id_after_a_skipped_row_is_still_caught(tmp_path: Path) -> None:
    f = tmp_path / "jobs.csv"
    f.write_text(
        "job_id,user,num_gpu,submit_time,duration,model_name\n"
        "1,vc_a,1,0,5,vgg16\n"
        "2,vc_a,oops,1,5,vgg16\n"  # line 3: skipped
        "1,vc_b,2,3,5,resnet\n"  # line 4: job 1 again
    )
    bad: list[str] = []
    _, jobs = _decode(list(open_source(f, "jobs-csv", on_bad=bad.append)[0]))
    assert [m.split(": ")[0] for m in bad] == [f"{f}:3", f"{f}:4"]
    assert "duplicate job_id '1'" in bad[1]
    assert [(j.event, j.tenant) for j in jobs] == [
        ("submit", "vc_a"),
        ("start", "vc_a"),
        ("finish", "vc_a"),
    ]


def test_a_row_with_a_byte_that_is_not_utf8_is_skipped(tmp_path: Path) -> None:
    d = tmp_path / "d.csv"
    d.write_bytes(b"ts,tenant,demand_gpus\n0,a,1\n60,a\xff,2\n120,a,3\n180,\xfeb,4\n240,a,5\n")
    bad: list[str] = []
    snaps, _ = _decode(list(open_source(d, "demand-csv", on_bad=bad.append)[0]))
    assert bad == [f"{d}:3: not UTF-8 text (byte 0xff)", f"{d}:5: not UTF-8 text (byte 0xfe)"]
    assert {t: n for t, n in _running_by_ts(snaps, "a").items() if t % 120 == 0} == {
        0.0: 1,
        120.0: 3,
        240.0: 5,
    }
    j = tmp_path / "jobs.csv"
    j.write_bytes(
        b"job_id,user,num_gpu,submit_time,duration\n1,a,1,0,5\n2,a\xff,1,1,5\n3,a,1,2,5\n"
    )
    bad.clear()
    _, jobs = _decode(list(open_source(j, "jobs-csv", on_bad=bad.append)[0]))
    assert bad == [f"{j}:3: not UTF-8 text (byte 0xff)"]
    assert sorted({e.job for e in jobs}) == ["1", "3"]


def test_a_bad_row_over_several_lines_is_skipped_whole(tmp_path: Path) -> None:
    f = tmp_path / "jobs.csv"
    f.write_text(
        "job_id,user,num_gpu,submit_time,duration,note\n"
        "1,a,1,0,5,x\n"
        '2,a,oops,1,5,"a\nb"\n'  # lines 3-4: one record, a bad num_gpu
        "3,a,1,2,5,y\n"
    )
    bad: list[str] = []
    _, jobs = _decode(list(open_source(f, "jobs-csv", on_bad=bad.append)[0]))
    assert len(bad) == 1 and bad[0].startswith(f"{f}:4: num_gpu 'oops'")
    assert sorted({e.job for e in jobs}) == ["1", "3"]


def test_replayed_names_fit_the_schema_or_the_row_is_refused(tmp_path: Path) -> None:
    longest = "t" * 233
    d = tmp_path / "d.csv"
    # 1,001 hosts: host numbers reach four digits
    d.write_text(f"ts,tenant,demand_gpus\n0,{longest},8008\n60,{longest}x,1\n")
    bad: list[str] = []
    snaps, jobs = _decode(list(open_source(d, "demand-csv", on_bad=bad.append)[0]))
    assert len(snaps) == 1001 and jobs[0].job == f"{longest}/pending"
    assert bad == [
        f"{d}:3: tenant is 234 characters, more than 233 (a replay names hosts and GPUs after it)"
    ]
    j = tmp_path / "jobs.csv"
    j.write_text(
        "job_id,user,num_gpu,submit_time,duration,model_name\n"
        f"{'j' * 256},{longest},16,0,5,{'m' * 256}\n"
        f"2,{longest}x,1,0,5,m\n"
        f"3,u,1,0,5,{'m' * 257}\n"
    )
    bad.clear()
    snaps, jobs = _decode(list(open_source(j, "jobs-csv", on_bad=bad.append)[0]))
    assert {e.job for e in jobs} == {"j" * 256} and {s.host[-3:] for s in snaps} == {"000", "001"}
    assert [m.split(": ")[0] for m in bad] == [f"{j}:3", f"{j}:4"]


def test_a_fleet_whose_gpu_names_the_schema_refuses_is_an_error() -> None:
    import itertools

    from dprobe.traces.demand_series import DemandPoint
    from dprobe.traces.replay_demand import demand_records

    # jobs-csv sums its jobs, so a tenant may run more GPUs than a demand row may: here
    # over a million hosts of 4,096 GPUs, whose GPU names would pass 256 characters
    running = 4096 * 1_000_000 + 1
    point = DemandPoint(ts=0.0, tenant="t" * 233, running_gpus=running, pending_gpus=0.0)
    recs = demand_records([point], DemandLayout(gpus_per_host=4096))
    with pytest.raises(UsageError, match="more than the schema's 256"):
        list(itertools.islice(recs, 3))


def test_a_file_with_many_bad_rows_is_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Skipping a bad row does not read the file again: every third row of 3,000 is bad,
    the file is opened once, and every good row comes through in file order."""
    import dprobe.traces.jobs_csv as jobs_csv

    opened: list[Path] = []
    real_open = jobs_csv.open_text

    def counting_open(path: Path):  # type: ignore[no-untyped-def]
        opened.append(path)
        return real_open(path)

    monkeypatch.setattr(jobs_csv, "open_text", counting_open)
    rows = [f"{k},vc_a,1,{k},5\n" if k % 3 else f"{k},vc_a,NA,{k},5\n" for k in range(3000)]
    f = tmp_path / "jobs.csv"
    f.write_text("job_id,user,num_gpu,submit_time,duration\n" + "".join(rows))
    bad: list[str] = []
    _, jobs = _decode(list(open_source(f, "jobs-csv", on_bad=bad.append)[0]))
    assert opened == [f]
    assert bad == [f"{f}:{k + 2}: num_gpu 'NA' is not a number" for k in range(0, 3000, 3)]
    submitted = [int(e.job) for e in jobs if e.event == "submit"]
    assert submitted == [k for k in range(3000) if k % 3]


def test_a_row_csv_cannot_parse_is_skipped_and_the_next_read(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text("ts,tenant,demand_gpus\n0,a,1\n" + f"60,a,{'9' * 140_000}\n" + "120,a,3\n")
    bad: list[str] = []
    snaps, _ = _decode(list(open_source(f, "demand-csv", on_bad=bad.append)[0]))
    assert len(bad) == 1 and bad[0].startswith(f"{f}:3: not valid CSV (field larger than")
    assert {t: n for t, n in _running_by_ts(snaps, "a").items() if t in (0.0, 120.0)} == {
        0.0: 1,
        120.0: 3,
    }
    with pytest.raises(UsageError, match=r"d\.csv:3: not valid CSV"):
        list(open_source(f, "demand-csv", strict=True)[0])


@pytest.mark.parametrize(
    "record",
    [
        b'1,"vc\n\xff\nx",1,0,5\n',  # the bad byte on a middle line of a quoted record
        b'1,"vc\nx\xff",1,0,5\n',  # on the line that closes the quote
    ],
)
def test_a_record_over_several_lines_with_a_bad_byte_is_skipped_whole(
    tmp_path: Path, record: bytes
) -> None:
    """The whole record goes (not only its bad line), the rows after it are read, and its
    job id does not count as seen."""
    f = tmp_path / "jobs.csv"
    f.write_bytes(
        b"job_id,user,num_gpu,submit_time,duration\n" + record + b"1,vc,4,1,5\n2,vc,1,2,5\n"
    )
    bad: list[str] = []
    _, jobs = _decode(list(open_source(f, "jobs-csv", on_bad=bad.append)[0]))
    bad_line = 2 + record.split(b"\n").index(next(x for x in record.split(b"\n") if b"\xff" in x))
    assert bad == [f"{f}:{bad_line}: not UTF-8 text (byte 0xff)"]
    assert sorted((e.job, e.gpus) for e in jobs if e.event == "submit") == [("1", 4), ("2", 1)]
    with pytest.raises(UsageError, match=rf"jobs\.csv:{bad_line}: not UTF-8"):
        list(open_source(f, "jobs-csv", strict=True)[0])


def test_an_idle_tenant_keeps_one_pending_job_rewritten_in_place(tmp_path: Path) -> None:
    """What docs/replay.md's worker expectations rest on: every tenant of a demand series
    has its pending job from its first point on (0 GPUs when nothing waits, so the worker
    gives it a window every minute, zeros included), and each change of pending GPUs
    re-submits that same job (the worker's book holds its newest size)."""
    idle, busy = tmp_path / "vcIdle.csv", tmp_path / "vcBusy.csv"
    idle.write_text(HEAD + "".join(f"2020-05-01 00:0{m}:00,0,0,16\n" for m in range(4)))
    pending = [0, 16, 16, 0]
    busy.write_text(
        HEAD + "".join(f"2020-05-01 00:0{m}:00,8,{p},16\n" for m, p in enumerate(pending))
    )
    _, jobs = _decode(list(open_source(tmp_path, "helios-vc")[0]))
    by_tenant: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for ev in jobs:
        by_tenant[ev.tenant].append((ev.event, ev.job, ev.gpus))
    assert by_tenant["vcIdle"] == [("submit", "vcIdle/pending", 0)]
    changes = [p for i, p in enumerate(pending) if i == 0 or p != pending[i - 1]]
    assert by_tenant["vcBusy"] == [("submit", "vcBusy/pending", p) for p in changes]


def test_a_day_or_an_hour_folder_of_an_archive_replays_just_that(tmp_path: Path) -> None:
    from dprobe.sinks.archive_schema import row_of
    from dprobe.sinks.parquet_archive import ArchiveWriter
    from dprobe.traces.archive_reader import archive_files, count_records, read_archive

    w = ArchiveWriter(tmp_path, fsync=False)
    day = 86_400.0
    times = [day * 20_000 + h * 1800.0 for h in range(100)]  # 50 hours over three days
    for i, t in enumerate(times):
        ev = schema.JobEvent(ts=t, event="submit", job=f"j{i}", tenant="a", gpus=1)
        w.add("jobs", row_of("jobs", ev, key=ev.job.encode(), value=schema.encode(ev),
                             partition=0, offset=i, timestamp_ms=None))  # fmt: skip
    w.flush()
    second_day = tmp_path / "jobs" / time.strftime("date=%Y-%m-%d", time.gmtime(day * 20_001))
    hour = second_day / "hour=05"
    for folder, lo, hi in ((second_day, day, 2 * day), (hour, day + 5 * 3600, day + 6 * 3600)):
        want = [t for t in times if lo <= t - day * 20_000 < hi]
        files = archive_files(folder)
        assert count_records(files) == len(want)
        assert [r.ts for r in read_archive(folder, files)] == want

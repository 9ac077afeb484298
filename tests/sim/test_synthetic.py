"""Helios-calibrated synthetic stream: sizes, large-job share and offered load follow the
series (Little's law), on a small series written here."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from dprobe.errors import UsageError
from dprobe.sim.synthetic import SyntheticSettings, generate

HEAD = (
    "time,running_gpu_num,pending_gpu_num,total_gpu_num,running_gpu_num_noless_8,"
    "pending_gpu_num_noless_8\n"
)


def _series(path: Path, demand: int, large: int, total: int, hours: int) -> None:
    rows = "".join(
        f"2020-05-{1 + h // 24:02d} {h % 24:02d}:{m:02d}:00,{demand},0,{total},{large},0\n"
        for h in range(hours)
        for m in range(60)
    )
    with gzip.open(path, "wt") as fh:
        fh.write(HEAD + rows)


def test_offered_load_matches_the_series(tmp_path: Path) -> None:
    # vcA: 64 GPUs of demand, half from >= 8-GPU jobs, in a 128-GPU VC; vcB: 4 GPUs, none
    # large; vcC: an 8-GPU VC of only large jobs for a day.
    _series(tmp_path / "vcA.csv.gz", 64, 32, 128, 24 * 7)
    _series(tmp_path / "vcB.csv.gz", 4, 0, 16, 24 * 7)
    _series(tmp_path / "vcC.csv.gz", 8, 8, 8, 24)  # one node: 16-GPU jobs must shrink to 8
    s = SyntheticSettings(
        days=7, max_duration_s=4 * 3600.0, duration_mean_s=1200.0, duration_median_s=300.0
    )
    jobs, sizes = generate(tmp_path, s)
    assert sizes == {"vcA": 16, "vcB": 2, "vcC": 1}
    span = 7 * 86400.0
    for vc, demand in (("vcA", 64), ("vcB", 4)):
        mine = [j for j in jobs if j.tenant == vc]
        offered = sum(j.num_gpu * j.duration_s for j in mine) / span
        assert offered == pytest.approx(demand, rel=0.15)  # Little's law, Poisson noise
    big = sum(j.num_gpu * j.duration_s for j in jobs if j.tenant == "vcA" and j.num_gpu >= 8)
    total = sum(j.num_gpu * j.duration_s for j in jobs if j.tenant == "vcA")
    assert big / total == pytest.approx(0.5, abs=0.1)
    assert {j.num_gpu for j in jobs if j.tenant == "vcC"} == {8}
    assert {j.num_gpu for j in jobs if j.tenant == "vcB"} <= {1, 2, 4}
    assert jobs == sorted(jobs, key=lambda j: (j.submit_s, j.job_id))
    assert generate(tmp_path, s) == (jobs, sizes)  # same seed, same stream


def test_no_series_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no Helios VC series"):
        generate(tmp_path)


def test_a_missing_folder_or_a_file_is_said_as_such(tmp_path: Path) -> None:
    """A mistyped --helios, or one VC's file instead of its folder, is named for what it
    is, not as a folder without series."""
    gone = tmp_path / "helios-earth-vsc"
    with pytest.raises(UsageError) as err:
        generate(gone)
    assert str(err.value) == (
        f"{gone}: no such folder (--helios takes the folder of the Helios VC series)"
    )
    _series(tmp_path / "vcA.csv.gz", 4, 0, 16, 48)
    with pytest.raises(UsageError) as err:
        generate(tmp_path / "vcA.csv.gz")
    assert str(err.value) == (
        f"{tmp_path / 'vcA.csv.gz'}: is a file, not a folder "
        "(--helios takes the folder of the Helios VC series)"
    )


def test_more_days_than_the_longest_series_is_a_usage_error(tmp_path: Path) -> None:
    _series(tmp_path / "vcA.csv.gz", 4, 0, 16, 48)
    _series(tmp_path / "vcB.csv.gz", 4, 0, 16, 24)  # a shorter series only ends earlier
    jobs, _ = generate(tmp_path, SyntheticSettings(days=2))
    assert max(j.submit_s for j in jobs if j.tenant == "vcA") > 86_400
    assert max(j.submit_s for j in jobs if j.tenant == "vcB") < 86_400
    with pytest.raises(
        UsageError, match=r"3 days asked for, but the Helios series cover only 2 days"
    ):
        generate(tmp_path, SyntheticSettings(days=3))


@pytest.mark.parametrize("days", [0.0, -2.0, 0.01, float("nan")])
def test_settings_need_at_least_one_hour(days: float) -> None:
    with pytest.raises(ValueError, match="at least one hour"):
        SyntheticSettings(days=days)


def _plain(path: Path, rows: list[str], head: str = HEAD) -> Path:
    path.write_text(head + "".join(r + "\n" for r in rows))
    return path


GOOD = "2020-05-01 00:00:00,8,0,16,8,0"


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ("2020-05-01 00:01:00,8,0,nan,8,0", r"vcA\.csv:3: total_gpu_num: .*'nan'"),
        ("2020-05-01 00:01:00,inf,0,16,8,0", r"vcA\.csv:3: running_gpu_num: .*'inf'"),
        ("2020-05-01 00:01:00,8,1e400,16,8,0", r"vcA\.csv:3: pending_gpu_num: .*'1e400'"),
        ("2020-05-01 00:01:00,-500,0,16,8,0", r"vcA\.csv:3: running_gpu_num: .*'-500'"),
        ("2020-05-01 00:01:00,8,0,16,-1,0", r"vcA\.csv:3: running_gpu_num_noless_8: .*'-1'"),
        ("2020-05-01 00:01:00,8,0,1e12,8,0", r"vcA\.csv:3: total_gpu_num: .*'1e12'"),
        ("2020-05-01 00:01:00,8,0,x,8,0", r"vcA\.csv:3: total_gpu_num: not a number: 'x'"),
        ("2020-04-30 23:59:00,8,0,16,8,0", r"vcA\.csv:3: time .* before the previous row's"),
        # a minute twice, however it is written: which of the two rows holds its demand?
        ("2020-05-01 00:00:00,9,0,16,8,0", r"vcA\.csv:3: time .* is line 2's too; keep one"),
        ("2020-05-01T00:00:00Z,8,0,16,8,0", r"vcA\.csv:3: time .* is line 2's too; keep one"),
        ("yesterday,8,0,16,8,0", r"vcA\.csv:3: time: not a date-time: 'yesterday'"),
        ("2020-05-01 00:01:00,8,0," + "9" * 9999 + ",8,0", r"total_gpu_num: .* got '9{40}'\.\.\.$"),
        ("2020-05-01 00:01:00,8,0,16,8", r"vcA\.csv:3: expected 6 fields, found 5"),
        ("2020-05-01 00:01:00,8,0,16,8,0,9", r"vcA\.csv:3: expected 6 fields, found 7"),
    ],
)
def test_a_bad_row_is_a_usage_error_naming_file_and_line(
    tmp_path: Path, row: str, match: str
) -> None:
    _plain(tmp_path / "vcA.csv", [GOOD, row])
    with pytest.raises(UsageError, match=match):
        generate(tmp_path, SyntheticSettings(days=1 / 24))


def test_a_missing_column_or_an_empty_file_is_a_usage_error(tmp_path: Path) -> None:
    _plain(tmp_path / "vcA.csv", [], head="time,running_gpu_num,pending_gpu_num\n")
    with pytest.raises(UsageError, match=r"vcA\.csv:1: header lacks column\(s\) total_gpu_num"):
        generate(tmp_path)
    (tmp_path / "vcA.csv").write_text("")
    with pytest.raises(UsageError, match=r"vcA\.csv:1: empty file"):
        generate(tmp_path)


def test_more_large_job_demand_than_demand_is_a_usage_error(tmp_path: Path) -> None:
    # single minutes of the real series count a few more >= 8-GPU GPUs than GPUs (kept);
    # over the whole series that cannot be, and would make the small-job share negative
    _plain(tmp_path / "vcA.csv", [GOOD, "2020-05-01 00:01:00,8,0,16,64,0"])
    with pytest.raises(UsageError, match=r"vcA\.csv: .*>= 8 GPUs .* exceeds"):
        generate(tmp_path, SyntheticSettings(days=1 / 24))


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"no gzip", r"vcG\.csv\.gz:1: unreadable: Not a gzipped file"),
        (
            gzip.compress(((HEAD + GOOD + "\n") * 50).encode(), mtime=0)[:60],
            r"vcG\.csv\.gz:\d+: unreadable: .*ended",
        ),
        (gzip.compress(b"time,\xff\n", mtime=0), r"vcG\.csv\.gz:1: not UTF-8 text \(byte 0xff\)"),
        (
            gzip.compress((HEAD + GOOD + "\n").encode() + b"2020-05-01 00:01\xe9,8\n", mtime=0),
            r"vcG\.csv\.gz:3: not UTF-8 text \(byte 0xe9\)",
        ),
    ],
    ids=["not-gzip", "truncated", "not-utf8", "not-utf8-line-3"],
)
def test_a_bad_gzip_file_is_a_usage_error_naming_it(
    tmp_path: Path, content: bytes, match: str
) -> None:
    (tmp_path / "vcG.csv.gz").write_bytes(content)
    with pytest.raises(UsageError, match=match):
        generate(tmp_path, SyntheticSettings(days=1 / 24))


def test_a_folder_named_like_a_series_is_a_usage_error(tmp_path: Path) -> None:
    _plain(tmp_path / "vcA.csv", [GOOD])
    (tmp_path / "vcD.csv").mkdir()
    with pytest.raises(UsageError, match=r"vcD\.csv: cannot read: Is a directory"):
        generate(tmp_path, SyntheticSettings(days=1 / 24))


def test_a_vc_in_two_files_is_a_usage_error_naming_both(tmp_path: Path) -> None:
    _plain(tmp_path / "vcA.csv", [GOOD])
    _series(tmp_path / "vcA.csv.gz", 8, 8, 16, 1)
    with pytest.raises(UsageError, match=r"VC vcA is in two files: .*vcA\.csv and .*vcA\.csv\.gz"):
        generate(tmp_path, SyntheticSettings(days=1 / 24))


def test_header_case_and_a_byte_order_mark_are_read(tmp_path: Path) -> None:
    (tmp_path / "vcA.csv").write_text("\ufeff" + HEAD.replace("time", "Time") + GOOD + "\n")
    _, sizes = generate(tmp_path, SyntheticSettings(days=1 / 24))
    assert sizes == {"vcA": 2}


def test_hours_without_rows_hold_the_last_demand_and_later_hours_keep_their_time(
    tmp_path: Path,
) -> None:
    # rows for hours 0-1 (nothing running) and hour 5 (64 GPUs); hours 2-4 have no row
    rows = [f"2020-05-01 0{h}:{m:02d}:00,0,0,64,0,0" for h in (0, 1) for m in range(60)]
    rows += [f"2020-05-01 05:{m:02d}:00,64,0,64,0,0" for m in range(60)]
    _plain(tmp_path / "vcA.csv", rows)
    jobs, _ = generate(tmp_path, SyntheticSettings(days=6 / 24, seed=1))
    assert jobs  # 64 GPUs for an hour
    assert all(5 * 3600 <= j.submit_s < 6 * 3600 for j in jobs)
    (tmp_path / "vcA.csv").write_text(HEAD + "2020-05-01 00:00:00,8,0,8,0,0\n"
                                      "2020-05-01 03:10:00,16,0,8,0,0\n")  # fmt: skip
    from dprobe.sim.synthetic import read_vc_file

    assert read_vc_file(tmp_path / "vcA.csv").hourly_demand == [8.0, 8.0, 8.0, 16.0]


def test_a_gap_of_over_a_year_is_a_usage_error_naming_the_line(tmp_path: Path) -> None:
    _plain(tmp_path / "vcA.csv", [GOOD, "2021-06-01 00:00:00,8,0,16,8,0"])
    with pytest.raises(UsageError, match=r"vcA\.csv:3: time jumps 9504 hours after"):
        generate(tmp_path, SyntheticSettings(days=1 / 24))


def test_only_csv_and_csv_gz_files_are_series(tmp_path: Path) -> None:
    # a backup or a partial download beside the series is not one more VC (evaluate and
    # replay read the same folder as one VC too)
    _plain(tmp_path / "vcA.csv", [GOOD])
    _plain(tmp_path / "vcB.csv.bak", [GOOD])
    (tmp_path / "vcC.csv.gz.part").write_bytes(b"\x1f\x8b")
    _, sizes = generate(tmp_path, SyntheticSettings(days=1 / 24))
    assert sizes == {"vcA": 2}


def test_a_vc_whose_series_starts_later_keeps_its_time(tmp_path: Path) -> None:
    # vcA from 00:00 (nothing running), vcB only from 02:00 (64 GPUs): vcB's jobs come in
    # the third hour, as in the series, not in the first
    _plain(tmp_path / "vcA.csv", [f"2020-05-01 0{h}:00:00,0,0,64,0,0" for h in range(3)])
    _plain(tmp_path / "vcB.csv", [f"2020-05-01 02:{m:02d}:00,64,0,64,0,0" for m in range(60)])
    jobs, _ = generate(tmp_path, SyntheticSettings(days=3 / 24, seed=1))
    assert jobs and {j.tenant for j in jobs} == {"vcB"}
    assert all(2 * 3600 <= j.submit_s < 3 * 3600 for j in jobs)
    _plain(tmp_path / "vcB.csv", ["2021-06-01 00:00:00,64,0,64,0,0"])
    with pytest.raises(UsageError, match=r"VC vcB's series starts 9504 hours after the earliest"):
        generate(tmp_path, SyntheticSettings(days=1 / 24))

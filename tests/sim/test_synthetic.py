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

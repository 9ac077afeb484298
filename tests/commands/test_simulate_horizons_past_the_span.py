"""``simulate --horizon`` or ``--lend-horizon`` longer than the jobs span is refused before
the run: no forecast that far ahead falls within it, and every one of them stays pending
in the forecaster's scoring (a horizon of 1e9 s ran for many minutes on 300 jobs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.cli import main


@pytest.fixture
def jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "jobs.csv"
    # submitted in the first 30 minutes, each running 10 minutes: a 40-minute span
    path.write_text(
        "job_id,user,num_gpu,submit_time,duration\n"
        + "".join(f"{i},{'ab'[i % 2]},{1 + i % 4},{i},10\n" for i in range(31))
    )
    return path


@pytest.mark.parametrize("flag", ["--horizon", "--lend-horizon"])
def test_a_horizon_past_the_jobs_span_is_refused(
    jobs: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    argv = ["simulate", "--jobs", str(jobs), "--nodes", "4", "--policies", "fifo",
            "--modes", "predictive", "--forecaster", "last-value", "--chart", ""]  # fmt: skip
    code = main([*argv, flag, "1e6"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    assert err.splitlines() == [
        f"dprobe simulate: {flag} 1e+06: longer than the jobs span (40.0 min, 2400 s), "
        "so no forecast that far ahead falls within the run"
    ]
    assert main([*argv, flag, "2400"]) == 0  # the span itself is taken

"""benchmarks/calibration_folds.py (docs/forecasting.md): a bad setting or a bad trace row
exits 2 with one line, before any model is recorded; good settings still run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.benchmarks.scripts import refused_with, run_benchmark

pytestmark = pytest.mark.slow  # runs a benchmark script as a process: seconds each

T0 = 1_590_969_600  # 2020-06-01 00:00 UTC


def _trace(path: Path, bad_line: int | None = None) -> Path:
    """Two tenants, one row a minute for two days; ``bad_line`` (1 = header) gets a
    demand that is not a number."""
    lines = ["ts,tenant,demand_gpus"]
    for i in range(2 * 24 * 60):
        for tenant in ("a", "b"):
            lines.append(f"{T0 + 60 * i},{tenant},{(i * 7 + len(tenant)) % 13}")
    if bad_line is not None:
        ts, tenant, _ = lines[bad_line - 1].split(",")
        lines[bad_line - 1] = f"{ts},{tenant},lots"
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(trace: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_benchmark(
        "calibration_folds.py", "--trace", str(trace), "--format", "demand-csv",
        "--models", "last-value", "--end", "2020-06-03",
        "--fold", f"{T0 + 43_200}:{T0 + 86_400}", *extra,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--variant", 'typo={"activity_halflfe": 3}'], "activity_halflfe"),
        (["--variant", 'half={"activity_halflife": 0}'], "activity_halflife must be > 0"),
        (["--variant", "x={bad"], "not JSON"),
        (["--variant", "default"], "not NAME="),
        (["--fold", "2020-06-01"], "not START:END"),
        (["--fold", "2020-06-02:2020-06-01"], "START must be before END"),
        (["--models", "last-valu"], "unknown last-valu"),
        (["--window-s", "0"], "--window-s must be a finite number > 0, got 0"),
        (["--time-unit", "0"], "--time-unit must be a finite number > 0, got 0"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(tmp_path: Path, extra: list[str], says: str) -> None:
    done = _run(_trace(tmp_path / "d.csv"), *extra)
    line = refused_with(done)
    assert line.startswith("calibration_folds.py: ") and says in line
    assert "recorded" not in done.stderr  # refused before any model ran


def test_a_bad_trace_row_names_the_file_and_line(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "d.csv", bad_line=7)
    done = _run(trace)
    assert (
        refused_with(done) == f"calibration_folds.py: {trace}:7: demand_gpus: not a number: 'lots'"
    )


def test_good_settings_still_run(tmp_path: Path) -> None:
    done = _run(_trace(tmp_path / "d.csv"), "--variant", 'half3={"activity_halflife": 3}')
    assert done.returncode == 0, done.stderr
    assert "half3 fold 0      last-value     600 s  cover" in done.stdout


@pytest.mark.parametrize(
    ("fold", "says"),
    [  # the trace's windows end 2020-06-01T00:10 .. 2020-06-03T00:00
        (f"{T0 + 2 * 86_400 - 10_800}:{T0 + 2 * 86_400}", "less than the longest horizon (6 h)"),
        (f"{T0 + 3 * 86_400}:{T0 + 4 * 86_400}", "no window of the trace ends in it"),
    ],
)
def test_a_fold_that_cannot_score_6_h_is_one_line_and_exit_2(
    tmp_path: Path, fold: str, says: str
) -> None:
    """Refused before the recording; it ended in a traceback (min() of nothing) after it."""
    done = run_benchmark(
        "calibration_folds.py", "--trace", str(_trace(tmp_path / "d.csv")), "--format",
        "demand-csv", "--models", "last-value", "--end", "2020-06-05", "--fold", fold,
    )  # fmt: skip
    line = refused_with(done)
    assert line.startswith(f"calibration_folds.py: --fold {fold!r}: ") and says in line
    assert "recorded" not in done.stderr


def test_a_fold_given_in_iso_times_is_split_at_the_colon_between_them(tmp_path: Path) -> None:
    """``2020-06-01T12:00:2020-06-02`` is START 12:00 on the first day, END the second:
    split at the first colon, its START was '2020-06-01T12' and END '00:2020-06-02'."""
    done = run_benchmark(
        "calibration_folds.py", "--trace", str(_trace(tmp_path / "d.csv")), "--format",
        "demand-csv", "--models", "last-value", "--end", "2020-06-03",
        "--fold", "2020-06-01T12:00:2020-06-02T00:00", "--variant", "default={}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "default fold 0      last-value   21600 s  cover" in done.stdout

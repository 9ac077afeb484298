"""When a horizon is not scored although the test span is longer than it, ``dprobe
evaluate`` says why: no window of the test span has one of its tenant that far ahead (a
trace whose points are further apart than --window-s), not that the span is too short."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.cli import main


def _sparse(path: Path) -> Path:
    """A point every 600 s for 100 points: 60-s windows have gaps of 9 between them."""
    rows = "".join(f"{1590000000 + 600 * i},a,{i % 9}\n" for i in range(100))
    path.write_text("ts,tenant,demand_gpus\n" + rows)
    return path


def _evaluate(trace: Path, *flags: str) -> list[str]:
    return ["evaluate", "--trace", str(trace), "--format", "demand-csv", "--no-plots",
            "--models", "last-value", *flags]  # fmt: skip


def test_no_horizon_scored_on_a_long_test_span_names_the_gaps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_evaluate(_sparse(tmp_path / "d.csv"), "--window-s", "60", "--horizons", "60"))
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert err[-1] == (
        "dprobe evaluate: no forecast could be scored: no window of the test span has one of "
        "its tenant 60 s later (the trace's points are further apart than --window-s 60?)"
    )


def test_a_horizon_left_unscored_by_gaps_is_told_apart_from_one_past_the_span(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the test span is the last 30%: 17,820 s; 21,600 s is past it, 60 s falls in the gaps
    flags = ("--window-s", "60", "--horizons", "60,600,21600")
    assert main(_evaluate(_sparse(tmp_path / "d.csv"), *flags)) == 0
    err = capsys.readouterr().err.splitlines()
    assert "horizons with no forecast to score (the test span is 17820 s): 21600 s" in err
    assert (
        "horizons with no forecast to score (no window of the test span has one of its "
        "tenant that much later: the trace's points are further apart than --window-s "
        "60?): 60 s"
    ) in err

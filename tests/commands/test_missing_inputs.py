"""A path that is not there reads the same in every command: ``PATH: no such file`` where
a file is asked for, ``no such folder`` / ``no such file or folder`` where those are."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.cli import main


def _inputs(tmp_path: Path) -> dict[str, Path]:
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,user,num_gpu,submit_time,duration\n0,a,1,0,5\n")
    demand = tmp_path / "demand.csv"
    demand.write_text("ts,tenant,demand_gpus\n" + "".join(f"{60 * i},a,1\n" for i in range(9)))
    return {"jobs": jobs, "demand": demand, "gone": tmp_path / "gone.csv"}


CASES = {
    "evaluate jobs-csv": (["evaluate", "--trace", "{gone}", "--format", "jobs-csv"], "file"),
    "evaluate demand-csv": (
        ["evaluate", "--trace", "{gone}", "--format", "demand-csv"],
        "file or folder",
    ),
    "evaluate --warm-start": (
        [
            "evaluate",
            "--trace",
            "{demand}",
            "--format",
            "demand-csv",
            "--no-plots",
            "--models",
            "dprobe-mmoe",
            "--warm-start",
            "{gone}",
        ],
        "file",
    ),
    "replay jobs-csv": (["replay", "{gone}", "--format", "jobs-csv"], "file"),
    "replay demand-csv": (["replay", "{gone}", "--format", "demand-csv"], "file or folder"),
    "simulate --jobs": (["simulate", "--jobs", "{gone}"], "file"),
    "simulate --vcs": (["simulate", "--jobs", "{jobs}", "--vcs", "{gone}"], "file"),
    "simulate --colocate": (
        ["simulate", "--jobs", "{jobs}", "--nodes", "2", "--colocate", "{gone}"],
        "file",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_missing_input_says_no_such_file(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    paths = _inputs(tmp_path)
    argv, what = CASES[case]
    given = [a.format(**paths) for a in argv]
    code = main(["--bootstrap", "127.0.0.1:1", *given])
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    (line,) = err.splitlines()
    assert line.endswith(f"{paths['gone']}: no such {what}"), line

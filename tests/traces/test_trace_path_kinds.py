"""A trace path that exists but is neither a regular file nor a folder (a named pipe, a
device) is named for what it is, not as missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dprobe.cli import main


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "--trace", "{path}", "--format", "demand-csv", "--no-plots"],
        ["evaluate", "--trace", "{path}", "--format", "helios-vc", "--no-plots"],
        ["replay", "{path}", "--format", "demand-csv"],
        ["replay", "{path}", "--format", "dprobe-parquet"],
    ],
    ids=["evaluate-demand", "evaluate-helios", "replay-demand", "replay-archive"],
)
def test_a_named_pipe_is_not_called_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    pipe = tmp_path / "trace.csv"
    os.mkfifo(pipe)
    code = main(["--bootstrap", "127.0.0.1:1", *(a.format(path=pipe) for a in argv)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    (line,) = err.splitlines()
    assert line.endswith(f"{pipe}: not a regular file or folder"), line


def test_a_missing_path_is_still_said_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = tmp_path / "gone.csv"
    assert main(["evaluate", "--trace", str(gone), "--format", "demand-csv"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"dprobe evaluate: {gone}: no such file or folder"
    ]

"""``dprobe collect --output FILE`` whose backend cannot start leaves no empty FILE behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.cli import main
from tests.nvidia_driver import has_nvidia_driver


def test_output_without_a_driver_exits_2_and_creates_no_file(capsys, tmp_path: Path) -> None:
    if has_nvidia_driver():
        pytest.skip("this machine has an NVIDIA driver")
    out = tmp_path / "snaps.jsonl"
    assert main(["collect", "--backend", "nvml", "--output", str(out), "--max-ticks", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nvml backend unavailable" in err[0]
    assert not out.exists()  # an empty file would read as a run that saw no snapshot


def test_output_appends_to_a_file_that_exists(tmp_path: Path) -> None:
    out = tmp_path / "snaps.jsonl"
    out.write_text('{"kept": true}\n')
    argv = ["collect", "--backend", "synthetic", "--interval", "0.05", "--output", str(out)]
    assert main([*argv, "--max-ticks", "2"]) == 0
    lines = out.read_text().splitlines()
    assert lines[0] == '{"kept": true}' and len(lines) == 3

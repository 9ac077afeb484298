"""``dprobe collect --output`` writes one snapshot per line; the prepared real-GPU check
(``scripts/gpu_check.py``) reports, and passes on a machine with a GPU."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dprobe.cli import main
from dprobe.schema import decode_snapshot

ROOT = Path(__file__).resolve().parents[2]


def test_output_writes_one_valid_snapshot_per_line(tmp_path: Path) -> None:
    out = tmp_path / "snaps.jsonl"
    argv = ["collect", "--backend", "synthetic", "--tenants", "3", "--interval", "0.05"]
    assert main([*argv, "--max-ticks", "4", "--output", str(out), "--host-id", "h1"]) == 0
    snaps = [decode_snapshot(line) for line in out.read_bytes().splitlines()]
    assert [s.seq for s in snaps] == [0, 1, 2, 3]
    assert {s.host for s in snaps} == {"h1"}
    assert all(b.ts > a.ts for a, b in itertools.pairwise(snaps))
    assert all(s.procs for s in snaps)


def test_output_to_an_unwritable_path_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "no-such-dir" / "x.jsonl"
    assert (
        main(["collect", "--backend", "synthetic", "--output", str(bad), "--max-ticks", "1"]) == 2
    )
    assert capsys.readouterr().err.strip().count("\n") == 0


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_output_that_cannot_be_written_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A full disk (here /dev/full) while writing --output: one line naming it, no traceback."""
    argv = ["collect", "--backend", "synthetic", "--output", "/dev/full", "--max-ticks", "1"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert "--output /dev/full" in err and "No space left on device" in err


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def test_gpu_check_without_a_gpu_says_so_in_its_report(tmp_path: Path) -> None:
    if _cuda():
        pytest.skip("this machine has a GPU: the gpu-marked test runs the check")
    report = tmp_path / "report.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--report", str(report)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "no usable GPU" in json.loads(report.read_text())["error"]


@pytest.mark.gpu
def test_gpu_check_passes_on_a_real_gpu(tmp_path: Path) -> None:
    if not _cuda():
        pytest.skip("no CUDA device here")
    report = tmp_path / "report.json"
    dprobe = str(Path(sys.executable).parent / "dprobe")
    argv = [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--report", str(report)]
    run = subprocess.run(
        [*argv, "--dprobe", dprobe], check=False, capture_output=True, text=True, timeout=300
    )
    result = json.loads(report.read_text())
    assert run.returncode == 0, result
    assert result["passed"] and result["snapshots"] >= 25


def test_output_skips_a_slow_tick_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retriable backend error (a read that timed out, a busy driver) costs one tick, not
    the run; a fatal one ends it with exit 2."""
    from dprobe.collectors.errors import BackendError
    from dprobe.collectors.synthetic import SyntheticBackend

    real = SyntheticBackend.read
    calls = itertools.count()
    fatal_at: list[int] = []

    async def flaky(self: SyntheticBackend) -> object:
        n = next(calls)
        if n == 1:
            raise BackendError("read took longer than 5 s", kind="timeout", retriable=True)
        if n in fatal_at:
            raise BackendError("driver gone", kind="no_driver", retriable=False)
        return await real(self)

    monkeypatch.setattr(SyntheticBackend, "read", flaky)
    out = tmp_path / "snaps.jsonl"
    argv = ["collect", "--backend", "synthetic", "--interval", "0.02", "--output", str(out)]
    assert main([*argv, "--max-ticks", "3"]) == 0
    assert [decode_snapshot(line).seq for line in out.read_bytes().splitlines()] == [0, 1, 2]
    assert "tick skipped: read took longer than 5 s" in capsys.readouterr().err
    calls, fatal_at[:] = itertools.count(), [2]
    assert main([*argv, "--max-ticks", "3"]) == 2
    assert "backend unavailable: driver gone" in capsys.readouterr().err

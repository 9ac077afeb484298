"""``--speed`` and ``[replay] speed`` at their extremes: as fast as possible, or exit 2 with
the bound, never a replay that sleeps for ever between two records."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dprobe.commands.replay import _speed
from dprobe.config import MIN_REPLAY_SPEED, ConfigError, ReplaySettings


def _replay(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    import os

    trace = tmp_path / "d.csv"
    trace.write_text("ts,tenant,demand_gpus\n0,a,1\n60,a,1\n")
    return subprocess.run(
        [sys.executable, "-m", "dprobe.cli", "--bootstrap", "127.0.0.1:1", "replay", str(trace),
         "--format", "demand-csv", "--no-progress", *args],
        capture_output=True, text=True, timeout=60, check=False, env={**os.environ, **(env or {})},
    )  # fmt: skip


@pytest.mark.parametrize("speed", ["1e-300", "5e-324", str(MIN_REPLAY_SPEED / 2)])
def test_a_speed_too_slow_to_finish_exits_2_naming_the_bound(tmp_path: Path, speed: str) -> None:
    done = _replay(tmp_path, "--speed", speed)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"--speed: must be 0 or 'max', or at least {MIN_REPLAY_SPEED:g}" in done.stderr


def test_a_setting_too_slow_exits_2_naming_the_setting(tmp_path: Path) -> None:
    done = _replay(tmp_path, env={"DPROBE_REPLAY_SPEED": "1e-300"})
    assert done.returncode == 2, done.stderr
    assert f"replay.speed must be 0 or 'max', or at least {MIN_REPLAY_SPEED:g}" in done.stderr


@pytest.mark.parametrize("speed", [MIN_REPLAY_SPEED / 2, float("nan"), -1.0])
def test_settings_refuse_a_speed_out_of_range(speed: float) -> None:
    with pytest.raises(ConfigError, match=r"replay\.speed must be"):
        ReplaySettings(speed=speed)


def test_the_slowest_and_an_infinite_speed_are_taken() -> None:
    assert ReplaySettings(speed=MIN_REPLAY_SPEED).speed == MIN_REPLAY_SPEED
    # a number too large for a float is infinite, as fast as possible like 'inf' and 'max'
    assert _speed("1e400") == _speed("inf") == _speed("max") == 0.0
    assert _speed("1e300") == 1e300

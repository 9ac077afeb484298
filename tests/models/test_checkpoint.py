"""Checkpoints are data: a file that would run code is refused, a corrupt one named."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from dprobe.errors import UsageError
from dprobe.models.checkpoint import CheckpointError, load_state, save_state
from dprobe.models.forecast.baselines import LastValue
from dprobe.models.plan_loop import PlanLoop
from dprobe.schema import TenantWindow
from tests.models.windows import demand_window

RAN: list[str] = []


class _RunsCode:
    """Unpickling this calls RAN.append: what a crafted checkpoint would do."""

    def __reduce__(self):
        return (RAN.append, ("ran",))


def _loop() -> PlanLoop:
    return PlanLoop(LastValue())


def _windows(end: float, demand: dict[str, float]) -> list[TenantWindow]:
    return [demand_window(t, end, running=d) for t, d in demand.items()]


def test_a_plan_loop_checkpoint_round_trips(tmp_path: Path) -> None:
    """A loop that has learned and planned (quotas moved, forecasts outstanding, planner
    history) is restored whole from its file and plans the next end as the original."""
    loop = _loop()
    for k in range(1, 6):  # vc-a grows, vc-b's demand vanishes: quota moves to vc-a
        loop.plan_end(60.0 * k, _windows(60.0 * k, {"vc-a": 8.0 * k, "vc-b": 0.0}))
    state = loop.state_dict()
    assert state != _loop().state_dict()  # there is something to restore
    assert loop.quotas()["vc-a"] > loop.quotas()["vc-b"]
    path = tmp_path / "plan-loop.ckpt"
    loop.save(path)
    again = _loop()
    assert again.load(path)
    assert again.state_dict() == state
    assert again.quotas() == loop.quotas() and again.planned_upto == loop.planned_upto
    nxt = _windows(360.0, {"vc-a": 48.0, "vc-b": 0.0})
    assert again.plan_end(360.0, nxt) == loop.plan_end(360.0, nxt)
    assert not _loop().load(tmp_path / "missing.ckpt")


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path: Path) -> None:
    buf = io.BytesIO()
    torch.save({"quotas": _RunsCode()}, buf)
    path = tmp_path / "plan-loop.ckpt"
    path.write_bytes(buf.getvalue())
    with pytest.raises(CheckpointError, match="not run"):
        _loop().load(path)
    assert RAN == []


@pytest.mark.parametrize("content", [b"", b"junk", b"PK\x03\x04 cut"])
def test_a_corrupt_checkpoint_is_one_line_naming_the_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "state.ckpt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        load_state(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert isinstance(info.value, UsageError) and info.value.exit_code == 2


def test_save_is_atomic_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.ckpt"
    save_state({"a": [1, 2]}, path)
    save_state({"a": [3]}, path)
    assert load_state(path) == {"a": [3]}
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.ckpt"]


def test_a_checkpoint_of_other_settings_leaves_the_loop_as_it_was(tmp_path: Path) -> None:
    from dprobe.models.forecast.multitask import MultiTaskForecaster

    path = tmp_path / "plan-loop.ckpt"
    PlanLoop(MultiTaskForecaster(k_lags=3)).save(path)
    loop = PlanLoop(MultiTaskForecaster(k_lags=4))
    before = loop.state_dict()
    with pytest.raises(CheckpointError, match="does not fit"):
        loop.load(path)
    after = loop.state_dict()
    assert after.keys() == before.keys()
    assert after["planned_upto"] == before["planned_upto"]
    assert loop.forecaster.forecast("vc-a", [600.0]) == {600.0: (0.0, 0.0)}


def test_a_checkpoint_of_other_settings_says_what_does_not_fit(tmp_path: Path) -> None:
    """torch's message starts with a line that only announces the list of mismatches;
    the one-line reason carries the first of them, not a dangling colon."""
    from dprobe.models.forecast.multitask import (
        MultiTaskForecaster,
        load_checkpoint,
        save_checkpoint,
    )

    path = tmp_path / "mmoe.ckpt"
    save_checkpoint(MultiTaskForecaster(k_lags=3), path)
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(MultiTaskForecaster(k_lags=4), path)
    message = str(caught.value)
    assert "not a checkpoint of this model" in message
    assert "size mismatch for" in message
    assert ":)" not in message
    assert "\n" not in message

"""One conformance test over every forecaster of the registry (the river habit): the
contract's invariants, for every name the worker, the simulator and evaluate accept, each
plain and wrapped in the online p90 calibration and the paying gate (what they run by
default)."""

from __future__ import annotations

import copy
import io
import json
import math
import random

import pytest
import torch

from dprobe.models.forecast.base import Forecaster, forget
from dprobe.models.forecast.multitask import MultiTaskForecaster
from dprobe.models.forecast.registry import ALIASES, FORECASTERS, MMOE, MMOE_JOBS, canonical_name
from dprobe.schema import LevelCounts, TenantWindow

from .forecast_cases import SMALL_SETTINGS, STEP, small, wave, win

HORIZONS = [600.0, 1800.0, 3600.0, 7200.0]
NAMES = sorted(FORECASTERS)
CASES = [
    pytest.param(name, calibrated, id=f"{name}{'+calibrated' if calibrated else ''}")
    for name in NAMES
    for calibrated in (False, True)
]


def test_small_settings_name_only_registered_forecasters() -> None:
    assert set(SMALL_SETTINGS) <= set(FORECASTERS)


def test_aliases_resolve_to_registered_names() -> None:
    assert all(canonical_name(alias) == name for alias, name in ALIASES.items())
    assert all(name in FORECASTERS for name in ALIASES.values())
    with pytest.raises(ValueError, match="unknown forecaster"):
        canonical_name("no-such-model")


def _stream(n: int = 120) -> list:
    a = list(wave("vc-a", n))
    b = list(wave("vc-b", n, base=8.0, amp=4.0))
    return [w for pair in zip(a, b, strict=True) for w in pair]


def _check_forecast(fc: dict, horizons: list[float]) -> None:
    assert list(fc) == horizons
    for p50, p90 in fc.values():
        assert math.isfinite(p50) and math.isfinite(p90)
        assert 0.0 <= p50 <= p90


def _roundtrip(state: dict) -> dict:
    """Through bytes, as a checkpoint would go (safe torch loading)."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


@pytest.mark.parametrize(("name", "calibrated"), CASES)
def test_follows_the_protocol(name: str, calibrated: bool) -> None:
    m = small(name, calibrated=calibrated)
    assert isinstance(m, Forecaster)
    assert m.name == name


@pytest.mark.parametrize(("name", "calibrated"), CASES)
def test_inputs_are_not_mutated(name: str, calibrated: bool) -> None:
    m = small(name, calibrated=calibrated)
    stream = _stream(60)
    before = copy.deepcopy(stream)
    horizons = list(HORIZONS)
    for w in stream:
        m.learn_one(w)
        m.forecast(w.tenant, horizons)
    assert stream == before
    assert horizons == HORIZONS


@pytest.mark.parametrize(("name", "calibrated"), CASES)
def test_state_round_trip_gives_identical_forecasts(name: str, calibrated: bool) -> None:
    stream = _stream(120)
    m = small(name, calibrated=calibrated)
    for w in stream[:160]:
        m.learn_one(w)
    state = _roundtrip(m.state_dict())
    m2 = small(name, calibrated=calibrated)
    m2.load_state_dict(state)
    for tenant in ("vc-a", "vc-b", "never-seen"):
        assert m2.forecast(tenant, HORIZONS) == m.forecast(tenant, HORIZONS)
    # and they keep agreeing as both learn the same future (optimizer and RNG restored)
    for w in stream[160:]:
        m.learn_one(w)
        m2.learn_one(w)
    for tenant in ("vc-a", "vc-b"):
        assert m2.forecast(tenant, HORIZONS) == m.forecast(tenant, HORIZONS)


@pytest.mark.parametrize(("name", "calibrated"), CASES)
def test_state_dict_is_a_copy(name: str, calibrated: bool) -> None:
    m = small(name, calibrated=calibrated)
    stream = _stream(60)
    for w in stream[:60]:
        m.learn_one(w)
    state = m.state_dict()
    snapshot = small(name, calibrated=calibrated)
    snapshot.load_state_dict(copy.deepcopy(state))
    expected = snapshot.forecast("vc-a", HORIZONS)
    for w in stream[60:]:
        m.learn_one(w)  # must not change the state already handed out
    again = small(name, calibrated=calibrated)
    again.load_state_dict(state)
    assert again.forecast("vc-a", HORIZONS) == expected


@pytest.mark.parametrize(("name", "calibrated"), CASES)
def test_same_seed_same_output(name: str, calibrated: bool) -> None:
    stream = _stream(100)
    a, b = small(name, calibrated=calibrated), small(name, calibrated=calibrated)
    outs = []
    for m in (a, b):
        out = []
        for w in stream:
            m.learn_one(w)
            out.append(m.forecast(w.tenant, HORIZONS))
        outs.append(out)
    assert outs[0] == outs[1]


@pytest.mark.parametrize(("name", "calibrated"), CASES)
def test_tenant_appearing_mid_stream(name: str, calibrated: bool) -> None:
    m = small(name, calibrated=calibrated)
    _check_forecast(m.forecast("vc-new", HORIZONS), HORIZONS)  # before anything is learned
    for w in wave("vc-a", 80):
        m.learn_one(w)
    _check_forecast(m.forecast("vc-new", HORIZONS), HORIZONS)
    late = [win("vc-new", n, 20.0) for n in range(80, 90)]
    for w in late:
        m.learn_one(w)
    fc = m.forecast("vc-new", HORIZONS)
    _check_forecast(fc, HORIZONS)
    # a flat 20-GPU tenant: the first horizon stays near 20 (baselines exactly)
    assert fc[600.0][0] == pytest.approx(20.0, rel=0.25)


@pytest.mark.parametrize(("name", "calibrated"), CASES)
def test_a_forgotten_tenant_is_new_and_the_others_are_untouched(
    name: str, calibrated: bool
) -> None:
    m = small(name, calibrated=calibrated)
    for w in _stream(120):
        m.learn_one(w)
    kept = small(name, calibrated=calibrated)
    kept.load_state_dict(_roundtrip(m.state_dict()))
    size = len(json.dumps(m.state_dict(), default=lambda v: repr(v.tolist())))
    assert forget(m, "vc-a")
    assert len(json.dumps(m.state_dict(), default=lambda v: repr(v.tolist()))) < size
    assert m.forecast("vc-b", HORIZONS) == kept.forecast("vc-b", HORIZONS)
    assert m.forecast("vc-a", HORIZONS) == m.forecast("vc-never-seen", HORIZONS)
    assert kept.forecast("vc-a", HORIZONS) != m.forecast("vc-a", HORIZONS)
    for n in range(120, 140):  # it comes back at a new level: learned afresh
        m.learn_one(win("vc-a", n, 30.0))
    fc = m.forecast("vc-a", HORIZONS)
    _check_forecast(fc, HORIZONS)
    assert fc[600.0][0] == pytest.approx(30.0, rel=0.25)


@pytest.mark.parametrize(("name", "calibrated"), CASES)
def test_missing_windows_are_tolerated(name: str, calibrated: bool) -> None:
    m = small(name, calibrated=calibrated)
    rng = random.Random(7)
    kept = [n for n in range(200) if rng.random() > 0.3 and not 90 <= n < 110]
    for n in kept:
        m.learn_one(win("vc-a", n, 12.0))
    fc = m.forecast("vc-a", HORIZONS)
    _check_forecast(fc, HORIZONS)
    assert fc[600.0][0] == pytest.approx(12.0, rel=0.1)


@pytest.mark.parametrize(("name", "calibrated"), CASES)
def test_late_and_repeated_windows_do_not_break_it(name: str, calibrated: bool) -> None:
    m = small(name, calibrated=calibrated)
    for n in range(20):
        m.learn_one(win("vc-a", n, 10.0))
    before = m.forecast("vc-a", HORIZONS)
    m.learn_one(win("vc-a", 5, 999.0))  # late
    m.learn_one(win("vc-a", 19, 999.0))  # repeated
    assert m.forecast("vc-a", HORIZONS) == before


@pytest.mark.parametrize(("name", "calibrated"), CASES)
def test_accepts_real_tenant_windows(name: str, calibrated: bool) -> None:
    m = small(name, calibrated=calibrated)
    for n in range(10):
        m.learn_one(
            TenantWindow(
                tenant="vc-a",
                window_start=n * STEP,
                window_end=(n + 1) * STEP,
                hosts=2,
                gpus_busy=12.0,
                instances=3.0,
                util_sum=150.0,
                level_counts=LevelCounts(L2=3),
                effective_demand_gpus=9.0,
                pending_gpus=4.0,
                running_gpus=12.0,
                quota_gpus=16.0,
            )
        )
    p50, _ = m.forecast("vc-a", [600.0])[600.0]
    assert p50 == pytest.approx(16.0, rel=0.1)  # demand = running + pending


@pytest.mark.parametrize(
    ("name", "calibrated"), [c for c in CASES if c.values[0] not in (MMOE, MMOE_JOBS)]
)
def test_baseline_state_is_json(name: str, calibrated: bool) -> None:
    m = small(name, calibrated=calibrated)
    for w in _stream(30):
        m.learn_one(w)
    state = json.loads(json.dumps(m.state_dict()))
    m2 = small(name, calibrated=calibrated)
    m2.load_state_dict(state)
    assert m2.forecast("vc-a", HORIZONS) == m.forecast("vc-a", HORIZONS)


def test_mmoe_checkpoint_file_warm_start(tmp_path) -> None:
    from dprobe.models.checkpoint import CheckpointError
    from dprobe.models.forecast.multitask import load_checkpoint, save_checkpoint

    from .forecast_cases import small_mmoe

    m = small_mmoe()
    for w in _stream(80):
        m.learn_one(w)
    save_checkpoint(m, tmp_path / "ckpt.pt")
    warm = small_mmoe()
    load_checkpoint(warm, tmp_path / "ckpt.pt")
    assert warm.forecast("vc-b", HORIZONS) == m.forecast("vc-b", HORIZONS)
    other = MultiTaskForecaster(k_lags=3)  # other settings: the checkpoint does not fit
    with pytest.raises(CheckpointError, match="not a checkpoint of this model"):
        load_checkpoint(other, tmp_path / "ckpt.pt")
    assert other.tenants() == []  # left fresh


def test_mmoe_checkpoint_into_the_job_model_is_a_checkpoint_error(tmp_path) -> None:
    from dprobe.models.checkpoint import CheckpointError
    from dprobe.models.forecast.multitask import load_checkpoint, save_checkpoint

    from .forecast_cases import small_mmoe

    m = small_mmoe()
    for w in _stream(30):
        m.learn_one(w)
    save_checkpoint(m, tmp_path / "ckpt.pt")
    jobs = small(MMOE_JOBS)  # more inputs: the saved weights do not fit
    assert isinstance(jobs, MultiTaskForecaster)
    with pytest.raises(CheckpointError, match="not a checkpoint of this model"):
        load_checkpoint(jobs, tmp_path / "ckpt.pt")
    assert jobs.tenants() == [] and jobs.name == MMOE_JOBS and jobs.job_inputs  # left fresh


@pytest.mark.parametrize(("name", "calibrated"), CASES)
def test_window_length_is_inferred_when_windows_do_not_state_it(
    name: str, calibrated: bool
) -> None:
    from types import SimpleNamespace

    m = small(name, calibrated=calibrated)
    ends = [300.0 * i for i in range(1, 40)]
    for i, end in enumerate(ends):
        m.learn_one(
            SimpleNamespace(tenant="a", window_end=end, running_gpus=10.0 + i % 2, pending_gpus=0.0)
        )
        if i == 0:
            assert m.forecast("a", [300.0]) == {300.0: (0.0, 0.0)}  # waits for a second window
    fc = m.forecast("a", [300.0, 3600.0])
    _check_forecast(fc, [300.0, 3600.0])
    assert 9.0 <= fc[300.0][0] <= 12.0
    state = _roundtrip(m.state_dict())
    again = small(name, calibrated=calibrated)
    again.load_state_dict(state)
    assert again.forecast("a", [300.0]) == m.forecast("a", [300.0])

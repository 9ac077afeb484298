"""The multi-task MMoE forecaster: it learns, new tenants start warm, horizons interpolate."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dprobe.models.forecast.baselines import LastValue
from dprobe.models.forecast.evaluation import rolling_origin
from dprobe.models.forecast.mmoe_net import MMoENet, pinball
from dprobe.models.forecast.multitask import MultiTaskForecaster

from .forecast_cases import STEP, win


def _square(tenant: str, n: int, lo: float, hi: float, half: int = 6) -> list:
    """Demand that flips between lo and hi every ``half`` windows: last value is always
    wrong one period-half ahead, while the past windows say exactly what comes next."""
    return [win(tenant, i, hi if (i // half) % 2 else lo) for i in range(n)]


def _model(**kw) -> MultiTaskForecaster:
    base = {
        "horizons_s": (STEP, 6 * STEP),
        "k_lags": 12,
        "expert_hidden": 32,
        "expert_out": 16,
        "tower_hidden": 16,
        "batch_size": 64,
        "min_rows": 64,
        "train_every": 2,
        "buffer_size": 2000,
        "lr": 3e-3,
        "seed": 0,
    }
    base.update(kw)
    return MultiTaskForecaster(**base)


def test_pinball_matches_its_definition() -> None:
    pred = torch.tensor([1.0, 3.0])
    target = torch.tensor([2.0, 2.0])
    mask = torch.ones(2)
    # under by 1 costs q, over by 1 costs 1 - q
    assert pinball(pred, target, 0.9, mask).item() == pytest.approx((0.9 + 0.1) / 2)


def test_net_starts_as_same_as_now_with_ordered_quantiles() -> None:
    net = MMoENet(n_features=5, n_horizons=2, n_tenant_slots=3)
    q, trend = net(torch.randn(4, 5), torch.tensor([0, 1, 2, 0]))
    assert torch.all(q[:, :, 0] == 0)  # zero-initialised towers: no change predicted
    assert torch.all(q[:, :, 1] > q[:, :, 0])
    assert trend.shape == (4, 2, 3)


def test_learns_a_predictable_pattern_and_beats_last_value() -> None:
    windows = _square("vc-a", 700, 10.0, 40.0)
    res = rolling_origin(
        windows, [LastValue(), _model()], [6 * STEP], test_start=windows[550].window_end
    )
    mase = {r.model: r.mase for r in res.rows}
    assert mase["last-value"] == 1.0
    assert mase["dprobe-mmoe"] < 0.3


def test_new_tenant_starts_from_the_generic_embedding() -> None:
    m = _model()
    for w in _square("vc-a", 300, 10.0, 40.0):
        m.learn_one(w)
    m.learn_one(win("vc-new", 300, 10.0))
    emb = m._ema.embed.weight
    slot = m._slots["vc-new"]
    assert torch.equal(emb[slot], emb[0])
    assert not torch.equal(emb[m._slots["vc-a"]], emb[0])


def test_generic_knowledge_transfers_to_a_new_tenant() -> None:
    m = _model()
    for w in _square("vc-a", 700, 10.0, 40.0):
        m.learn_one(w)
    # the same pattern, twice the size, in a tenant the model has never seen
    for w in _square("vc-b", 30, 20.0, 80.0):
        m.learn_one(w)
    # after 30 windows vc-b ends a "low" half (20 GPUs): one hour ahead it is high (80);
    # last value would say 20
    p50, _ = m.forecast("vc-b", [6 * STEP])[6 * STEP]
    assert abs(p50 - 80.0) < abs(p50 - 20.0)


def test_horizons_between_heads_are_interpolated() -> None:
    """Linearly: 3.5 windows is half-way between the heads at 1 and 6 windows, half a
    window half-way between the demand now and the first head (both quantiles)."""
    m = _model(gate_changes=False)
    windows = _square("vc-a", 400, 10.0, 40.0)
    for w in windows:
        m.learn_one(w)
    fc = m.forecast("vc-a", [STEP / 2, STEP, 3.5 * STEP, 6 * STEP, 60 * STEP])
    assert abs(fc[6 * STEP][0] - fc[STEP][0]) > 1.0  # the heads differ: a real check
    now = windows[-1].running_gpus + windows[-1].pending_gpus
    for q in (0, 1):
        assert fc[3.5 * STEP][q] == pytest.approx((fc[STEP][q] + fc[6 * STEP][q]) / 2)
        assert fc[STEP / 2][q] == pytest.approx((now + fc[STEP][q]) / 2)
    assert fc[60 * STEP] == fc[6 * STEP]  # beyond the last head: the last head


def test_gate_keeps_p50_at_now_when_flat_is_likely() -> None:
    m = _model()
    for i in range(300):
        m.learn_one(win("vc-a", i, 16.0))
    probs = m.trend("vc-a")
    assert all(p["flat"] > 0.5 for p in probs.values())
    assert all(p50 == 16.0 for p50, _ in m.forecast("vc-a", [STEP, 6 * STEP]).values())


def test_settings_are_kept_verbatim_and_validated() -> None:
    horizons = [600, 3600]
    m = MultiTaskForecaster(horizons_s=horizons, k_lags=5, seed=3)
    assert m.horizons_s is horizons and (m.k_lags, m.seed) == (5, 3)
    assert "k_lags=5" in repr(m)
    with pytest.raises(ValueError, match="increasing"):
        MultiTaskForecaster(horizons_s=(3600, 600))
    with pytest.raises(ValueError, match="positive"):
        MultiTaskForecaster(horizons_s=(0,))


def test_uses_one_thread() -> None:
    # from more than one thread: whatever an earlier model or the environment set, the
    # model itself must bring torch down to one
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        MultiTaskForecaster()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_memory_per_tenant_is_bounded() -> None:
    m = _model(min_rows=10**9, buffer_size=500)  # no training needed here
    for i in range(2000):
        m.learn_one(win("vc-a", i, float(i % 7)))
    hist = m._hist["vc-a"]
    assert hist.length < 200  # one day of 10-minute windows plus slack
    assert len(m._origins["vc-a"]) <= 7  # origins wait only for the longest horizon
    # ~2,000 rows matured (one per window): the replay buffer keeps only the newest 500
    assert len(m._buffer) == 500
    assert len(m.state_dict()["buffer"]["x"]) == 500
    assert np.isfinite(m.forecast("vc-a", [STEP])[STEP][0])


def _minute_steps(tenant: str, n_windows: int, seed: int, mean_run_min: float = 240.0) -> list:
    """Whole-GPU demand that jumps to a new level at random minutes and stays there for
    hours, averaged into 10-minute windows: a window holding a jump has a mean between
    the old and the new level, so the level at its end lies beyond its mean."""
    rng = np.random.default_rng(seed)
    level, minutes = 40, []
    while len(minutes) < 10 * n_windows:
        minutes += [level] * max(int(rng.exponential(mean_run_min)), 1)
        level = int(np.clip(level + rng.choice([-1, 1]) * rng.integers(4, 16), 4, 120))
    per_window = np.asarray(minutes[: 10 * n_windows], dtype=float).reshape(n_windows, 10)
    return [win(tenant, i, float(v)) for i, v in enumerate(per_window.mean(axis=1))]


def _random_walk(tenant: str, n_windows: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    y = 200 + np.cumsum(rng.integers(-6, 7, size=n_windows))
    return [win(tenant, i, float(max(v, 0))) for i, v in enumerate(y)]


@pytest.mark.slow  # trains on 2,400 windows, twice
def test_combination_shrinks_the_network_on_a_random_walk() -> None:
    # ungated and trained hard, the network forecasts noise; on a random walk no change
    # is the best forecast, and the combination learns to drop the network's change
    m = _model(gate_changes=False, lr=1e-2, combine_min_rows=50, combine_halflife=300.0)
    windows = _random_walk("vc-a", 1200, seed=1) + _random_walk("vc-b", 1200, seed=2)
    windows.sort(key=lambda w: (w.window_end, w.tenant))
    start = windows[1600].window_end
    res = rolling_origin(windows, [LastValue(), m], [STEP, 6 * STEP], test_start=start)
    weights = m.combination()
    assert all(w["model"] <= 0.25 for w in weights.values())
    assert all(w["step"] == 0.0 for w in weights.values())  # whole windows: no steps inside
    mase = {(r.model, r.horizon_s): r.mase for r in res.rows}
    assert mase[("dprobe-mmoe", 6 * STEP)] < 1.01
    plain = _model(gate_changes=False, lr=1e-2, combine=False)  # the network alone
    res_plain = rolling_origin(windows, [LastValue(), plain], [6 * STEP], test_start=start)
    assert mase[("dprobe-mmoe", 6 * STEP)] < {r.model: r.mase for r in res_plain.rows}[plain.name]


@pytest.mark.slow  # trains on 1,500 windows, twice
def test_combination_continues_a_step_inside_the_newest_window() -> None:
    windows = _minute_steps("vc-a", 1500, seed=3)
    m = _model(combine_min_rows=50)
    res = rolling_origin(windows, [LastValue(), m], [STEP], test_start=windows[1000].window_end)
    assert m.combination()[STEP]["step"] > 0.0
    mase = {r.model: r.mase for r in res.rows}
    assert mase["dprobe-mmoe"] < 0.98
    alone = _model(combine=False)  # the same network without the combination
    res = rolling_origin(windows, [LastValue(), alone], [STEP], test_start=windows[1000].window_end)
    assert mase["dprobe-mmoe"] < {r.model: r.mase for r in res.rows}[alone.name]


def test_combination_starts_as_the_network_alone() -> None:
    m = _model(gate_changes=False, combine_min_rows=10**9)
    for w in _square("vc-a", 300, 10.0, 40.0):
        m.learn_one(w)
    off = _model(gate_changes=False, combine=False)
    for w in _square("vc-a", 300, 10.0, 40.0):
        off.learn_one(w)
    assert m.combination() == {
        STEP: {"model": 1.0, "step": 0.0},
        6 * STEP: {"model": 1.0, "step": 0.0},
    }
    assert m.forecast("vc-a", [STEP, 6 * STEP]) == off.forecast("vc-a", [STEP, 6 * STEP])


def test_combination_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="empty"):
        MultiTaskForecaster(combine_step_weights=())
    with pytest.raises(ValueError, match="halflife"):
        MultiTaskForecaster(combine_halflife=0.0)


@pytest.mark.parametrize("field", ["pending", "quota"])
def test_a_nan_input_of_one_tenant_cannot_poison_the_others(field: str) -> None:
    m = _model()
    for a, b in zip(_square("vc-a", 200, 10.0, 40.0), _square("vc-b", 200, 5.0, 20.0), strict=True):
        m.learn_one(a)
        m.learn_one(b)
    bad = win("vc-a", 200, 10.0, **{field: float("nan")})
    m.learn_one(bad)
    for i in range(201, 260):  # training goes on with the NaN window in its history
        m.learn_one(win("vc-a", i, 10.0))
        m.learn_one(win("vc-b", i, 5.0))
    for tenant in ("vc-a", "vc-b"):
        out = m.forecast(tenant, [STEP, 6 * STEP])
        assert all(np.isfinite(v) for pair in out.values() for v in pair), (tenant, out)
    assert all(torch.isfinite(p).all() for p in m._ema.parameters())


def test_a_forgotten_tenants_slot_goes_to_the_next_new_tenant() -> None:
    """Two slots: with both held, a third tenant shares one by hash; once vc-a is
    forgotten, vc-c gets vc-a's slot, started from the generic embedding, and vc-a's rows
    in the replay buffer train the generic embedding instead."""
    from .forecast_cases import SMALL_SETTINGS

    def model() -> MultiTaskForecaster:
        return MultiTaskForecaster(max_tenants=2, seed=0, **SMALL_SETTINGS["dprobe-mmoe"])

    m, kept = model(), model()
    for n in range(60):
        for f in (m, kept):
            f.learn_one(win("vc-a", n, 10.0 + n % 3))
            f.learn_one(win("vc-b", n, 4.0))
    slot_a = m.state_dict()["slots"]["vc-a"]
    assert (m._buffer.tenant[: len(m._buffer)] == slot_a).any()
    m.forget("vc-a")
    assert not (m._buffer.tenant[: len(m._buffer)] == slot_a).any()
    generic = m._net.embed.weight[0].detach().clone()
    m.learn_one(win("vc-c", 60, 7.0))
    kept.learn_one(win("vc-c", 60, 7.0))
    assert m.state_dict()["slots"] == {"vc-b": 3 - slot_a, "vc-c": slot_a}
    assert torch.equal(m._net.embed.weight[slot_a], generic)
    assert kept.state_dict()["slots"]["vc-c"] in (1, 2)  # shared with vc-a or vc-b
    assert set(kept.state_dict()["slots"]) == {"vc-a", "vc-b", "vc-c"}

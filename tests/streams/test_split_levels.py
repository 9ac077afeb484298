"""split_snapshot levels each process with the rules of ``dprobe.models.levels.classify``
(bound once per settings, since it runs for every process sample)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dprobe.models.levels import LEVELS, LevelSettings, classify
from dprobe.streams.state.window_agg import _levels

EDGES = [0.0, 1.0, 24.999, 25.0, 25.001, 69.999, 70.0, 70.001, 100.0]
MEM = [0.0, 1e9, 3e9 - 1, 3e9, 3e9 + 1, 72e9 - 1, 72e9, 72e9 + 1, 80e9]
utils = st.one_of(st.sampled_from(EDGES), st.floats(0.0, 100.0))
mems = st.one_of(st.sampled_from(MEM), st.floats(0.0, 1e11))
settings = st.one_of(
    st.just(LevelSettings()),
    st.builds(
        LevelSettings,
        l1_max_util_pct=st.floats(0.0, 100.0),
        l1_max_mem_bytes=st.floats(0.0, 1e11),
        l3_min_util_pct=st.floats(0.0, 100.0),
        l3_min_sm_util_pct=st.floats(0.0, 100.0),
        ex_min_mem_frac=st.floats(0.0, 1.0),
        weight_l1=st.floats(0.0, 1.0),
    ),
)


@given(settings, utils, utils, mems, st.one_of(st.just(0.0), st.sampled_from(MEM), mems))
def test_the_bound_rules_level_like_classify(
    lv: LevelSettings, gpu_util: float, sm_util: float, mem_used: float, mem_total: float
) -> None:
    level_of, weights = _levels(lv)
    expected = classify(
        lv,
        gpu_util=gpu_util,
        sm_util=sm_util,
        mem_used_bytes=mem_used,
        mem_total_bytes=mem_total,
    )
    i = level_of(gpu_util, sm_util, mem_used, mem_total)
    assert LEVELS[i] == expected
    assert weights[i] == lv.weight(expected)

"""Job profiler and profile tables: schema, levels from attributes/metrics, LOFO."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from dprobe.models.levels import LevelSettings
from dprobe.models.profiler import JobProfiler
from dprobe.models.profiler_eval import leave_one_family_out, leave_one_row_out
from dprobe.models.profiles import (
    Profile,
    ProfileTableError,
    load_profiles,
    parse_profiles,
    shipped_profiles,
)

LUCID_SHAPED = """model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,label
Toy,Synthetic,32,0,10.0,20.0,5.0,1500.0,0
Toy,Synthetic,128,1,12.0,80.0,40.0,6000.0,2
"""


def _p(family: str, batch: int, util: float, mem: float = 2000.0, amp: bool = False, params=None):
    return Profile(family, batch, amp, util, mem, params_m=params)


def test_reads_lucid_shape_and_maps_columns() -> None:
    rows = parse_profiles(LUCID_SHAPED, source="t.csv")
    assert rows[1] == Profile("Toy", 128, True, 80.0, 6000.0, None, None, 40.0)


def test_reads_dprobe_schema_with_comments() -> None:
    text = (
        "# a comment\nfamily,batch_size,amp,gpu_util_pct,gpu_mem_mb,params_m\n"
        "X,64,true,55,3000,12.5\n"
    )
    assert parse_profiles(text) == [Profile("X", 64, True, 55.0, 3000.0, 12.5)]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("X,64,0,abc,3000", "t.csv:3: gpu_util_pct: not a number"),
        ("X,64,0,150,3000", "t.csv:3: gpu_util_pct: 150 outside"),
        ("X,64,maybe,50,3000", "t.csv:3: amp"),
        ("X,64,0", "t.csv:3: wrong number of fields"),
    ],
)
def test_bad_rows_name_file_and_line(bad: str, message: str) -> None:
    text = f"family,batch_size,amp,gpu_util_pct,gpu_mem_mb\nX,32,0,50,3000\n{bad}\n"
    with pytest.raises(ProfileTableError) as exc:
        parse_profiles(text, source="t.csv")
    assert message in str(exc.value)


def test_a_batch_size_that_is_no_whole_number_is_refused_not_truncated() -> None:
    text = "family,batch_size,amp,gpu_util_pct,gpu_mem_mb\nX,32,0,50,3000\nX,1.5,0,50,3000\n"
    with pytest.raises(ProfileTableError, match=r"t\.csv:3: batch_size: not a whole number: 1\.5"):
        parse_profiles(text, source="t.csv")
    lucid = LUCID_SHAPED.replace("Synthetic,32,", "Synthetic,32.5,")
    with pytest.raises(ProfileTableError, match=r"t\.csv:2: batchsize: not a whole number"):
        parse_profiles(lucid, source="t.csv")
    whole = "family,batch_size,amp,gpu_util_pct,gpu_mem_mb\nX,64.0,0,50,3000\n"
    assert parse_profiles(whole)[0].batch_size == 64


def test_a_table_of_a_header_alone_is_refused(tmp_path: Path) -> None:
    """No rows is no table: an accuracy "0.000 (0/0 profiles)" would be reported over it."""
    with pytest.raises(ProfileTableError, match=r"t\.csv: no profile rows"):
        parse_profiles("# only a comment\nfamily,batch_size,amp,gpu_util_pct,gpu_mem_mb\n", "t.csv")
    path = tmp_path / "single_data.csv"
    path.write_text(LUCID_SHAPED.splitlines()[0] + "\n")
    with pytest.raises(ProfileTableError, match="no profile rows"):
        load_profiles(path)


def test_unknown_header_is_refused() -> None:
    with pytest.raises(ProfileTableError, match="neither the dprobe schema"):
        parse_profiles("a,b\n1,2\n", source="t.csv")


def test_shipped_table_is_sane() -> None:
    rows = shipped_profiles()
    assert len({r.family for r in rows}) >= 10
    for r in rows:
        assert 0 <= r.gpu_util_pct <= 100 and r.gpu_mem_mb > 0 and r.params_m is not None
        assert r.gpu_util_pct % 5 == 0  # summarised (rounded) values, not raw measurements


def test_known_family_interpolates_over_log2_batch() -> None:
    prof = JobProfiler().fit([_p("X", 32, 20.0, 1000.0), _p("X", 128, 80.0, 4000.0)])
    est = prof.estimate(family="X", batch_size=64)
    assert est.source == "family"
    assert est.gpu_util_pct == pytest.approx(50.0)  # log2(64) is halfway between 5 and 7
    assert est.gpu_mem_mb == pytest.approx(2000.0)  # geometric midpoint of 1000 and 4000
    assert est.level == "L2"
    # clamped beyond the profiled range
    assert prof.estimate(family="x", batch_size=1024).gpu_util_pct == pytest.approx(80.0)


def test_known_family_levels_follow_the_thresholds() -> None:
    prof = JobProfiler().fit([_p("Small", 32, 10.0, 1000.0), _p("Big", 32, 95.0, 20000.0)])
    assert prof.estimate(family="Small", batch_size=32).level == "L1"
    assert prof.estimate(family="Big", batch_size=32).level == "L3"
    strict = JobProfiler(levels=LevelSettings(l3_min_util_pct=96.0)).fit(
        [_p("Big", 32, 95.0, 20000.0)]
    )
    assert strict.estimate(family="Big", batch_size=32).level == "L2"


def test_other_precision_is_used_when_one_was_never_profiled() -> None:
    prof = JobProfiler().fit([_p("X", 32, 90.0, 9000.0, amp=False)])
    assert prof.estimate(family="X", batch_size=32, amp=True).gpu_util_pct == 90.0


def test_unseen_family_uses_the_learned_regressor() -> None:
    # util grows 10 points per doubling of the batch, whatever the family
    table = [
        _p(f, b, 10.0 * math.log2(b) - 20, params=p)
        for f, p in (("A", 1), ("B", 10))
        for b in (16, 32, 64, 128)
    ]
    for reg in ("ridge", "knn"):
        prof = JobProfiler(regressor=reg, ridge_alpha=1e-6).fit(table)
        est = prof.estimate(family="Unseen", batch_size=64, params_m=5)
        assert est.source == "regressor"
        assert est.gpu_util_pct == pytest.approx(40.0, abs=3.0)


def test_knn_leaves_out_a_parameter_count_the_table_never_has() -> None:
    # a table without params_m: a job that gave its parameter count was compared with no
    # row at all, and got the table's median footprint labelled as a regressor estimate
    table = [_p(f, b, 10.0 * math.log2(b) - 20) for f in ("A", "B") for b in (16, 32, 64, 128)]
    prof = JobProfiler(regressor="knn").fit(table)
    with_params = prof.estimate(family="Unseen", batch_size=64, params_m=5)
    assert with_params == prof.estimate(family="Unseen", batch_size=64)
    assert with_params.gpu_util_pct == pytest.approx(40.0, abs=3.0)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"regressor": "Ridge"}, "regressor must be 'ridge' or 'knn', not 'Ridge'"),
        ({"k_neighbours": 0}, "k_neighbours must be a whole number >= 1, not 0"),
        ({"fallback_level": "L4"}, "fallback_level must be one of L1, L2, L3, EX"),
        # a fractional k failed at the first unseen family with a TypeError about slices
        ({"k_neighbours": 2.5}, "k_neighbours must be a whole number >= 1, not 2.5"),
        # a NaN or infinite penalty gave every unseen family a NaN util (levelled L2), a
        # negative one fitted something that is no ridge regression
        ({"ridge_alpha": math.nan}, "ridge_alpha must be a finite number >= 0, not nan"),
        ({"ridge_alpha": math.inf}, "ridge_alpha must be a finite number >= 0, not inf"),
        ({"ridge_alpha": -1.0}, "ridge_alpha must be a finite number >= 0, not -1.0"),
        # a device of no memory made the EX rule (memory >= 90 % of it) never hold
        ({"gpu_mem_total_mb": 0.0}, "gpu_mem_total_mb must be a finite number > 0, not 0.0"),
        ({"gpu_mem_total_mb": math.nan}, "gpu_mem_total_mb must be a finite number > 0"),
    ],
)
def test_settings_it_would_not_apply_are_refused(setting: dict, message: str) -> None:
    # a misspelt regressor ran kNN, k_neighbours 0 gave NaN estimates, and a fallback
    # level outside the four came back as the level of every job it could not place
    with pytest.raises(ValueError, match=re.escape(message)):
        JobProfiler(**setting)


def test_an_expected_footprint_filling_the_device_is_exclusive() -> None:
    # what a device of 0 MiB switched off: a family profiled at 30 GiB on a 32 GiB GPU
    # needs the whole GPU (memory >= 90 % of it), at any util
    prof = JobProfiler(gpu_mem_total_mb=32_768.0).fit([_p("Huge", 32, 40.0, 30_000.0)])
    assert prof.estimate(family="Huge", batch_size=32).level == "EX"
    assert (
        JobProfiler(gpu_mem_total_mb=65_536.0)
        .fit([_p("Huge", 32, 40.0, 30_000.0)])
        .estimate(family="Huge", batch_size=32)
        .level
        == "L2"
    )


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"batch_size": -4}, "batch_size must be a finite number >= 1 (None or 0: unknown)"),
        ({"batch_size": math.nan}, "batch_size must be a finite number >= 1 (None or 0: unknown)"),
        ({"params_m": -5.0}, "params_m must be a finite number >= 0 (None: unknown), not -5.0"),
        # an infinite one failed with "math range error" (ridge) or gave a NaN footprint
        # (kNN), a NaN parameter count was read as unknown
        ({"batch_size": math.inf}, "batch_size must be a finite number >= 1 (None or 0: unknown)"),
        ({"params_m": math.inf}, "params_m must be a finite number >= 0 (None: unknown), not inf"),
        ({"params_m": math.nan}, "params_m must be a finite number >= 0 (None: unknown), not nan"),
    ],
)
def test_impossible_attributes_are_named_not_a_math_domain_error(attrs: dict, message: str) -> None:
    for prof in (JobProfiler(), JobProfiler(regressor="knn")):
        prof.fit(shipped_profiles())
        for family in ("ResNet50", "NeverProfiled"):  # the family path and the regressor
            with pytest.raises(ValueError, match=re.escape(message)):
                prof.estimate(family=family, **attrs)


def test_an_unknown_batch_size_is_still_none_or_zero() -> None:
    prof = JobProfiler().fit(shipped_profiles())
    assert prof.estimate(family="ResNet50", batch_size=0) == prof.estimate(family="ResNet50")


def test_fallback_when_nothing_is_known() -> None:
    est = JobProfiler().estimate(family="X", batch_size=32)
    assert (est.level, est.source) == ("L2", "fallback")
    prof = JobProfiler(fallback_level="L3").fit([_p("A", 32, 40.0)])
    assert prof.estimate(family="Unseen").level == "L3"


def test_runtime_metrics_win_over_attributes() -> None:
    prof = JobProfiler().fit([_p("Big", 32, 95.0, 20000.0)])
    est = prof.profile(family="Big", batch_size=32, gpu_util=5.0, mem_used_bytes=1e9)
    assert (est.level, est.source) == ("L1", "runtime")
    assert prof.profile(family="Big", batch_size=32, exclusive=True).level == "EX"
    full = prof.profile(gpu_util=30.0, mem_used_bytes=79e9, mem_total_bytes=80e9)
    assert full.level == "EX"


def test_lofo_is_perfect_when_attributes_determine_the_level() -> None:
    table = [
        _p(f, b, 15.0 if b < 64 else 90.0, 1000.0 if b < 64 else 9000.0)
        for f in "ABCD"
        for b in (16, 32, 128, 256)
    ]
    res = leave_one_family_out(table, lambda: JobProfiler(regressor="knn", k_neighbours=1))
    assert res.accuracy == 1.0 and res.n == 16
    assert res.per_family == dict.fromkeys("ABCD", (4, 4))


def test_lofo_cannot_guess_a_family_specific_level() -> None:
    # same attributes, opposite footprints: only the family tells them apart
    table = [_p("Low", 32, 10.0, 1000.0), _p("High", 32, 95.0, 20000.0)]
    res = leave_one_family_out(table)
    assert res.accuracy == 0.0
    assert (
        leave_one_row_out([*table, _p("Low", 64, 12.0, 1000.0), _p("High", 64, 96.0, 20000.0)])
        == 1.0
    )


def test_load_profiles_fills_params_from_the_shipped_families(tmp_path: Path) -> None:
    f = tmp_path / "lucid.csv"
    f.write_text(LUCID_SHAPED.replace("Toy", "ResNet50"))
    rows = load_profiles(f)
    assert {r.params_m for r in rows} == {25.6}


def test_loads_the_real_lucid_table(trace_dir: Path) -> None:
    rows = load_profiles(trace_dir / "lucid-profiles" / "single_data.csv")
    assert len(rows) == 66
    assert len({r.family for r in rows}) == 14
    assert all(r.params_m is not None for r in rows)


def test_lofo_benchmark_refuses_a_bad_table_in_one_line(tmp_path: Path) -> None:
    """benchmarks/profiler_lofo.py (docs/profiler.md) given a table it cannot read exits 2
    with one line naming the file and line, not a traceback."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "profiler_lofo.py"
    bad = tmp_path / "single_data.csv"
    bad.write_text(
        "model,batchsize,amp,gpu_util,gmem\nresnet50,64,0,90,8000\nbert,oops,0,50,4000\n"
    )
    done = subprocess.run(
        [sys.executable, str(script), "--table", str(bad)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"profiler_lofo.py: {bad}:3: batchsize: not a number: 'oops'"
    ]


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        # a NaN util was levelled L2 from "live metrics" and reported as a util of NaN
        ({"gpu_util": math.nan}, "gpu_util must be a finite number, not nan"),
        ({"sm_util": math.nan}, "sm_util must be a finite number, not nan"),
        ({"mem_used_bytes": math.inf}, "mem_used_bytes must be a finite number, not inf"),
        ({"mem_total_bytes": math.nan}, "mem_total_bytes must be a finite number, not nan"),
    ],
)
def test_live_metrics_that_are_no_numbers_are_named(metrics: dict, message: str) -> None:
    live = {"gpu_util": 50.0, "mem_used_bytes": 4e9, **metrics}
    with pytest.raises(ValueError, match=re.escape(message)):
        JobProfiler().fit(shipped_profiles()).profile(family="BERT", **live)

"""Several seeds: shares against reactive are taken seed by seed, and ``dprobe simulate
--seeds`` gives exactly the runs that one ``--seed`` at a time gives."""

from __future__ import annotations

import gzip
import json
import math
import random
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from dprobe.cli import main
from dprobe.sim.run import CellResult
from dprobe.sim.seeds import mean_cells, shares, summary


def _cell(mode: str, seed: int, wait: float, lost: float = 0.0) -> CellResult:
    return CellResult(
        "fifo", mode, 900.0, "wait", 10, 0, 0, wait, wait, wait, 0.5, 3, 1, lost,
        0.0, 0.0, 0, 1.0, 0.1, "", seed=seed,
    )  # fmt: skip


def test_shares_match_a_plain_recomputation() -> None:
    rng = random.Random(7)
    pairs = [(rng.uniform(1, 500), rng.uniform(1, 500)) for _ in range(40)]
    pairs += [(3.0, 0.0)]  # no share without a base
    s = shares(pairs)
    ratios = [v / b for v, b in pairs[:-1]]
    assert s.runs == 40
    assert s.mean == pytest.approx(statistics.fmean(ratios))
    assert s.geo == pytest.approx(statistics.geometric_mean(ratios))
    assert s.below == sum(1 for v, b in pairs[:-1] if v < b)
    assert (s.low, s.high) == (min(ratios), max(ratios))
    assert math.isnan(shares([]).mean) and shares([]).runs == 0
    assert math.isnan(shares([(0.0, 5.0)]).geo)  # a zero wait has no logarithm


def test_summary_pairs_each_run_with_reactive_of_its_own_seed() -> None:
    # Seed 0: predictive halves reactive's wait; seed 1: it waits 1.5x. Per seed the
    # shares are 0.5 and 1.5 (mean 1.0); a ratio of the means would say 1550/1100.
    results = [
        _cell("reactive", 0, 100.0, lost=10.0),
        _cell("predictive", 0, 50.0, lost=2.0),
        _cell("predictive", 1, 1500.0, lost=4.0),
        _cell("reactive", 1, 1000.0, lost=30.0),
    ]
    rows = {r["mode"]: r for r in summary(results)}
    pred = rows["predictive"]
    assert pred["seeds"] == 2
    assert pred["avg_queue_s"] == pytest.approx(775.0)
    assert pred["lost_gpu_h"] == pytest.approx(3.0)
    assert pred["vs_reactive"].mean == pytest.approx(1.0)
    assert pred["vs_reactive"].geo == pytest.approx(math.sqrt(0.75))
    assert pred["vs_reactive"].below == 1
    assert rows["reactive"]["vs_reactive"] is None
    # a seed without its reactive run: no share rather than a wrong one
    lone = summary([*results, _cell("oracle", 2, 10.0)])
    assert next(r for r in lone if r["mode"] == "oracle")["vs_reactive"] is None


def test_mean_cells_average_every_figure_over_the_seeds() -> None:
    a, b = _cell("reactive", 0, 100.0, lost=1.0), _cell("reactive", 1, 300.0, lost=2.0)
    b = replace(b, node_moves=6)
    (m,) = mean_cells([a, b])
    assert (m.avg_queue_s, m.lost_gpu_h, m.node_moves, m.seed) == (200.0, 1.5, 4, -1)
    assert (m.policy, m.mode, m.move_latency_s, m.reclaim) == ("fifo", "reactive", 900.0, "wait")
    assert mean_cells([a]) == [a]


HEAD = (
    "time,running_gpu_num,pending_gpu_num,total_gpu_num,running_gpu_num_noless_8,"
    "pending_gpu_num_noless_8\n"
)


def _helios(folder: Path) -> Path:
    # two VCs for a day: a busy 2-node VC that will borrow, a quiet 3-node one
    for name, demand, total in (("vcA", 20, 16), ("vcB", 4, 24)):
        rows = "".join(
            f"2020-05-01 {h:02d}:{m:02d}:00,{demand},0,{total},0,0\n"
            for h in range(24)
            for m in range(60)
        )
        with gzip.open(folder / f"{name}.csv.gz", "wt") as fh:
            fh.write(HEAD + rows)
    return folder


def test_seeds_give_the_runs_of_one_seed_at_a_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", "--helios", str(_helios(tmp_path)), "--days", "1", "--chart", ""]
    args += ["--policies", "fifo,sjf", "--modes", "static,reactive,oracle", "--move-latency", "0"]
    assert main([*args, "--seeds", "1,2", "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    alone = []
    for seed in (1, 2):
        assert main([*args, "--seed", str(seed), "--json"]) == 0
        alone += json.loads(capsys.readouterr().out)
    assert both == alone
    assert [r["seed"] for r in both] == [1] * 6 + [2] * 6
    assert main([*args, "--seeds", "1,2", "--json", "--workers", "2"]) == 0  # one shared pool
    assert json.loads(capsys.readouterr().out) == alone
    waits = {(r["seed"], r["policy"], r["mode"]): r["avg_queue_s"] for r in both}
    assert waits[(1, "fifo", "reactive")] != waits[(2, "fifo", "reactive")]  # two streams

    assert main([*args, "--seeds", "1,2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 + 2  # header, rule, one line per policy
    fifo = lines[2].split(" | ")
    assert fifo[:4] == ["| 0", "wait", "fifo", "2"]  # then static, reactive, predictive, oracle
    mean = (waits[(1, "fifo", "reactive")] + waits[(2, "fifo", "reactive")]) / 2
    assert float(fifo[5].replace(",", "")) == pytest.approx(
        mean, abs=0.51
    )  # printed to 1 s above 100
    below = sum(waits[(s, "fifo", "oracle")] < waits[(s, "fifo", "reactive")] for s in (1, 2))
    assert fifo[9].endswith(f"{below}/2 below")


def test_bad_seeds_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--helios", str(_helios(tmp_path)), "--days", "1", "--chart", ""]
    assert main([*args, "--seeds", "1,x"]) == 2
    assert "--seeds '1,x'" in capsys.readouterr().err
    assert main([*args, "--seeds", ","]) == 2
    with pytest.raises(SystemExit) as exc:
        main([*args, "--seed", "1", "--seeds", "1,2"])
    assert exc.value.code == 2

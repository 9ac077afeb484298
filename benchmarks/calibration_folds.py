"""Choose calibration settings on validation folds: record each model once, replay the
calibration layer with every candidate setting, score p90 coverage and pinball loss.

The calibration wrapper never changes what its inner model learns, so a model's raw
``(p50, p90)`` after every window can be recorded in one pass and the wrapper replayed
over the recording with each candidate setting: the figures are exactly those
``dprobe evaluate`` would print for that setting, at a fraction of the time. Windows
after ``--end`` are never read, so the test span stays unseen.

Usage (Helios Earth and the two folds of docs/forecasting.md are the defaults)::

    python benchmarks/calibration_folds.py --trace $DPROBE_TRACE_DIR/helios-earth-vcs \\
        --format helios-vc --end 2020-05-22 \\
        --fold 2020-05-08:2020-05-15 --fold 2020-05-15:2020-05-22 \\
        --variant 'default={}' --variant 'fallback={"raw_fallback": true}'

Prints one line per variant, fold, model and horizon (coverage and pinball, uncalibrated
-> calibrated), then per variant and horizon the range of coverage over models and folds
and the best pinball per fold, and with ``--json`` one JSON list last.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HORIZONS = (600.0, 3600.0, 21600.0)
MODELS = "last-value,seasonal-naive,moving-average,holt-winters,dprobe-mmoe"
HELIOS = Path(os.environ.get("DPROBE_TRACE_DIR", "")) / "helios-earth-vcs"
FORMATS = ("demand-csv", "helios-vc", "jobs-csv")  # those of dprobe evaluate
FOLDS = ("2020-05-08:2020-05-15", "2020-05-15:2020-05-22")
VARIANTS = ("default={}", 'fallback={"raw_fallback": true}')


class Recorder:
    """Wraps a forecaster and keeps its forecast at ``HORIZONS`` after every window."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.version = inner, inner.name, inner.version
        self.records: dict[tuple[str, float], dict[float, tuple[float, float]]] = {}

    def learn_one(self, window: Any) -> None:
        self.inner.learn_one(window)
        tenant = str(window.tenant)
        self.records[(tenant, float(window.window_end))] = self.inner.forecast(tenant, HORIZONS)

    def forecast(self, tenant: str, horizons: Sequence[float]) -> dict[float, tuple[float, float]]:
        return self.inner.forecast(tenant, horizons)


class Replayed:
    """A forecaster that says again what a :class:`Recorder` heard after each window."""

    def __init__(self, name: str, records: dict[tuple[str, float], dict[float, Any]]) -> None:
        self.name, self.version, self.records = name, "replay", records
        self.last: dict[str, float] = {}

    def learn_one(self, window: Any) -> None:
        self.last[str(window.tenant)] = float(window.window_end)

    def forecast(self, tenant: str, horizons: Sequence[float]) -> dict[float, tuple[float, float]]:
        end = self.last.get(tenant)
        if end is None:
            return dict.fromkeys(horizons, (0.0, 0.0))
        rec = self.records[(tenant, end)]
        return {h: rec[h] for h in horizons}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


def _windows(args: argparse.Namespace, end: float) -> list[Any]:
    from dprobe.commands.evaluate import _read_windows

    ns = argparse.Namespace(
        trace=args.trace, fmt=args.format, window_s=args.window_s, time_unit=args.time_unit
    )
    return _read_windows(ns, end)


def _time(text: str) -> float:
    from dprobe.commands.evaluate import _time as parse

    return parse(text, "--fold/--end")


def _span(fold: str) -> tuple[float, float]:
    """``START:END`` as two times; ISO times hold colons too, so the split is at the
    first colon with a time on either side."""
    from dprobe.errors import UsageError

    for i, c in enumerate(fold):
        if c == ":":
            try:
                return _time(fold[:i]), _time(fold[i + 1 :])
            except UsageError:
                continue
    raise ValueError(f"--fold {fold!r}: not START:END (ISO-8601 or epoch seconds each)")


def _parse(
    args: argparse.Namespace,
) -> tuple[float, list[tuple[float, float]], list[tuple[str, dict[str, Any]]]]:
    """``--end``, ``--fold``, ``--variant``, ``--models``, ``--format``, ``--window-s`` and
    ``--time-unit``, checked; a bad one raises ValueError or UsageError with a line for the
    user."""
    from dprobe.commands._common import positive
    from dprobe.models.forecast.calibration import Calibrated
    from dprobe.models.forecast.registry import FORECASTERS

    positive(args.window_s, "--window-s")
    positive(args.time_unit, "--time-unit")
    if args.format not in FORMATS:
        raise ValueError(f"--format {args.format!r}: choose from {', '.join(FORMATS)}")
    if unknown := [m for m in args.models.split(",") if m not in FORECASTERS]:
        raise ValueError(
            f"--models: unknown {', '.join(unknown)} (choose from {', '.join(FORECASTERS)})"
        )
    end = _time(args.end)
    folds = []
    for fold in args.fold or FOLDS:
        span = _span(fold)
        if not span[0] < span[1] <= end:
            raise ValueError(f"--fold {fold!r}: START must be before END, and END not after --end")
        folds.append(span)
    variants = []
    for variant in args.variant or VARIANTS:
        name, sep, text = variant.partition("=")
        try:
            settings = json.loads(text) if sep and name else None
        except json.JSONDecodeError as exc:
            raise ValueError(f"--variant {variant!r}: settings are not JSON: {exc}") from None
        if isinstance(settings, dict):
            try:  # unknown settings and bad values, as the calibration layer checks them
                Calibrated(Replayed("check", {}), **settings)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"--variant {variant!r}: {exc}") from None
            variants.append((name, settings))
            continue
        raise ValueError(f'--variant {variant!r}: not NAME={{"setting": value, ...}}')
    return end, folds, variants


def _check_folds(
    windows: list[Any], folds: list[tuple[float, float]], texts: Sequence[str]
) -> None:
    """Raise ValueError for the first fold in which no forecast at the longest horizon
    could be scored: its windows must reach that far past its START."""
    from dprobe.commands.evaluate import _iso

    for (start, stop), text in zip(folds, texts, strict=True):
        ends = [float(w.window_end) for w in windows if start <= w.window_end <= stop]
        if not ends:
            raise ValueError(f"--fold {text!r}: no window of the trace ends in it")
        if max(ends) - start < HORIZONS[-1]:
            raise ValueError(
                f"--fold {text!r}: the trace's windows in it end at {_iso(max(ends))}, less than "
                f"the longest horizon ({HORIZONS[-1] / 3600:g} h) after its START"
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=str(HELIOS))
    p.add_argument("--format", default="helios-vc")
    p.add_argument("--end", default="2020-05-22", help="read nothing at or after this time")
    p.add_argument("--fold", action="append", help="START:END scored span [the two folds]")
    p.add_argument("--variant", action="append", help='NAME={"setting": v} [default, fallback]')
    p.add_argument("--models", default=MODELS)
    p.add_argument("--window-s", type=float, default=600.0)
    p.add_argument("--time-unit", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if not Path(args.trace).exists():
        p.exit(2, f"{p.prog}: --trace {args.trace}: not found "
                  "(set DPROBE_TRACE_DIR or pass --trace)\n")  # fmt: skip

    import torch

    from dprobe.errors import UsageError
    from dprobe.models.forecast.calibration import Calibrated
    from dprobe.models.forecast.evaluation import rolling_origin
    from dprobe.models.forecast.registry import make_forecaster

    torch.set_num_threads(1)
    # Every setting is checked before the (minutes long) recording, so that a typo
    # costs one line and exit 2, not a traceback after the models have run.
    try:
        end, folds, variants = _parse(args)
        windows = _windows(args, end)
        _check_folds(windows, folds, args.fold or FOLDS)
    except (UsageError, ValueError) as exc:
        p.exit(2, f"{p.prog}: {exc}\n")
    t0 = time.monotonic()
    recorded = {}
    for name in args.models.split(","):
        rec = Recorder(make_forecaster(name, seed=args.seed))
        for w in windows:
            rec.learn_one(w)
        recorded[rec.name] = rec.records
    print(f"recorded {len(recorded)} models over {len(windows)} windows in "
          f"{time.monotonic() - t0:.0f} s", file=sys.stderr)  # fmt: skip
    rows: list[dict[str, Any]] = []
    for vname, settings in variants:
        for k, (start, stop) in enumerate(folds):
            span = [w for w in windows if w.window_end <= stop]
            models = [Calibrated(Replayed(n, r), **settings) for n, r in recorded.items()]
            res = rolling_origin(span, models, HORIZONS, test_start=start)
            for m in res.rows:
                rows.append({"variant": vname, "fold": k, "model": m.model,
                             "horizon_s": m.horizon_s, "coverage": m.p90_coverage,
                             "pinball": m.pinball_p90, "coverage_raw": m.p90_coverage_uncalibrated,
                             "pinball_raw": m.pinball_p90_uncalibrated})  # fmt: skip
    for r in rows:
        print(f"{r['variant']:>12} fold {r['fold']} {r['model']:>15} {r['horizon_s']:>7.0f} s  "
              f"cover {r['coverage_raw']:.3f} -> {r['coverage']:.3f}  "
              f"pinball {r['pinball_raw']:.3f} -> {r['pinball']:.3f}")  # fmt: skip
    for vname, _ in variants:
        for h in HORIZONS:
            sel = [r for r in rows if r["variant"] == vname and r["horizon_s"] == h]
            cov = [r["coverage"] for r in sel]
            out = sum(not 0.87 <= c <= 0.93 for c in cov)
            best = {k: min(r["pinball"] for r in sel if r["fold"] == k) for k in range(len(folds))}
            print(f"{vname:>12} {h:>7.0f} s  coverage {min(cov):.3f}..{max(cov):.3f} "
                  f"({out} outside 0.87-0.93)  best pinball per fold "
                  + " / ".join(f"{best[k]:.3f}" for k in best))  # fmt: skip
    if args.json:
        json.dump([{k: (None if isinstance(v, float) and math.isnan(v) else v)
                    for k, v in r.items()} for r in rows], sys.stdout)  # fmt: skip
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

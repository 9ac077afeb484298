"""Forecast accuracy of every model against the baselines on a demand trace.

Rolling-origin evaluation: the trace is aggregated into windows of --window-s seconds
(the mean demand of each window; demand = running + pending GPUs), every model learns the
windows in time order, and from every --origin-stride-th window in the test span it
forecasts 10 min, 1 h and 6 h ahead. Windows before --test-start only fit (warm up) the
models; online models keep learning from windows that have closed during the test span,
never from the future. Metrics per model and horizon: MAE, RMSE, MASE against last value,
the under-provisioning rate (p50 below actual), p90 coverage (share of actuals at or below
p90) and the p90 pinball loss. Every model's p90 is calibrated online (as the worker does)
and its uncalibrated p90 is scored beside it ("before"); --no-calibration scores the
models without the calibration layer. PNG plots go to --out.

Examples:
    dprobe evaluate --trace ../shared/data/helios-earth-vcs --format helios-vc \\
        --test-start 2020-05-22 --json
    dprobe evaluate --trace demand.csv --format demand-csv --out report/
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dprobe.commands._common import (
    checked_seed,
    nonempty_path,
    not_applying,
    positive,
    said_interrupted,
)
from dprobe.commands._step_bound import check_steps, jobs_span_s
from dprobe.count_text import count_of
from dprobe.errors import UsageError
from dprobe.folders import output_file, output_folder

# The registry's forecasters (dprobe.models.forecast.registry) evaluated by default;
# ``mmoe`` is accepted for ``dprobe-mmoe``.
MODEL_NAMES = ("last-value", "seasonal-naive", "moving-average", "holt-winters", "dprobe-mmoe")
DEFAULT_HORIZONS = "600,3600,21600"
DEFAULT_OUT = "dprobe-out/evaluate"
DEFAULT_PLOT_TENANTS = 3
MAX_JOB_WINDOWS = 1_000_000  # a jobs trace's windows, all tenants together


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trace",
        required=True,
        type=nonempty_path,
        metavar="PATH",
        help="a trace file or a folder of them",
    )
    p.add_argument(
        "--format", required=True, choices=["demand-csv", "helios-vc", "jobs-csv"], dest="fmt"
    )
    p.add_argument(
        "--time-unit",
        type=float,
        default=None,
        metavar="S",
        help="--format jobs-csv only: seconds per time unit of submit_time/duration "
        "(default 60: minutes)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document (rows) on stdout")
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="folder for the PNG plots and summary.json (default dprobe-out/evaluate)",
    )
    p.add_argument(
        "--no-plots",
        action="store_true",
        help="write nothing to --out (no PNG plots, no summary.json)",
    )
    p.add_argument(
        "--test-start",
        metavar="TIME",
        help="start of the test span (ISO-8601 or epoch s); default: the last 30%% of the trace",
    )
    p.add_argument(
        "--test-end",
        metavar="TIME",
        help="ignore the trace from this time on (e.g. to validate on a span before the test)",
    )
    p.add_argument(
        "--window-s",
        type=float,
        default=600.0,
        help="window length in seconds, > 0 (default 600); a jobs trace may make at most a "
        "million windows, all tenants together",
    )
    p.add_argument(
        "--origin-stride", type=int, default=1, help="forecast from every N-th window (default 1)"
    )
    p.add_argument(
        "--horizons",
        default=DEFAULT_HORIZONS,
        help=f"horizons in seconds, comma-separated (default {DEFAULT_HORIZONS})",
    )
    p.add_argument(
        "--models",
        default=",".join(MODEL_NAMES),
        help="registered forecasters to evaluate, comma-separated (default: "
        f"{','.join(MODEL_NAMES)})",
    )
    p.add_argument("--seed", type=int, default=None, help="seed of the multi-task model (0)")
    p.add_argument(
        "--no-calibration",
        action="store_true",
        help="score the models' own p90 only (default: p90 calibrated online, before/after)",
    )
    p.add_argument(
        "--warm-start",
        type=nonempty_path,
        metavar="FILE",
        help="multi-task model checkpoint to start from",
    )
    p.add_argument(
        "--save-checkpoint",
        type=nonempty_path,
        metavar="FILE",
        help="write the multi-task model at the end",
    )
    p.add_argument(
        "--plot-tenants", type=int, default=None, help="tenants to plot, largest first, >= 0 (3)"
    )


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None, so it is valid JSON
    (a MASE is infinite where last value made no error at all).

    >>> finite({"mase": float("inf"), "rows": [1.5, float("nan")]})
    {'mase': None, 'rows': [1.5, None]}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def _time(text: str, flag: str) -> float:
    from dprobe.traces.demand_series import parse_ts

    try:
        return parse_ts(text)
    except ValueError:
        raise UsageError(f"{flag}: not ISO-8601 or epoch seconds: {text!r}") from None


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


def _models(args: argparse.Namespace) -> list[Any]:
    from dprobe.models.forecast.baselines import LastValue
    from dprobe.models.forecast.registry import (
        FORECASTERS,
        MMOE,
        MMOE_JOBS,
        canonical_name,
        make_forecaster,
    )

    def canonical(name: str) -> str | None:
        try:
            return canonical_name(name)
        except ValueError:
            return None

    wanted = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted({m for m in wanted if canonical(m) not in FORECASTERS})
    if unknown:
        raise UsageError(
            f"--models: unknown {', '.join(unknown)} (choose from {', '.join(FORECASTERS)})"
        )
    if not wanted:
        raise UsageError("--models: need one or more model names")
    # a model named twice (or by an alias and its name) runs and is scored once
    names = list(dict.fromkeys(canonical_name(m) for m in wanted))
    multitask = [n for n in names if n in (MMOE, MMOE_JOBS)]
    if args.seed is not None and not multitask:  # the only model that draws random numbers
        raise UsageError(
            f"--seed applies only with a multi-task model in --models ({MMOE} or {MMOE_JOBS})"
        )
    seed = 0 if args.seed is None else args.seed
    for flag, given in (
        ("--warm-start", args.warm_start),
        ("--save-checkpoint", args.save_checkpoint),
    ):
        if given and len(multitask) != 1:
            raise UsageError(
                f"{flag} needs exactly one multi-task model in --models ({MMOE} or {MMOE_JOBS}); "
                f"got {', '.join(multitask) or 'none'}"
            )
    # last value is the MASE reference: always there, always first
    models: list[Any] = [LastValue()]
    for name in names:
        if name == "last-value":
            continue
        model = make_forecaster(name, seed=seed)
        if name in (MMOE, MMOE_JOBS) and args.warm_start:
            from dprobe.models.checkpoint import CheckpointError
            from dprobe.models.forecast.multitask import load_checkpoint
            from dprobe.text_input import cannot_read

            try:
                load_checkpoint(model, args.warm_start)
            except OSError as exc:
                raise UsageError(cannot_read(f"--warm-start {args.warm_start}", exc)) from None
            except CheckpointError as exc:
                raise UsageError(f"--warm-start: {exc}") from None
        models.append(model)
    return _calibrated(models, args)


def _calibrated(models: list[Any], args: argparse.Namespace) -> list[Any]:
    """Each model wrapped in the online p90 calibration, unless --no-calibration."""
    if args.no_calibration:
        return models
    from dprobe.models.forecast.calibration import Calibrated

    return [Calibrated(m) for m in models]


def _horizons(text: str) -> list[float]:
    try:
        hs = sorted({float(h) for h in text.split(",") if h.strip()})
    except ValueError:
        raise UsageError(f"--horizons: not a list of seconds: {text!r}") from None
    if not hs or any(not math.isfinite(h) or h <= 0 for h in hs):
        raise UsageError("--horizons: need positive seconds")
    return hs


def run(args: argparse.Namespace) -> int:
    """Run the command; Ctrl-C ends it with one line saying so (exit 130)."""
    try:
        return _run(args)
    except KeyboardInterrupt:
        return said_interrupted("evaluate")


def _run(args: argparse.Namespace) -> int:
    from dprobe.models.forecast.evaluation import rolling_origin

    # every check of the flags and output paths first: nothing is read, run or written
    # before they all pass
    positive(args.window_s, "--window-s")
    # a bad value is named before whether it applies; a flag that would be ignored is
    # refused, not dropped
    args.time_unit_flag = None
    if args.time_unit is not None:
        positive(args.time_unit, "--time-unit")
        if args.fmt != "jobs-csv":
            raise UsageError("--time-unit applies only with --format jobs-csv")
        args.time_unit_flag = "--time-unit"  # refused by a header in seconds
    else:
        args.time_unit = 60.0
    if args.seed is not None:
        checked_seed(args.seed, "--seed")
    if args.origin_stride < 1:
        raise UsageError("--origin-stride must be >= 1")
    if args.plot_tenants is not None and args.plot_tenants < 0:
        raise UsageError(f"--plot-tenants must be >= 0, got {args.plot_tenants}")
    if args.no_plots:
        given = [
            f
            for f, v in (("--out", args.out), ("--plot-tenants", args.plot_tenants))
            if v is not None
        ]
        if given:
            raise not_applying(given, "with --no-plots (it writes nothing)")
    args.out = DEFAULT_OUT if args.out is None else args.out
    args.plot_tenants = DEFAULT_PLOT_TENANTS if args.plot_tenants is None else args.plot_tenants
    horizons = _horizons(args.horizons)
    short = [h for h in horizons if h < args.window_s]
    horizons = [h for h in horizons if h >= args.window_s]
    if not horizons:
        raise UsageError(f"--horizons: every horizon is shorter than --window-s {args.window_s:g}")
    test_end = _time(args.test_end, "--test-end") if args.test_end else math.inf
    given_start = _time(args.test_start, "--test-start") if args.test_start else None
    if given_start is not None and given_start >= test_end:
        raise UsageError(f"--test-end {args.test_end} is not after --test-start {args.test_start}")
    if args.save_checkpoint:
        _check_checkpoint_path(args.save_checkpoint)
    if not args.no_plots:
        if args.out == "":  # Path("") is the current folder: plots strewn there
            raise UsageError("--out '' names no folder: give one, or --no-plots to write nothing")
        out = output_folder(args.out, "--out")
        for name in ("summary.json", "error_by_horizon.png"):
            if (out / name).is_dir():
                raise UsageError(f"--out {args.out}: {out / name} is a directory")
    err = sys.stderr

    t0 = time.monotonic()
    models = _models(args)
    # the profiler's side report before the evaluation: a table it cannot use is said in
    # seconds, not after the run
    profiler_line, profiler = _profiler_accuracy(args, err)
    windows, n_rows = _counted_windows(args, test_end)
    if not windows:
        raise UsageError(_no_windows(args, n_rows, test_end))
    _check_warm_start(args, models, windows)
    first, last = windows[0].window_end, windows[-1].window_end
    if first == last:
        raise UsageError(
            f"{args.trace}: the trace holds one {args.window_s:g}-s window (ending "
            f"{_iso(first)}); an evaluation needs at least {_windows_needed(horizons[0], args)} "
            f"consecutive windows: some to fit the models on, then a test span (by default "
            f"the last 30%) longer than the shortest horizon ({horizons[0]:g} s)"
        )
    if given_start is not None:
        test_start = given_start
    else:
        test_start = first + 0.7 * (last - first)
    if test_start == first:  # inside the trace, but nothing before it to fit on
        raise UsageError(
            f"--test-start {_iso(test_start)} is the end of the trace's first window: give a "
            "later one, so that the models have at least one window to fit on"
        )
    if not first < test_start <= last:
        raise UsageError(
            f"--test-start {_iso(test_start)} is outside the trace ({_iso(first)} .. {_iso(last)})"
        )
    # a forecast h ahead is scored against the window round(h / window) windows later
    reach = round(horizons[0] / args.window_s) * args.window_s
    if last - test_start < reach:  # no forecast of the test span could be scored
        raise UsageError(
            f"the test span {_iso(test_start)} .. {_iso(last)} ({last - test_start:g} s) is "
            f"shorter than the shortest horizon ({horizons[0]:g} s): give an earlier "
            "--test-start, shorter --horizons or a longer trace"
        )
    tenants = sorted({w.tenant for w in windows})
    n_fit = sum(1 for w in windows if w.window_end < test_start)
    split = (
        f"split: fit/warm-up on windows ending {_iso(first)} .. before {_iso(test_start)} "
        f"({count_of(n_fit, 'window')}); test {_iso(test_start)} .. {_iso(last)} "
        f"({count_of(len(windows) - n_fit, 'window')}); {count_of(len(tenants), 'tenant')}, "
        f"{args.window_s:g}-s windows "
        f"(mean demand), origins every {args.origin_stride} window(s); online models keep "
        "learning from closed windows during the test span (never from the future)"
    )
    print(split, file=err)
    if short:
        skipped = ", ".join(f"{h:g}" for h in short)
        print(f"horizons shorter than a window are not evaluated: {skipped} s", file=err)

    def progress(n: int) -> None:
        if n % 10_000 == 0:
            print(f"  {n}/{len(windows)} windows ({time.monotonic() - t0:.0f} s)", file=err)

    result = rolling_origin(
        windows,
        models,
        horizons,
        test_start=test_start,
        origin_stride=args.origin_stride,
        progress=progress,
        absent_is_zero=args.fmt == "jobs-csv",  # no window: no job of the tenant ran
    )
    # the test span reaches the shortest horizon (checked above): a horizon no forecast
    # was scored at within the span has no window that far after any of the span's
    gaps = f"the trace's points are further apart than --window-s {args.window_s:g}?"
    if not result.rows:
        raise UsageError(
            "no forecast could be scored: no window of the test span has one of its tenant "
            f"{horizons[0]:g} s later ({gaps})"
        )
    unscored = [h for h in horizons if all(r.horizon_s != h for r in result.rows)]
    past = [h for h in unscored if round(h / args.window_s) * args.window_s > last - test_start]
    for why, these in (
        (f"the test span is {last - test_start:g} s", past),
        (
            f"no window of the test span has one of its tenant that much later: {gaps}",
            [h for h in unscored if h not in past],
        ),
    ):
        if these:  # asked for, but absent from the table and the JSON: say why
            listed = ", ".join(f"{h:g}" for h in these)
            print(f"horizons with no forecast to score ({why}): {listed} s", file=err)
    print(
        f"evaluated {count_of(len(windows), 'window')} in {time.monotonic() - t0:.1f} s", file=err
    )
    if profiler_line:
        print(profiler_line, file=err)

    table = _table(result.rows)
    if args.json:
        print(table, file=err)
        json.dump([finite(r.public()) for r in result.rows], sys.stdout, allow_nan=False)
        sys.stdout.write("\n")
    else:
        if not (sys.stdout.isatty() and err.isatty()):  # on a terminal it is on screen already
            print(split)
        print(table)
    if args.save_checkpoint:
        from dprobe.models.forecast.multitask import MultiTaskForecaster

        for m in models:
            inner = getattr(m, "inner", m)  # the checkpoint holds the model itself
            if isinstance(inner, MultiTaskForecaster):
                _save_checkpoint(inner, args.save_checkpoint)
                print(f"checkpoint written to {args.save_checkpoint}", file=err)
    if not args.no_plots:
        _plots(
            args,
            result=result,
            windows=windows,
            horizons=horizons,
            names=[m.name for m in models],
            split=split,
            err=err,
            profiler=profiler,
        )
    return 0


def _read_windows(args: argparse.Namespace, test_end: float) -> list[Any]:
    """The trace's windows ending before ``test_end``: demand series are averaged per
    window; a jobs trace gives each window's demand and job flow (traces/job_windows.py)."""
    return _counted_windows(args, test_end)[0]


def _counted_windows(args: argparse.Namespace, test_end: float) -> tuple[list[Any], int]:
    """:func:`_read_windows`, and how many rows (jobs, for a jobs trace) the trace holds
    in all, to say why it gave no window."""
    if args.fmt == "jobs-csv":
        from dprobe.traces.job_windows import job_windows
        from dprobe.traces.jobs_csv import read_jobs

        jobs = read_jobs(
            args.trace,
            time_unit_s=args.time_unit,
            time_unit_flag=getattr(args, "time_unit_flag", None),
        )
        check_steps(  # each tenant has a window every window_s while jobs run or wait
            "--window-s",
            args.window_s,
            span_s=jobs_span_s([jobs]),
            per_step=len({j.tenant for j in jobs}),
            noun="tenant windows",
            most=MAX_JOB_WINDOWS,
        )
        kept = [w for w in job_windows(jobs, args.window_s) if w.window_end <= test_end]
        return kept, len(jobs)
    from dprobe.traces.demand_series import read_trace
    from dprobe.traces.demand_windows import to_windows

    rows = 0

    def points() -> Any:
        nonlocal rows
        for p in read_trace(args.trace, args.fmt):
            rows += 1
            if p.ts < test_end:
                yield p

    # a window cut short by --test-end is left out, as for a jobs trace
    return [w for w in to_windows(points(), args.window_s) if w.window_end <= test_end], rows


def _no_windows(args: argparse.Namespace, n_rows: int, test_end: float) -> str:
    """Why a trace gave no window, naming only the flags that were given."""
    what = "jobs" if args.fmt == "jobs-csv" else "rows"
    if n_rows == 0:
        return f"{args.trace}: the trace has no {what}"
    if math.isfinite(test_end):
        return (
            f"{args.trace}: no {args.window_s:g}-s window of its {n_rows} {what} ends at or "
            f"before --test-end {_iso(test_end)}"
        )
    return f"{args.trace}: its {n_rows} {what} make no {args.window_s:g}-s window"


def _windows_needed(horizon_s: float, args: argparse.Namespace) -> int:
    """Consecutive windows for one scored forecast at ``horizon_s`` with the default split
    (the last 30% of the windows are the test span).

    >>> _windows_needed(600.0, argparse.Namespace(window_s=600.0))
    5
    """
    ahead = max(1, round(horizon_s / args.window_s))
    n = 2
    while math.ceil(0.7 * (n - 1) - 1e-9) + ahead > n - 1:
        n += 1
    return n


def _check_warm_start(args: argparse.Namespace, models: list[Any], windows: list[Any]) -> None:
    """--warm-start from a checkpoint that has already learned windows at or after the
    trace's first window of a tenant is a :class:`UsageError`: the model would ignore
    that tenant's windows as late until the trace passes the checkpoint's time, and its
    forecasts would stay frozen."""
    if not args.warm_start:
        return
    from dprobe.models.forecast.multitask import MultiTaskForecaster

    first: dict[str, float] = {}
    for w in windows:
        end = float(w.window_end)
        if end < first.get(w.tenant, math.inf):
            first[w.tenant] = end
    for m in models:
        inner = getattr(m, "inner", m)
        if not isinstance(inner, MultiTaskForecaster):
            continue
        late = sorted(t for t, end in first.items() if inner.ignores(t, end))
        if not late:
            continue
        seen = max(inner.seen_until(t) or 0.0 for t in late)
        start = min(first[t] for t in late)
        raise UsageError(
            f"--warm-start {args.warm_start}: the checkpoint has learned windows up to "
            f"{_iso(seen)}, but the trace starts at {_iso(start)} for "
            f"{count_of(len(late), 'tenant')} it holds ({', '.join(late[:3])}"
            f"{', ...' if len(late) > 3 else ''}): the model would ignore those windows as "
            "late and its forecasts would not move; warm-start from a checkpoint saved on a "
            "span before the trace's"
        )


def _check_checkpoint_path(path: str) -> None:
    """--save-checkpoint as a file to write at the end, and the temporary file it is
    written through (``PATH.tmp``) not a directory in the way."""
    out = output_file(path, "--save-checkpoint")
    tmp = out.with_suffix(out.suffix + ".tmp")
    if tmp.is_dir():
        raise UsageError(f"--save-checkpoint {path}: {tmp} (its temporary file) is a directory")


def _save_checkpoint(model: Any, path: str) -> None:
    """Write the checkpoint; an OSError is a one-line :class:`UsageError`, and the
    temporary file of the atomic write is not left behind."""
    from dprobe.models.forecast.multitask import save_checkpoint

    out = Path(path)
    tmp = out.with_suffix(out.suffix + ".tmp")
    ours = not tmp.exists()
    try:
        save_checkpoint(model, out)
    except OSError as exc:
        if ours:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        raise UsageError(f"--save-checkpoint {path}: {exc.strerror or exc}") from None


def _profiler_accuracy(
    args: argparse.Namespace, err: Any
) -> tuple[str | None, dict[str, Any] | None]:
    """Level accuracy of the job profiler on the Lucid profiles, leave one family out
    (models/profiler_eval.py): ``(one line, summary)``. The table is looked for under
    DPROBE_TRACE_DIR, then beside the trace's folder (a public traces folder). The user
    did not name that table: one it cannot read is a warning on ``err`` and no report
    ``(None, None)``, not the end of the evaluation."""
    import os

    from dprobe.models.profiler_eval import lucid_lofo
    from dprobe.models.profiles import ProfileTableError

    trace = Path(args.trace).resolve()
    folders: list[str | Path] = [os.environ.get("DPROBE_TRACE_DIR", ""), *trace.parents[:2]]
    try:
        return lucid_lofo([f for f in folders if f])
    except ProfileTableError as exc:
        print(
            f"warning: no profiler level accuracy in this report: {exc} (the Lucid profile "
            "table is found under DPROBE_TRACE_DIR or beside the trace's folder; the "
            "forecasts are evaluated without it)",
            file=err,
        )
        return None, None


def _table(rows: list[Any]) -> str:
    head = (
        f"{'model':16s} {'horizon':>8s} {'MAE':>8s} {'RMSE':>8s} {'MASE':>7s} "
        f"{'under':>6s} {'p90 cover':>15s} {'pinball p90':>15s} {'n':>6s}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.model:16s} {r.horizon_s / 60:>6g}m {r.mae:8.3f} {r.rmse:8.3f} {r.mase:7.3f} "
            f"{r.under_rate:6.3f} {_before_after(r, 'p90_coverage'):>15s} "
            f"{_before_after(r, 'pinball_p90'):>15s} {r.n:6d}"
        )
    lines.append("MASE = MAE / MAE of last value (same pairs); under = share of p50 below actual")
    lines.append(
        "p90 cover = share of actuals at or below p90 (target 0.90); pinball p90 = mean "
        "quantile loss at 0.9 in GPUs (lower is better)"
    )
    if any(r.calibrated for r in rows):
        lines.append("p90 figures read uncalibrated -> calibrated (the layer the worker runs)")
    return "\n".join(lines)


def _before_after(row: Any, field: str) -> str:
    """``"0.874 -> 0.901"`` for a calibrated row, the plain figure otherwise."""
    after = getattr(row, field)
    before = getattr(row, f"{field}_uncalibrated")
    return f"{after:.3f}" if before is None else f"{before:.3f} -> {after:.3f}"


def _plots(
    args: argparse.Namespace,
    *,
    result: Any,
    windows: list[Any],
    horizons: list[float],
    names: list[str],
    split: str,
    err: Any,
    profiler: dict[str, Any] | None = None,
) -> None:
    out = Path(args.out)
    try:
        n_png = _write_plots(
            args,
            out,
            result=result,
            windows=windows,
            horizons=horizons,
            names=names,
            split=split,
            profiler=profiler,
        )
    except OSError as exc:
        raise UsageError(f"--out {out}: {exc.strerror or exc}") from None
    print(f"plots and summary.json written to {out}/ ({n_png} PNG)", file=err)


def _write_plots(
    args: argparse.Namespace,
    out: Path,
    *,
    result: Any,
    windows: list[Any],
    horizons: list[float],
    names: list[str],
    split: str,
    profiler: dict[str, Any] | None,
) -> int:
    from dprobe.commands import evaluate_plots as plots

    out.mkdir(parents=True, exist_ok=True)
    size: dict[str, float] = {}
    for w in windows:
        size[w.tenant] = size.get(w.tenant, 0.0) + w.running_gpus + w.pending_gpus
    top = sorted(size, key=lambda t: -size[t])[: max(args.plot_tenants, 0)]
    shown = [n for n in names if n in ("last-value", "holt-winters", "dprobe-mmoe")] or names
    # the scored horizon nearest 1 h: one with no forecast to score would draw empty plots
    scored = sorted({r.horizon_s for r in result.rows}) or horizons
    h_plot = min(scored, key=lambda h: abs(h - 3600.0))
    paths = plots.error_by_horizon(result, out)
    paths += plots.forecasts_vs_actual(result, out, tenants=top, horizon_s=h_plot, models=shown)
    for old in set(out.glob("forecast_*s.png")) - set(paths):  # an earlier run's: misleading
        old.unlink()
    summary = {
        "split": split,
        "fit_span": result.fit_span,
        "test_span": result.test_span,
        "rows": [vars(r) for r in result.rows],
        "profiler_lofo": profiler,
    }
    (out / "summary.json").write_text(json.dumps(finite(summary), indent=1, allow_nan=False))
    return len(paths)

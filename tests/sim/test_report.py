"""The simulator's tables: both show the change of the wait in one sign convention."""

from __future__ import annotations

from dprobe.sim.report import rows, sweep_table, table
from dprobe.sim.run import CellResult


def _cell(mode: str, wait_s: float) -> CellResult:
    return CellResult(
        "fifo", mode, 900.0, "wait", 1, 0, 0, wait_s, wait_s, wait_s, 0.5, 0, 0,
        0.0, 0.0, 0.0, 0, 1.0, 0.1, "",
    )  # fmt: skip


def _column(text: str, header: str) -> dict[str, str]:
    """Mode (or policy) -> the cell of ``header`` in a Markdown table."""
    lines = [[c.strip() for c in ln.strip("|").split("|")] for ln in text.splitlines()]
    head, body = lines[0], lines[2:]
    key = head.index("mode") if "mode" in head else head.index("policy")
    return {r[key]: r[head.index(header)] for r in body}


def test_a_mode_that_waits_less_shows_a_negative_change_in_both_tables() -> None:
    cells = [_cell("static", 1000.0), _cell("reactive", 100.0), _cell("predictive", 80.0),
             _cell("oracle", 60.0)]  # fmt: skip
    per_cell = _column(table(cells), "wait vs reactive")
    assert per_cell == {"static": "+900.00 %", "reactive": "-", "predictive": "-20.00 %",
                        "oracle": "-40.00 %"}  # fmt: skip
    assert _column(table(cells), "wait vs static")["predictive"] == "-92.00 %"
    assert _column(sweep_table(cells), "pred wait vs reactive") == {"fifo": "-20.00 %"}
    # the JSON keeps its fields: reductions, positive when a mode waits less
    assert {r["mode"]: r["reduction_vs_reactive"] for r in rows(cells)}["predictive"] == 20.0


def test_static_rows_name_no_move_latency_or_reclaim_rule_and_counts_are_grouped() -> None:
    busy = CellResult(
        "fifo", "reactive", 900.0, "preempt", 1, 0, 0, 10.0, 10.0, 10.0, 0.5, 12_345, 1_200,
        0.0, 0.0, 0.0, 0, 1.0, 0.1, "",
    )  # fmt: skip
    text = table([_cell("static", 1000.0), busy])
    assert _column(text, "latency s") == {"static": "-", "reactive": "900"}
    assert _column(text, "reclaim") == {"static": "-", "reactive": "preempt"}
    assert _column(text, "node moves")["reactive"] == "12,345"
    assert _column(text, "preemptions")["reactive"] == "1,200"


def test_a_change_without_a_reference_reads_dash_not_an_empty_cell() -> None:
    # no static cell at all, and a reactive cell that did not wait
    cells = [_cell("reactive", 0.0), _cell("predictive", 80.0)]
    text = table(cells)
    assert _column(text, "wait vs static") == {"reactive": "-", "predictive": "-"}
    assert _column(text, "wait vs reactive") == {"reactive": "-", "predictive": "-"}
    assert "|  |" not in text


def test_the_sweep_chart_says_where_it_draws_a_wait_of_zero(tmp_path, monkeypatch) -> None:
    import dprobe.sim.report as report

    labels: list[str] = []
    save = report._save

    def keep_labels(plt, fig, path):
        labels.extend(ax.get_ylabel() for ax in fig.axes)
        return save(plt, fig, path)

    monkeypatch.setattr(report, "_save", keep_labels)
    cells = [_cell("static", 0.0), _cell("reactive", 0.0)]  # drawn at 0.1 on the log axis
    assert report.sweep_chart(cells, tmp_path / "s.png").stat().st_size > 1000
    assert any("0 drawn at 0.1" in label for label in labels)


def test_a_mode_that_waits_as_long_reads_no_change_not_a_negative_one() -> None:
    # the same wait, and one a hair longer that rounds to no change
    cells = [_cell("static", 1000.0), _cell("reactive", 100.0), _cell("predictive", 100.0),
             _cell("oracle", 100.00001)]  # fmt: skip
    per_cell = _column(table(cells), "wait vs reactive")
    assert per_cell == {"static": "+900.00 %", "reactive": "-", "predictive": "+0.00 %",
                        "oracle": "+0.00 %"}  # fmt: skip
    assert _column(sweep_table(cells), "pred wait vs reactive") == {"fifo": "+0.00 %"}
    reductions = {r["mode"]: r["reduction_vs_reactive"] for r in rows(cells)}
    assert str(reductions["predictive"]) == "0.0" and str(reductions["oracle"]) == "0.0"

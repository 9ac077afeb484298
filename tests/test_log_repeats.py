"""A Kafka client retrying against a broker that is away logs the same line many times a
second; every dprobe command's log lets each such line through once a minute and says
how many it left out."""

from __future__ import annotations

import logging
import re
import subprocess
import sys

from dprobe.log_repeats import RepeatedLines


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(name: str, level: int, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args or None, None)


def test_each_distinct_client_line_passes_once_per_window_and_counts_the_rest() -> None:
    clock = _Clock()
    f = RepeatedLines(window_s=60.0, clock=clock)
    down = ("aiokafka", logging.ERROR, "Unable connect to node with id %s: %s", 1, "refused")
    passed = []
    for i in range(600):  # 10 a second for a minute
        clock.now = i / 10
        record = _record(*down)
        if f.filter(record):
            passed.append(record.getMessage())
    assert passed == ["Unable connect to node with id 1: refused"]  # 0 .. 59.9 s: once
    clock.now = 75.0
    record = _record(*down)
    assert f.filter(record)
    assert re.search(r" \(599 more like it since \d\d:\d\d:\d\d\)$", record.getMessage())
    # another text, another node, another level, another logger: each its own line
    assert f.filter(_record("aiokafka", logging.ERROR, "Unable to update metadata from [1]"))
    assert f.filter(_record(*down[:3], 2, "refused"))
    assert f.filter(_record("aiokafka", logging.WARNING, down[2], 1, "refused"))
    assert f.filter(_record("aiokafka.consumer.group_coordinator", logging.ERROR, "x"))
    assert f.filter(_record("aiokafka.consumer.group_coordinator", logging.ERROR, "x")) is False


def test_the_same_text_with_another_exception_is_another_line() -> None:
    f = RepeatedLines(window_s=60.0, clock=lambda: 0.0)

    def failed(exc: Exception) -> logging.LogRecord:
        record = _record("aiokafka", logging.ERROR, "Unexpected error in coordinator routine")
        record.exc_info = (type(exc), exc, None)
        return record

    assert f.filter(failed(KeyError("a")))
    assert f.filter(failed(KeyError("a"))) is False
    assert f.filter(failed(OSError("b")))  # another traceback is not held back


def test_other_loggers_and_lines_below_warning_are_never_held_back() -> None:
    f = RepeatedLines(window_s=60.0, clock=lambda: 0.0)
    for _ in range(3):
        assert f.filter(_record("dprobe.streams.app", logging.ERROR, "same"))
        assert f.filter(_record("aiokafka", logging.INFO, "same"))
        assert f.filter(_record("aiokafkax", logging.ERROR, "same"))  # not the client


def test_the_command_line_filters_its_log_handler_once(tmp_path) -> None:
    code = (
        "import logging\n"
        "from dprobe.cli import main\n"
        "for _ in range(2):\n"
        "    assert main(['config', 'show', 'worker']) == 0\n"
        "[handler] = logging.getLogger().handlers\n"
        "print(sum(type(f).__name__ == 'RepeatedLines' for f in handler.filters))\n"
    )
    argv = [sys.executable, "-c", code]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, check=True)
    assert out.stdout.strip().splitlines()[-1] == "1"


def test_the_lag_pollers_failed_refreshes_pass_once_a_minute_too() -> None:
    clock = _Clock()
    f = RepeatedLines(window_s=60.0, clock=clock)
    line = ("dprobe.sinks.consumer_lag", logging.WARNING, "refresh failed: %s", "NodeNotReady")
    passed = []
    for i in range(12):  # every 5 s for a minute
        clock.now = 5.0 * i
        passed.append(f.filter(_record(*line)))
    assert passed == [True] + [False] * 11

"""Counters of what the worker saw, read at scrape time by the Prometheus exporter.

Plain in-process numbers (per worker process), bounded keys: hosts and reasons.

Example:
    >>> s = WorkerStats()
    >>> s.dead_letter("malformed_json"); s.dead_letters["malformed_json"]
    1
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class WorkerStats:
    snapshots: int = 0
    process_samples: int = 0
    duplicates: int = 0
    resets: int = 0
    late_partials: int = 0
    job_events: int = 0
    windows_emitted: int = 0
    lost_snapshots: Counter[str] = field(default_factory=Counter)  # by host
    dead_letters: Counter[str] = field(default_factory=Counter)  # by reason
    close_delay_s: list[float] = field(default_factory=list)  # window end -> produced (wall)

    def dead_letter(self, reason: str) -> None:
        self.dead_letters[reason] += 1

"""The window stage's state of one tenant-updates partition, and its stored form.

What a window partition knows besides its windows: how far each samples partition has
forwarded (``sources``), which windows are open (``open``), how far it has closed
(``closed_end``) and reported to the planning stage (``upto``), and which tenants sent
job events (``job_tenants``, ``max_ts``). The stage changes it in place while it applies
a batch and writes :meth:`PartitionState.to_plain` to its changelog-backed table under
``p|PARTITION``.

Stored form (msgspec JSON of a plain dict, keys in this order; ``upto`` only once a
progress was reported)::

    {"max_ts": 0.0, "closed_end": 0.0, "open": {tenant: [starts]}, "job_tenants": [...],
     "sources": {"samples partition": progress}, "upto": 120.0}

:meth:`~PartitionState.from_plain` takes the numbers as they were stored and
:meth:`~PartitionState.to_plain` gives them back in the same order, so a state read from a
changelog is written back byte for byte.

Example:
    >>> ps = PartitionState.from_plain(None)
    >>> ps.open_window("vc-a", 120.0)
    >>> ps.note_source(0, 195.0)
    >>> ps.watermark(sources=1, grace_s=10.0)
    185.0
    >>> ps.ready_starts(watermark=185.0, window_s=60.0)
    [120.0]
    >>> ps.close(120.0, end=180.0)
    >>> ps.to_plain()
    {'max_ts': 0.0, 'closed_end': 180.0, 'open': {}, 'job_tenants': [], 'sources': {'0': 195.0}}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PartitionState:
    """Watermark sources, open windows and progress of one window partition."""

    max_ts: float = 0.0  # newest job event time (drives time while no samples partition did)
    closed_end: float = 0.0  # end of the newest window closed here
    open: dict[str, list[float]] = field(default_factory=dict)  # tenant -> open window starts
    job_tenants: list[str] = field(default_factory=list)  # tenants with job events, sorted
    sources: dict[str, float] = field(default_factory=dict)  # samples partition -> progress
    upto: float | None = None  # progress reported to the planning stage; None: none yet

    @classmethod
    def from_plain(cls, data: Mapping[str, Any] | None) -> PartitionState:
        """The state stored as ``data`` (``None``: a partition that stored nothing yet)."""
        if data is None:
            return cls()
        return cls(
            max_ts=data["max_ts"],
            closed_end=data["closed_end"],
            open={tenant: list(starts) for tenant, starts in data["open"].items()},
            job_tenants=list(data["job_tenants"]),
            sources=dict(data["sources"]),
            upto=data.get("upto"),
        )

    def to_plain(self) -> dict[str, Any]:
        """The plain data the table stores (a new dict; see the module docstring)."""
        out: dict[str, Any] = {
            "max_ts": self.max_ts,
            "closed_end": self.closed_end,
            "open": {tenant: list(starts) for tenant, starts in self.open.items()},
            "job_tenants": list(self.job_tenants),
            "sources": dict(self.sources),
        }
        if self.upto is not None:
            out["upto"] = self.upto
        return out

    @property
    def out_before(self) -> float:
        """Every window ending at or before this is out: a partial for it is late."""
        return max(self.closed_end, 0.0 if self.upto is None else self.upto)

    def open_window(self, tenant: str, start: float) -> None:
        """Remember that ``tenant`` has a window starting at ``start`` open."""
        starts = self.open.setdefault(tenant, [])
        if start not in starts:
            starts.append(start)

    def note_source(self, source: int, ts: float) -> None:
        """Samples partition ``source`` forwarded every snapshot up to ``ts``."""
        key = str(source)
        self.sources[key] = max(self.sources.get(key, 0.0), ts)

    def note_job(self, tenant: str, ts: float) -> None:
        """A job event of ``tenant`` at event time ``ts`` was applied."""
        if tenant not in self.job_tenants:
            self.job_tenants = sorted([*self.job_tenants, tenant])
        self.max_ts = max(self.max_ts, ts)

    def watermark(self, *, sources: int, grace_s: float) -> float:
        """Event time up to which all ``sources`` samples partitions forwarded, minus grace.

        Before any samples partition has reported, only job events drive time (their newest
        event time minus grace), and only while no window of samples is open.
        """
        if not self.sources:
            return float("-inf") if self.open else self.max_ts - grace_s
        if len(self.sources) < sources:
            return float("-inf")
        return float(min(self.sources.values())) - grace_s

    def ready_starts(self, *, watermark: float, window_s: float) -> list[float]:
        """Starts of the open windows that end at or before ``watermark``, oldest first."""
        return sorted({s for lst in self.open.values() for s in lst if s + window_s <= watermark})

    def tenants_open_at(self, start: float) -> set[str]:
        """Tenants with a window starting at ``start`` open."""
        return {t for t, lst in self.open.items() if start in lst}

    def close(self, start: float, *, end: float) -> None:
        """The windows starting at ``start`` (ending at ``end``) were emitted."""
        self.closed_end = max(self.closed_end, end)
        for t in list(self.open):
            self.open[t] = [s for s in self.open[t] if s != start]
            if not self.open[t]:
                del self.open[t]

    def report(self, upto: float) -> bool:
        """Record progress ``upto`` if it is new; ``True`` when it is (and must be sent)."""
        if upto > (0.0 if self.upto is None else self.upto):
            self.upto = upto
            return True
        return False

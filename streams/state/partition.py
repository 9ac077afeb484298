"""The window stage's state of one tenant-updates partition, and its stored form.

What a window partition knows besides its windows: how far each samples partition has
forwarded (``sources``), how far it has closed (``closed_end``) and reported to the
planning stage (``upto``), the newest job event time (``max_ts``), and its *tenant
index*: which windows are open per tenant (``open``) and which tenants sent job events
(``job_tenants``). The stage changes it in place while it applies a batch and writes it
back at the end of the batch and whenever it closes windows.

Stored form (msgspec JSON of plain dicts). The core, under ``p|PARTITION``, keys in this
order (``upto`` only once a progress was reported, ``layout`` once the window stage set
it: the shard counts it is stored under)::

    {"max_ts": 0.0, "closed_end": 0.0, "sources": {"samples partition": progress},
     "upto": 120.0, "layout": {"index": 64, "host": [[8, null]]}}

An index stored with another shard count than ``index_shards`` is moved into
``index_shards`` shards as it is loaded (every shard that holds a tenant then counts as
changed).

The tenant index is split by tenant (:func:`~dprobe.streams.state.bounds.shard_of`) into
``index_shards`` shards, stored under ``p|PARTITION|i<k>`` (only the shards that hold a
tenant, and only those a batch changed are written)::

    {"open": {tenant: [starts]}, "job_tenants": [tenants, sorted]}

so a batch writes what its tenants changed, not every tenant, and no stored value grows
past ``max_shard_bytes``: opening a window or adding a tenant that would take a shard
past it raises :class:`~dprobe.streams.state.bounds.StateFull` and changes nothing.
A core stored by an older worker (with ``open`` and ``job_tenants`` inside) still loads;
its index is written out as shards at the next write.

Example:
    >>> ps = PartitionState.from_stored(None, index_shards=4)
    >>> ps.open_window("vc-a", 120.0)
    >>> ps.note_source(0, 195.0)
    >>> ps.watermark(sources=1, grace_s=10.0)
    185.0
    >>> ps.ready_starts(watermark=185.0, window_s=60.0)
    [120.0]
    >>> ps.close(120.0, end=180.0)
    >>> ps.to_plain()
    {'max_ts': 0.0, 'closed_end': 180.0, 'sources': {'0': 195.0}}
    >>> ps.open_window("vc-b", 180.0)
    >>> sorted(ps.dirty), ps.index_plain(1), ps.index_plain(3)
    ([1, 3], None, {'open': {'vc-b': [180.0]}, 'job_tenants': []})
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from dprobe.streams.state.bounds import DEFAULT_MAX_STATE_BYTES, RANK_BYTES, StateFull, shard_of

_START_BYTES = 26  # one window start in a stored list: a float of <= 24 characters, a comma
_SHARD_BASE_BYTES = 32 + RANK_BYTES  # {"open":{},"job_tenants":[]}


def _tenant_bytes(tenant: str) -> int:
    """Upper bound of the bytes a tenant's entry takes in a stored shard, without starts."""
    return len(msgspec.json.encode(tenant)) + 8


@dataclass
class _Shard:
    open: dict[str, list[float]] = field(default_factory=dict)
    job_tenants: set[str] = field(default_factory=set)
    size: int = _SHARD_BASE_BYTES  # upper bound of the stored bytes, from what it holds


@dataclass
class PartitionState:
    """Watermark sources, tenant index and progress of one window partition."""

    max_ts: float = 0.0  # newest job event time (drives time while every source is empty)
    closed_end: float = 0.0  # end of the newest window closed here
    sources: dict[str, float] = field(default_factory=dict)  # samples partition -> progress
    upto: float | None = None  # progress reported to the planning stage; None: none yet
    index_shards: int = 1
    max_shard_bytes: int = DEFAULT_MAX_STATE_BYTES
    dirty: set[int] = field(default_factory=set)  # index shards changed since loaded
    # the shard counts the stored state is laid out in, for a worker whose counts differ:
    # {"index": index shards, "host": [[host shards, newest window start under them or
    # None for the counts new windows take], ...]} (the window stage keeps it); ``None``:
    # not recorded (stored before it was), read as the counts of the settings
    layout: dict[str, Any] | None = None
    _shards: list[_Shard] = field(default_factory=list)

    @classmethod
    def from_stored(
        cls,
        core: Mapping[str, Any] | None,
        index: Sequence[Mapping[str, Any] | None] = (),
        *,
        index_shards: int | None = None,
        max_shard_bytes: int = DEFAULT_MAX_STATE_BYTES,
    ) -> PartitionState:
        """The state stored as ``core`` and ``index`` (the data of each index shard;
        ``None``: an empty shard). ``core=None``: nothing stored yet."""
        n = index_shards if index_shards is not None else max(len(index), 1)
        core = core or {}
        ps = cls(
            max_ts=core.get("max_ts", 0.0),
            closed_end=core.get("closed_end", 0.0),
            sources=dict(core.get("sources", {})),
            upto=core.get("upto"),
            index_shards=n,
            max_shard_bytes=max_shard_bytes,
            layout=core.get("layout"),
            _shards=[_Shard() for _ in range(n)],
        )
        if len(index) != n:  # stored with another index shard count: each tenant moves
            for data in index:
                if data is not None:
                    for tenant, starts in data["open"].items():
                        for start in starts:
                            ps._add(tenant, start, check=False)
                    for tenant in data["job_tenants"]:
                        ps._add(tenant, None, check=False)
            index = ()
        for k, data in enumerate(index):
            if data is not None:
                shard = ps._shards[k]
                shard.open = {t: list(starts) for t, starts in data["open"].items()}
                shard.job_tenants = set(data["job_tenants"])
                shard.size = (
                    _SHARD_BASE_BYTES
                    + sum(_tenant_bytes(t) + _START_BYTES * len(s) for t, s in shard.open.items())
                    + sum(_tenant_bytes(t) for t in shard.job_tenants)
                )
        # an index kept inside the core by an older worker
        for tenant, starts in core.get("open", {}).items():
            for start in starts:
                ps._add(tenant, start, check=False)
        for tenant in core.get("job_tenants", []):
            ps._add(tenant, None, check=False)
        return ps

    @classmethod
    def from_plain(cls, data: Mapping[str, Any] | None) -> PartitionState:
        """A state from one plain dict holding everything (the form older workers stored)."""
        return cls.from_stored(data)

    def to_plain(self) -> dict[str, Any]:
        """The core the table stores under ``p|PARTITION`` (a new dict)."""
        out: dict[str, Any] = {
            "max_ts": self.max_ts,
            "closed_end": self.closed_end,
            "sources": dict(self.sources),
        }
        if self.upto is not None:
            out["upto"] = self.upto
        if self.layout is not None:
            out["layout"] = self.layout
        return out

    def index_plain(self, k: int) -> dict[str, Any] | None:
        """What the table stores for index shard ``k`` (``None``: the shard is empty)."""
        shard = self._shards[k]
        if not shard.open and not shard.job_tenants:
            return None
        return {
            "open": {t: list(s) for t, s in shard.open.items()},
            "job_tenants": sorted(shard.job_tenants),
        }

    # -- the index ----------------------------------------------------------------------
    def _add(self, tenant: str, start: float | None, *, check: bool = True) -> None:
        k = shard_of(tenant, self.index_shards)
        shard = self._shards[k]
        if start is None:
            if tenant in shard.job_tenants:
                return
            grow = _tenant_bytes(tenant)
        else:
            starts = shard.open.get(tenant)
            if starts is not None and start in starts:
                return
            grow = _START_BYTES + (_tenant_bytes(tenant) if starts is None else 0)
        if check and shard.size + grow > self.max_shard_bytes:
            raise StateFull(
                f"tenant index shard {k} would exceed {self.max_shard_bytes} bytes "
                f"(tenant {tenant!r}); raise worker.max_state_bytes or index shards"
            )
        if start is None:
            shard.job_tenants.add(tenant)
        else:
            shard.open.setdefault(tenant, []).append(start)
        shard.size += grow
        self.dirty.add(k)

    @property
    def open(self) -> dict[str, list[float]]:
        """Tenant -> open window starts (a new dict, for reading)."""
        return {t: list(s) for shard in self._shards for t, s in shard.open.items()}

    @property
    def job_tenants(self) -> list[str]:
        """Tenants with job events, sorted."""
        return sorted(t for shard in self._shards for t in shard.job_tenants)

    def _open_items(self) -> Iterator[tuple[str, list[float]]]:
        for shard in self._shards:
            yield from shard.open.items()

    def newest_open_start(self) -> float | None:
        """The start of the newest open window, ``None`` when none is open."""
        return max((s for _, lst in self._open_items() for s in lst), default=None)

    @property
    def out_before(self) -> float:
        """Every window ending at or before this is out: a partial for it is late."""
        return max(self.closed_end, 0.0 if self.upto is None else self.upto)

    def open_window(self, tenant: str, start: float) -> None:
        """Remember that ``tenant`` has a window starting at ``start`` open
        (:class:`StateFull`, and nothing changed, if its index shard is full)."""
        self._add(tenant, start)

    def note_source(self, source: int, ts: float) -> None:
        """Samples partition ``source`` forwarded every snapshot up to ``ts``."""
        key = str(source)
        self.sources[key] = max(self.sources.get(key, 0.0), ts)

    def note_job(self, tenant: str, ts: float) -> None:
        """A job event of ``tenant`` at event time ``ts`` was applied
        (:class:`StateFull`, and nothing changed, if its index shard is full)."""
        self._add(tenant, None)
        self.max_ts = max(self.max_ts, ts)

    def forget_job_tenant(self, tenant: str) -> None:
        """``tenant``'s job book is empty: it leaves the index (a job event adds it again)."""
        k = shard_of(tenant, self.index_shards)
        shard = self._shards[k]
        if tenant in shard.job_tenants:
            shard.job_tenants.discard(tenant)
            shard.size -= _tenant_bytes(tenant)
            self.dirty.add(k)

    def watermark(self, *, sources: int, grace_s: float) -> float:
        """Event time up to which all ``sources`` samples partitions forwarded, minus grace.

        Nothing closes before every samples partition has reported: a samples topic with
        a backlog the worker has not read yet holds windows, whatever time the job events,
        read first, speak of. A samples partition with nothing to forward reports progress
        0 (:meth:`~dprobe.streams.ingest.Ingest.report_idle_sources`); while every one
        stands at 0 (no telemetry at all), job events alone drive time (their newest event
        time minus grace), and only while no window of samples is open.
        """
        if len(self.sources) < sources:
            return float("-inf")
        if max(self.sources.values(), default=0.0) <= 0.0:
            has_open = any(shard.open for shard in self._shards)
            return float("-inf") if has_open else self.max_ts - grace_s
        return float(min(self.sources.values())) - grace_s

    def ready_starts(self, *, watermark: float, window_s: float) -> list[float]:
        """Starts of the open windows that end at or before ``watermark``, oldest first."""
        items = self._open_items()
        return sorted({s for _, lst in items for s in lst if s + window_s <= watermark})

    def tenants_open_at(self, start: float) -> set[str]:
        """Tenants with a window starting at ``start`` open."""
        return {t for t, lst in self._open_items() if start in lst}

    def close(self, start: float, *, end: float) -> None:
        """The windows starting at ``start`` (ending at ``end``) were emitted."""
        self.closed_end = max(self.closed_end, end)
        for k, shard in enumerate(self._shards):
            for t in [t for t, lst in shard.open.items() if start in lst]:
                rest = [s for s in shard.open[t] if s != start]
                shard.size -= _START_BYTES * (len(shard.open[t]) - len(rest))
                if rest:
                    shard.open[t] = rest
                else:
                    del shard.open[t]
                    shard.size -= _tenant_bytes(t)
                self.dirty.add(k)

    def report(self, upto: float) -> bool:
        """Record progress ``upto`` if it is new; ``True`` when it is (and must be sent)."""
        if upto > (0.0 if self.upto is None else self.upto):
            self.upto = upto
            return True
        return False

"""Optional GPU sharing: two low-level 1-GPU jobs of one VC may share a GPU, each slowed to
its measured co-location speed (Lucid's ``colocate_info.csv``: speed of each job of a
pair running together, relative to running alone).

Assumptions (settings): only 1-GPU jobs of a low level share: by default those whose
level the job profiler predicts from their model name is in ``share_levels`` (L1 or L2;
the same estimate the worker and the simulator's windows use for pending jobs, see
:func:`~dprobe.models.demand.predicted_level`; a model the profiler cannot level does
not share), or, when ``low_level`` names models, exactly those; at most two jobs per
GPU; a waiting job shares only when it cannot get a GPU of its own; the speed of a pair
is the mean measured speed of that model pair (capped at 1), else the median of the
whole table. Trace model names match table names by normalised prefix (``vgg16`` ->
``VGG``, ``mobilenet_v2`` -> ``MobileNetV2``).

Example:
    >>> sh = Sharing({("vgg", "vgg"): 0.8}, low_level={"vgg16"}, default_speed=0.9)
    >>> sh.speed("vgg16", "vgg16"), sh.speed("vgg16", "alexnet")
    (0.8, 0.9)
    >>> by_level = Sharing({}, default_speed=0.9)
    >>> by_level.shares_model("vgg16"), by_level.shares_model("resnet50")  # L2, L3
    (True, False)
"""

from __future__ import annotations

import csv
import io
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from dprobe.errors import UsageError
from dprobe.models.demand import default_profiler
from dprobe.models.levels import Level, LevelSettings
from dprobe.text_input import read_text
from dprobe.traces.jobs_csv import cell_number

if TYPE_CHECKING:
    from dprobe.sim.cluster import VC
    from dprobe.sim.engine import Simulator
    from dprobe.sim.jobs import SimJob


def norm(name: str) -> str:
    """``"MobileNet_V2"`` -> ``"mobilenetv2"``."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


class Sharing:
    """Co-location of low-level 1-GPU jobs (see module doc)."""

    def __init__(
        self,
        speeds: dict[tuple[str, str], float],
        *,
        low_level: Iterable[str] | None = None,
        default_speed: float,
        share_levels: Iterable[Level] = ("L1", "L2"),
        levels: LevelSettings | None = None,
    ) -> None:
        self._speeds = {(norm(a), norm(b)): min(1.0, v) for (a, b), v in speeds.items()}
        self._table = sorted({k for pair in self._speeds for k in pair}, key=len, reverse=True)
        self.low_level = None if low_level is None else frozenset(low_level)
        self.share_levels = frozenset(share_levels)
        self.levels = levels
        self.default_speed = min(1.0, default_speed)
        self._cache: dict[tuple[str, str], float] = {}
        self._shares: dict[str, bool] = {}
        self._profiler = default_profiler(levels) if self.low_level is None else None

    def _match(self, model: str) -> str | None:
        m = norm(model)
        return next((t for t in self._table if m.startswith(t) or t.startswith(m)), None)

    def speed(self, model: str, partner: str) -> float:
        """Speed of ``model`` while sharing a GPU with ``partner`` (relative to alone)."""
        key = (model, partner)
        if key not in self._cache:
            a, b = self._match(model), self._match(partner)
            v = self._speeds.get((a, b)) if a and b else None
            self._cache[key] = self.default_speed if v is None else v
        return self._cache[key]

    def shares_model(self, model: str) -> bool:
        """Whether a 1-GPU job of ``model`` is low-level enough to share (see module doc)."""
        if self.low_level is not None:
            return model in self.low_level
        if model not in self._shares:
            assert self._profiler is not None
            est = self._profiler.estimate(family=model) if model else None
            self._shares[model] = (
                est is not None and est.source != "fallback" and est.level in self.share_levels
            )
        return self._shares[model]

    def can_share(self, job: SimJob) -> bool:
        return job.gpus == 1 and self.shares_model(job.model)

    # --- engine hooks ------------------------------------------------------------------
    def on_start_alone(self, sim: Simulator, job: SimJob) -> None:
        if self.can_share(job):
            job.placement[0][0].solo.append(job)

    def try_colocate(self, sim: Simulator, vc: VC, job: SimJob) -> bool:
        """Start ``job`` next to a low-level job alone on its GPU, if there is one."""
        for idx in sorted(vc.nodes):
            node = vc.nodes[idx]
            if not node.solo:
                continue
            host = node.solo.pop(0)
            sim.progress(host)
            host.speed, job.speed = (
                self.speed(host.model, job.model),
                self.speed(job.model, host.model),
            )
            host.shared_with, job.shared_with = job, host
            sim.reschedule(host)
            sim.start(job, vc, [(node, 0)])
            return True
        return False

    def on_stop(self, sim: Simulator, job: SimJob) -> None:
        """Before ``job`` leaves its GPU: its partner (if any) runs alone again at full speed."""
        node = job.placement[0][0] if job.placement else None
        partner = job.shared_with
        if partner is None:
            if node is not None and job in node.solo:
                node.solo.remove(job)
            return
        assert node is not None
        sim.progress(partner)
        job.shared_with = partner.shared_with = None
        job.speed = partner.speed = 1.0
        if job.placement[0][1] == 1:  # the leaving job held the GPU: hand it over
            node.jobs[job], node.jobs[partner] = 0, 1
            job.placement, partner.placement = [(node, 0)], [(node, 1)]
        node.solo.append(partner)
        sim.reschedule(partner)


def load_colocation(
    path: str | Path, low_level: Iterable[str] | None = None, **kw: object
) -> Sharing:
    """A :class:`Sharing` from a ``colocate_info.csv``-style file
    (``model1,speed1,model2,speed2`` columns at least); ``low_level`` None: jobs share by
    predicted level; ``kw``: more :class:`Sharing` settings."""
    p = Path(path)
    sums: dict[tuple[str, str], list[float]] = defaultdict(list)
    reader = csv.DictReader(io.StringIO(read_text(p), newline=""))
    try:
        missing = [
            c
            for c in ("model1", "speed1", "model2", "speed2")
            if c not in (reader.fieldnames or ())
        ]
        if missing and reader.fieldnames:  # the header says it is another file
            raise UsageError(f"{p}:1: no {', '.join(missing)} column(s) in its header")
        for row in reader:
            a, sa_text, b, sb_text = (row.get(c) for c in ("model1", "speed1", "model2", "speed2"))
            if a is None or b is None or sa_text is None or sb_text is None:  # a row cut short
                raise UsageError(f"{p}:{reader.line_num}: need model1, speed1, model2, speed2")
            sa = cell_number(sa_text, "speed1", str(p), reader.line_num)
            sb = cell_number(sb_text, "speed2", str(p), reader.line_num)
            if not (sa > 0 and sb > 0):
                raise UsageError(f"{p}:{reader.line_num}: speeds must be > 0")
            sums[(a, b)].append(sa)
            sums[(b, a)].append(sb)
    except csv.Error as exc:
        raise UsageError(f"{p}:{reader.line_num}: not CSV: {exc}") from None
    if not sums:
        raise UsageError(f"{p}:1: no co-location rows")
    speeds = {k: statistics.fmean(v) for k, v in sums.items()}
    return Sharing(
        speeds,
        low_level=low_level,
        default_speed=statistics.median(x for v in sums.values() for x in v),
        **kw,  # type: ignore[arg-type]
    )

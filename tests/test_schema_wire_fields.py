"""Every field a topic's contract lists is on the wire, also when it holds its default.

Consumers in any language read these topics with plain JSON (kcat, jq, a Go or Java
client): a documented field that is simply absent when it is 0, empty or unknown breaks
``record["lost_snapshots"]``. The field lists below are those of the documented contracts
(DESIGN section 3 and ``dprobe/schema.py``), written out here, not derived from the code.
Optional GPU, process and job attributes (known only sometimes) may be left out.
"""

from __future__ import annotations

import json

from dprobe import schema

HOST_SNAPSHOT = {"v", "host", "ts", "interval_s", "seq", "gpus", "procs"}
TENANT_WINDOW = {
    "v",
    "tenant",
    "window_start",
    "window_end",
    "hosts",
    "gpus_busy",
    "instances",
    "util_sum",
    "level_counts",
    "effective_demand_gpus",
    "pending_gpus",
    "running_gpus",
    "quota_gpus",
    "samples",
    "lost_snapshots",
}
LEVELS = {"L1", "L2", "L3", "EX"}
DEAD_LETTER = {"v", "source_topic", "partition", "offset", "reason", "error", "raw", "ts"}
CLUSTER_REPORT = {"v", "ts", "source", "capacity_gpus", "quotas", "complete"}


def _wire(msg: schema.Message) -> dict:
    doc: dict = json.loads(schema.encode(msg))
    return doc


def test_an_idle_host_snapshot_still_carries_its_gpus_and_procs_lists() -> None:
    doc = _wire(schema.HostSnapshot(host="gpu-1", ts=1.7e9, interval_s=1.0, seq=0))
    assert doc.keys() >= HOST_SNAPSHOT
    assert doc["gpus"] == [] and doc["procs"] == []


def test_a_quiet_tenant_window_carries_every_documented_field_and_level() -> None:
    window = schema.TenantWindow(
        tenant="vc-a",
        window_start=1.7e9,
        window_end=1.7e9 + 60,
        hosts=1,
        gpus_busy=0.0,
        instances=0.0,
        util_sum=0.0,
        level_counts=schema.LevelCounts(L3=4),
        effective_demand_gpus=0.0,
        pending_gpus=0.0,
        running_gpus=0.0,
    )
    doc = _wire(window)
    assert doc.keys() >= TENANT_WINDOW
    assert doc["lost_snapshots"] == 0 and doc["samples"] == 0 and doc["quota_gpus"] is None
    assert doc["level_counts"] == {"L1": 0, "L2": 0, "L3": 4, "EX": 0}
    assert schema.decode_window(schema.encode(window)) == window


def test_dead_letter_and_cluster_report_carry_every_documented_field() -> None:
    dl = schema.dead_letter(
        b"{oops",
        schema.SchemaError("bad", "malformed_json"),
        source_topic="dprobe.samples",
        partition=0,
        offset=7,
    )
    assert _wire(dl).keys() == DEAD_LETTER
    report = schema.ClusterReport(ts=1.7e9, source="cli", capacity_gpus=64.0)
    doc = _wire(report)
    assert doc.keys() == CLUSTER_REPORT
    assert doc["quotas"] == {} and doc["complete"] is False
    assert schema.decode_cluster_report(schema.encode(report)) == report

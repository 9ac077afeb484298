"""Message contracts: valid objects round-trip exactly; every invalid mutation is rejected
with an error that names the offending field."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dprobe import schema
from tests.strategies import ANY_MESSAGE, host_snapshot, job_event, scaling_event, tenant_window

KINDS = list(ANY_MESSAGE)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
@given(data=st.data())
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_valid_objects_round_trip_exactly(kind: type, data: st.DataObject) -> None:
    msg = data.draw(ANY_MESSAGE[kind])
    raw = schema.encode(msg)
    back = schema.decode(raw, kind)
    assert back == msg
    assert schema.encode(back) == raw
    assert json.loads(raw)["v"] == schema.versions_of(kind)[0]


def _paths(node: Any, path: str = "$") -> list[tuple[str, Any]]:
    """Every (path, value) leaf of a JSON document, excluding the version tag."""
    out: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if path == "$" and k == "v":
                continue
            out += _paths(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, f"{path}[{i}]")
    else:
        out.append((path, node))
    return out


def _set(doc: Any, path: str, value: Any, delete: bool = False) -> None:
    tokens = path[1:].replace("[", ".[").split(".")[1:]
    node = doc
    for tok in tokens[:-1]:
        node = node[int(tok[1:-1])] if tok.startswith("[") else node[tok]
    last = tokens[-1]
    key: Any = int(last[1:-1]) if last.startswith("[") else last
    if delete:
        del node[key]
    else:
        node[key] = value


# Fields whose contract bounds we can break by a numeric mutation, by leaf name.
PCT_FIELDS = {"util", "mem_util", "sm_util"}
SIZE_FIELDS = {
    "mem_used",
    "mem_total",
    "seq",
    "pid",
    "gpus",
    "hosts",
    "samples",
    "lost_snapshots",
    "L1",
    "L2",
    "L3",
    "EX",
    "index",
}
REQUIRED_TOP = {
    schema.HostSnapshot: ["host", "ts", "interval_s", "seq"],
    schema.JobEvent: ["ts", "event", "job", "tenant", "gpus"],
    schema.TenantWindow: ["tenant", "window_start", "window_end", "level_counts", "running_gpus"],
    schema.ScalingEvent: ["event_id", "plan_id", "tenant", "action", "forecast", "model"],
    schema.DeadLetter: ["source_topic", "partition", "offset", "reason", "error", "raw"],
}
STRATEGIES = {
    schema.HostSnapshot: host_snapshot(),
    schema.JobEvent: job_event,
    schema.TenantWindow: tenant_window(),
    schema.ScalingEvent: scaling_event(),
}


@pytest.mark.parametrize("kind", list(STRATEGIES), ids=lambda k: k.__name__)
@given(data=st.data())
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_every_invalid_mutation_is_rejected_naming_the_field(
    kind: type, data: st.DataObject
) -> None:
    msg = data.draw(STRATEGIES[kind])
    doc = json.loads(schema.encode(msg))
    leaves = [
        (p, v) for p, v in _paths(doc) if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    mutation = data.draw(
        st.sampled_from(
            ["missing", "wrong_type", "nan", "infinity", "huge", "negative", "over100", "version"]
        )
    )
    expect_path = "$"
    raw: bytes
    if mutation == "missing":
        field = data.draw(st.sampled_from(REQUIRED_TOP[kind]))
        _set(doc, f"$.{field}", None, delete=True)
        raw, expect_path = json.dumps(doc).encode(), field
    elif mutation == "version":
        accepted = schema.versions_of(kind)
        doc["v"] = data.draw(
            st.sampled_from([v for v in (0, 1, 2, 3, 99, "1", None, 1.5) if v not in accepted])
        )
        raw, expect_path = json.dumps(doc).encode(), "$.v"
    else:
        if mutation == "negative":
            leaves = [
                (p, v) for p, v in leaves if p.rsplit(".", 1)[-1].split("[")[0] in SIZE_FIELDS
            ]
        if mutation == "over100":
            leaves = [(p, v) for p, v in leaves if p.rsplit(".", 1)[-1] in PCT_FIELDS]
        if not leaves:
            return
        path, _ = data.draw(st.sampled_from(leaves))
        bad: Any = {
            "wrong_type": "12",
            "nan": float("nan"),
            "infinity": float("inf"),
            "huge": 1e300,
            "negative": -1,
            "over100": 100.5,
        }[mutation]
        if mutation == "huge" and path.endswith(("delta_gpus",)):
            bad = -1e300
        _set(doc, path, bad)
        raw, expect_path = json.dumps(doc).encode(), path
    with pytest.raises(schema.SchemaError) as err:
        schema.decode(raw, kind)
    assert expect_path in str(err.value), (mutation, str(err.value))


@given(snap=host_snapshot())
@settings(max_examples=30)
def test_oversized_messages_are_rejected(snap: schema.HostSnapshot) -> None:
    raw = schema.encode(snap)
    with pytest.raises(schema.SchemaError) as err:
        schema.decode_snapshot(raw, max_bytes=len(raw) - 1)
    assert err.value.reason == "oversized"
    assert schema.decode_snapshot(raw, max_bytes=len(raw)) == snap


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "malformed_json"),
        (b"\xff\xfe", "malformed_json"),
        (b'{"v":1,"host":"h","ts":1,"interval_s":1,"seq":0', "malformed_json"),
        (b"[]", "invalid_field"),
        (b'{"v":2,"host":"h"}', "unknown_version"),
        (b'{"host":"h","ts":1,"interval_s":1,"seq":0}', "invalid_field"),
    ],
)
def test_garbage_gets_a_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(schema.SchemaError) as err:
        schema.decode_snapshot(raw)
    assert err.value.reason == reason


POISON = [
    b'{"v":1,"host":"\xff\xfe","ts":1}',  # invalid UTF-8 inside a string
    b'{"v":1,"\xc3":1}',  # ... inside a key
    b'{"v":1,"extra":' + b"[" * 200_000 + b"]" * 200_000 + b"}",  # nested past recursion
    b'{"v":1,"extra":' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}",
]


@pytest.mark.parametrize("kind", [schema.HostSnapshot, schema.JobEvent, schema.TenantWindow])
@pytest.mark.parametrize("raw", POISON, ids=["utf8-value", "utf8-key", "deep-list", "deep-obj"])
def test_poison_records_are_schema_errors(kind: type, raw: bytes) -> None:
    with pytest.raises(schema.SchemaError) as err:
        schema.decode(raw, kind)
    # where the decoder skips the bad part unread (an unknown field), the missing required
    # fields are what it reports; either way a reason, never another exception
    assert err.value.reason in ("malformed_json", "invalid_field")


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=256) | st.text(max_size=128).map(str.encode))
def test_any_bytes_decode_or_raise_a_schema_error(raw: bytes) -> None:
    for kind in (schema.HostSnapshot, schema.JobEvent, schema.TenantWindow, schema.ScalingEvent):
        try:
            schema.decode(raw, kind)
        except schema.SchemaError as exc:
            assert exc.reason


def test_process_on_unknown_gpu_is_inconsistent() -> None:
    g = schema.Gpu(uuid="GPU-a", index=0, util=1, mem_util=1, mem_used=1, mem_total=2, power_w=1)
    p = schema.Proc(pid=1, gpu="GPU-b", tenant="t", job="j", sm_util=1, mem_util=1, mem_used=1)
    raw = schema.encode(
        schema.HostSnapshot(host="h", ts=1, interval_s=1, seq=0, gpus=(g,), procs=(p,))
    )
    with pytest.raises(schema.SchemaError, match=r"\$\.procs\[0\]\.gpu"):
        schema.decode_snapshot(raw)


def test_dead_letter_keeps_raw_bytes_and_reason() -> None:
    import base64

    raw = b"x" * 10_000
    dl = schema.dead_letter(
        raw,
        schema.SchemaError("bad", "malformed_json"),
        source_topic="t",
        partition=3,
        offset=9,
        max_raw_bytes=100,
    )
    assert (dl.reason, dl.partition, dl.offset) == ("malformed_json", 3, 9)
    assert base64.b64decode(dl.raw) == raw[:100]
    assert schema.decode(schema.encode(dl), schema.DeadLetter) == dl


def _v1(window: schema.TenantWindow) -> bytes:
    """``window`` as a producer of schema v1 wrote it: ``v`` 1 and no ``flow``."""
    doc = json.loads(schema.encode(window))
    doc["v"] = 1
    doc.pop("flow", None)
    return json.dumps(doc).encode()


@given(window=tenant_window())
@settings(max_examples=100)
def test_a_window_of_the_previous_version_still_decodes(window: schema.TenantWindow) -> None:
    old = schema.decode_window(_v1(window))
    assert type(old) is schema.TenantWindow
    assert old == msgspec.structs.replace(window, flow=None)
    assert json.loads(schema.encode(old))["v"] == schema.WINDOW_VERSION


def test_window_versions_and_an_inconsistent_flow() -> None:
    assert schema.versions_of(schema.TenantWindow) == (2, 1)
    assert schema.versions_of(schema.HostSnapshot) == (1,)
    doc = {
        "v": 2,
        "tenant": "a",
        "window_start": 0,
        "window_end": 60,
        "hosts": 0,
        "gpus_busy": 0,
        "instances": 0,
        "util_sum": 0,
        "level_counts": {},
        "effective_demand_gpus": 0,
        "pending_gpus": 0,
        "running_gpus": 0,
        "flow": {
            "edges_s": [60, 600],
            "running_by_age": [0, 0, 0],
            "pending_by_level": {},
            "pending_by_wait": [0, 0],
            "submitted_jobs": 0,
            "submitted_gpus": 0,
            "started_jobs": 0,
            "started_gpus": 0,
            "finished_jobs": 0,
            "finished_gpus": 0,
            "finished_by_duration": [0, 0, 0],
        },
    }
    with pytest.raises(schema.SchemaError, match=r"\$\.flow\.pending_by_wait") as err:
        schema.decode_window(json.dumps(doc).encode())
    assert err.value.reason == "inconsistent"
    doc["flow"]["pending_by_wait"] = [0, 0, 0]
    doc["flow"]["edges_s"] = [600, 60]
    with pytest.raises(schema.SchemaError, match=r"\$\.flow\.edges_s"):
        schema.decode_window(json.dumps(doc).encode())
    doc["v"] = 7
    with pytest.raises(schema.SchemaError, match="reads v1/v2") as err:
        schema.decode_window(json.dumps(doc).encode())
    assert err.value.reason == "unknown_version"


def test_invalid_utf8_in_a_known_string_is_malformed_json() -> None:
    with pytest.raises(schema.SchemaError, match="UTF-8") as err:
        schema.decode_snapshot(POISON[0])
    assert err.value.reason == "malformed_json"

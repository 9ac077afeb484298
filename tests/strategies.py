"""Hypothesis strategies for every message contract (valid values only)."""

from __future__ import annotations

from hypothesis import strategies as st

from dprobe import schema

ids = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FFF, exclude_categories=("Cs",)),
    min_size=1,
    max_size=24,
)
pct = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)
sizes = st.integers(min_value=0, max_value=2**40)
epoch = st.floats(min_value=0.0, max_value=4e9, allow_nan=False)
gpus = st.floats(min_value=0.0, max_value=1e5, allow_nan=False)
counts = st.integers(min_value=0, max_value=10**9)


@st.composite
def gpu(draw: st.DrawFn, uuid: str | None = None) -> schema.Gpu:
    total = draw(st.integers(min_value=1, max_value=2**40))
    return schema.Gpu(
        uuid=uuid or draw(ids),
        index=draw(st.integers(0, 64)),
        util=draw(pct),
        mem_util=draw(pct),
        mem_used=draw(st.integers(0, total)),
        mem_total=total,
        power_w=draw(st.floats(0, 2000, allow_nan=False)),
        sm_clock_mhz=draw(st.none() | st.floats(0, 5000, allow_nan=False)),
        mig_parent=draw(st.none() | ids),
        name=draw(st.none() | st.text(max_size=30)),
    )


@st.composite
def host_snapshot(draw: st.DrawFn) -> schema.HostSnapshot:
    uuids = draw(st.lists(ids, min_size=0, max_size=4, unique=True))
    gpu_list = tuple(draw(gpu(uuid=u)) for u in uuids)
    procs: tuple[schema.Proc, ...] = ()
    if uuids:
        procs = tuple(
            draw(
                st.lists(
                    st.builds(
                        schema.Proc,
                        pid=st.integers(0, 2**22),
                        gpu=st.sampled_from(uuids),
                        tenant=ids,
                        job=ids,
                        sm_util=pct,
                        mem_util=pct,
                        mem_used=sizes,
                        model=st.none() | st.text(max_size=20),
                        batch_size=st.none() | st.integers(1, 4096),
                        amp=st.none() | st.booleans(),
                    ),
                    max_size=6,
                )
            )
        )
    return schema.HostSnapshot(
        host=draw(ids),
        ts=draw(epoch),
        interval_s=draw(st.floats(0.001, 3600, allow_nan=False)),
        seq=draw(counts),
        gpus=gpu_list,
        procs=procs,
    )


job_event = st.builds(
    schema.JobEvent,
    ts=epoch,
    event=st.sampled_from(["submit", "start", "finish", "cancel"]),
    job=ids,
    tenant=ids,
    gpus=st.integers(0, 4096),
    model=st.none() | st.text(max_size=20),
    batch_size=st.none() | st.integers(1, 4096),
    amp=st.none() | st.booleans(),
    params_m=st.none() | st.floats(0, 1e6, allow_nan=False),
)


@st.composite
def job_flow(draw: st.DrawFn) -> schema.JobFlow:
    edges = draw(
        st.lists(
            st.floats(1.0, 1e6, allow_nan=False),
            min_size=1,
            max_size=schema.MAX_FLOW_EDGES,
            unique=True,
        ).map(sorted)
    )
    n = len(edges) + 1
    return schema.JobFlow(
        edges_s=tuple(edges),
        running_by_age=tuple(draw(st.lists(gpus, min_size=n, max_size=n))),
        pending_by_level=schema.LevelGpus(
            L1=draw(gpus), L2=draw(gpus), L3=draw(gpus), EX=draw(gpus)
        ),
        pending_by_wait=tuple(draw(st.lists(gpus, min_size=n, max_size=n))),
        submitted_jobs=draw(counts),
        submitted_gpus=draw(gpus),
        started_jobs=draw(counts),
        started_gpus=draw(gpus),
        finished_jobs=draw(counts),
        finished_gpus=draw(gpus),
        finished_by_duration=tuple(draw(st.lists(counts, min_size=n, max_size=n))),
    )


@st.composite
def tenant_window(draw: st.DrawFn) -> schema.TenantWindow:
    start = draw(st.floats(0, 4e9 - 3600, allow_nan=False))
    return schema.TenantWindow(
        tenant=draw(ids),
        window_start=start,
        window_end=start + draw(st.floats(1, 3600, allow_nan=False)),
        hosts=draw(counts),
        gpus_busy=draw(gpus),
        instances=draw(gpus),
        util_sum=draw(st.floats(0, 1e9, allow_nan=False)),
        level_counts=schema.LevelCounts(
            L1=draw(counts), L2=draw(counts), L3=draw(counts), EX=draw(counts)
        ),
        effective_demand_gpus=draw(gpus),
        pending_gpus=draw(gpus),
        running_gpus=draw(gpus),
        quota_gpus=draw(st.none() | gpus),
        samples=draw(counts),
        lost_snapshots=draw(counts),
        flow=draw(st.none() | job_flow()),
    )


@st.composite
def scaling_event(draw: st.DrawFn) -> schema.ScalingEvent:
    current = float(draw(st.integers(0, 10_000)))
    delta = float(draw(st.integers(1, 1000)))
    up = draw(st.booleans())
    target = current + delta if up else max(current - delta, 0.0)
    if target == current:
        target, up = current + delta, True
    return schema.ScalingEvent(
        event_id=draw(ids),
        plan_id=draw(ids),
        ts=draw(epoch),
        time="2026-01-01T00:00:00Z",
        tenant=draw(ids),
        action="scale_up" if up else "scale_down",
        current_quota_gpus=current,
        target_quota_gpus=target,
        delta_gpus=target - current,
        forecast=schema.Forecast(horizon_s=3600.0, p50=draw(gpus), p90=draw(gpus)),
        reason=draw(st.sampled_from(["forecast_above_quota", "forecast_below_quota"])),
        message=draw(st.text(max_size=80)),
        model=schema.ModelInfo(name="dprobe-mmoe", version="1"),
    )


dead_letter = st.builds(
    schema.DeadLetter,
    source_topic=ids,
    partition=st.integers(-1, 1000),
    offset=st.integers(-1, 2**40),
    reason=ids,
    error=st.text(max_size=200),
    raw=st.binary(max_size=64).map(lambda b: __import__("base64").b64encode(b).decode()),
    ts=epoch,
)

ANY_MESSAGE = {
    schema.HostSnapshot: host_snapshot(),
    schema.JobEvent: job_event,
    schema.TenantWindow: tenant_window(),
    schema.ScalingEvent: scaling_event(),
    schema.DeadLetter: dead_letter,
}

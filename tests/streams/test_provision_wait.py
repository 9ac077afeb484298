"""A topic created a moment ago may be described without its partitions yet (on a fresh
broker, while it also creates its consumer-offsets topic): the worker waits for them
instead of building its app for topics of 0 partitions."""

from __future__ import annotations

from typing import Any

from dprobe.streams.provision import wait_for_partitions


class _Admin:
    """Describes the topics without partitions ``empty_for`` times, then with them."""

    def __init__(self, empty_for: int) -> None:
        self.empty_for = empty_for
        self.calls = 0

    async def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        self.calls += 1
        n = 0 if self.calls <= self.empty_for else 4
        return [{"topic": t, "partitions": [{"partition": i} for i in range(n)]} for t in topics]


async def test_partitions_are_read_once_the_broker_reports_them() -> None:
    admin = _Admin(empty_for=3)
    got = await wait_for_partitions(admin, ["a.samples", "a.jobs"])  # type: ignore[arg-type]
    assert got == {"a.samples": 4, "a.jobs": 4}
    assert admin.calls == 4


async def test_the_wait_is_bounded() -> None:
    admin = _Admin(empty_for=10**9)
    got = await wait_for_partitions(admin, ["a.samples"], wait_s=0.5)  # type: ignore[arg-type]
    assert got == {"a.samples": 0}
    assert 2 <= admin.calls <= 5

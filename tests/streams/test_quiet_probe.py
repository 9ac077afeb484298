"""The quiet probe as the worker runs it, on its Kafka consumer's thread: its answer, a
lookup that hangs (given up on that thread, so it cannot hold the thread) and one that
fails (no partition counts as quiet; the idle clock times them as before). The lookups
themselves are tested against a real broker in ``test_quiet_sources.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from dprobe.streams.quiet_sources import quiet_taken_over


class FakeConsumer:
    """What ``quiet_partitions`` asks of aiokafka's consumer; partition 0 read to its
    end and quiet, partition 1 with records left."""

    def __init__(self, *, hang: bool = False, fail: bool = False) -> None:
        self.hang, self.fail = hang, fail
        self.cancelled = False

    async def beginning_offsets(self, tps: list[Any]) -> dict[Any, int]:
        if self.fail:
            raise ConnectionError("broker gone")
        if self.hang:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled = True
                raise
        return dict.fromkeys(tps, 0)

    async def end_offsets(self, tps: list[Any]) -> dict[Any, int]:
        return dict.fromkeys(tps, 5)

    async def offsets_for_times(self, times: dict[Any, int]) -> dict[Any, None]:
        return dict.fromkeys(times)

    async def committed(self, tp: Any) -> int:
        return 5 if tp.partition == 0 else 3


def _faust_consumer(consumer: FakeConsumer) -> Any:
    async def call_thread(fun: Callable[[], Awaitable[Any]]) -> Any:
        return await fun()

    return SimpleNamespace(
        _thread=SimpleNamespace(call_thread=call_thread, _ensure_consumer=lambda: consumer)
    )


async def test_the_probe_answers_through_the_consumer_thread() -> None:
    got = await quiet_taken_over(_faust_consumer(FakeConsumer()), "samples", [1, 0, 1], 30.0)
    assert got == {0}


async def test_a_lookup_that_hangs_is_given_up_on_the_thread_and_counts_nothing_quiet() -> None:
    consumer = FakeConsumer(hang=True)
    got = await quiet_taken_over(_faust_consumer(consumer), "samples", [0], 30.0, timeout_s=0.05)
    assert got == set()
    assert consumer.cancelled  # the thread's work was stopped, not left running


async def test_a_lookup_that_fails_counts_nothing_quiet() -> None:
    got = await quiet_taken_over(_faust_consumer(FakeConsumer(fail=True)), "samples", [0], 30.0)
    assert got == set()

"""Eager delivery: a coroutine run in the caller until it blocks, then finished by a task
exactly as its own task would have (results, exceptions, cancellation), and faust's
consumer taking the eager path only for its per-record delivery race."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dprobe.config import WorkerSettings
from dprobe.streams.eager_delivery import EagerConsumer, start_eagerly
from tests.streams.helpers import bare_consumer, unstarted_worker_app


async def _value(x: int) -> int:
    return x


async def _boom() -> None:
    raise ValueError("bad record")


def test_a_coroutine_that_never_blocks_finishes_in_the_caller() -> None:
    async def main() -> None:
        before = len(asyncio.all_tasks())
        assert start_eagerly(_value(7)) == (True, 7)
        assert len(asyncio.all_tasks()) == before  # no task was made for it

    asyncio.run(main())


def test_an_exception_before_blocking_reaches_the_caller() -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match="bad record"):
            start_eagerly(_boom())

    asyncio.run(main())


def test_a_blocked_coroutine_goes_on_in_a_task_with_its_result_and_its_steps() -> None:
    steps: list[str] = []

    async def main() -> None:
        gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def work() -> int:
            steps.append("before")
            got = await gate
            steps.append("between")
            await asyncio.sleep(0)  # a bare yield on the way
            steps.append("after")
            return got * 2

        finished, task = start_eagerly(work())
        assert not finished and steps == ["before"]
        await asyncio.sleep(0)
        assert not task.done()
        gate.set_result(21)
        assert await task == 42

    asyncio.run(main())
    assert steps == ["before", "between", "after"]


def test_a_failed_await_raises_inside_the_coroutine_which_may_handle_it() -> None:
    async def main() -> None:
        gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def work() -> str:
            try:
                await gate
            except KeyError as exc:
                return f"handled {exc}"
            return "not reached"

        _, task = start_eagerly(work())
        gate.set_exception(KeyError("k"))
        assert await task == "handled 'k'"

    asyncio.run(main())


def test_cancelling_the_task_cancels_what_the_coroutine_waits_on() -> None:
    """A put blocked on a full queue, cancelled (as a suspended flow does): the coroutine
    sees CancelledError at its await, the queue's waiting putter is gone, the item is not
    put, and the task ends cancelled."""
    seen: list[str] = []

    async def main() -> None:
        queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
        queue.put_nowait(1)

        async def deliver() -> None:
            try:
                await queue.put(2)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        finished, task = start_eagerly(deliver())
        assert not finished
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert queue.qsize() == 1 and queue.get_nowait() == 1
        assert not queue._putters  # type: ignore[attr-defined]

    asyncio.run(main())
    assert seen == ["cancelled"]


def test_cancelling_during_a_bare_yield_throws_into_the_coroutine() -> None:
    seen: list[str] = []

    async def main() -> None:
        async def spin() -> None:
            try:
                for _ in range(1_000_000):
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        _, task = start_eagerly(spin())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["cancelled"]


def test_the_worker_consumes_through_the_eager_consumer(tmp_path: Path) -> None:
    with unstarted_worker_app(WorkerSettings(data_dir=tmp_path)) as built:
        assert isinstance(built.app.consumer, EagerConsumer)


def test_the_consumer_delivers_eagerly_while_the_flow_is_on() -> None:
    async def main() -> None:
        with bare_consumer(EagerConsumer) as consumer:
            before = len(asyncio.all_tasks())
            waiting = consumer.suspend_flow.wait()
            result = await consumer.wait_first(_value(5), waiting)
            assert result.done and result.results == [5]
            assert waiting.cr_frame is None  # closed, never run: no "never awaited" warning
            assert len(asyncio.all_tasks()) == before

    asyncio.run(main())


def test_a_blocked_delivery_still_gives_way_to_a_suspended_flow() -> None:
    """faust's race, kept: a delivery that blocks is cancelled when the flow is
    suspended first (a rebalance), and the item never lands."""

    async def main() -> None:
        queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
        queue.put_nowait(1)
        delivered: list[int] = []

        async def deliver() -> None:
            await queue.put(2)
            delivered.append(2)

        with bare_consumer(EagerConsumer) as consumer:
            asyncio.get_running_loop().call_later(0.05, consumer.suspend_flow.set)
            await consumer.wait_first(deliver(), consumer.suspend_flow.wait())
            await asyncio.sleep(0.01)
        assert delivered == [] and queue.qsize() == 1
        assert not queue._putters  # type: ignore[attr-defined]

    asyncio.run(main())


def test_a_blocked_delivery_that_gets_room_lands() -> None:
    async def main() -> None:
        queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
        queue.put_nowait(1)

        async def deliver() -> str:
            await queue.put(2)
            return "landed"

        with bare_consumer(EagerConsumer) as consumer:
            asyncio.get_running_loop().call_later(0.05, queue.get_nowait)
            result = await consumer.wait_first(deliver(), consumer.suspend_flow.wait())
            assert result.results == ["landed"]
        assert queue.get_nowait() == 2

    asyncio.run(main())


def test_other_waits_are_faust_own() -> None:
    """Any other use of wait_first (another event, a timeout) answers as faust's does."""

    async def main() -> None:
        other = asyncio.Event()
        other.set()
        with bare_consumer(EagerConsumer) as consumer:
            ours = await consumer.wait_first(other.wait(), timeout=1.0)
            faust_own = await super(EagerConsumer, consumer).wait_first(other.wait(), timeout=1.0)
            assert (ours.results, ours.stopped) == (faust_own.results, faust_own.stopped)
            assert ours.results == [True]

    asyncio.run(main())

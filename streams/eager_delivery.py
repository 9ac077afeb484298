"""Faust's consumer hands a record to the streams without four tasks per record.

faust's fetcher passes every record it reads to the streams with
``wait_first(callback(record), suspend_flow.wait())``: four tasks and an ``asyncio.wait``
per record, so that a delivery blocked on a full stream buffer gives way when a rebalance
suspends the flow. Nearly every delivery finishes without ever blocking (the buffer has
room, the flow is on); in a profile of the worker catching up on a backlog, that
bookkeeping took about a fifth of its main thread's samples. :class:`EagerConsumer`
runs the delivery at once instead and falls back to the same race only when the delivery
blocks: what is delivered, in which order, and what a suspended flow cancels stay as they
were.

Example:
    >>> import asyncio
    >>> async def quick():
    ...     return 42
    >>> async def demo():
    ...     return start_eagerly(quick())
    >>> asyncio.run(demo())
    (True, 42)
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from faust.transport.drivers.aiokafka import Consumer
from mode.services import WaitResults

_EVENT_WAIT = asyncio.Event.wait.__code__


def start_eagerly(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Run ``coro`` in the calling task until it first blocks.

    Returns ``(True, its result)`` when it finished without blocking (an exception it
    raised propagates), else ``(False, a task that goes on with it)``: that task resumes
    the coroutine as its own task would have, and cancelling it cancels what the
    coroutine waits on.
    """
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return True, stop.value
    return False, asyncio.ensure_future(_go_on(coro, yielded))


async def _go_on(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """Drive ``coro``, which has just yielded ``yielded`` to its task, to its end."""
    while True:
        cancelled: BaseException | None = None
        try:
            if yielded is None:  # a bare yield (asyncio.sleep(0)): resume next round
                await asyncio.sleep(0)
            else:  # a future it awaits: resume once that is done, whatever its outcome
                yielded._asyncio_future_blocking = False
                await asyncio.wait([yielded])
        except asyncio.CancelledError as exc:
            # as Task.cancel does: cancel what the coroutine waits on, and let it see
            # the cancellation through its own await
            if yielded is None or not yielded.cancel():
                cancelled = exc
        try:
            yielded = coro.send(None) if cancelled is None else coro.throw(cancelled)
        except StopIteration as stop:
            return stop.value


def _is_wait_of(coro: Any, event: asyncio.Event) -> bool:
    """Whether ``coro`` is ``event.wait()``, not yet started."""
    frame = getattr(coro, "cr_frame", None)
    return (
        getattr(coro, "cr_code", None) is _EVENT_WAIT
        and frame is not None
        and frame.f_locals.get("self") is event
    )


class EagerConsumer(Consumer):
    """faust's aiokafka consumer whose per-record delivery runs eagerly (module doc).

    Install it before the app's consumer is created:
    ``app.transport.Consumer = EagerConsumer``.
    """

    async def wait_first(
        self,
        *coros: Any,
        timeout: Any = None,  # noqa: ASYNC109 - faust's signature
    ) -> WaitResults:
        if (
            len(coros) == 2
            and timeout is None
            and asyncio.iscoroutine(coros[0])
            and _is_wait_of(coros[1], self.suspend_flow)
            and not self.suspend_flow.is_set()
        ):
            finished, out = start_eagerly(coros[0])
            if finished:
                coros[1].close()  # never started: nothing to wait for
                return WaitResults([coros[0]], [out], stopped=False)
            return await super().wait_first(out, coros[1])
        return await super().wait_first(*coros, timeout=timeout)

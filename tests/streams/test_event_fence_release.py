"""A worker that loses planning stops its event producer in the background, but never in
the middle of a transaction; no broker needed (a stand-in producer records its calls)."""

from __future__ import annotations

import asyncio

from dprobe.streams.event_fence import FencedEvents


class Producer:
    """Records what happens to it; ``commit_transaction`` waits for ``gate``."""

    def __init__(self, gate: asyncio.Event) -> None:
        self.log: list[str] = []
        self.gate = gate

    async def start(self) -> None:
        self.log.append("start")

    async def stop(self) -> None:
        self.log.append("stop")

    async def begin_transaction(self) -> None:
        self.log.append("begin")

    async def send(self, topic: str, value: bytes, key: bytes) -> asyncio.Future[None]:
        self.log.append(value.decode())
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def commit_transaction(self) -> None:
        await self.gate.wait()
        self.log.append("commit")

    async def abort_transaction(self) -> None:
        self.log.append("abort")


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def _sink() -> tuple[FencedEvents, list[Producer], asyncio.Event]:
    gate = asyncio.Event()
    made: list[Producer] = []
    sink = FencedEvents(lambda: made.append(Producer(gate)) or made[-1], "events")
    return sink, made, gate


def test_a_released_producer_is_stopped_without_waiting_for_the_next_claim() -> None:
    async def run() -> list[list[str]]:
        sink, made, gate = await _sink()
        gate.set()
        await sink.send_all([(b"a", b"e1")])
        sink.release()  # planning went to another worker
        await _settle()
        assert made[0].log[-1] == "stop", made[0].log
        await sink.send_all([(b"a", b"e2")])  # planning came back: a new producer
        await sink.close()
        return [p.log for p in made]

    first, second = asyncio.run(run())
    assert first == ["start", "begin", "e1", "commit", "stop"]
    assert second == ["start", "begin", "e2", "commit", "stop"]


def test_a_release_during_a_transaction_stops_the_producer_only_after_it_commits() -> None:
    async def run() -> list[str]:
        sink, made, gate = await _sink()
        sending = asyncio.create_task(sink.send_all([(b"a", b"e1"), (b"b", b"e2")]))
        await _settle()  # the transaction waits in its commit
        sink.release()
        await _settle()
        assert "stop" not in made[0].log, made[0].log
        gate.set()
        await sending
        await _settle()
        await sink.close()
        assert len(made) == 1
        return made[0].log

    assert asyncio.run(run()) == ["start", "begin", "e1", "e2", "commit", "stop"]


def test_a_release_before_any_producer_or_outside_a_loop_is_harmless() -> None:
    gate = asyncio.Event()
    made: list[Producer] = []
    sink = FencedEvents(lambda: made.append(Producer(gate)) or made[-1], "events")
    sink.release()  # nothing started yet, no running loop
    assert made == []
    asyncio.run(sink.close())


def test_a_rebalance_while_the_producer_starts_leaves_that_producer_stale() -> None:
    class SlowStart(Producer):
        async def start(self) -> None:
            await self.gate.wait()
            self.log.append("start")

    async def run() -> list[list[str]]:
        gate = asyncio.Event()
        made: list[Producer] = []
        sink = FencedEvents(lambda: made.append(SlowStart(gate)) or made[-1], "events")
        claiming = asyncio.create_task(sink.claim())
        await _settle()
        sink.release()  # a rebalance began while the producer was starting
        gate.set()
        await claiming
        await sink.send_all([(b"a", b"e1")])  # so the events go through a fresh one
        await sink.close()
        return [p.log for p in made]

    first, second = asyncio.run(run())
    assert first == ["start", "stop"]
    assert second == ["start", "begin", "e1", "commit", "stop"]

"""Between the end of the worker's startup handlers and faust's own, a stop signal is
not left to the default handlers (SIGTERM would end the worker with no word, status 143):
it is noted, and handed to faust's handlers once they are in place, which stop the
worker cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import faust
import pytest

from dprobe.streams.runner import _Worker
from dprobe.streams.startup_stop import StartupStop


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_after_the_startup_handlers_is_noted_not_fatal(sig: signal.Signals) -> None:
    loop = asyncio.new_event_loop()
    try:
        with StartupStop(loop) as stop:
            stop.hand_over()
        os.kill(os.getpid(), sig)  # the default handlers would end this process
        loop.run_until_complete(asyncio.sleep(0.1))
        assert stop.noted == sig and stop.received is None
        for s in (signal.SIGTERM, signal.SIGINT):  # faust puts its own in their place
            loop.remove_signal_handler(s)
    finally:
        loop.close()


def test_without_hand_over_the_default_handlers_are_back() -> None:
    loop = asyncio.new_event_loop()
    try:
        with StartupStop(loop):
            pass
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        loop.close()


def test_faust_s_handlers_are_handed_the_noted_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    installed: list[str] = []
    scheduled: list[signal.Signals] = []
    monkeypatch.setattr(
        faust.Worker, "install_signal_handlers", lambda self: installed.append("faust")
    )
    worker: Any = _Worker.__new__(_Worker)
    worker._schedule_shutdown = scheduled.append
    worker.startup = None
    _Worker.install_signal_handlers(worker)
    assert (installed, scheduled) == (["faust"], [])  # nothing noted: nothing to hand over

    loop = asyncio.new_event_loop()
    try:
        with StartupStop(loop) as stop:
            stop.hand_over()
        stop._note(signal.SIGTERM)
        for s in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(s)
    finally:
        loop.close()
    worker.startup = stop
    _Worker.install_signal_handlers(worker)
    assert (installed, scheduled) == (["faust", "faust"], [signal.SIGTERM])

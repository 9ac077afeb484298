"""Fixtures of the archive tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.sinks.consumer_tasks import TasksSince


@pytest.fixture
async def consumer_tasks() -> AsyncIterator[TasksSince]:
    """The tasks a test's archive starts; those still running when it ends (the fetcher
    of a consumer stopped while its broker hung) are cancelled, so that they do not go on
    logging connection errors into the tests after it (the event loop is the session's)."""
    tasks = TasksSince()
    yield tasks
    left = tasks.running()
    for task in left:
        task.cancel()
    if left:
        await asyncio.wait(left, timeout=5.0)

"""The asyncio tasks a test starts: what an archive leaves running once it has stopped."""

from __future__ import annotations

import asyncio
from typing import Any


class TasksSince:
    """The asyncio tasks started since a test began (an archive's Kafka consumer's)."""

    def __init__(self) -> None:
        self.before = asyncio.all_tasks()

    def running(self) -> set[asyncio.Task[Any]]:
        """Those started since, other than the test's own, that have not ended."""
        mine = asyncio.current_task()
        return {t for t in asyncio.all_tasks() - self.before if not t.done() and t is not mine}

    async def still_running_after(self, wait_s: float) -> set[asyncio.Task[Any]]:
        """Those that still run ``wait_s`` seconds on (a task ends once its connection
        closes, at the next turns of the loop)."""
        if left := self.running():
            await asyncio.wait(left, timeout=wait_s)
        return self.running()

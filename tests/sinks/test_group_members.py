"""``group_members`` counts a group's members from the broker's answer, and raises the
broker's error when that answer describes no group (a coordinator still loading lists
no member although some may run), so the worker's window-length check does not take
such a group for an empty one and mark its planning topic."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import GroupLoadInProgressError, KafkaError

from dprobe.config import WorkerSettings
from dprobe.sinks.consumer_lag import group_members
from dprobe.streams import group_window
from dprobe.streams.group_window import check_group_window


class _Admin:
    """Answers DescribeGroups with one group: ``(error, id, state, protocol type,
    protocol, members)``, the fields of the broker's response that are read."""

    def __init__(self, error: int, members: int, group: str = "g") -> None:
        row = (error, group, "Stable" if members else "Empty", "consumer", "", [()] * members)
        self.response = SimpleNamespace(groups=[row])

    async def describe_consumer_groups(self, groups: list[str]) -> list[Any]:
        return [self.response]


@pytest.mark.parametrize("members", [0, 3])
async def test_members_of_a_described_group(members: int) -> None:
    assert await group_members(_Admin(0, members), "g") == members  # type: ignore[arg-type]


async def test_an_unknown_group_has_no_member() -> None:
    assert await group_members(_Admin(69, 0), "g") == 0  # type: ignore[arg-type]


async def test_another_group_in_the_answer_is_not_counted() -> None:
    assert await group_members(_Admin(0, 2, group="other"), "g") == 0  # type: ignore[arg-type]


async def test_a_coordinator_still_loading_raises_instead_of_reading_as_empty() -> None:
    with pytest.raises(GroupLoadInProgressError):
        await group_members(_Admin(14, 0), "g")  # type: ignore[arg-type]


async def test_the_window_check_does_not_start_a_group_it_could_not_describe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # True would make the worker mark the length as if it started the group
    monkeypatch.setattr(group_window, "DESCRIBE_WAIT_S", 0.3)
    s = WorkerSettings(app_id="g")
    assert await check_group_window(_Admin(14, 0), s, "g-planning") is False
    assert issubclass(GroupLoadInProgressError, KafkaError)


class _Loading(_Admin):
    """A coordinator that is loading for the first ``loading`` answers."""

    def __init__(self, loading: int) -> None:
        super().__init__(0, 0)
        self.loading, self.asked = loading, 0

    async def describe_consumer_groups(self, groups: list[str]) -> list[Any]:
        self.asked += 1
        if self.asked <= self.loading:
            return [SimpleNamespace(groups=[(14, "g", "", "", "", [])])]
        return [self.response]


async def test_the_window_check_waits_for_a_coordinator_that_is_loading() -> None:
    # after a broker restart: the group is described once its coordinator has loaded
    admin = _Loading(2)
    assert await check_group_window(admin, WorkerSettings(app_id="g"), "g-planning") is True
    assert admin.asked == 3

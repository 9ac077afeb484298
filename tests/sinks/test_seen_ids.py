"""SeenIds: the bounded set of event ids a consumer uses to drop duplicates."""

from __future__ import annotations

import pytest


def test_seen_ids_forgets_the_oldest_first() -> None:
    from dprobe.sinks.seen_ids import SeenIds

    seen = SeenIds(maxlen=3)
    assert [seen.add(i) for i in ("a", "b", "c", "a", "d")] == [True, True, True, False, True]
    assert "b" not in seen and "a" in seen  # "a" was refreshed by its duplicate, "b" evicted
    with pytest.raises(ValueError, match="maxlen"):
        SeenIds(maxlen=0)

"""A bounded set of recently seen ids, for consumers that drop duplicate events.

ScalingEvent ids are deterministic, so a redelivered or re-produced event carries the
same ``event_id``. Memory is bounded: the oldest ids are forgotten first (a duplicate of
an event older than the last ``maxlen`` ones would pass again, which a consumer that
applies absolute targets tolerates).

Example:
    >>> seen = SeenIds(maxlen=2)
    >>> seen.add("a"), seen.add("a"), seen.add("b"), seen.add("c"), seen.add("a")
    (True, False, True, True, True)
    >>> len(seen)
    2
"""

from __future__ import annotations

from collections import OrderedDict


class SeenIds:
    """Remembers the last ``maxlen`` distinct ids; :meth:`add` says whether one is new."""

    def __init__(self, maxlen: int = 100_000) -> None:
        if maxlen < 1:
            raise ValueError("maxlen must be >= 1")
        self.maxlen = maxlen
        self._ids: OrderedDict[str, None] = OrderedDict()

    def add(self, event_id: str) -> bool:
        """Record ``event_id``; ``True`` if it was not among the remembered ids."""
        if event_id in self._ids:
            self._ids.move_to_end(event_id)
            return False
        self._ids[event_id] = None
        if len(self._ids) > self.maxlen:
            self._ids.popitem(last=False)
        return True

    def discard(self, event_id: str) -> None:
        """Forget ``event_id``: it counts as new when it comes again."""
        self._ids.pop(event_id, None)

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

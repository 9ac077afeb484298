"""Create Kafka topics and say why the broker refused one.

aiokafka's ``create_topics`` does not raise when the broker refuses a topic: the refusal
(a replication factor above the broker count, no CREATE permission, an invalid name) is
an error code in its response. :func:`create_topics` reads it, so a refused topic is one
clear error instead of a topic that a broker with auto-create later makes with its own
defaults. A topic that already exists (another client was first) is not an error.

Example:
    >>> from types import SimpleNamespace
    >>> refusals(SimpleNamespace(topic_errors=[("a", 0, None), ("b", 36, "exists"),
    ...                                        ("c", 38, "factor: 3 larger than brokers: 1")]))
    ['c: InvalidReplicationFactorError (factor: 3 larger than brokers: 1)']
"""

from __future__ import annotations

from typing import Any

from aiokafka.errors import TopicAlreadyExistsError, for_code

from dprobe.errors import UsageError

_EXISTS = TopicAlreadyExistsError.errno


class TopicCreateError(UsageError):
    """The broker refused to create one or more topics (the reasons in the message).

    ``retriable``: every reason is one that passes by itself (the controller timed out or
    moved), so the same request may succeed later. ``codes``: Kafka's error codes of the
    refusal."""

    def __init__(self, message: str, *, codes: frozenset[int] = frozenset()) -> None:
        super().__init__(message)
        self.codes = codes
        self.retriable = bool(codes) and all(for_code(c).retriable for c in codes)


def refusals(response: Any) -> list[str]:
    """``"topic, topic: ErrorName (message)"`` for each reason the response gives for
    refusing topics, the topics refused for it in order (a broker with too few replicas
    refuses every topic for the same reason: it is said once)."""
    topics: dict[str, list[str]] = {}
    for entry in getattr(response, "topic_errors", []) or []:
        topic, code = entry[0], entry[1]
        if code in (0, _EXISTS):
            continue
        message = entry[2] if len(entry) > 2 and entry[2] else ""
        reason = for_code(code).__name__ + (f" ({message})" if message else "")
        topics.setdefault(reason, []).append(topic)
    return [f"{', '.join(names)}: {reason}" for reason, names in topics.items()]


async def create_topics(admin: Any, new: list[Any]) -> None:
    """Create ``new`` (aiokafka ``NewTopic`` s) with ``admin``; :class:`TopicCreateError`
    naming each refused topic and the broker's reason (exit 2 in a command)."""
    try:
        response = await admin.create_topics(new)
    except TopicAlreadyExistsError:  # an older broker or client raises instead
        return
    refused = refusals(response)
    if refused:
        codes = {e[1] for e in getattr(response, "topic_errors", []) or []} - {0, _EXISTS}
        raise TopicCreateError(
            "Kafka refused to create topic(s): " + "; ".join(refused), codes=frozenset(codes)
        )

"""What a broker's refusal to create topics reads like: one reason, the topics it is for."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from aiokafka.errors import (
    InvalidReplicationFactorError,
    NotControllerError,
    PolicyViolationError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
)

from dprobe.topic_create import TopicCreateError, create_topics, refusals

_REPLICAS = "Unable to replicate the partition 3 time(s): only 1 broker(s) are registered."


def test_topics_refused_for_the_same_reason_share_one_line() -> None:
    rf, policy = InvalidReplicationFactorError.errno, PolicyViolationError.errno
    response = SimpleNamespace(
        topic_errors=[
            ("p.samples", rf, _REPLICAS),
            ("p.jobs", rf, _REPLICAS),
            ("p.ok", 0, None),
            ("p.features", policy, "p.features: name not allowed"),
            ("p.cluster", rf, _REPLICAS),
            ("p.old", 36, "already exists"),  # TopicAlreadyExists: not a refusal
        ]
    )
    assert refusals(response) == [
        f"p.samples, p.jobs, p.cluster: InvalidReplicationFactorError ({_REPLICAS})",
        "p.features: PolicyViolationError (p.features: name not allowed)",
    ]


def test_a_refusal_without_a_message_names_the_error() -> None:
    response = SimpleNamespace(topic_errors=[("p.samples", PolicyViolationError.errno, "")])
    assert refusals(response) == ["p.samples: PolicyViolationError"]


class _Answers:
    """An admin client's stand-in that answers create_topics with fixed error codes."""

    def __init__(self, *codes: int) -> None:
        self.codes = codes

    async def create_topics(self, new: list[str]) -> SimpleNamespace:
        return SimpleNamespace(
            topic_errors=[(t, c, "") for t, c in zip(new, self.codes, strict=True)]
        )


@pytest.mark.parametrize(
    ("codes", "passes"),
    [
        ((RequestTimedOutError.errno,), True),  # the controller did not answer in time
        ((NotControllerError.errno, 0), True),  # the controller moved
        ((InvalidReplicationFactorError.errno,), False),
        ((TopicAuthorizationFailedError.errno,), False),
        ((RequestTimedOutError.errno, PolicyViolationError.errno), False),
    ],
)
async def test_a_refusal_is_retriable_only_when_each_of_its_reasons_passes(
    codes: tuple[int, ...], passes: bool
) -> None:
    with pytest.raises(TopicCreateError) as err:
        await create_topics(_Answers(*codes), [f"p.t{i}" for i in range(len(codes))])
    assert err.value.retriable is passes

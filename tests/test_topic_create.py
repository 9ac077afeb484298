"""What a broker's refusal to create topics reads like: one reason, the topics it is for."""

from __future__ import annotations

from types import SimpleNamespace

from aiokafka.errors import InvalidReplicationFactorError, PolicyViolationError

from dprobe.topic_create import refusals

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

"""What a Kafka client logs while it starts: held back while the start may still fail
(the command's one line then names the cause), passed on when it succeeds."""

from __future__ import annotations

import logging

import pytest

from dprobe.config import KafkaSettings
from dprobe.kafka_auth import connect_error, watching_auth

CONN = logging.getLogger("aiokafka.conn")


def _aiokafka_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("aiokafka")]


def test_a_failed_start_is_one_line_naming_the_cause(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    kafka = KafkaSettings(bootstrap="k1:9093")
    with pytest.raises(OSError), watching_auth(quiet=True) as watch:
        CONN.info("connecting")
        CONN.error('Unable connect to "k1:9093": [SSL: WRONG_VERSION_NUMBER] wrong version')
        raise OSError("Unable to bootstrap from [('k1', 9093)]")
    assert _aiokafka_lines(caplog) == []  # held back, then dropped: the one line says it
    line = str(connect_error(kafka, OSError("Unable to bootstrap"), watch))
    assert line == (
        'cannot reach Kafka at k1:9093: Unable connect to "k1:9093": '
        "[SSL: WRONG_VERSION_NUMBER] wrong version"
    )


def test_a_start_that_succeeds_passes_on_what_the_client_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    with watching_auth(quiet=True):
        CONN.error('Unable connect to "k1:9092": refused')  # k2 answered
        CONN.info("below the level shown: stays out")
        assert _aiokafka_lines(caplog) == []
    assert _aiokafka_lines(caplog) == ['Unable connect to "k1:9092": refused']
    assert not logging.getLogger("aiokafka").handlers  # the watch is gone
    assert logging.getLogger("aiokafka").propagate


def test_a_start_that_succeeds_passes_on_no_progress_reports(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At the default level (INFO) the client's subscription and metadata lines, and the
    "not found" of a topic the command then reads or reports itself, are not passed on."""
    caplog.set_level(logging.INFO)
    with watching_auth(quiet=True):
        logging.getLogger("aiokafka.consumer.subscription_state").info("Updating subscribed")
        logging.getLogger("aiokafka.cluster").error("Topic t not found in cluster metadata")
        logging.getLogger("aiokafka.cluster").error("something else")
        CONN.warning('Unable connect to "k1:9092": refused')
    assert _aiokafka_lines(caplog) == ["something else", 'Unable connect to "k1:9092": refused']


def test_at_debug_nothing_is_held_back(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(OSError), watching_auth(quiet=True):
        CONN.error("refused")
        raise OSError("no")
    assert _aiokafka_lines(caplog) == ["refused"]

"""Broker settings of the topics dprobe creates, shared by every process that creates one.

The samples topic keeps the broker's clock on its records (``LogAppendTime``): the worker
checks a snapshot's event time against its record's time, so a host with a skewed clock
cannot skew the record time too. Whoever creates ``dprobe.samples`` first (the worker,
``dprobe topics create`` or a collector) creates it the same way. The cluster topic and
the worker's changelogs are compacted: the latest record of each key is kept for good.

A topic that exists already is left as it is; :func:`warn_if_unlike` says which of these
settings it lacks, why that matters and the command that sets it.

Example:
    >>> SAMPLES["message.timestamp.type"]
    'LogAppendTime'
    >>> unlike({"cleanup.policy": "compact"}, {"cleanup.policy": "compact,delete"})
    []
    >>> unlike(SAMPLES, {"message.timestamp.type": "CreateTime"})
    [('message.timestamp.type', 'CreateTime', 'LogAppendTime')]
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

log = logging.getLogger(__name__)

SAMPLES: Final[dict[str, str]] = {"message.timestamp.type": "LogAppendTime"}
COMPACTED: Final[dict[str, str]] = {"cleanup.policy": "compact"}

#: what a topic of each kind loses without its settings (for the warning)
WHY: Final[dict[str, str]] = {
    "samples": "its records then carry each collector host's clock, not the broker's, "
    "which the worker's clock-skew check (max_clock_skew_s) and its lookup of quiet "
    "partitions rely on",
    "cluster": "a source's last report is deleted once older than the topic's retention, "
    "so a worker or `dprobe cluster show` started later no longer sees it",
    "changelog": "a worker's table restored from it loses what is older than the topic's retention",
}
SETTINGS: Final[dict[str, dict[str, str]]] = {
    "samples": SAMPLES,
    "cluster": COMPACTED,
    "changelog": COMPACTED,
}


def unlike(wanted: Mapping[str, str], found: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """``(name, found value, wanted value)`` for each of ``wanted`` that ``found`` lacks (a
    cleanup policy that compacts and deletes too still compacts)."""
    out = []
    for name, value in wanted.items():
        there = found.get(name)
        if there is None:  # not described: nothing is known
            continue
        if name == "cleanup.policy" and value in there.split(","):
            continue
        if there != value:
            out.append((name, there, value))
    return out


async def warn_if_unlike(admin: Any, kinds: Mapping[str, str], bootstrap: str) -> None:
    """Log a warning for each topic of ``kinds`` (topic -> ``samples``, ``cluster`` or
    ``changelog``) whose settings are not those dprobe creates it with. Topics that
    cannot be described (missing, no right to describe their settings) are skipped."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    from aiokafka.errors import KafkaError

    if not kinds:
        return
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, t, configs=dict.fromkeys(SETTINGS[k]))
        for t, k in kinds.items()
    ]
    try:
        responses = await admin.describe_configs(resources)
    except KafkaError as exc:
        log.debug("topic settings not checked: %r", exc)
        return
    for response in responses:
        for error, _, _, topic, entries in response.resources:
            if error or topic not in kinds:
                continue
            found = {entry[0]: entry[1] for entry in entries if entry[1] is not None}
            for name, there, value in unlike(SETTINGS[kinds[topic]], found):
                log.warning(
                    "topic %s has %s=%s, not %s as dprobe creates it: %s; set it with "
                    "kafka-configs.sh --bootstrap-server %s --alter --entity-type topics "
                    "--entity-name %s --add-config %s=%s",
                    topic, name, there, value, WHY[kinds[topic]], bootstrap, topic, name,
                    value,
                )  # fmt: skip

"""Broker settings of the topics dprobe creates, shared by every process that creates one.

The samples topic keeps the broker's clock on its records (``LogAppendTime``): the worker
checks a snapshot's event time against its record's time, so a host with a skewed clock
cannot skew the record time too. Whoever creates ``dprobe.samples`` first (the worker,
``dprobe topics create`` or a collector) creates it the same way.

Example:
    >>> SAMPLES["message.timestamp.type"]
    'LogAppendTime'
"""

from __future__ import annotations

from typing import Final

SAMPLES: Final[dict[str, str]] = {"message.timestamp.type": "LogAppendTime"}
COMPACTED: Final[dict[str, str]] = {"cleanup.policy": "compact"}

"""examples/README.md says what the schedulers accept: Volcano's guarantee stays at or
below deserved, Kueue's quota is changed entry by entry, not by a merge patch."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "examples" / "README.md"


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _patches(section: str) -> list[dict]:
    """The JSON bodies of the ``kubectl patch`` commands shown in ``section``."""
    commands = re.findall(r"kubectl patch (?:[^\n\\]|\\\n)*", section)
    bodies = []
    for command in commands:
        words = shlex.split(command.replace("\\\n", " "))
        bodies.append(json.loads(words[words.index("-p") + 1]))
    return bodies


def _gpus(mapping: dict) -> int:
    return int(mapping["nvidia.com/gpu"])


def test_volcano_guarantee_is_capped_at_deserved_and_lowered_first() -> None:
    volcano = _section("Volcano")
    assert "min(setting, `deserved`)" in volcano
    assert "lower the guarantee first" in volcano
    patches = _patches(volcano)
    assert any("guarantee" in p["spec"] for p in patches)
    for patch in patches:
        spec = patch["spec"]
        if "guarantee" in spec and "deserved" in spec:
            assert _gpus(spec["guarantee"]["resource"]) <= _gpus(spec["deserved"])


def test_kueue_section_does_not_promise_a_merge_patch_keeps_the_limits() -> None:
    kueue = _section("Kueue: `kueue_quota_consumer.py`")
    assert "--type=merge" not in kueue
    assert "atomic" in kueue and "resourceVersion" in kueue
    assert "--known-queues" in kueue

"""The README's shell commands for consuming the scaling events: each event reaches a
script as it arrives. kcat buffers its output when it goes to a pipe or a file (a
scheduler's ``kcat ... | while read``) unless given ``-u``, so an event could wait there
until a few kilobytes of later ones pushed it out; ``dprobe events`` flushes every line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _shell_block() -> list[list[str]]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Consuming the scaling events", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    return [shlex.split(line) for line in block.group(1).splitlines() if line.strip()]


def test_kcat_is_shown_unbuffered() -> None:
    kcat = [argv for argv in _shell_block() if argv[0] == "kcat"]
    assert kcat, "the README shows how to read the events with kcat"
    for argv in kcat:
        assert "-C" in argv and "-u" in argv, argv


def test_the_dprobe_events_line_is_a_valid_command() -> None:
    from dprobe.cli import build_parser

    (line,) = [argv for argv in _shell_block() if argv[:2] == ["dprobe", "events"]]
    args = build_parser().parse_args(line[1:])
    assert args.from_beginning

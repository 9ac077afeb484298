"""Small text inputs: a byte-order mark is dropped, and bad UTF-8 is named by the line it
is on in the file as a text editor counts lines (the mark is on line 1 and takes none)."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from dprobe.errors import UsageError
from dprobe.text_input import read_text


@pytest.mark.parametrize("mark", [b"", codecs.BOM_UTF8])
def test_bad_utf8_is_named_by_its_line_with_or_without_a_byte_order_mark(
    tmp_path: Path, mark: bytes
) -> None:
    body = b"a,b\nc,d\n\xff\n"
    p = tmp_path / "t.csv"
    p.write_bytes(mark + body)
    line = body.split(b"\n").index(b"\xff") + 1  # counted in the file as written
    with pytest.raises(UsageError, match=rf"t\.csv:{line}: not UTF-8 text"):
        read_text(p)


def test_a_byte_order_mark_is_not_part_of_the_text(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_bytes(codecs.BOM_UTF8 + "tenant,quota_gpus\nvc-ä,1\n".encode())
    assert read_text(p) == "tenant,quota_gpus\nvc-ä,1\n"
    p.write_bytes(codecs.BOM_UTF8 * 2 + b"x")  # only the first is a mark; the second is text
    assert read_text(p) == "\ufeffx"

"""Where a key of a TOML file (a settings file, a tenant map) is written, for error lines
that name its line."""

from __future__ import annotations


def key_line(text: str, table: str, key: str) -> int | None:
    """The line number of ``key = ...`` in ``[table]`` of ``text`` written plainly (a bare,
    quoted or literal key), else ``None`` (a dotted or inline-table form, say).

    >>> key_line('[kafka]\\nbootstrap = "k:1"\\n[worker]  # mine\\n"window_s" = 5\\n',
    ...          "worker", "window_s")
    4
    >>> key_line("[worker]\\nwindow_s = 5\\n", "lag", "window_s") is None
    True
    """
    forms = {key, f'"{key}"', f"'{key}'"}
    current = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            current = stripped.split("]", 1)[0].strip("[ ")
        elif current == table and stripped.split("=", 1)[0].strip() in forms:
            return number
    return None


def at_line(text: str, table: str, key: str) -> str:
    """`` (line N)`` for :func:`key_line`, else "".

    >>> at_line("[lag]\\ninterval_s = 0\\n", "lag", "interval_s")
    ' (line 2)'
    """
    number = key_line(text, table, key)
    return f" (line {number})" if number else ""

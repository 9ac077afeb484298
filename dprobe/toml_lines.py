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


def key_parts(key: str) -> list[str]:
    """The names of a dotted TOML key or table header, quotes removed.

    >>> key_parts(' pods . "ml/t-0" '), key_parts("'a.b'")
    (['pods', 'ml/t-0'], ['a.b'])
    """
    parts: list[str] = []
    name, quote = "", ""
    for ch in key:
        if quote:
            quote, name = ("", name) if ch == quote else (quote, name + ch)
        elif ch in "\"'":
            quote = ch
        elif ch == ".":
            parts, name = [*parts, name.strip()], ""
        else:
            name += ch
    return [*parts, name.strip()]


def at_path(text: str, *path: str) -> str:
    """`` (line N)`` of the first line of ``text`` that writes ``path`` (a table, a key of
    the top level or of a table, or anything under it: a sub-table, a dotted key), else "";
    unlike :func:`at_line`, which finds a key only where it is written plainly.

    >>> at_path('x = 1\\n[users]\\nbob = 7\\n', "users", "bob"), at_path("", "x")
    (' (line 3)', '')
    >>> at_path('x = 1\\n[pods.sub]\\n', "pods", "sub")
    ' (line 2)'
    >>> at_path('[pods]\\na.b = "x"\\n', "pods", "a")
    ' (line 2)'
    """
    table: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            table = key_parts(stripped.lstrip("[").split("]", 1)[0])
            written = table
        elif "=" in stripped and not stripped.startswith("#"):
            written = table + key_parts(stripped.split("=", 1)[0])
        else:
            continue
        if written[: len(path)] == list(path):
            return f" (line {number})"
    return ""

"""Check a settings file before a service starts with it, or show what a service would run with.

`dprobe config check` builds the settings of every service (kafka, broker, collector,
worker, archive, lag, replay) from the file given with --config (or DPROBE_CONFIG) and the
environment, as each service does when it starts. It prints one line per service that is
fine and, for each that is not, one line per refused setting (all of them, not only the
first), naming the setting and where it was given.
Without a file it says so on stderr: it has then checked the defaults and the environment.
It exits 2 if any service's settings are refused. Like `promtool check config`, it can run
in a deployment pipeline: it talks to no broker. It does read the TLS files the [kafka]
table names, as every service does when it starts.

`dprobe config show SERVICE` prints the settings SERVICE would run with, each with where
its value came from (default, the file, an environment variable, or a flag before or
after the command). Passwords are shown as ***. With --json it prints one JSON document:
{"section": {"setting": {"value": ..., "from": "..."}}}.

Examples:
    dprobe --config /etc/dprobe/worker.toml config check
    dprobe --config /etc/dprobe/worker.toml config show worker
    DPROBE_WORKER_WINDOW_S=30 dprobe config show worker --json | jq .worker.window_s
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    from dprobe.config import SERVICES

    sections = [c.section for c in SERVICES]
    p.add_argument("action", choices=["check", "show"], help="check every service, or show one")
    p.add_argument(
        "service",
        nargs="?",
        metavar="SERVICE",  # checked by run(), which names a settings file given here
        help=f"with show: the service ({', '.join(sections)})",
    )
    p.add_argument("--json", action="store_true", help="with show: one JSON document on stdout")


def run(args: argparse.Namespace) -> int:
    from dprobe.config import SERVICES

    parser: argparse.ArgumentParser = args._parser
    sections = [c.section for c in SERVICES]
    if args.service is not None and args.service not in sections:
        if "/" in args.service or "." in args.service:  # `config check /etc/dprobe/x.toml`
            parser.error(
                f"{args.service!r} is a settings file, not a SERVICE: give it with --config "
                f"(dprobe --config {args.service} config {args.action})"
            )
        choices = ", ".join(repr(name) for name in sections)
        parser.error(f"argument SERVICE: invalid choice: {args.service!r} (choose from {choices})")
    if args.action == "check":
        if args.service is not None or args.json:
            parser.error("check takes no SERVICE nor --json: it checks every service")
        return _check(args)
    if args.service is None:
        parser.error("show needs the SERVICE whose settings to show")
    return _show(args)


def _load(cls: type, args: argparse.Namespace, origins: dict[str, str] | None = None) -> Any:
    import os

    from dprobe.config import load

    file = getattr(args, "config", None) or os.environ.get("DPROBE_CONFIG")
    bootstrap = getattr(args, "bootstrap", None)
    return load(
        cls,
        cli={"bootstrap": bootstrap},
        file=file,
        flags=getattr(args, "_flags", None),
        origins=origins,
    )


def _check(args: argparse.Namespace) -> int:
    from dprobe.commands.collect import check_on_start
    from dprobe.commands.worker import check_model
    from dprobe.config import (
        SERVICES,
        CollectorSettings,
        ConfigError,
        KafkaSettings,
        WorkerSettings,
    )
    from dprobe.errors import UsageError

    # what a service checks on start beyond its settings object, before Kafka
    more: dict[type, Callable[[Any], None]] = {
        WorkerSettings: check_model,
        CollectorSettings: check_on_start,
    }
    refused: dict[str, list[str]] = {}  # reason -> the services refused for it
    relative: dict[str, str] = {}  # setting -> its warning, once whatever the services
    with _warnings_of("dprobe.config") as warnings:  # e.g. a misspelt DPROBE_* variable
        for cls in SERVICES:
            origins: dict[str, str] = {}
            try:
                service = _load(cls, args, origins)
                more.get(cls, lambda _: None)(service)
            except UsageError as exc:  # each refused setting on a line of its own
                reasons = exc.problems if isinstance(exc, ConfigError) else (str(exc),)
                for reason in reasons:
                    refused.setdefault(reason, []).append(f"[{cls.section}]")
            else:
                print(f"[{cls.section}] ok")
                relative.update(_relative_paths(_tables(service, cls.section), origins))
    for reason, services in refused.items():  # a file-wide problem is told once
        who = "every service" if len(services) == len(SERVICES) else ", ".join(services)
        print(f"dprobe config: {who} refused: {reason}", file=sys.stderr)
    for warning in [*dict.fromkeys(warnings), *relative.values()]:  # each said once
        print(f"dprobe config: warning: {warning}", file=sys.stderr)
    if not (getattr(args, "config", None) or os.environ.get("DPROBE_CONFIG")):
        print(
            "dprobe config: no settings file given (--config FILE or DPROBE_CONFIG): checked "
            "the defaults and the environment only",
            file=sys.stderr,
        )
    if not refused:
        kafka = _load(KafkaSettings, args)
        placeholders = example_hosts(kafka.bootstrap)
        if placeholders:
            print(
                f"dprobe config: warning: kafka.bootstrap names {', '.join(placeholders)}: "
                "example host names, as in the shipped settings files; set your brokers' "
                "addresses",
                file=sys.stderr,
            )
    return 2 if refused else 0


@contextlib.contextmanager
def _warnings_of(logger_name: str) -> Iterator[list[str]]:
    """The warnings ``logger_name`` logs meanwhile, as texts, instead of logging them."""
    logger = logging.getLogger(logger_name)
    got: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record.getMessage())

    keep = _Keep(logging.WARNING)
    logger.addHandler(keep)
    propagate, logger.propagate = logger.propagate, False
    try:
        yield got
    finally:
        logger.removeHandler(keep)
        logger.propagate = propagate


def _relative_paths(tables: dict[str, dict[str, Any]], origins: dict[str, str]) -> dict[str, str]:
    """A warning for each path a settings file gives relative: a service takes it from
    the folder it starts in (``/`` under systemd), not from the file's."""
    found: dict[str, str] = {}
    for section, table in tables.items():
        for key, value in table.items():
            origin = origins.get(f"{section}.{key}", "")
            path = value if isinstance(value, str) else ""
            given = origin.startswith("config file") and path and _is_path(section, key)
            if given and not os.path.isabs(os.path.expanduser(path)):
                found[f"{section}.{key}"] = (
                    f"{section}.{key} = {path!r} ({origin}) is a relative path: a service "
                    f"takes it from the folder it starts in (here {os.getcwd()}; / under "
                    "systemd): write it in full"
                )
    return found


def _is_path(section: str, key: str) -> bool:
    """Whether setting ``section.key`` is a file or folder path."""
    from dprobe.config import SERVICES

    cls = next((c for c in SERVICES if c.section == section), None)
    fields = {f.name: f for f in dataclasses.fields(cls)} if cls else {}
    return key in fields and "Path" in str(fields[key].type)


def example_hosts(bootstrap: str) -> list[str]:
    """The hosts of ``bootstrap`` under a name reserved for examples (RFC 2606, and the
    ``example.internal`` of the shipped settings files): left as shipped, not a broker.

    >>> example_hosts("kafka-1.example.internal:9092,k2:9092,[::1]:9093,a.example.com")
    ['kafka-1.example.internal', 'a.example.com']
    """
    hosts = []
    for server in bootstrap.split(","):
        host = server.strip().rsplit(":", 1)[0] if "[" not in server else ""
        name = host.lower().rstrip(".")
        suffixes = ("example.internal", "example", "example.com", "example.net", "example.org")
        if any(name == s or name.endswith("." + s) for s in suffixes):
            hosts.append(host)
    return hosts


def _show(args: argparse.Namespace) -> int:
    from dprobe.config import SERVICES

    cls = next(c for c in SERVICES if c.section == args.service)
    origins: dict[str, str] = {}
    settings = _load(cls, args, origins)
    tables = _tables(settings, cls.section)
    if args.json:
        doc = {
            section: {k: {"value": v, "from": origins[f"{section}.{k}"]} for k, v in t.items()}
            for section, t in tables.items()
        }
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    for n, (section, table) in enumerate(tables.items()):
        print(("\n" if n else "") + f"[{section}]")
        width = min(40, max(len(_toml_line(k, v)) for k, v in table.items()))
        for key, value in table.items():
            line = _toml_line(key, value)
            empty = EMPTY_MEANS.get(f"{section}.{key}") if value == "" else None
            said = _comment(origins[f"{section}.{key}"]) + (f": {empty()}" if empty else "")
            print(f"{line:<{width}}  # {said}")
    return 0


def _host_name() -> str:
    import socket

    return f"the host name, here {socket.gethostname()}"


# settings whose empty value stands for something the service works out on start
EMPTY_MEANS: dict[str, Callable[[], str]] = {"collector.host_id": _host_name}


def _tables(settings: Any, section: str) -> dict[str, dict[str, Any]]:
    """The settings as plain tables: ``section`` first, then a nested ``kafka``.

    >>> from dprobe.config import LagSettings
    >>> t = _tables(LagSettings(), "lag")
    >>> list(t), t["lag"]["groups"], t["kafka"]["sasl_password"]
    (['lag', 'kafka'], ['dprobe-worker', 'dprobe-archive'], None)
    """
    from dprobe.config import KafkaSettings

    own: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if isinstance(value, KafkaSettings):
            nested.update(_tables(value, "kafka"))
        else:
            own[f.name] = _plain(value)
    return {section: own, **nested}


def _plain(value: Any) -> Any:
    """A setting's value as JSON and TOML hold it (a secret as ``***``).

    >>> from dprobe.config import Secret
    >>> _plain(Secret("x")), _plain(Path("/a")), _plain((1.0, 2.0))
    ('***', '/a', [1.0, 2.0])
    """
    from dprobe.config import Secret

    if isinstance(value, Secret):
        return "***"
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _toml_line(key: str, value: Any) -> str:
    """``key = value`` in TOML. A value not set is a comment (TOML has no null), and so is
    a password: read back, ``***`` would be taken for it.

    >>> _toml_line("window_s", 60.0), _toml_line("groups", ["a"]), _toml_line("ssl_cafile", None)
    ('window_s = 60.0', 'groups = ["a"]', '# ssl_cafile (not set)')
    >>> _toml_line("sasl_password", "***")
    '# sasl_password = "***" (hidden)'
    """
    if value is None:
        return f"# {key} (not set)"
    if value == "***":
        return f'# {key} = "***" (hidden)'
    return f"{key} = {_toml_value(value)}"


def _toml_value(value: Any) -> str:
    """``value`` as TOML writes it: any character a string holds, control characters
    escaped (JSON's surrogate pairs for characters beyond U+FFFF are not TOML).

    >>> print(_toml_value(['a"b\\n', "ü"]), _toml_value(True), _toml_value(1e-05))
    ["a\\"b\\u000a", "ü"] true 1e-05
    """
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return '"' + "".join(_toml_char(c) for c in value) + '"'
    return json.dumps(value)  # int, float: JSON's numbers are TOML's


def _toml_char(c: str) -> str:
    if c in '"\\':
        return "\\" + c
    if c < " " or c == "\x7f":
        return f"\\u{ord(c):04x}"
    return c


def _comment(text: str) -> str:
    """``text`` safe after ``#``: a line break in it would end the comment."""
    return "".join(f"\\u{ord(c):04x}" if c < " " or c == "\x7f" else c for c in text)

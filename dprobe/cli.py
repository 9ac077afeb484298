"""The ``dprobe`` command line: one entry point, one sub-command per job.

    dprobe [--bootstrap HOST:PORT] [--config FILE] COMMAND ...

Contract (scripts depend on it): ``--json`` prints one JSON document on stdout and nothing
else there (``events --json``, a tail: one per line); human text goes to stderr. Exit 0 on
success, 2 on bad usage or bad input (one-line reason), 1 on other failures. When stdout
is a pipe whose reader has gone (``dprobe collect --backend synthetic --output - | head
-1``, at the second snapshot), the command ends quietly with 141, the status a shell
reports for a tool that SIGPIPE ended (``dprobe events`` ends its tail with 0).

Example:
    >>> main(["broker", "--help"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import logging
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from dprobe.commands._common import nonempty_path
from dprobe.errors import DprobeError
from dprobe.journal_log import (
    PLAIN_FORMAT,
    JournalFormatter,
    error_prefix,
    journal_excepthook,
    stderr_is_journal,
)
from dprobe.log_repeats import RepeatedLines

# name -> (module under dprobe.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("broker", "start, stop or check the local single-node Kafka broker (no Docker)"),
    "collect": ("collect", "run the per-node GPU collector service (NVML or synthetic)"),
    "worker": ("worker", "run a stream worker: windows, forecasts, quota plans"),
    "archive": ("archive", "write the raw topics to hourly Parquet files"),
    "topics": ("topics", "create or list dprobe's topics with the configured partitions"),
    "lag": ("lag", "export consumer-group lag from Kafka (kafka_exporter's names)"),
    "cluster": ("cluster", "publish or show the capacity and quotas the scheduler reports"),
    "replay": ("replay", "replay an archive or a public trace into Kafka"),
    "events": ("events", "tail scaling events, deduplicated"),
    "evaluate": ("evaluate", "forecast accuracy of every model vs baselines on a trace"),
    "simulate": ("simulate", "trace-driven cluster simulation of quota modes and policies"),
    "demo": ("demo", "everything on one machine on an accelerated clock; ends by itself"),
    "config": ("config", "check a settings file, or show what a service would run with"),
}


# top-level modules of the optional extras (`pip install dprobe` alone is the collector's
# install; `dprobe[worker]` adds the stream worker's, `dprobe[all]` every command's)
EXTRAS = frozenset({"faust", "mode", "croniter", "torch", "numpy", "pyarrow", "matplotlib", "tqdm"})
# the extra that holds all a command needs, where one smaller than [all] does
EXTRA_OF = {"worker": "worker", "archive": "archive", "replay": "archive"}

# commands that run once and end: the Kafka client's progress reports (subscriptions,
# metadata, coordinators; for config, the TLS files it loads) are noise beside their own
# lines unless --log-level DEBUG
ONE_SHOT_KAFKA_COMMANDS = frozenset({"topics", "cluster", "replay", "events", "config"})

# what a shell reports for a process that SIGPIPE ended (128 + 13), like `yes | head -1`
BROKEN_PIPE_EXIT = 141


class _Parser(argparse.ArgumentParser):
    """dprobe's parsers: one-line errors; a command's parser refuses, under its own name,
    what it does not know, and a prefix of one of its own flags is that flag even where a
    global option (accepted after the command too) starts the same (``broker --con``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.late_globals: set[argparse.Action] = set()  # global options after the command
        self.refuses_extras = False  # set on a command's parser
        # a value that starts like a negative number is a value, not a flag: `--latencies
        # -1,900` and `--move-latency -1e3` reach the command's own check of the number
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?(,.*)?$")

    def error(self, message: str) -> NoReturn:
        """Bad usage: one line naming the command, the reason and where help is (exit 2),
        like every other refusal of dprobe, instead of argparse's usage block."""
        self.exit(2, f"{error_prefix()}{self.prog}: {message} (see: {self.prog} --help)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and self.refuses_extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def _get_option_tuples(self, option_string: str) -> list[Any]:
        found = super()._get_option_tuples(option_string)
        own = [t for t in found if t[0] not in self.late_globals]
        return own or found


def _add_global_options(p: _Parser, *, after_command: bool = False) -> None:
    """``--bootstrap``, ``--config`` and ``--log-level``: before the command, and also after
    it (``dprobe worker --bootstrap kafka-1:9092``), where a value given overrides the one
    before and an absent one leaves it as it was."""
    where = (
        p.add_argument_group("global options (also accepted before the command)")
        if after_command
        else p
    )
    absent = argparse.SUPPRESS  # after the command: a flag not given sets nothing
    added = [
        where.add_argument(
            "--bootstrap",
            metavar="HOST:PORT",
            default=absent if after_command else None,
            help="Kafka bootstrap servers (env DPROBE_KAFKA_BOOTSTRAP; default 127.0.0.1:9092)",
        ),
        where.add_argument(
            "--config",
            metavar="FILE",
            type=nonempty_path,  # `--config "$UNSET"` must not run on the defaults silently
            default=absent if after_command else None,
            help="TOML settings file (env DPROBE_CONFIG)",
        ),
        where.add_argument(
            "--log-level",
            choices=["DEBUG", "INFO", "WARNING", "ERROR"],
            default=absent if after_command else "INFO",
        ),
    ]
    if after_command:
        p.late_globals.update(added)
        p.refuses_extras = True


def _version() -> str:
    """The installed package's version (``unknown`` when dprobe runs uninstalled)."""
    try:
        return importlib.metadata.version("dprobe")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what is still
    buffered for a closed pipe fails no more (and prints no second error)."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: stdout is no file
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dprobe",
        description=(
            "Watch every GPU process, forecast each tenant's GPU demand and emit quota "
            "scaling events (DProbe, Euro-Par 2024)."
        ),
    )
    _add_global_options(parser)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name, (module, help_text) in COMMANDS.items():
        mod = importlib.import_module(f"dprobe.commands.{module}")
        # a module docstring is the command's help: its reST literals read as `x` there
        description = (mod.__doc__ or "").replace("``", "`")
        p = sub.add_parser(name, help=help_text, description=description)
        p.formatter_class = argparse.RawDescriptionHelpFormatter
        mod.add_arguments(p)
        _add_global_options(p, after_command=True)
        p.set_defaults(_module=mod, _parser=p, _flags={**flag_names(parser), **flag_names(p)})
    return parser


def flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's destination and its long flag, to name in error lines.

    >>> p = argparse.ArgumentParser()
    >>> _ = p.add_argument("-w", "--window", dest="window_s")
    >>> flag_names(p)
    {'help': '--help', 'window_s': '--window'}
    """
    return {a.dest: max(a.option_strings, key=len) for a in parser._actions if a.option_strings}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dprobe`` with ``argv``; return the exit code."""
    try:
        code = _run(argv)
    except BrokenPipeError:  # stdout's reader has gone (`| head`): end quietly
        code = BROKEN_PIPE_EXIT
    except SystemExit as exc:  # --help, --version and bad usage, from argparse
        if not _flush_stdout():
            raise SystemExit(exc.code or BROKEN_PIPE_EXIT) from None
        raise
    if not _flush_stdout():  # what is still buffered shows a gone reader here
        code = code or BROKEN_PIPE_EXIT
    return code


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named by the command they were given to, whose --help lists its flags
        given = list(sys.argv[1:] if argv is None else argv)
        before = args.command in given and unknown[0] in given[: given.index(args.command)]
        (parser if before else args._parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    root = logging.getLogger()
    theirs = list(root.handlers)  # a host program's own (or a test runner's) stay as they are
    logging.basicConfig(level=args.log_level, stream=sys.stderr, format=PLAIN_FORMAT)
    journal = stderr_is_journal(sys.stderr)  # under systemd: priorities, journald's time
    if journal:  # a bug's traceback: error lines too
        sys.excepthook = journal_excepthook
    for handler in root.handlers:
        if handler not in theirs:
            handler.addFilter(RepeatedLines())  # a Kafka client retrying: once a minute
            if journal:
                handler.setFormatter(JournalFormatter())
    try:
        with _client_progress_hidden(args.command in ONE_SHOT_KAFKA_COMMANDS, args.log_level):
            return int(args._module.run(args) or 0)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in EXTRAS:
            raise
        extra = EXTRA_OF.get(args.command, "all")
        print(
            f"{error_prefix()}dprobe {args.command}: needs {exc.name}, which the collector-only "
            f"install leaves out: pip install '.[{extra}]' at the root of the dprobe checkout",
            file=sys.stderr,
        )
        return 2
    except DprobeError as exc:
        print(f"{error_prefix()}dprobe {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


@contextlib.contextmanager
def _client_progress_hidden(one_shot: bool, level: str) -> Iterator[None]:
    """For a one-shot command at the default level, the Kafka client's INFO lines are not
    shown, nor its warning that it retries a send (a topic just created has no leader for
    a moment; a send that fails for good fails the command); its other warnings and errors
    are. The loggers are as they were afterwards."""
    logger = logging.getLogger("aiokafka")
    sender = logging.getLogger("aiokafka.producer.sender")
    before = logger.level
    hide = one_shot and level == "INFO"
    if hide:
        logger.setLevel(logging.WARNING)
        sender.addFilter(_not_a_retried_send)
    try:
        yield
    finally:
        logger.setLevel(before)
        sender.removeFilter(_not_a_retried_send)


def _not_a_retried_send(record: logging.LogRecord) -> bool:
    return not (
        str(record.msg).startswith("Got error produce response") and "retrying" in str(record.msg)
    )


def _flush_stdout() -> bool:
    """Flush stdout; ``False``, with stdout sent to /dev/null, when its reader has gone."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        return False
    return True


def entry() -> NoReturn:  # pragma: no cover - console script
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    entry()

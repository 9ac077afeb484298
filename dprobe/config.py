"""Settings: one frozen, validated object per service, built once in one place.

Precedence, highest first: CLI flags > environment (``DPROBE_*``) > TOML file > default.
Each service's settings live in a TOML table named after its ``section`` (``[collector]``,
``[worker]``, ...); the Kafka client settings shared by every service live in ``[kafka]``
and in ``DPROBE_KAFKA_*`` variables. Nothing is read from the environment at import time.

Example:
    >>> s = load(WorkerSettings, cli={"window_s": 30}, env={"DPROBE_KAFKA_BOOTSTRAP": "k:9092"})
    >>> s.window_s, s.kafka.bootstrap
    (30.0, 'k:9092')
    >>> sasl = {"DPROBE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "DPROBE_KAFKA_SASL_MECHANISM":
    ...         "PLAIN", "DPROBE_KAFKA_SASL_USERNAME": "svc", "DPROBE_KAFKA_SASL_PASSWORD": "pw"}
    >>> load(KafkaSettings, env=sasl).sasl_password
    Secret('***')
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import errno
import itertools
import logging
import math
import os
import re
import stat
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from dprobe.errors import UsageError
from dprobe.schema import LEVELS, MAX_FLOW_EDGES, Gpu
from dprobe.text_input import read_text
from dprobe.toml_lines import at_line, key_line

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def _cache_dir(name: str) -> Path:
    """Default location of local state: ``$XDG_CACHE_HOME/dprobe/NAME`` (~/.cache; a
    relative ``XDG_CACHE_HOME`` is ignored, as the XDG spec says)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = str(Path.home() / ".cache")
    return Path(base) / "dprobe" / name


class ConfigError(UsageError):
    """A setting has an invalid value; the message names the setting and where it came from.

    One error may carry several ``problems`` (every refused setting of a settings file),
    each a message of its own; the error's text is all of them, in order.

    >>> exc = ConfigError("worker.window_s must be > 0", "worker.grace_s must be >= 0")
    >>> exc.problems[1], str(exc)
    ('worker.grace_s must be >= 0', 'worker.window_s must be > 0; worker.grace_s must be >= 0')
    """

    def __init__(self, *problems: str) -> None:
        super().__init__("; ".join(problems))
        self.problems: tuple[str, ...] = problems


def _check_port(name: str, port: int, *, lowest: int = 0) -> None:
    """A TCP port setting within [``lowest``, 65535] (0: any free port), else a ConfigError.

    >>> _check_port("lag.metrics_port", 70000)
    Traceback (most recent call last):
    ...
    dprobe.config.ConfigError: lag.metrics_port must be within [0, 65535]
    """
    if not lowest <= port <= 65_535:
        raise ConfigError(f"{name} must be within [{lowest}, 65535]")


def _check_metrics_addr(section: str, addr: str) -> None:
    """Refuse an empty /metrics address: it binds every interface, which a cleared
    variable (``DPROBE_WORKER_METRICS_ADDR=``) must not do without a word.

    >>> _check_metrics_addr("lag", "")
    Traceback (most recent call last):
    ...
    dprobe.config.ConfigError: lag.metrics_addr is empty: ... 0.0.0.0 ...
    """
    if not addr.strip():
        raise ConfigError(
            f"{section}.metrics_addr is empty: give the address to serve /metrics on "
            "(127.0.0.1 by default; 0.0.0.0 for every interface, only behind a firewall)"
        )


# Kafka refuses any other topic name (and "." and ".." alone); the broker's own message
# arrives only once a client tries to create or produce, so settings check it up front.
_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]*")
MAX_TOPIC_CHARS = 249
_LONGEST_SUFFIX = len("scaling-events")  # the longest name dprobe appends to a prefix


def check_topic_name(what: str, name: str, *, prefix: bool = False) -> None:
    """Refuse a Kafka topic name (or, with ``prefix``, a prefix of dprobe's topic names)
    that the broker would refuse, naming ``what`` and the rule.

    >>> check_topic_name("--topic", "dprobe.samples")
    >>> check_topic_name("replay.topic_prefix", "../", prefix=True)
    Traceback (most recent call last):
    ...
    dprobe.config.ConfigError: replay.topic_prefix '../': Kafka topic names hold only ...
    """
    longest = MAX_TOPIC_CHARS - (_LONGEST_SUFFIX if prefix else 0)
    rule = "letters, digits, '.', '_' and '-'"
    if not _TOPIC_CHARS.fullmatch(name):
        raise ConfigError(f"{what} {name!r}: Kafka topic names hold only {rule}")
    if len(name) > longest:
        raise ConfigError(f"{what}: at most {longest} characters, got {len(name)}")
    if not prefix and not name:
        raise ConfigError(f"{what}: an empty name is not a Kafka topic name")
    if not prefix and name in (".", ".."):
        raise ConfigError(f"{what} {name!r}: '.' and '..' alone are not Kafka topic names")


class Secret:
    """A string that never shows itself in ``repr``/``str`` (logs, tracebacks, --help).

    >>> s = Secret("hunter2"); s, str(s), s.get()
    (Secret('***'), '***', 'hunter2')
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


# the SASL mechanisms a user name and password configure (Kerberos and OAuth are not
# supported: they need a ticket library or a token provider)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class KafkaSettings:
    """Kafka client settings passed to every producer, consumer, admin client and faust app.

    Security settings (SASL/SSL) follow the names of aiokafka's constructor arguments.
    """

    section = "kafka"

    bootstrap: str = DEFAULT_BOOTSTRAP  # HOST:PORT[,HOST:PORT...]; in TOML also a list
    client_id: str = "dprobe"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_password: Secret | None = None
    topic_prefix: str = "dprobe."
    request_timeout_ms: int = 30_000

    def __post_init__(self) -> None:
        _check_servers(self.bootstrap)
        if not self.topic_prefix:  # plain "samples", "jobs" would mix with others' topics
            raise ConfigError("kafka.topic_prefix must not be empty (the default is 'dprobe.')")
        check_topic_name("kafka.topic_prefix", self.topic_prefix, prefix=True)
        if self.request_timeout_ms < 1:
            raise ConfigError("kafka.request_timeout_ms must be >= 1")
        allowed = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}
        if self.security_protocol not in allowed:
            raise ConfigError(f"kafka.security_protocol must be one of {sorted(allowed)}")
        sasl = self.security_protocol.startswith("SASL")
        if sasl and not self.sasl_mechanism:
            raise ConfigError("kafka.sasl_mechanism is required with a SASL security_protocol")
        if self.sasl_mechanism and self.sasl_mechanism not in SASL_MECHANISMS:
            raise ConfigError(
                f"kafka.sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}, "
                f"not {self.sasl_mechanism!r}"
            )
        sasl_names = ("sasl_mechanism", "sasl_username", "sasl_password")
        stray = [n for n in sasl_names if getattr(self, n)]
        if stray and not sasl:  # aiokafka would connect without them, in plain text
            raise ConfigError(
                f"kafka.{', kafka.'.join(stray)} set, but kafka.security_protocol is "
                f"{self.security_protocol}, which sends no credentials: set it to "
                "SASL_PLAINTEXT or SASL_SSL (with kafka.sasl_mechanism), or remove them"
            )
        if sasl and not (self.sasl_username and self.sasl_password):
            raise ConfigError(
                f"kafka.sasl_username and kafka.sasl_password are required with "
                f"sasl_mechanism {self.sasl_mechanism}"
            )
        if self.security_protocol in {"SSL", "SASL_SSL"}:  # the only ones that read them
            for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
                path = getattr(self, name)
                if path is not None and not is_file_of(f"kafka.{name}", Path(path)):
                    raise ConfigError(f"kafka.{name}: {path}: no such file")
                if path is not None and not os.access(path, os.R_OK):  # a root-only key
                    raise ConfigError(
                        f"kafka.{name}: {path}: cannot read: {os.strerror(errno.EACCES)} "
                        "(this user may not read it)"
                    )
            try:
                self.ssl_context()
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                raise ConfigError(
                    "kafka.ssl_cafile, ssl_certfile, ssl_keyfile, ssl_password: "
                    f"cannot load them: {exc}"
                ) from None

    def topic(self, name: str) -> str:
        """Full topic name: ``topic("samples") -> "dprobe.samples"``."""
        return f"{self.topic_prefix}{name}"

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for any aiokafka client (producer, consumer, admin).

        >>> KafkaSettings(bootstrap="b:1").client_kwargs()["bootstrap_servers"]
        'b:1'
        """
        kw: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
            "request_timeout_ms": self.request_timeout_ms,
        }
        if self.sasl_mechanism:
            kw["sasl_mechanism"] = self.sasl_mechanism
            kw["sasl_plain_username"] = self.sasl_username
            kw["sasl_plain_password"] = self.sasl_password.get() if self.sasl_password else None
        if self.security_protocol in {"SSL", "SASL_SSL"}:
            kw["ssl_context"] = self.ssl_context()
        return kw

    def ssl_context(self) -> Any:
        """An ``ssl.SSLContext`` from the configured CA/cert/key files."""
        from aiokafka.helpers import create_ssl_context

        return create_ssl_context(
            cafile=str(self.ssl_cafile) if self.ssl_cafile else None,
            certfile=str(self.ssl_certfile) if self.ssl_certfile else None,
            keyfile=str(self.ssl_keyfile) if self.ssl_keyfile else None,
            password=self.ssl_password.get() if self.ssl_password else None,
        )


@dataclass(frozen=True)
class BrokerSettings:
    """The local single-node Kafka of ``dprobe broker`` (infra/kafka)."""

    section = "broker"

    port: int = 9092
    controller_port: int = 9093
    state_dir: Path = field(default_factory=lambda: _cache_dir("broker"))
    lib_dir: Path = field(default_factory=lambda: _cache_dir("kafka-lib"))
    heap: str = "512m"
    start_timeout_s: float = 120.0
    # a SASL_PLAINTEXT/SCRAM-SHA-512 client port with this one user (tests of credentials)
    sasl_user: str = ""
    sasl_password: Secret | None = None

    def __post_init__(self) -> None:
        _check_port("broker.port", self.port, lowest=1)
        _check_port("broker.controller_port", self.controller_port, lowest=1)
        if self.port == self.controller_port:
            raise ConfigError("broker.port and broker.controller_port must differ")
        if not self.start_timeout_s > 0:
            raise ConfigError("broker.start_timeout_s must be > 0 seconds")
        if not re.fullmatch(r"[1-9][0-9]*[kKmMgG]?", self.heap):
            raise ConfigError(
                f"broker.heap must be a JVM heap size such as 512m or 2g, not {self.heap!r}"
            )
        _check_dir_path("broker.state_dir", self.state_dir)
        _check_dir_path("broker.lib_dir", self.lib_dir)
        if self.sasl_user and not (self.sasl_password and self.sasl_password.get()):
            raise ConfigError("broker.sasl_user needs broker.sasl_password")
        if self.sasl_password and not self.sasl_user:
            raise ConfigError("broker.sasl_password needs broker.sasl_user")


@dataclass(frozen=True)
class CollectorSettings:
    """``dprobe collect``: the per-node collector service."""

    section = "collector"

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    backend: str = "synthetic"
    interval_s: float = 10.0
    host_id: str = ""
    metrics_addr: str = "127.0.0.1"
    metrics_port: int = 9401
    spool_dir: Path = field(default_factory=lambda: _cache_dir("spool"))
    spool_max_bytes: int = 256 * 1024 * 1024
    state_dir: Path = field(default_factory=lambda: _cache_dir("collector"))
    tenant_map: Path | None = None
    tenant_env_vars: tuple[str, ...] = ()
    proc_root: Path = Path("/proc")
    seed: int = 0
    clock_speed: float = 1.0
    tenants: int = 4
    synthetic_gpus: int = 8
    synthetic_procs_per_gpu: int = 2
    pod_log_dir: Path = Path("/var/log/pods")
    compression: str = "zstd"
    send_batch_max: int = 500
    send_timeout_s: float = 15.0
    shutdown_timeout_s: float = 10.0
    spool_fsync: bool = True
    nvml_timeout_s: float = 5.0
    # when the samples topic is missing, the collector creates it like the worker would
    partitions: int = 4
    replication_factor: int = 1

    def __post_init__(self) -> None:
        if not self.interval_s >= MIN_COLLECT_INTERVAL_S:  # a tick costs 3-6 ms of CPU
            raise ConfigError(
                f"collector.interval_s must be at least {MIN_COLLECT_INTERVAL_S} s: a "
                "shorter one keeps a core busy reading and sending snapshots"
            )
        _check_topic_layout("collector", self.partitions, self.replication_factor)
        if self.compression not in {"zstd", "lz4", "gzip", "snappy", "none"}:
            raise ConfigError("collector.compression must be zstd, lz4, gzip, snappy or none")
        for name in ("clock_speed", "send_timeout_s", "nvml_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"collector.{name} must be > 0")
        _check_clock_speed(self.clock_speed, self.interval_s)
        if self.spool_max_bytes < 1024 * 1024:
            raise ConfigError("collector.spool_max_bytes must be at least 1 MiB")
        if not 1 <= self.send_batch_max <= 100_000:  # 0 would never send a snapshot
            raise ConfigError("collector.send_batch_max must be within [1, 100000]")
        if self.shutdown_timeout_s < 0:
            raise ConfigError("collector.shutdown_timeout_s must be >= 0 seconds")
        _check_dir_path("collector.spool_dir", self.spool_dir)
        _check_dir_path("collector.state_dir", self.state_dir)
        if self.backend not in {"nvml", "synthetic"}:
            raise ConfigError("collector.backend must be 'nvml' or 'synthetic'")
        _check_port("collector.metrics_port", self.metrics_port)
        _check_metrics_addr("collector", self.metrics_addr)
        for var in self.tenant_env_vars:  # a name no environment holds would never match
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
                raise ConfigError(
                    f"collector.tenant_env_vars: {var!r} is not an environment variable name"
                )
        for name, most in SYNTHETIC_MAX.items():
            if getattr(self, name) < 1:
                raise ConfigError(f"collector.{name} must be >= 1")
            if getattr(self, name) > most:  # a larger workload takes minutes per tick
                raise ConfigError(f"collector.{name} must be at most {most:,}")
        _check_host_id(self.host_id)


# below this a collector spends most of a core on its own ticks (each takes 3-6 ms of CPU,
# docs/collector.md "Cost"); 1-10 s suits demand profiling
MIN_COLLECT_INTERVAL_S = 0.01

# the fastest clock a collector runs on: a wall second is then 11.6 days of event time
# (far faster ones stamp snapshots millions of years ahead and stall the synthetic
# workload, which steps through the time between ticks)
MAX_CLOCK_SPEED = 1e6


def _exact(value: float) -> str:
    """``value`` as short as ``:g`` writes it, unless that rounds it: a refusal shows the
    value given (``1000001``, not ``1e+06``).

    >>> _exact(1e6), _exact(1000001.0), _exact(0.0005)
    ('1e+06', '1000001.0', '0.0005')
    """
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def _check_clock_speed(speed: float, interval_s: float) -> None:
    """Refuse a clock faster than :data:`MAX_CLOCK_SPEED`, or one that ticks more often
    than every :data:`MIN_COLLECT_INTERVAL_S` of wall time.

    >>> _check_clock_speed(600.0, 60.0)
    >>> _check_clock_speed(1e4, 10.0)
    Traceback (most recent call last):
    ...
    dprobe.config.ConfigError: collector.clock_speed 10000 takes a snapshot every 1 ms of \
wall time at interval_s 10: at most one every 0.01 s (a faster one keeps a core busy); a \
lower clock_speed or a longer interval_s
    """
    if not speed <= MAX_CLOCK_SPEED:
        raise ConfigError(
            f"collector.clock_speed must be at most {MAX_CLOCK_SPEED:g} (a wall second is "
            f"then {MAX_CLOCK_SPEED / 86_400:.1f} days of event time), got {_exact(speed)}"
        )
    if interval_s / speed < MIN_COLLECT_INTERVAL_S * (1 - 1e-9):
        raise ConfigError(
            f"collector.clock_speed {speed:g} takes a snapshot every "
            f"{1000 * interval_s / speed:.3g} ms of wall time at interval_s {interval_s:g}: at "
            f"most one every {MIN_COLLECT_INTERVAL_S} s (a faster one keeps a core busy); a "
            "lower clock_speed or a longer interval_s"
        )


# the largest synthetic workload: a tick of 1,024 GPUs x 64 processes takes about 2 s to
# generate, one of 100,000 GPUs minutes
SYNTHETIC_MAX = {"tenants": 10_000, "synthetic_gpus": 1024, "synthetic_procs_per_gpu": 64}


ZSTD_LEVELS = (-131_072, 22)  # what zstd (and pyarrow's Parquet writer) accept


def _check_topic_layout(section: str, partitions: int, replication_factor: int) -> None:
    """Partitions and replication of a topic a service creates, within what a cluster runs.

    >>> _check_topic_layout("replay", 4, 0)
    Traceback (most recent call last):
    ...
    dprobe.config.ConfigError: replay.partitions must be within [1, 10000] and ...
    """
    if not (1 <= partitions <= 10_000 and 1 <= replication_factor <= 100):
        raise ConfigError(
            f"{section}.partitions must be within [1, 10000] and replication_factor within [1, 100]"
        )


def _check_dir_path(name: str, path: Path) -> None:
    """Refuse a folder that can never be made: one that is a file, or lies under one.

    >>> _check_dir_path("broker.state_dir", Path("/tmp/a/b"))
    >>> _check_dir_path("broker.state_dir", Path("/etc/passwd/b"))
    Traceback (most recent call last):
    ...
    dprobe.config.ConfigError: broker.state_dir: /etc/passwd/b: /etc/passwd is not a folder
    """
    blocked: OSError | None = None  # why the folders below the first one found were unseen
    for folder in (path, *path.parents):
        try:
            mode = folder.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:  # a name too long; a folder above that this user may not enter
            blocked = blocked or exc
            continue
        if not stat.S_ISDIR(mode):
            raise ConfigError(f"{name}: {path}: {folder} is not a folder")
        if blocked is not None:
            denied = blocked.errno == errno.EACCES
            where = f" (this user may not enter {folder})" if denied else ""
            raise ConfigError(f"{name}: {path}: {blocked.strerror}{where}")
        return


def is_file_of(name: str, path: Path) -> bool:
    """Whether ``path`` (given by setting ``name``) is a file; a path that cannot be looked
    at (a name too long, a folder this user may not enter) is refused, naming why.

    >>> is_file_of("kafka.ssl_cafile", Path("/etc/passwd")), is_file_of("x", Path("/no/such"))
    (True, False)
    >>> is_file_of("kafka.ssl_cafile", Path("/" + "a" * 300))
    Traceback (most recent call last):
    ...
    dprobe.config.ConfigError: kafka.ssl_cafile: /aaa...: File name too long
    """
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:  # a name too long; a folder this user may not enter
        raise ConfigError(f"{name}: {path}: {exc.strerror}") from None


# a file name holds at most 255 bytes (NAME_MAX): the seq file is seq-<host>
HOST_ID_MAX_BYTES = 255 - len("seq-")


def _check_host_id(host: str) -> None:
    """A collector's host id: any name a snapshot's ``host`` may hold (host names and
    FQDNs, dots and dashes included) that is also a single file name, since the spool
    lives in ``spool_dir/<host>`` and the seq in ``state_dir/seq-<host>``: at most 251
    bytes in UTF-8 (a file name holds 255). ``""`` stands for the machine's host name.

    >>> _check_host_id("gpu-01.rack-3.example.com")
    >>> _check_host_id("..")
    Traceback (most recent call last):
    ...
    dprobe.config.ConfigError: collector.host_id '..' is not a single folder name ...
    """
    size = len(host.encode("utf-8", errors="surrogatepass"))
    if size > HOST_ID_MAX_BYTES:
        raise ConfigError(
            f"collector.host_id is {size} bytes long in UTF-8, at most {HOST_ID_MAX_BYTES}: "
            "it names the host's spool folder and its seq file seq-<host>, and a file name "
            "holds at most 255 bytes"
        )
    if host in {".", ".."} or any(c in host for c in "/\\\0"):
        raise ConfigError(
            f"collector.host_id {host!r} is not a single folder name (it names the host's "
            "spool folder): no '/', '\\' or NUL, and not '.' or '..'"
        )


@dataclass(frozen=True)
class WorkerSettings:
    """``dprobe worker``: the faust stream worker (windows, forecasts, plans)."""

    section = "worker"

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    app_id: str = "dprobe-worker"
    window_s: float = 60.0
    grace_s: float = 10.0
    source_idle_s: float = 30.0
    partitions: int = 4
    events_partitions: int = 1  # the scaling-events topic: one keeps plans in order
    replication_factor: int = 1
    commit_interval_s: float = 1.0
    # the planning state is checkpointed into Kafka at most this often (0: after every
    # plan); the journal of planning records covers the time in between
    planning_checkpoint_s: float = 300.0
    # scaling events in Kafka transactions that fence a former planning owner (off for
    # brokers without transactions; docs/worker.md)
    fence_events: bool = True
    producer_linger_ms: float = 5.0
    producer_buffer_messages: int = 10_000
    # the most bytes one fetch takes from one partition (faust's default of 1 MiB leaves a
    # worker waiting for its next fetch most of the time when it catches up: docs/worker.md)
    fetch_partition_bytes: int = 8 * 1024 * 1024
    batch_max: int = 500
    batch_within_s: float = 0.1
    model: str = "dprobe-mmoe"
    calibrate: bool = True  # online-calibrated p90 (models/forecast/calibration.py)
    seed: int = 0
    capacity_gpus: int = 64
    node_gpus: int = 8
    guaranteed_gpus: int = 0
    plan_horizon_s: float = 3600.0
    # how the planner sizes and damps quotas (assumptions; docs/planner.md)
    plan_headroom: float = 0.0  # quota = forecast x (1 + headroom)
    plan_tolerance: float = 0.1  # a change within this share of the quota is no change
    plan_cooldown_s: float = 60.0  # no reversal of a tenant's last move within this long
    plan_scale_down_stabilization_s: float = 300.0  # shrink to the highest of this long
    plan_scale_up_stabilization_s: float = 0.0  # grow to the lowest of this long (HPA: 0)
    # rate limits (HPA's behavior policies): per period, up at most max(percent, nodes)
    plan_period_s: float = 15.0
    plan_scale_up_max_percent: float = 100.0
    plan_scale_up_max_nodes: int = 4
    plan_scale_down_max_percent: float = 100.0
    plan_urgent_first: bool = True  # waiting jobs take idle nodes before forecast demand
    # reconfiguration costs the planner acts ahead of (assumptions; docs/planner.md)
    move_latency_s: float = 0.0
    lend_horizon_s: float = 0.0
    forecast_gate: bool = True
    # a tenant that sent no window for this long is forgotten by the forecaster and the
    # planner (0: never); quotas stay (docs/worker.md)
    forget_tenant_after_s: float = 7 * 86_400.0
    lag_interval_s: float = 5.0
    data_dir: Path = field(default_factory=lambda: _cache_dir("worker"))
    metrics_addr: str = "127.0.0.1"
    metrics_port: int = 9402
    # /healthz answers 503 once the event loop has not run for this long (a hung worker)
    health_stale_s: float = 60.0
    # a worker still stopping this long after SIGTERM/SIGINT exits at once (exit 1)
    shutdown_timeout_s: float = 25.0
    # the group drops a worker that sent no heartbeat for this long (a killed or frozen
    # one): its partitions, planning among them, go to the others only then (faust's 60 s)
    session_timeout_s: float = 60.0
    max_message_bytes: int = 1_048_576
    max_clock_skew_s: float = 300.0  # a snapshot this far ahead of its Kafka record: dead letter
    # bounded state: every stored value stays under max_state_bytes (docs/worker.md)
    max_state_bytes: int = 524_288
    window_host_shards: int = 8
    job_book_shards: int = 16
    tenant_index_shards: int = 64
    # DProbe's multi-level demand and the job flow (assumptions; docs/worker.md)
    plan_quantile: str = "p90"
    level_l1_max_util_pct: float = 25.0
    level_l1_max_mem_bytes: float = 3e9
    level_l3_min_util_pct: float = 70.0
    level_l3_min_sm_util_pct: float = 70.0
    level_ex_min_mem_frac: float = 0.9
    level_weights: tuple[float, ...] = (0.3, 0.5, 0.7, 1.0)
    profile_pending: bool = True
    unknown_pending_level: str = "EX"
    flow_edges_s: tuple[float, ...] = (60.0, 240.0, 960.0, 3840.0, 15360.0, 61440.0, 245760.0)

    def __post_init__(self) -> None:
        if self.window_s <= 0 or self.grace_s < 0:
            raise ConfigError("worker.window_s must be > 0 and worker.grace_s >= 0")
        if not 1 <= self.batch_max <= 1_000_000 or self.batch_within_s <= 0:
            raise ConfigError(
                "worker.batch_max must be within [1, 1000000] and worker.batch_within_s > 0"
            )
        if not 65_536 <= self.fetch_partition_bytes <= 1 << 30:
            raise ConfigError("worker.fetch_partition_bytes must be within [65536, 2**30]")
        if not (1 <= self.partitions <= 10_000 and 1 <= self.events_partitions <= 10_000) or not (
            1 <= self.replication_factor <= 100
        ):
            raise ConfigError(
                "worker.partitions must be within [1, 10000] (events_partitions too) and "
                "replication_factor within [1, 100]"
            )
        if not self.max_clock_skew_s > 0:
            raise ConfigError("worker.max_clock_skew_s must be > 0 seconds")
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", self.app_id):
            # it names the consumer group and the worker's own topics
            raise ConfigError(
                "worker.app_id must be 1 to 200 letters, digits, '.', '_' or '-' "
                f"(it names Kafka topics): {self.app_id!r}"
            )
        for name in ("commit_interval_s", "lag_interval_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"worker.{name} must be > 0 seconds")
        if not self.source_idle_s >= 0:
            raise ConfigError("worker.source_idle_s must be >= 0 seconds")
        if not self.health_stale_s >= 5:
            raise ConfigError("worker.health_stale_s must be >= 5 seconds")
        if not 1 <= self.producer_buffer_messages <= 10_000_000:
            raise ConfigError("worker.producer_buffer_messages must be within [1, 10000000]")
        if "{" in str(self.data_dir) or "}" in str(self.data_dir):
            raise ConfigError(f"worker.data_dir may not hold '{{' or '}}': {self.data_dir}")
        if not 0 <= self.planning_checkpoint_s <= 86_400:
            raise ConfigError("worker.planning_checkpoint_s must be within [0, 86400] seconds")
        if not 4_096 <= self.max_state_bytes <= self.max_message_bytes <= 2**31 - 1:
            raise ConfigError(
                "worker.max_state_bytes must be within [4096, worker.max_message_bytes] and "
                "max_message_bytes at most 2147483647 (Kafka's limit)"
            )
        for name in ("window_host_shards", "job_book_shards", "tenant_index_shards"):
            if not 1 <= getattr(self, name) <= 4_096:
                raise ConfigError(f"worker.{name} must be within [1, 4096]")
        if not (
            1 <= self.node_gpus <= self.capacity_gpus <= 10_000_000
            and 0 <= self.guaranteed_gpus <= self.capacity_gpus
        ):
            raise ConfigError(
                "worker.node_gpus must be within [1, worker.capacity_gpus], "
                "worker.guaranteed_gpus within [0, worker.capacity_gpus] and capacity_gpus "
                "at most 10000000"
            )
        damping = (
            self.plan_cooldown_s,
            self.plan_scale_down_stabilization_s,
            self.plan_scale_up_stabilization_s,
        )
        if not (
            0 <= self.plan_headroom <= 10 and 0 <= self.plan_tolerance < 1 and min(damping) >= 0
        ):
            raise ConfigError(
                "worker.plan_headroom must be within [0, 10], plan_tolerance within [0, 1), "
                "plan_cooldown_s and plan_scale_down/up_stabilization_s >= 0"
            )
        rates = (self.plan_scale_up_max_percent, self.plan_scale_down_max_percent)
        period_ok = 0 < self.plan_period_s <= 1800  # HPA's periodSeconds: at most 1800
        if not (period_ok and min(rates) >= 0 and self.plan_scale_up_max_nodes >= 0):
            raise ConfigError(
                "worker.plan_period_s must be within (0, 1800], plan_scale_up_max_percent, "
                "plan_scale_down_max_percent and plan_scale_up_max_nodes >= 0"
            )
        if not (self.plan_horizon_s > 0 and self.move_latency_s >= 0 and self.lend_horizon_s >= 0):
            raise ConfigError(
                "worker.plan_horizon_s must be > 0, move_latency_s and lend_horizon_s >= 0"
            )
        if self.plan_lead_s > MAX_DURATION_S:  # no scaling event carries a longer horizon
            raise ConfigError(
                f"worker.move_latency_s + window_s (the planning lead, {self.plan_lead_s:g} s) "
                f"must be at most {MAX_DURATION_S:g} s"
            )
        if not 0 < self.shutdown_timeout_s <= 3600:
            raise ConfigError("worker.shutdown_timeout_s must be within (0, 3600] seconds")
        if not 6 <= self.session_timeout_s <= 1800:  # Kafka's own group.*.session.timeout.ms
            raise ConfigError("worker.session_timeout_s must be within [6, 1800] seconds")
        if not self.producer_linger_ms >= 0:  # Kafka's linger.ms: 0 or more
            raise ConfigError("worker.producer_linger_ms must be >= 0")
        if self.seed < 0:  # numpy's generators take no negative seed
            raise ConfigError("worker.seed must be >= 0")
        if not self.forget_tenant_after_s >= 0:
            raise ConfigError("worker.forget_tenant_after_s must be >= 0 (0: never)")
        _check_port("worker.metrics_port", self.metrics_port)
        _check_metrics_addr("worker", self.metrics_addr)
        _check_demand_settings(self)

    @property
    def plan_lead_s(self) -> float:
        """How far ahead plans size quotas: the planning horizon, or one move latency plus
        one window if that is longer (capacity moved now serves only after the latency)."""
        return max(self.plan_horizon_s, self.move_latency_s + self.window_s)


def _check_demand_settings(s: WorkerSettings) -> None:
    """Validate the worker's multi-level demand, planner quantile and job flow settings."""
    if s.plan_quantile not in ("p50", "p90"):
        raise ConfigError("worker.plan_quantile must be p50 or p90")
    if s.unknown_pending_level not in LEVELS:
        raise ConfigError("worker.unknown_pending_level must be L1, L2, L3 or EX")
    if len(s.level_weights) != 4 or any(not 0 <= w <= 1 for w in s.level_weights):
        raise ConfigError("worker.level_weights: four weights (L1,L2,L3,EX), each within [0, 1]")
    for name in ("level_l1_max_util_pct", "level_l3_min_util_pct", "level_l3_min_sm_util_pct"):
        if not 0 <= getattr(s, name) <= 100:
            raise ConfigError(f"worker.{name} must be within [0, 100]")
    if not 0 < s.level_ex_min_mem_frac <= 1:
        raise ConfigError("worker.level_ex_min_mem_frac must be within (0, 1]")
    if not 0 <= s.level_l1_max_mem_bytes <= 2**53:
        raise ConfigError("worker.level_l1_max_mem_bytes must be within [0, 2**53]")
    e = s.flow_edges_s
    if (
        not 1 <= len(e) <= MAX_FLOW_EDGES
        or e[0] <= 0
        or any(b <= a for a, b in itertools.pairwise(e))
    ):
        raise ConfigError(
            f"worker.flow_edges_s: 1 to {MAX_FLOW_EDGES} increasing edges > 0 (seconds)"
        )


@dataclass(frozen=True)
class ArchiveSettings:
    """``dprobe archive``: hourly Parquet files of the raw topics (samples, jobs, cluster)."""

    section = "archive"

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    out_dir: Path = Path("archive")
    group_id: str = "dprobe-archive"
    flush_records: int = 200_000
    flush_bytes: int = 64 * 1024 * 1024
    flush_interval_s: float = 60.0
    compression_level: int = 3

    def __post_init__(self) -> None:
        for name in ("flush_records", "flush_bytes", "flush_interval_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"archive.{name} must be > 0")
        if not ZSTD_LEVELS[0] <= self.compression_level <= ZSTD_LEVELS[1]:
            raise ConfigError(
                f"archive.compression_level must be within [{ZSTD_LEVELS[0]}, {ZSTD_LEVELS[1]}] "
                "(zstd's levels; below 1 faster and larger)"
            )
        if not self.group_id.strip():
            raise ConfigError("archive.group_id must name a consumer group")


@dataclass(frozen=True)
class LagSettings:
    """``dprobe lag``: consumer-group lag from Kafka's admin API, in kafka_exporter's names."""

    section = "lag"

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    groups: tuple[str, ...] = ("dprobe-worker", "dprobe-archive")
    topics: tuple[str, ...] = ()  # empty: the topics each group has committed offsets on
    interval_s: float = 15.0
    metrics_addr: str = "127.0.0.1"
    metrics_port: int = 9403

    def __post_init__(self) -> None:
        if not self.groups or not all(g.strip() for g in self.groups):
            raise ConfigError("lag.groups must name at least one consumer group, none empty")
        for topic in self.topics:
            check_topic_name("lag.topics", topic)
        for name, values in (("groups", self.groups), ("topics", self.topics)):
            twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
            if twice is not None:  # a group polled twice serves each series twice
                raise ConfigError(f"lag.{name} names {twice!r} twice: name each once")
        if not self.interval_s > 0:
            raise ConfigError("lag.interval_s must be > 0 seconds")
        _check_port("lag.metrics_port", self.metrics_port)
        _check_metrics_addr("lag", self.metrics_addr)


def _max_gpu_index() -> int:
    """The largest GPU index a snapshot may carry (``dprobe.schema.Gpu.index``)."""
    meta = get_type_hints(Gpu, include_extras=True)["index"].__metadata__
    return int(next(m.le for m in meta if getattr(m, "le", None) is not None))


# The slowest replay: a minute of event time in about 17 hours; slower, a replay of minute
# points would sleep for days (or, at 1e-300, for ever) before its second record.
MIN_REPLAY_SPEED = 0.001

# A replayed host numbers its GPUs 0..gpus_per_host-1; the worker rejects a snapshot with
# an index beyond the schema's bound, so a host of more GPUs would replay nothing.
MAX_GPUS_PER_HOST = _max_gpu_index() + 1


@dataclass(frozen=True)
class ReplaySettings:
    """``dprobe replay``: an archive or a public trace back into Kafka."""

    section = "replay"

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    # replays go to topics of their own unless told otherwise: history replayed into the
    # live topics would be dropped as late by workers that are ahead of it
    topic_prefix: str = "dprobe-replay."
    speed: float = 0.0
    tick_s: float = 60.0
    gpus_per_host: int = 8
    jobs_time_unit_s: float = 60.0
    compression: str = "zstd"
    await_every: int = 20_000
    partitions: int = 4
    replication_factor: int = 1

    def __post_init__(self) -> None:
        if not self.speed >= 0:
            raise ConfigError("replay.speed must be >= 0 (0 or 'max' = as fast as possible)")
        if 0 < self.speed < MIN_REPLAY_SPEED:
            raise ConfigError(
                f"replay.speed must be 0 or 'max', or at least {too_slow(self.speed)}"
            )
        if not self.tick_s >= MIN_COLLECT_INTERVAL_S:  # shorter: a flood of snapshots,
            # and past the precision of an event time, an endless one at a single instant
            raise ConfigError(
                f"replay.tick_s must be at least {MIN_COLLECT_INTERVAL_S:g} s (a collector's "
                f"shortest interval), got {_exact(self.tick_s)}"
            )
        if not self.jobs_time_unit_s > 0:
            raise ConfigError("replay.jobs_time_unit_s must be > 0")
        if not 1 <= self.gpus_per_host <= MAX_GPUS_PER_HOST:
            raise ConfigError(
                f"replay.gpus_per_host must be within [1, {MAX_GPUS_PER_HOST}] "
                f"(a snapshot's GPU index is at most {MAX_GPUS_PER_HOST - 1})"
            )
        if self.compression not in {"zstd", "lz4", "gzip", "snappy", "none"}:
            raise ConfigError("replay.compression must be zstd, lz4, gzip, snappy or none")
        if self.await_every < 1:
            raise ConfigError("replay.await_every must be >= 1")
        _check_topic_layout("replay", self.partitions, self.replication_factor)
        if not self.topic_prefix:
            raise ConfigError("replay.topic_prefix must not be empty")
        check_topic_name("replay.topic_prefix", self.topic_prefix, prefix=True)

    def topic(self, kind: str) -> str:
        """Target topic of a kind: ``topic("samples") -> "dprobe-replay.samples"``."""
        return f"{self.topic_prefix}{kind}"

    @property
    def into_live_topics(self) -> bool:
        """True when the replay writes into the topics live collectors and workers use."""
        return self.topic_prefix == self.kafka.topic_prefix


def too_slow(speed: float) -> str:
    """Why a replay speed below :data:`MIN_REPLAY_SPEED` is refused.

    >>> too_slow(1e-300)
    '0.001 (a minute of event time in 17 h), got 1e-300'
    """
    hours = 60 / MIN_REPLAY_SPEED / 3600
    return f"{MIN_REPLAY_SPEED:g} (a minute of event time in {hours:.0f} h), got {_exact(speed)}"


# The settings of every service: a settings file may hold a table for each.
SERVICES = (
    KafkaSettings,
    BrokerSettings,
    CollectorSettings,
    WorkerSettings,
    ArchiveSettings,
    LagSettings,
    ReplaySettings,
)

S = TypeVar("S")


def load(
    cls: type[S],
    *,
    cli: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    file: Path | str | None = None,
    flags: Mapping[str, str] | None = None,
    origins: dict[str, str] | None = None,
    with_kafka: bool = True,
) -> S:
    """Build ``cls`` from CLI values (``None`` = not given) > ``env`` > TOML ``file`` > defaults.

    ``env`` defaults to ``os.environ`` read at call time. A nested ``kafka`` field is built
    from the same sources (``DPROBE_KAFKA_*``, ``[kafka]``, CLI key ``bootstrap``).
    ``flags`` maps a CLI value's key to the flag that gave it, which error lines name;
    ``origins``, when given, receives where each setting's value came from. Without
    ``with_kafka`` the ``kafka`` settings are not read (nor their TLS files loaded): for a
    command that uses a service's other settings and never connects.
    """
    env = os.environ if env is None else env
    _warn_misspelt_sections(env)
    doc: dict[str, Any] = {}
    where = text = ""
    if file:
        path = Path(file).expanduser()
        doc, text = _read_toml(path)
        _check_sections(doc, path)
        where = f"config file {path}: "
    built = _build(
        cls,
        dict(cli or {}),
        env,
        doc,
        where,
        flags=dict(flags or {}),
        origins=origins,
        with_kafka=with_kafka,
        text=text,
    )
    if isinstance(built, WorkerSettings):
        _warn_frozen_moves(built)
    return built


def _check_sections(doc: dict[str, Any], path: Path) -> None:
    """Every key at the top of a settings file is the table of a service (any service: one
    file may serve them all); a misspelt table or a key outside any table is a ConfigError
    rather than a setting silently left at its default.

    >>> _check_sections({"replya": {"speed": 5}}, Path("d.toml"))
    Traceback (most recent call last):
    ...
    dprobe.config.ConfigError: config file d.toml: unknown section(s) [replya] (did you ...
    """
    known = sorted(c.section for c in SERVICES)
    listed = ", ".join(f"[{k}]" for k in known)
    problems = []
    for key, value in doc.items():
        if key in known and not isinstance(value, dict):
            kind = _kind(value) or "a string"
            problems.append(f"config file {path}: [{key}] must be a table, not {kind}")
    loose = sorted(k for k, v in doc.items() if k not in known and not isinstance(v, dict))
    if loose:
        problems.append(
            f"config file {path}: top-level key(s) {', '.join(loose)} outside any section; "
            f"put each in a section: {listed}"
        )
    unknown = sorted(k for k, v in doc.items() if k not in known and isinstance(v, dict))
    if unknown:
        named = ", ".join(f"[{k}]{_did_you_mean(k, known, '[{}]')}" for k in unknown)
        problems.append(f"config file {path}: unknown section(s) {named}; known: {listed}")
    if problems:
        raise ConfigError(*problems)


def _in_kafka(key: str) -> str:
    """`` (did you mean NAME in [kafka]?)`` for a Kafka setting written in a service's
    table (``bootstrap``, or ``kafka_bootstrap``), else "".

    >>> _in_kafka("kafka_bootstrap"), _in_kafka("window_s")
    (' (did you mean bootstrap in [kafka]?)', '')
    """
    name = key.removeprefix("kafka_")
    return (
        f" (did you mean {name} in [kafka]?)" if name in KafkaSettings.__dataclass_fields__ else ""
    )


def _did_you_mean(name: str, known: list[str], form: str = "{}") -> str:
    """`` (did you mean X?)`` for the known name closest to a misspelt ``name``, else "".

    >>> _did_you_mean("windw_s", ["window_s", "grace_s"]), _did_you_mean("zzz", ["grace_s"])
    (' (did you mean window_s?)', '')
    """
    near = _nearest(name, known)
    return f" (did you mean {form.format(near)}?)" if near else ""


def _nearest(name: str, known: list[str] | set[str]) -> str | None:
    """The known setting a misspelt ``name`` most likely means: the one whose last words
    it is (``gpus``, as ``--gpus`` spells it, for ``synthetic_gpus``), else the closest.

    >>> _nearest("gpus", ["seed", "synthetic_gpus"]), _nearest("windw_s", ["window_s"])
    ('synthetic_gpus', 'window_s')
    """
    tails = [k for k in sorted(known) if k.endswith("_" + name)]
    if len(tails) == 1:
        return tails[0]
    near = difflib.get_close_matches(name, sorted(known), n=1)
    return near[0] if near else None


def _read_toml(path: Path) -> tuple[dict[str, Any], str]:
    """The TOML document at ``path`` and its text; every way it can fail is one
    ``ConfigError`` line.

    >>> _read_toml(Path("/"))
    Traceback (most recent call last):
    ...
    dprobe.config.ConfigError: config file /: cannot read: Is a directory
    """
    text = read_text(path, max_bytes=1 << 20, error=ConfigError, what="config file ")
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None


def _build(
    cls: type[S],
    cli: dict[str, Any],
    env: Mapping[str, str],
    doc: dict[str, Any],
    where: str = "",
    *,
    flags: dict[str, str] | None = None,
    origins: dict[str, str] | None = None,
    with_kafka: bool = True,
    text: str = "",
) -> S:
    """``cls`` from its sources; ``where`` names the config file (whose ``text`` gives the
    line of a refused key) and ``flags`` the command line's flags in error lines; ``origins``
    receives where each setting came from
    (``"worker.window_s" -> "environment DPROBE_WORKER_WINDOW_S"``, else ``"default"``);
    without ``with_kafka`` a nested ``kafka`` is the default, whatever its sources say.

    Every refused setting is told, not only the first: the :class:`ConfigError` carries
    one problem per unknown key, per value of the wrong type and per check the settings
    fail (see :func:`_construct`)."""
    flags = flags or {}
    section: str = getattr(cls, "section")  # noqa: B009 - class attribute, not a field
    table = doc.get(section, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{where}[{section}] must be a table")
    problems: list[str] = []
    hints = get_type_hints(cls)
    values: dict[str, Any] = {}
    given: dict[str, str] = {}  # field -> where its value came from, for error lines
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = [f.name for f in fields]
    unknown = sorted(set(table) - set(names))
    if unknown:
        # a nested KafkaSettings is set in [kafka], never here: not a name to suggest
        settable = [n for n in names if hints[n] is not KafkaSettings]
        kafka_too = len(settable) < len(names)  # the service reads [kafka] as well
        named = ", ".join(
            k
            + ((kafka_too and _in_kafka(k)) or _did_you_mean(k, settable))
            + at_line(text, section, k)
            for k in unknown
        )
        problems.append(f"{where}[{section}] has unknown settings: {named}")
    env_keys = {f.name: _env_key(section, f.name) for f in fields}
    nested = {f.name for f in fields if hints[f.name] is KafkaSettings}
    _warn_unknown_env(section, env, {v for k, v in env_keys.items() if k not in nested})
    for f in fields:
        hint = hints[f.name]
        if hint is KafkaSettings:
            if f.name in table:
                problems.append(
                    f"{where}[{section}] {f.name}: Kafka settings go in the [kafka] table, "
                    "which every command reads"
                )
            if not with_kafka:
                values[f.name] = KafkaSettings()
                continue
            kafka_cli = {"bootstrap": cli.get("bootstrap")}
            try:
                values[f.name] = _build(
                    KafkaSettings,
                    kafka_cli,
                    env,
                    doc,
                    where,
                    flags=flags,
                    origins=origins,
                    text=text,
                )
            except ConfigError as exc:  # told with this section's own problems
                problems.extend(exc.problems)
            continue
        env_key = env_keys[f.name]
        if cli.get(f.name) is not None:
            flag = flags.get(f.name, f"{section}.{f.name}")
            raw, origin, kind = cli[f.name], f"{flag} on the command line", "cli"
        elif env_key in env:
            raw, origin, kind = env[env_key], f"environment {env_key}", "env"
        elif f.name in table:
            raw, origin, kind = table[f.name], f"{where}[{section}] {f.name}", "file"
        else:
            if origins is not None:
                origins[f"{section}.{f.name}"] = "default"
            continue
        if origins is not None:
            shown_origin = where.removesuffix(": ") if kind == "file" else origin
            origins[f"{section}.{f.name}"] = shown_origin
        try:
            if section == "kafka" and f.name == "bootstrap" and isinstance(raw, list):
                raw = _join_servers(raw)
            if section == "replay" and f.name == "speed":
                values[f.name] = _replay_speed(raw)
            else:
                values[f.name] = _convert(raw, hint)
            _check_duration(f.name, values[f.name])
        except (TypeError, ValueError) as exc:
            line = at_line(text, section, f.name) if kind == "file" else ""
            problems.append(f"{origin}: {exc}{line}")
            values.pop(f.name, None)  # the other settings are still checked
            continue
        secret = hint is Secret or isinstance(values[f.name], Secret)
        shown = "(hidden)" if secret else _shown(raw)
        given[f.name] = {
            "cli": _flag_given(flags[f.name], raw, shown)
            if f.name in flags
            else f"{f.name} = {shown} on the command line",
            "env": f"{env_key}={shown} in the environment",
            "file": f"{f.name} = {shown} in [{section}] of {where.removesuffix(': ')}"
            + (f", line {n}" if (n := key_line(text, section, f.name)) else ""),
        }[kind]
    # the checks of the settings themselves, of the values that could be read (a nested
    # kafka that was refused stands in as its default)
    values.update(
        {n: KafkaSettings() for n in names if hints[n] is KafkaSettings and n not in values}
    )
    built, refused = _construct(cls, values, section, given)
    if built is None or problems or refused:
        raise ConfigError(*problems, *refused)
    return built


def _construct(
    cls: type[S], values: dict[str, Any], section: str, given: dict[str, str]
) -> tuple[S | None, list[str]]:
    """``cls(**values)`` and no refusal, or every check it fails, each with where its
    settings were given (and ``None``, or the settings without those it refused).

    The checks of ``__post_init__`` stop at the first that fails, so the settings a refusal
    names are put back to their defaults and the rest are checked again, until they pass.
    A refusal that names a setting already put back says nothing of what was given (the
    default may not suit the other settings) and is not told.
    """
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    reset: set[str] = set()
    refused: list[str] = []
    while True:
        try:
            return cls(**{k: v for k, v in values.items() if k not in reset}), refused
        except (ConfigError, TypeError, ValueError) as exc:
            message = str(exc)
            named = {n for n in names if _names(message, section, n)}
            if not named & reset:
                refused.append(f"{message}{_given_in(message, section, given)}")
            more = {n for n in named if n in values} - reset
            if not more:  # nothing left to put back: whatever else is wrong stays unsaid
                return None, refused
            reset |= more


MAX_DURATION_S = 1e7  # 115 days, the longest duration a message may hold
# durations that no message holds and that may sensibly be longer: their own limit
_LONG_DURATIONS_S = {"forget_tenant_after_s": 3650 * 86_400.0}  # ten years


def _check_duration(name: str, value: Any) -> None:
    """A duration setting (``*_s``, ``*_ms``) no longer than :data:`MAX_DURATION_S` (or its
    own limit): a larger one is a typo, and one near the largest float overflows the clock
    arithmetic it feeds (``now + 1e308`` is infinity) instead of failing here. Below zero
    is left to each setting's own check.

    >>> _check_duration("window_s", 60.0)
    >>> _check_duration("plan_horizon_s", 1e308)
    Traceback (most recent call last):
    ...
    ValueError: expected at most 10000000 seconds (115 days), got 1e+308
    """
    scale = 1.0 if name.endswith("_s") else 1e3 if name.endswith("_ms") else 0.0
    limit_s = _LONG_DURATIONS_S.get(name, MAX_DURATION_S)
    values = value if isinstance(value, tuple) else (value,)
    for v in values:
        if scale and isinstance(v, float | int) and v > limit_s * scale:
            unit = "seconds" if scale == 1.0 else "milliseconds"
            raise ValueError(
                f"expected at most {limit_s * scale:.0f} {unit} "
                f"({limit_s // 86_400:.0f} days), got {_exact(v)}"
            )


def _flag_given(flag: str, raw: Any, shown: str) -> str:
    """How a value given by ``flag`` reads in an error line; a repeated flag's values one
    by one.

    >>> _flag_given("--group", ("", "w"), "('', 'w')"), _flag_given("--window", 5.0, "5.0")
    ("--group '' --group 'w'", '--window 5.0')
    """
    if isinstance(raw, list | tuple) and shown != "(hidden)":
        return " ".join(f"{flag} {_shown(v)}" for v in raw)
    return f"{flag} {shown}"


def _env_key(section: str, name: str) -> str:
    """The environment variable of a setting.

    >>> _env_key("worker", "window_s"), _env_key("kafka", "bootstrap")
    ('DPROBE_WORKER_WINDOW_S', 'DPROBE_KAFKA_BOOTSTRAP')
    """
    return f"DPROBE_{section.upper()}_{name.upper()}"


# variables of the local broker's script (infra/kafka/kafka.sh) that share the kafka prefix
_BROKER_SCRIPT_ENV = frozenset(
    f"DPROBE_KAFKA_{n}"
    for n in (
        "PORT",
        "CONTROLLER_PORT",
        "HEAP",
        "LIB_DIR",
        "STATE_DIR",
        "START_TIMEOUT_S",
        "STOP_TIMEOUT_S",
        "SASL_USER",
        "SASL_PASSWORD",
    )
)
_warned_env: set[str] = set()  # what was warned of once a process (variables, frozen moves)
_log = logging.getLogger(__name__)


def _warn_unknown_env(section: str, env: Mapping[str, str], known: set[str]) -> None:
    """Log once each ``DPROBE_<SECTION>_*`` variable that names no setting of ``section``
    (a misspelt one would otherwise be ignored without a word)."""
    prefix = f"DPROBE_{section.upper()}_"
    for key in env:
        if not key.startswith(prefix) or key in known or key in _BROKER_SCRIPT_ENV:
            continue
        if key in _warned_env:
            continue
        _warned_env.add(key)
        _log.warning(
            "environment variable %s names no %s setting: ignored%s",
            key,
            section,
            _env_hint(key.removeprefix(prefix), prefix, known),
        )


def _env_hint(rest: str, prefix: str, known: set[str]) -> str:
    """``; did you mean ...?`` for an unknown variable ``prefix + rest``: a Kafka setting
    under a service's prefix by its shared ``DPROBE_KAFKA_*`` name, else the closest.

    >>> _env_hint("KAFKA_BOOTSTRAP", "DPROBE_WORKER_", set())
    '; did you mean DPROBE_KAFKA_BOOTSTRAP? (Kafka settings are shared by every service)'
    """
    if prefix != "DPROBE_KAFKA_" and (rest == "KAFKA" or rest.startswith("KAFKA_")):
        name = rest.removeprefix("KAFKA").removeprefix("_")
        if name.lower() in KafkaSettings.__dataclass_fields__:
            return (
                f"; did you mean DPROBE_KAFKA_{name}? (Kafka settings are shared by every service)"
            )
        return "; Kafka settings are DPROBE_KAFKA_* variables, shared by every service"
    near = _nearest(rest.lower(), {k.removeprefix(prefix).lower() for k in known})
    return f"; did you mean {prefix}{near.upper()}?" if near else ""


def _warn_frozen_moves(s: WorkerSettings) -> None:
    """Log once a process that the rate limits let no quota move: a plan moves GPUs from
    one tenant to another, so a limit of 0 on either side holds every quota where it is
    (valid, as HPA's ``selectPolicy: Disabled``, but rarely what was meant)."""
    if s.plan_scale_up_max_percent == 0 and s.plan_scale_up_max_nodes == 0:
        frozen = "plan_scale_up_max_percent and plan_scale_up_max_nodes are 0: no quota grows"
    elif s.plan_scale_down_max_percent == 0:
        frozen = "plan_scale_down_max_percent is 0: no quota shrinks"
    else:
        return
    if frozen in _warned_env:
        return
    _warned_env.add(frozen)
    _log.warning(
        "worker.%s, and a plan only moves GPUs between tenants, so no scaling event will "
        "ever move quota",
        frozen,
    )


def _warn_misspelt_sections(env: Mapping[str, str]) -> None:
    """Log once each ``DPROBE_*`` variable whose section is a near miss of a service's
    (``DPROBE_WORKR_WINDOW_S``): no setting would ever read it.

    Other ``DPROBE_*`` variables (``DPROBE_TRACE_DIR``, ``DPROBE_TENANT`` in a job's
    environment, ...) are not near any section and stay quiet.
    """
    sections = sorted(c.section.upper() for c in SERVICES)
    for key in env:
        if not key.startswith("DPROBE_") or key in _warned_env:
            continue
        word, _, rest = key.removeprefix("DPROBE_").partition("_")
        if not rest or word in sections:
            continue
        near = difflib.get_close_matches(word, sections, n=1, cutoff=0.75)
        if near:
            _warned_env.add(key)
            _log.warning(
                "environment variable %s names no section: ignored; did you mean %s?",
                key,
                f"DPROBE_{near[0]}_{rest}",
            )


def _given_in(message: str, section: str, given: dict[str, str]) -> str:
    """Where the settings an error line names came from (`` (given: ...)``), if given.

    >>> _given_in("worker.grace_s must be >= 0", "worker",
    ...           {"grace_s": "DPROBE_WORKER_GRACE_S='-5' in the environment"})
    " (given: DPROBE_WORKER_GRACE_S='-5' in the environment)"
    >>> _given_in("worker.grace_s must be >= 0", "worker", {})
    ''
    """
    named = [text for name, text in given.items() if _names(message, section, name)]
    return f" (given: {'; '.join(named)})" if named else ""


def _names(message: str, section: str, name: str) -> bool:
    """Whether ``message`` names the setting ``name`` of ``section`` (``worker.grace_s``,
    or ``grace_s`` alone in a list such as ``window_s and grace_s``).

    >>> _names("worker.partitions must be >= 1", "worker", "partitions")
    True
    >>> _names("worker.events_partitions must be >= 1", "worker", "partitions")
    False
    """
    return bool(
        re.search(rf"(?<![\w.]){re.escape(section)}\.{re.escape(name)}\b", message)
        or re.search(rf"(?<![\w.]){re.escape(name)}\b", message)
    )


def _check_servers(bootstrap: str) -> None:
    """Refuse a bootstrap list a Kafka client cannot parse: every comma-separated server
    is ``HOST:PORT`` (a bracketed IPv6 address allowed), or ``HOST`` for port 9092.

    >>> _check_servers("k1:9092,[::1]:9093,k3,fe80::1,[fe80::1%eth0]:9092")
    >>> _check_servers("k1:x")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dprobe.config.ConfigError: kafka.bootstrap: server 'k1:x' is not HOST:PORT (...)
    """
    for item in bootstrap.split(","):
        server = item.strip()
        if server.startswith("["):  # [IPv6]:PORT or [IPv6]
            host, _, rest = server[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else None if not rest else "?"
        elif server.count(":") > 1:  # a bare IPv6 address
            host, port = server, None
            if re.fullmatch(r"[0-9A-Fa-f:.]+%[\w.-]+", server):  # Kafka clients misread it
                raise ConfigError(
                    f"kafka.bootstrap: server {server!r}: write an IPv6 address with a zone "
                    f"in brackets, [{server}]:9092"
                )
            if not re.fullmatch(r"[0-9A-Fa-f:.]+", server):
                port = ","  # two HOST:PORT run together ('k1:9092;k2:9092'), not IPv6
        else:
            host, _, port_text = server.partition(":")
            port = port_text if ":" in server else None
        if any(c.isspace() or c in "/@?#" for c in host):  # a URL or two names run together
            raise ConfigError(
                f"kafka.bootstrap: server {server!r}: host {host!r} is no host name or address"
            )
        if not host or (port is not None and not (port.isdigit() and 0 < int(port) < 65536)):
            raise ConfigError(
                f"kafka.bootstrap: server {server!r} is not HOST:PORT "
                + (
                    "(servers are separated by ',')"
                    if port == ","
                    else "(the port is a number from 1 to 65535)"
                )
            )


def _replay_speed(raw: Any) -> float:
    """``[replay] speed`` as ``--speed`` takes it: a number, or ``"max"`` (or ``"inf"``, any
    case) for as fast as possible (0).

    >>> _replay_speed(" MAX"), _replay_speed("600"), _replay_speed(2)
    (0.0, 600.0, 2.0)
    >>> _replay_speed("fast")
    Traceback (most recent call last):
    ValueError: expected a number or 'max', got 'fast'
    """
    if isinstance(raw, str) and raw.strip().lower() in {"max", "inf"}:
        return 0.0
    try:
        value: float = _convert(raw, float)
    except ValueError as exc:
        raise ValueError(str(exc).replace("a number", "a number or 'max'", 1)) from None
    return value


def _join_servers(raw: list[Any]) -> str:
    """``bootstrap = ["k1:9092", "k2:9092"]`` as the comma list that aiokafka and faust read
    (``"k1:9092,k2:9092"``, as in infra/systemd/collector.toml).

    >>> _join_servers(["k1:9092", " k2:9092"])
    'k1:9092,k2:9092'
    """
    items = [x.strip() if isinstance(x, str) else x for x in raw]
    if not items:
        raise ValueError("expected at least one HOST:PORT server, got an empty list")
    if any(not isinstance(x, str) or not x or "," in x for x in items):
        raise ValueError(f"expected a list of HOST:PORT strings, got {_shown(raw)}")
    return ",".join(items)


def _shown(raw: Any) -> str:
    """``raw`` for an error line: cut short, and never the digits of a huge integer.

    >>> print(_shown(10**400)); print(_shown("x" * 100))
    an integer of 1329 bits
    'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (102 chars)
    """
    if isinstance(raw, int) and raw.bit_length() > 64:
        return f"an integer of {raw.bit_length()} bits"
    text = repr(raw)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} chars)"


# TOML values that are no number nor text (datetime before date: it is one)
_STRUCTURES = {
    list: "a list",
    tuple: "a list",
    dict: "a table",
    datetime.datetime: "a date and time",
    datetime.date: "a date",
    datetime.time: "a time",
}


_SCALARS = {
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    str: "a string",
    Path: "a string",
    Secret: "a string",
}


def _kind(raw: Any) -> str | None:
    """What a TOML value that is no text is, for an error line (``None`` for text).

    >>> _kind([1]), _kind(datetime.date(2026, 1, 1)), _kind(True), _kind(3), _kind("3")
    ('a list', 'a date', 'a boolean', 'a number', None)
    """
    kind = next((k for t, k in _STRUCTURES.items() if isinstance(raw, t)), None)
    if kind is None and isinstance(raw, bool | int | float):
        kind = "a boolean" if isinstance(raw, bool) else "a number"
    return kind


def _convert(raw: Any, hint: Any) -> Any:
    """Convert a CLI/env/TOML value to the annotated type (with a readable error)."""
    origin = typing.get_origin(hint)
    kind = _kind(raw)
    expected = _SCALARS.get(hint)
    # text settings take text only; number and boolean ones also text, read below
    if expected and kind and (hint in (Path, Secret, str) or kind not in ("a boolean", "a number")):
        raise ValueError(f"expected {expected}, got {kind}")
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if raw is None or (isinstance(raw, str) and raw == ""):
            return None
        return _convert(raw, args[0])
    if origin is tuple:
        (item,) = typing.get_args(hint)[:1]
        if kind in ("a boolean", "a number", "a table"):
            raise ValueError(f"expected a list, got {kind}")
        if not isinstance(raw, str):  # a TOML list or repeated flag: each item counts
            return tuple(_convert(p.strip() if isinstance(p, str) else p, item) for p in raw)
        # a comma-separated environment value: spaces and a trailing comma mean no harm
        return tuple(_convert(p.strip(), item) for p in raw.split(",") if p.strip())
    if hint is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in {"1", "true", "yes", "on"}:
            return True
        if text in {"0", "false", "no", "off"}:
            return False
        raise ValueError(f"expected a boolean, got {raw!r}")
    if hint is int:
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise ValueError(f"expected an integer, got {_shown(raw)}")
        try:
            whole = int(raw)
        except (ValueError, OverflowError):
            raise ValueError(f"expected an integer, got {_shown(raw)}") from None
        if not -(2**63) <= whole < 2**63:  # TOML's integers are 64-bit
            raise ValueError(f"expected a 64-bit integer, got {_shown(raw)}")
        return whole
    if hint is float:
        if isinstance(raw, bool):  # TOML `true` is no number, though Python counts it one
            raise ValueError(f"expected a number, got {_shown(raw)}")
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"expected a number, got {_shown(raw)}") from None
        except OverflowError:  # a TOML integer beyond the largest float
            raise ValueError(f"expected a finite number, got {_shown(raw)}") from None
        if not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {_shown(raw)}")
        return value
    if hint is Path:
        if not str(raw).strip():  # Path("") is the current folder: never what was meant
            raise ValueError("expected a path, got an empty string")
        if "\0" in str(raw):  # TOML spells it \u0000; no file system takes one
            raise ValueError("expected a path, got one holding a NUL character")
        return Path(str(raw)).expanduser()
    if hint is Secret:
        return raw if isinstance(raw, Secret) else Secret(str(raw))
    if hint is str:
        return str(raw)
    raise TypeError(f"unsupported setting type {hint!r}")

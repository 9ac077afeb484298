"""Tell an authentication failure from an unreachable broker, in one line.

aiokafka reports wrong SASL credentials only in its log (``SaslAuthenticationFailed``)
and then raises the same ``KafkaConnectionError`` as for a broker that is down. Every
command starts its Kafka clients inside :func:`watching_auth`, which listens to the
``aiokafka`` logger, and turns a failed start into :func:`connect_error`: a
:class:`~dprobe.errors.UsageError` (exit 2) that says the credentials were refused, for
whom and with which mechanism, or that the broker could not be reached. No password is
ever part of the message.

Example:
    >>> import logging
    >>> from dprobe.config import KafkaSettings, Secret
    >>> k = KafkaSettings(bootstrap="b:9092", security_protocol="SASL_PLAINTEXT",
    ...                   sasl_mechanism="SCRAM-SHA-512", sasl_username="ops",
    ...                   sasl_password=Secret("pw"))
    >>> with watching_auth() as watch:
    ...     logging.getLogger("aiokafka.conn").error(
    ...         "[Error 58] SaslAuthenticationFailed: Authentication failed")
    >>> str(connect_error(k, OSError("Unable to bootstrap"), watch))[:65]
    "Kafka at b:9092 refused the credentials of user 'ops' (SASL_PLAIN"
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from dprobe.errors import UsageError

if TYPE_CHECKING:
    from dprobe.config import KafkaSettings

_MARKERS = ("SaslAuthenticationFailed", "Authentication failed", "IllegalSaslState")


class AuthWatch(logging.Handler):
    """Remembers whether aiokafka logged an authentication failure, and its last error
    (the cause of a failed connection: refused, a TLS error, a name that does not resolve).
    With ``hold``, it also keeps every record, for :func:`watching_auth` to pass on."""

    def __init__(self, *, hold: bool = False) -> None:
        super().__init__(logging.DEBUG)
        self.failure: str | None = None
        self.last_error: str | None = None
        self.held: list[logging.LogRecord] | None = [] if hold else None

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if self.failure is None and any(m in text for m in _MARKERS):
            self.failure = text
        if record.levelno >= logging.ERROR:
            self.last_error = text
        if self.held is not None:
            self.held.append(record)


@contextmanager
def watching_auth(*, quiet: bool = False) -> Iterator[AuthWatch]:
    """An :class:`AuthWatch` on the ``aiokafka`` logger for the duration of the block
    (which lets its errors through meanwhile, even where they were silenced). ``quiet``:
    the client's own log lines are held back meanwhile, unless it logs at DEBUG, and its
    warnings and errors passed on only if the block ends without an error (a command whose
    failure to start is one line of its own says it all, with
    :attr:`AuthWatch.last_error` as the cause)."""
    logger = logging.getLogger("aiokafka")
    level, propagate = logger.level, logger.propagate
    shown = logger.getEffectiveLevel()
    if shown > logging.ERROR:
        logger.setLevel(logging.ERROR)
    hold = quiet and shown > logging.DEBUG
    watch = AuthWatch(hold=hold)
    if hold:
        logger.propagate = False
    logger.addHandler(watch)
    failed = True
    try:
        yield watch
        failed = False
    finally:
        logger.removeHandler(watch)
        logger.setLevel(level)
        logger.propagate = propagate
        if not failed and watch.held:  # the start went well: its warnings go on
            for record in watch.held:
                if _worth_passing_on(record, shown):
                    logging.getLogger(record.name).handle(record)


def _worth_passing_on(record: logging.LogRecord, shown: int) -> bool:
    """Whether a line the client logged during a start that went well still matters: a
    warning or error (a first bootstrap server that is down while the second answered),
    not its progress reports (subscriptions, metadata), nor the "topic not found" of a
    topic the command then finds or reports itself."""
    if record.levelno < max(shown, logging.WARNING):
        return False
    return not (record.name == "aiokafka.cluster" and _MISSING_TOPIC in record.getMessage())


_MISSING_TOPIC = "not found in cluster metadata"


def auth_refused(kafka: KafkaSettings) -> str:
    """The one line that says ``kafka``'s credentials were refused."""
    return (
        f"Kafka at {kafka.bootstrap} refused the credentials of user {kafka.sasl_username!r} "
        f"({kafka.security_protocol}, {kafka.sasl_mechanism}): check kafka.sasl_username and "
        "kafka.sasl_password"
    )


def connect_error(kafka: KafkaSettings, exc: BaseException, watch: AuthWatch) -> UsageError:
    """The error of a client that failed to start: refused credentials or unreachable."""
    if watch.failure is not None:
        return UsageError(auth_refused(kafka))
    cause = (watch.last_error or str(exc)).rstrip()
    if cause.endswith(":"):  # a timeout, whose own text is empty: a port that does not answer
        cause += (
            f" no answer within {kafka.request_timeout_ms / 1000:g} s "
            "(kafka.request_timeout_ms): is a Kafka broker listening there?"
        )
    return UsageError(f"cannot reach Kafka at {kafka.bootstrap}: {cause}{unreachable_hint(kafka)}")


def unreachable_hint(kafka: KafkaSettings) -> str:
    """What to try when nothing answers at ``kafka.bootstrap``.

    >>> from dprobe.config import KafkaSettings
    >>> unreachable_hint(KafkaSettings())[:63]
    ' (is a broker running? `dprobe broker start` starts a local one'
    """
    from dprobe.config import DEFAULT_BOOTSTRAP

    if kafka.bootstrap == DEFAULT_BOOTSTRAP:
        return (
            " (is a broker running? `dprobe broker start` starts a local one; "
            "--bootstrap or DPROBE_KAFKA_BOOTSTRAP names yours)"
        )
    return ""


async def start_client(
    start: Callable[[], Awaitable[object]],
    close: Callable[[], Awaitable[object]],
    kafka: KafkaSettings,
    errors: type[BaseException] | tuple[type[BaseException], ...],
) -> None:
    """``await start()`` of a Kafka client; if it fails with ``errors``, ``await close()``
    and raise :func:`connect_error` (refused credentials or unreachable broker), without
    the client's own log lines on the way."""
    with watching_auth(quiet=True) as watch:
        try:
            await start()
        except errors as exc:
            await close()
            raise connect_error(kafka, exc, watch) from None


async def check_credentials(kafka: KafkaSettings) -> bool:
    """Connect once, for a service that keeps retrying afterwards: a
    :class:`~dprobe.errors.UsageError` if the broker refuses the credentials (retrying
    cannot help), ``False`` if it cannot be reached now, ``True`` if it answers."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaConnectionError

    admin = AIOKafkaAdminClient(**kafka.client_kwargs())
    with watching_auth() as watch:
        try:
            await admin.start()
        except KafkaConnectionError:
            if watch.failure is not None:
                raise UsageError(auth_refused(kafka)) from None
            return False
        finally:
            await admin.close()
    return True

"""The study's storage: opening it with one-line errors, and its URL with the password hidden.

Two kinds of storage hold a study:

- a journal file (``journal:///path/study.journal``), the default in a job folder: Optuna's
  :class:`~optuna.storages.JournalStorage`, an append-only log of every storage operation that
  each process replays into memory. Reads cost no queries, so a trial costs a few appended lines
  instead of hundreds of SQL statements (``benchmarks/bench_optimizer_storage.py`` measures both).
  Appends are serialised by an ``flock`` on ``study.journal.lock`` that the kernel drops when a
  process dies, so ``--jobs N`` and other processes on the same machine share the file, and a
  killed worker never leaves the lock held. Every append is one ``write`` to the file (in the OS
  cache when the call returns), so a killed process loses no finished trial; like SQLite with
  ``synchronous=NORMAL``, only a power cut may lose the last ones.
- any SQLAlchemy URL (SQLite, PostgreSQL, MySQL) for Optuna's :class:`~optuna.storages.RDBStorage`:
  the way to share a study between machines.

A storage URL may carry a password (``postgresql+psycopg2://user:secret@host/db``). It is used to
connect and nowhere else: everything printed or saved shows :func:`masked_url`, SQLAlchemy's own
rendering with the password as ``***``. A later command that must connect again (``servopt report``)
gets the URL from ``--storage`` or the ``SERVOPT_STORAGE`` environment variable; a URL without a
password lets the driver find one (PostgreSQL's ``PGPASSWORD`` or ``~/.pgpass``).

Example:
    >>> masked_url("postgresql+psycopg2://servopt:secret@db.internal:5432/studies")
    'postgresql+psycopg2://servopt:***@db.internal:5432/studies'
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
import warnings
from pathlib import Path
from typing import Any

from typing import TYPE_CHECKING

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend

from ..costmodels.errors import InputError

if TYPE_CHECKING:
    import sqlalchemy.exc
    from sqlalchemy.engine import URL

STORAGE_ENV = "SERVOPT_STORAGE"
JOURNAL_SCHEME = "journal:"
# A worker that dies leaves its trial RUNNING; the heartbeat lets any later worker fail it.
HEARTBEAT_INTERVAL_S = 10
GRACE_PERIOD_S = 30
SCHEMA_RETRIES = 5
# A server that drops packets would otherwise keep the first connection waiting for minutes.
CONNECT_TIMEOUT_S = 10
# Drivers whose connect() takes ``connect_timeout`` (seconds).
_CONNECT_TIMEOUT_DRIVERS = {("postgresql", "psycopg2"), ("postgresql", "psycopg"), ("mysql", "mysqldb"),
                            ("mysql", "pymysql")}
# What to pip install when a driver module is missing.
_DRIVER_PACKAGES = {"psycopg2": "psycopg2-binary", "psycopg": "psycopg[binary]", "MySQLdb": "mysqlclient",
                    "pymysql": "PyMySQL"}
_PASSWORD_IN_TEXT = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def _make_url(url: str) -> URL:
    """SQLAlchemy's parse of a database URL (SQLAlchemy is imported only when a database is used:
    journal files do without it)."""
    from sqlalchemy.engine import make_url  # noqa: PLC0415

    return make_url(url)


def _bad_url_errors() -> tuple[type[Exception], ...]:
    import sqlalchemy.exc  # noqa: PLC0415

    return sqlalchemy.exc.ArgumentError, ValueError


def masked_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (also for text SQLAlchemy cannot parse)."""
    if url.startswith(JOURNAL_SCHEME):
        return url
    try:
        return _make_url(url).render_as_string(hide_password=True)
    except _bad_url_errors():
        return _PASSWORD_IN_TEXT.sub(r"\1***@", url)


def has_hidden_password(url: str) -> bool:
    """Whether ``url`` is a masked URL whose password was left out (``user:***@``)."""
    if url.startswith(JOURNAL_SCHEME):
        return False
    try:
        return _make_url(url).password == "***"
    except _bad_url_errors():
        return False


def storage_from_env() -> str | None:
    return os.environ.get(STORAGE_ENV) or None


def _parse(url: str) -> URL:
    try:
        return _make_url(url)
    except _bad_url_errors() as err:
        raise InputError(f"storage URL '{masked_url(url)}' is not a SQLAlchemy URL ({_clean(err, url)}); expected "
                         "e.g. sqlite:///runs/study.db or postgresql+psycopg2://user@host:5432/db") from None


def _clean(err: BaseException, url: str) -> str:
    """The first line of a driver's message, without the password should it quote the URL."""
    lines = str(getattr(err, "orig", None) or err).strip().splitlines()
    text = lines[0].strip() if lines else type(err).__name__
    try:
        password = _make_url(url).password
    except _bad_url_errors():
        password = None
    if password:
        text = text.replace(str(password), "***")
    return _PASSWORD_IN_TEXT.sub(r"\1***@", text)


def _engine_kwargs(parsed: URL) -> dict[str, Any]:
    if parsed.get_backend_name() == "sqlite":
        return {"connect_args": {"timeout": 120}}
    if (parsed.get_backend_name(), parsed.get_driver_name()) in _CONNECT_TIMEOUT_DRIVERS:
        return {"connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}}
    return {}


def _schema_race(err: sqlalchemy.exc.SQLAlchemyError) -> bool:
    """Workers started together race to create the schema of a new database: the loser fails on a
    duplicate row or table, and finds the schema in place when it tries again."""
    import sqlalchemy.exc  # noqa: PLC0415

    return isinstance(err, sqlalchemy.exc.IntegrityError) or "already exists" in str(err)


def journal_url(path: str | Path) -> str:
    """The storage URL of a journal file.

    >>> journal_url("/runs/chat/study.journal")
    'journal:///runs/chat/study.journal'
    """
    return f"{JOURNAL_SCHEME}//{Path(path).resolve()}"


def journal_path(url: str) -> Path | None:
    """The file of a ``journal:`` URL (``journal:///abs/path`` or ``journal:relative/path``), else None."""
    if not url.startswith(JOURNAL_SCHEME):
        return None
    rest = url[len(JOURNAL_SCHEME):]
    return Path(rest[2:] if rest.startswith("//") else rest)


class _FlockLock:
    """The journal's lock (the interface of Optuna's journal file locks): an exclusive ``flock`` on
    ``PATH.lock``, held only while a process appends, and released by the
    kernel when the process dies (Optuna's own file locks leave a lock file that later workers must
    wait out)."""

    def __init__(self, path: str):
        self._path = path + ".lock"
        self._fd: int | None = None

    def acquire(self) -> bool:
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd = fd
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class _JournalFile(JournalFileBackend):
    """Optuna's journal file, each append one ``write`` under the lock, without an ``fsync`` per
    storage operation (see the module docstring for what that keeps)."""

    def __init__(self, path: str):
        super().__init__(path, lock_obj=_FlockLock(path))

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        data = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode()
        self._lock.acquire()
        try:
            fd = os.open(self._file_path, os.O_WRONLY | os.O_APPEND)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        finally:
            self._lock.release()


def _open_journal(path: Path, shown: str) -> JournalStorage:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(_JournalFile(str(path)))
    except (OSError, ValueError) as err:
        raise InputError(f"storage {shown} cannot be opened: {err}") from None


def open_storage(url: str) -> BaseStorage:
    """An Optuna storage: a journal file for ``journal:`` URLs, else RDB storage, where SQLite gets
    WAL (concurrent readers, one writer) and a lock timeout.

    A bad URL, a missing driver or a server that cannot be reached raises :class:`InputError` with
    one line that shows the URL masked.
    """
    path = journal_path(url)
    if path is not None:
        return _open_journal(path, url)
    import sqlalchemy.exc  # noqa: PLC0415
    from sqlalchemy import event  # noqa: PLC0415

    parsed = _parse(url)
    shown = masked_url(url)
    for attempt in range(SCHEMA_RETRIES):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # the heartbeat's
                storage = RDBStorage(url, heartbeat_interval=HEARTBEAT_INTERVAL_S, grace_period=GRACE_PERIOD_S,
                                     engine_kwargs=_engine_kwargs(parsed))
            break
        except ImportError as err:
            # Optuna re-raises the driver's ImportError with its own message; the cause names the module.
            module = getattr(err.__cause__, "name", None) or err.name or "?"
            package = _DRIVER_PACKAGES.get(module, module)
            raise InputError(f"storage {shown}: its database driver '{module}' is not installed "
                             f"(pip install '{package}'), or name another driver in the URL") from None
        except sqlalchemy.exc.NoSuchModuleError:
            raise InputError(f"storage {shown}: SQLAlchemy knows no database '{parsed.drivername}'; "
                             "expected sqlite, postgresql or mysql") from None
        except sqlalchemy.exc.SQLAlchemyError as err:
            if not _schema_race(err) or attempt == SCHEMA_RETRIES - 1:
                raise InputError(f"storage {shown} cannot be opened: {_clean(err, url)}") from None
            time.sleep(0.2 * (attempt + 1))
    if parsed.get_backend_name() == "sqlite":
        def _pragmas(connection, _record):
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            # Committed transactions survive a killed process (they are in the OS cache); only a
            # power cut may lose the last ones.
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        event.listen(storage.engine, "connect", _pragmas)
        storage.engine.dispose()
    return storage

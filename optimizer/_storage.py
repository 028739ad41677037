"""The study's database: opening it with one-line errors, and its URL with the password hidden.

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

import os
import re
import time
import warnings
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.storages import RDBStorage
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url

from ..costmodels.errors import InputError

STORAGE_ENV = "SERVOPT_STORAGE"
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


def masked_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (also for text SQLAlchemy cannot parse)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (sqlalchemy.exc.ArgumentError, ValueError):
        return _PASSWORD_IN_TEXT.sub(r"\1***@", url)


def has_hidden_password(url: str) -> bool:
    """Whether ``url`` is a masked URL whose password was left out (``user:***@``)."""
    try:
        return make_url(url).password == "***"
    except (sqlalchemy.exc.ArgumentError, ValueError):
        return False


def storage_from_env() -> str | None:
    return os.environ.get(STORAGE_ENV) or None


def _parse(url: str) -> URL:
    try:
        return make_url(url)
    except (sqlalchemy.exc.ArgumentError, ValueError) as err:
        raise InputError(f"storage URL '{masked_url(url)}' is not a SQLAlchemy URL ({_clean(err, url)}); expected "
                         "e.g. sqlite:///runs/study.db or postgresql+psycopg2://user@host:5432/db") from None


def _clean(err: BaseException, url: str) -> str:
    """The first line of a driver's message, without the password should it quote the URL."""
    lines = str(getattr(err, "orig", None) or err).strip().splitlines()
    text = lines[0].strip() if lines else type(err).__name__
    try:
        password = make_url(url).password
    except (sqlalchemy.exc.ArgumentError, ValueError):
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
    return isinstance(err, sqlalchemy.exc.IntegrityError) or "already exists" in str(err)


def open_storage(url: str) -> RDBStorage:
    """An Optuna RDB storage; SQLite gets WAL (concurrent readers, one writer) and a lock timeout.

    A bad URL, a missing driver or a server that cannot be reached raises :class:`InputError` with
    one line that shows the URL masked.
    """
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

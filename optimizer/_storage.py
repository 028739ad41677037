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

A storage URL may carry a password, in any spelling libpq accepts (``user:secret@``, percent-encoded
or not, an unencoded ``@`` in it included, or ``?password=secret``). It is used to connect and
nowhere else: everything printed or saved (job.json, the reports, front.json, the study's attributes
in a shared database, error messages) shows :func:`masked_url`, every password as ``***``. A later command that must connect again (``servopt report``)
gets the URL from ``--storage`` or the ``SERVOPT_STORAGE`` environment variable; a URL without a
password lets the driver find one (PostgreSQL's ``PGPASSWORD`` or ``~/.pgpass``).

Example:
    >>> masked_url("postgresql+psycopg2://servopt:secret@db.internal:5432/studies")
    'postgresql+psycopg2://servopt:***@db.internal:5432/studies'
    >>> masked_url("postgresql://servopt:se@cret@db:5432/studies?sslmode=require&password=secret")
    'postgresql://servopt:***@db:5432/studies?sslmode=require&password=***'
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend

from ..costmodels.errors import InputError
from ..costmodels.outfiles import check_no_links
from ..costmodels.userfiles import shown

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


def _make_url(url: str) -> URL:
    """SQLAlchemy's parse of a database URL (SQLAlchemy is imported only when a database is used:
    journal files do without it)."""
    from sqlalchemy.engine import make_url  # noqa: PLC0415

    return make_url(url)


def _bad_url_errors() -> tuple[type[Exception], ...]:
    import sqlalchemy.exc  # noqa: PLC0415

    return sqlalchemy.exc.ArgumentError, ValueError


# Query keys whose values are secrets, as libpq (password, sslpassword), psycopg and the MySQL drivers
# (passwd, pwd) take them; compared percent-decoded and in any case.
_SECRET_KEYS = {"password", "passwd", "pwd", "sslpassword"}


def _secret_spans(url: str) -> list[tuple[int, int]]:
    """Where ``url`` holds secrets (start, end): the password of ``user:password@`` (up to the last
    ``@`` before the query, so that an unencoded ``@`` in it is covered), and the values of the
    password keys of the query (``?password=...``, ``?passw%6Frd=...``)."""
    spans = []
    scheme_end = url.find("://")
    start = scheme_end + 3 if scheme_end >= 0 else 0
    query_at = url.find("?", start)
    head_end = len(url) if query_at < 0 else query_at
    at = url.rfind("@", start, head_end)
    if scheme_end >= 0 and at >= 0:
        user, colon, _ = url[start:at].partition(":")
        if colon and "/" not in user:
            spans.append((start + len(user) + 1, at))
    if query_at >= 0:
        offset = query_at + 1
        for part in url[query_at + 1:].split("&"):
            key, equals, _ = part.partition("=")
            if equals and unquote_plus(key).strip().lower() in _SECRET_KEYS:
                spans.append((offset + len(key) + 1, offset + len(part)))
            offset += len(part) + 1
    return spans


def masked_url(url: str) -> str:
    """``url`` with every password in it (see :func:`_secret_spans`) replaced by ``***``: what is
    printed, saved and stored in the study."""
    if url.startswith(JOURNAL_SCHEME):
        return url
    for begin, end in reversed(_secret_spans(url)):
        url = url[:begin] + "***" + url[end:]
    return url


def has_hidden_password(url: str) -> bool:
    """Whether ``url`` is a masked URL whose password was left out (``user:***@``, ``password=***``)."""
    return any(url[begin:end] == "***" for begin, end in _secret_spans(url))


def _secrets(url: str) -> list[str]:
    """The secrets of ``url`` as written and percent-decoded (what a driver's message may quote)."""
    found = [url[begin:end] for begin, end in _secret_spans(url)]
    return sorted({text for raw in found for text in (raw, unquote_plus(raw)) if text}, key=len, reverse=True)


def storage_from_env() -> str | None:
    return os.environ.get(STORAGE_ENV) or None


def _parse(url: str) -> URL:
    head = url.split("?", 1)[0]
    if head.count("@") > 1:
        # SQLAlchemy and libpq end the password at the first '@': the rest would be taken for the host
        # name, and looked up (part of the password sent to a DNS server) before any connection failed.
        raise InputError(f"storage {masked_url(url)}: the user or password holds an unencoded '@'; write it as %40 "
                         "(percent-encoded), or pass the password in PGPASSWORD or ~/.pgpass instead")
    try:
        parsed = _make_url(url)
    except _bad_url_errors() as err:
        raise InputError(f"storage URL '{masked_url(url)}' is not a SQLAlchemy URL ({_clean(err, url)}); expected "
                         "e.g. sqlite:///runs/study.db or postgresql+psycopg2://user@host:5432/db") from None
    database = parsed.database or ""
    if parsed.get_backend_name() == "sqlite" and (database in ("", ":memory:") or database.startswith("file::memory:")
                                                   or parsed.query.get("mode") == "memory"):
        raise InputError(f"storage {masked_url(url)} is an in-memory SQLite database: the study would be lost when "
                         "the process ends, and --jobs workers and later commands could not read it; give a file, "
                         "e.g. sqlite:///runs/study.db")
    return parsed


def _clean(err: BaseException, url: str) -> str:
    """The first line of a driver's message, without the password should it quote the URL."""
    lines = str(getattr(err, "orig", None) or err).strip().splitlines()
    text = lines[0].strip() if lines else type(err).__name__
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return masked_url(text)


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
    return f"{JOURNAL_SCHEME}//{os.path.abspath(path)}"  # not resolve(): a planted link stays a link, refused


def journal_path(url: str) -> Path | None:
    """The file of a ``journal:`` URL (``journal:///abs/path`` or ``journal:relative/path``), else None."""
    if not url.startswith(JOURNAL_SCHEME):
        return None
    rest = url[len(JOURNAL_SCHEME):]
    return Path(rest[2:] if rest.startswith("//") else rest)


class JournalWriteError(InputError):
    """An append to the journal failed (a full disk, most often); the journal was cut back to what it
    held before, so that it ends with a whole record."""


@contextmanager
def journal_errors() -> Iterator[None]:
    """Around code that writes the study through Optuna: a failed journal append comes out as its
    :class:`JournalWriteError`, whatever Optuna raised on top of it (its own bookkeeping of the trial
    fails again on a full disk, with an AssertionError)."""
    try:
        yield
    except Exception as err:
        cause: BaseException | None = err
        while cause is not None and not isinstance(cause, JournalWriteError):
            cause = cause.__cause__ or cause.__context__
        if cause is None or cause is err:
            raise
        raise cause from None


def _open_journal_fd(path: str, flags: int, what: str) -> int:
    """A descriptor of the journal's ``path`` (or its lock file), never through a symbolic link and
    only onto a regular file (a FIFO or device named study.journal is refused, not waited on)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if os.path.islink(path):
            raise _not_a_journal(path, what, stat.S_IFLNK) from None
        if err.errno == errno.EISDIR:
            raise _not_a_journal(path, what, stat.S_IFDIR) from None
        raise InputError(f"{what} '{shown(path)}' cannot be opened: {err.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_a_journal(path, what, mode)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def _check_journal_path(path: str) -> None:
    """Refuse a journal ``path`` that is a link, a folder, a FIFO or a device before anything is made
    beside it (its lock file: journal:///dev/null left /dev/null.lock behind its refusal)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as err:
        raise InputError(f"storage journal '{shown(path)}' cannot be opened: {err.strerror}") from None
    if not stat.S_ISREG(mode):
        raise _not_a_journal(path, "storage journal", mode)


def _not_a_journal(path: str, what: str, mode: int) -> InputError:
    if stat.S_ISLNK(mode):
        return InputError(f"{what} '{shown(path)}' is a symbolic link; servopt does not follow links in its folders "
                          "(a planted link would have the study written into its target). Remove it and rerun")
    kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO, device or socket"
    return InputError(f"{what} '{shown(path)}' is {kind}, not a regular file; give a journal file's path")


class _FlockLock:
    """The journal's lock (the interface of Optuna's journal file locks): an exclusive ``flock`` on
    ``PATH.lock``, held only while a process appends, and released by the
    kernel when the process dies (Optuna's own file locks leave a lock file that later workers must
    wait out)."""

    def __init__(self, path: str):
        self._path = path + ".lock"
        self._fd: int | None = None

    def acquire(self) -> bool:
        fd = _open_journal_fd(self._path, os.O_RDWR | os.O_CREAT, "journal lock")
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd = fd
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


# Optuna's journal records are JSON objects that begin with their operation code.
_RECORD_START = b'{"op_code":'


class _JournalFile(JournalFileBackend):
    """Optuna's journal file, opened without following links, each append one ``write`` under the
    lock, without an ``fsync`` per storage operation (see the module docstring for what that keeps).

    A journal's records are whole lines. A process killed in the middle of an append, or a full disk,
    leaves a last line cut short; the next process to open the journal cuts it off (under the lock)
    before it reads, and ``repaired`` says so: the records before it, every finished trial among
    them, are kept. A failed append cuts the journal back to where it began and raises
    :class:`JournalWriteError` (one line naming the file), so no torn line is left to begin with. A
    line that an older servopt left torn in the middle of the file, a whole record appended after
    it, keeps that record.
    """

    def __init__(self, path: str):
        # Not Optuna's __init__: it creates the file through a planted link.
        self._file_path = path
        self._lock = _FlockLock(path)
        self._log_number_offset: dict[int, int] = {0: 0}
        self.repaired = ""
        _check_journal_path(path)
        self._lock.acquire()
        try:
            fd = _open_journal_fd(path, os.O_RDWR | os.O_CREAT, "storage journal")
            try:
                self.repaired = _repair(fd, path)
            finally:
                os.close(fd)
        finally:
            self._lock.release()

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        data = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode()
        self._lock.acquire()
        try:
            fd = _open_journal_fd(self._file_path, os.O_WRONLY | os.O_APPEND, "storage journal")
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            except OSError as err:
                _cut(fd, start)
                full = " (the disk is full)" if err.errno in (errno.ENOSPC, errno.EDQUOT) else ""
                raise JournalWriteError(
                    f"storage journal '{shown(self._file_path)}' could not be written: {err.strerror}{full}; it is as "
                    "it was before this write and keeps every finished trial: free space and rerun the same command "
                    "to resume") from None
            finally:
                os.close(fd)
        finally:
            self._lock.release()


def _cut(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass  # the next process to open the journal cuts the torn line


def _repair(fd: int, path: str) -> str:
    """Make the journal end with a whole record (see :class:`_JournalFile`); returns what was done."""
    size = os.fstat(fd).st_size
    if not size:
        return ""
    if os.read(fd, len(_RECORD_START)) != _RECORD_START[:size]:
        raise InputError(f"storage journal '{shown(path)}' is not a study journal (it does not begin with an Optuna "
                         "journal record); move it away, or give another --out folder or --storage")
    os.lseek(fd, max(size - 1, 0), os.SEEK_SET)
    notes = []
    if os.read(fd, 1) != b"\n":
        os.lseek(fd, 0, os.SEEK_SET)
        data = _read_all(fd, size)
        keep = data.rfind(b"\n") + 1
        os.ftruncate(fd, keep)
        notes.append(f"its last line was cut short ({size - keep:,} bytes: a full disk, or a process killed while "
                     "writing) and is cut off")
    fixed, blank = _untear(fd, path)
    if fixed:
        notes.append(f"{fixed} line(s) an older servopt left torn mid-file lost their torn part")
    if blank:
        notes.append(f"{blank} blank line(s) are dropped")
    if not notes:
        return ""
    return f"storage journal '{shown(path)}': " + "; ".join(notes) + "; every whole record (every finished trial) is kept"


def _read_all(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _untear(fd: int, path: str) -> tuple[int, int]:
    """Replace each line that is a torn record followed by a whole one with the whole one, and drop
    blank lines; returns how many of each there were (a line that is neither a record nor torn is
    refused, naming it). A whole record is one line that begins with its operation code, once: only other
    lines are parsed. The repaired journal replaces the old one whole (a temporary file renamed over
    it, under the caller's lock), so that a kill in the middle leaves one or the other."""
    os.lseek(fd, 0, os.SEEK_SET)
    lines = _read_all(fd, os.fstat(fd).st_size).split(b"\n")
    fixed, blank = 0, 0
    for i, line in enumerate(lines):
        if line.startswith(_RECORD_START) and (line.count(_RECORD_START) == 1 or _is_record(line)):
            continue
        if not line:
            blank += i < len(lines) - 1  # the last is what follows the final newline
            continue
        cut = line.rfind(_RECORD_START)
        while cut > 0 and not _is_record(line[cut:]):
            cut = line.rfind(_RECORD_START, 0, cut)
        if cut > 0:
            lines[i] = line[cut:]
            fixed += 1
            continue
        # Neither a record nor a torn one before a whole one: what it held (a trial, a study) is not for
        # servopt to guess, and Optuna would replay the records after it against the wrong trials.
        raise InputError(f"storage journal '{shown(path)}' line {i + 1:,} is not an Optuna journal record (the file "
                         "was edited, or damaged); restore the journal from a copy, or move it away to start over")
    if blank:  # blank lines (an editor's) hold nothing: dropped, as Optuna cannot read past them
        lines = [line for line in lines[:-1] if line] + [lines[-1]]
    if fixed or blank:
        folder = os.path.dirname(path) or "."
        temp_fd, temp = tempfile.mkstemp(dir=folder, prefix=".study.journal.", suffix=".tmp")
        try:
            with os.fdopen(temp_fd, "wb") as temp_file:
                temp_file.write(b"\n".join(lines))
                temp_file.flush()
                os.fsync(temp_file.fileno())
            os.chmod(temp, 0o644)
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
    return fixed, blank


def _is_record(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _open_journal(path: Path, shown_url: str) -> JournalStorage:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"storage {shown_url}: cannot create its folder: {err.strerror}") from None
    backend = _JournalFile(str(path))
    try:
        storage = JournalStorage(backend)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:  # not Optuna's records
        raise InputError(f"storage journal '{shown(path)}' cannot be replayed ({type(err).__name__}: "
                         f"{str(err)[:100]}): it is not a study journal, or was edited; move it away to start over")\
            from None
    storage.repaired = backend.repaired
    return storage


def storage_file(url: str) -> Path | None:
    """The file a storage URL keeps its study in (a journal, or a SQLite database), or None for a
    database server.

    >>> storage_file("journal:///runs/chat/study.journal"), storage_file("sqlite:///runs/chat/study.db")
    (PosixPath('/runs/chat/study.journal'), PosixPath('runs/chat/study.db'))
    >>> storage_file("postgresql://db.internal/studies") is None
    True
    """
    path = journal_path(url)
    if path is not None:
        return path
    parsed = _parse(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    return Path(database[len("file:"):].split("?")[0] if database.startswith("file:") else database)


# Files SQLite keeps beside a database in WAL mode, and its rollback journal.
_SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def _check_sqlite_file(path: Path, shown_url: str, folder: str | Path | None) -> None:
    """A SQLite database (and the files SQLite writes beside it) never through a symbolic link (an
    empty file a planted study.db linked to became a database), and only onto a regular file."""
    for name in (path, *(path.with_name(path.name + end) for end in _SQLITE_COMPANIONS)):
        check_no_links(name, f"storage {shown_url}", folder)
        try:
            mode = os.lstat(name).st_mode
        except FileNotFoundError:
            continue
        except OSError as err:
            raise InputError(f"storage {shown_url}: '{shown(name)}' cannot be opened: {err.strerror}") from None
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO, device or socket"
            raise InputError(f"storage {shown_url}: '{shown(name)}' is {kind}, not a regular file; give a database "
                             "file's path")


def open_storage(url: str, folder: str | Path | None = None) -> BaseStorage:
    """An Optuna storage: a journal file for ``journal:`` URLs, else RDB storage, where SQLite gets
    WAL (concurrent readers, one writer) and a lock timeout. A journal or SQLite file is never opened
    through a symbolic link, nor (when it lies in ``folder``, the job folder) through a linked folder
    (:func:`~servopt.costmodels.outfiles.check_no_links`).

    A bad URL, a missing driver or a server that cannot be reached raises :class:`InputError` with
    one line that shows the URL masked.
    """
    path = journal_path(url)
    if path is not None:
        check_no_links(path, "storage journal", folder)
        return _open_journal(path, url)
    import sqlalchemy.exc  # noqa: PLC0415
    from sqlalchemy import event  # noqa: PLC0415

    parsed = _parse(url)
    shown = masked_url(url)
    database = storage_file(url)
    if database is not None:
        _check_sqlite_file(database, shown, folder)
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

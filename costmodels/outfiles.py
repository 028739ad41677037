"""Writing servopt's own files: atomically, and never through a symbolic link.

Every file servopt writes (job.json, the result tables and reports, exports, profiles, kernel
tables) goes through :func:`write_text` or :func:`write_bytes`: the content goes to a temporary
file in the same folder, is flushed to disk, then renamed over the target with ``os.replace``. A
reader sees the old file or the new one, never a truncated one, even when the writer is killed.
The rename replaces a symbolic link planted at the target instead of writing through it, so a
``report.md`` that links to another file leaves that file untouched. :func:`read_text` refuses to
follow a link when reading back what servopt wrote.

Example:
    >>> import os, tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> victim = folder / "victim.txt"
    >>> _ = victim.write_text("keep me")
    >>> os.symlink(victim, folder / "report.md")
    >>> _ = write_text(folder / "report.md", "# report")
    >>> victim.read_text(), (folder / "report.md").is_symlink()
    ('keep me', False)
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import InputError, one_line
from .userfiles import checked_descriptor, shown

if TYPE_CHECKING:
    import pandas as pd


def ensure_folder(folder: str | Path) -> Path:
    """Create ``folder`` (and its parents) if needed; an existing non-folder is an error."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(f"'{shown(folder)}' exists and is not a folder; choose another output folder") from None
    except OSError as err:
        raise InputError(f"cannot create folder '{shown(folder)}': {err.strerror}") from None
    return folder


def output_folder(folder: str | Path, what: str, markers: Iterable[str]) -> Path:
    """A folder servopt fills with files of its own (a job, an export): created if missing. Refused:
    the file system's root, and a folder that holds other things but none of ``markers`` (the files
    that say servopt wrote it), whose files of the same names servopt would replace.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "notes.txt").write_text("mine")
    >>> try:
    ...     output_folder(folder, "--out", ["job.json"])
    ... except InputError as err:
    ...     print(str(err).split("; ")[0].split("' ")[1])
    holds other files (notes.txt), and no job.json
    """
    path = Path(folder)
    if os.path.abspath(path) == os.path.abspath(os.sep):
        raise InputError(f"{what} '{shown(folder)}' is the file system's root folder; give a folder of its own "
                         "(servopt writes several files there)")
    try:
        entries = sorted(os.listdir(path)) if path.is_dir() else []
    except OSError as err:  # a name too long, no permission
        raise InputError(f"cannot create folder '{shown(folder)}': {err.strerror}") from None
    if entries:
        markers = list(markers)
        if not set(markers) & set(entries):
            listed = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise InputError(f"{what} '{shown(folder)}' holds other files ({one_line(listed)[:120]}), and no "
                             f"{' or '.join(markers)}; servopt would replace files of its names there: give a new "
                             "or empty folder")
    return ensure_folder(path)


def check_no_links(path: str | Path, what: str, folder: str | Path | None = None) -> Path:
    """Refuse ``path`` when it is a symbolic link or, when it lies in ``folder`` (a job folder), when any
    folder between ``folder`` and it is one: servopt follows no link inside its folders, where a
    planted one would have it create or rewrite the link's target. ``folder`` itself may be a link
    (the user named it).

    >>> import os, tempfile, pathlib
    >>> job = pathlib.Path(tempfile.mkdtemp())
    >>> os.symlink(tempfile.mkdtemp(), job / "sub")
    >>> try:
    ...     check_no_links(job / "sub" / "study.db", "storage", job)
    ... except InputError as err:
    ...     print(str(err).split("': ")[1].split(";")[0])
    '.../sub' is a symbolic link
    """
    path = Path(os.path.abspath(path))
    links = [path]
    if folder is not None:
        root = Path(os.path.abspath(folder))
        links += [parent for parent in path.parents if root in parent.parents]
    for part in links:
        if os.path.islink(part):
            shown_part = "it" if part == path else f"'{shown(part)}'"
            raise InputError(f"{what} '{shown(path)}': {shown_part} is a symbolic link; servopt follows no link inside "
                             "its folders (a planted link would have it write into the link's target). Remove it and "
                             "rerun")
    return path


def within(path: str | Path, folder: str | Path) -> bool:
    """Whether ``path`` lies inside ``folder`` (compared as written, links not resolved)."""
    return Path(os.path.abspath(folder)) in Path(os.path.abspath(path)).parents


def check_own_file(path: str | Path, mark: str, what: str) -> Path:
    """``path`` as a file servopt may replace: absent, or a file whose text begins with ``mark`` (the
    line servopt writes first in it). A file of the same name that a person wrote (a hand-edited
    workload.yaml in a ``--seed-job`` folder) is refused, not replaced.

    >>> import tempfile, pathlib
    >>> mine = pathlib.Path(tempfile.mkdtemp()) / "workload.yaml"
    >>> _ = mine.write_text("model: my-model\\n")
    >>> try:
    ...     check_own_file(mine, "# Written by servopt", "--seed-job")
    ... except InputError as err:
    ...     print(str(err).split(": ", 1)[1].split(";")[0])
    servopt did not write this file (it does not begin with '# Written by servopt')
    """
    path = check_output_file(path, what)
    try:
        head = read_text(path, what)[:len(mark)] if os.path.lexists(path) else mark
    except InputError:  # a link, a FIFO, not UTF-8: not servopt's
        head = ""
    if head != mark:
        raise InputError(f"{what} '{shown(path)}': servopt did not write this file (it does not begin with '{mark}'); "
                         "servopt never replaces a file it did not write: move it away, or give another folder")
    return path


def check_output_file(path: str | Path, what: str) -> Path:
    """``path`` as a file servopt may write: not a folder, FIFO or device, in a folder that exists or
    can be created and is writable. Checked before work that takes long (a calibration sweep), and by
    every write."""
    path = Path(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as err:
        raise InputError(f"{what} '{shown(path)}' cannot be written: {err.strerror}") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise InputError(f"{what} '{shown(path)}' is a folder; give a file name (e.g. '{shown(path / 'out')}')")
    if info is not None and not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
        raise InputError(f"{what} '{shown(path)}' is a FIFO, device or socket, not a file servopt can replace")
    parent = path.parent
    try:
        if parent.exists() and not parent.is_dir():
            raise InputError(f"{what} '{shown(path)}': '{shown(parent)}' is not a folder")
        writable = not parent.is_dir() or os.access(parent, os.W_OK | os.X_OK)
    except OSError as err:
        raise InputError(f"{what} '{shown(path)}' cannot be written: {err.strerror}") from None
    if not writable:
        raise InputError(f"{what} '{shown(path)}' cannot be written: no permission to write in '{shown(parent)}'")
    return path


def write_bytes(path: str | Path, data: bytes, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder, then rename); every
    failure (a full disk, a folder in its place, no permission) is one InputError naming ``path``."""
    path = check_output_file(path, "output")
    folder = ensure_folder(path.parent)
    try:
        fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{path.name[:100]}.", suffix=".tmp")
    except OSError as err:
        raise InputError(f"cannot write '{shown(path)}': {err.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        # os.replace renames the temporary file over the name: a symlink there is replaced, not followed.
        os.replace(temp, path)
    except BaseException as err:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        if isinstance(err, OSError):
            full = " (the disk is full)" if err.errno in (errno.ENOSPC, errno.EDQUOT) else ""
            raise InputError(f"cannot write '{shown(path)}': {err.strerror}{full}") from None
        raise
    return path


# What a spreadsheet reads as the start of a formula (OWASP, "CSV Injection": =, +, -, @, tab, carriage return).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell that a spreadsheet would run as a formula prefixed with ``'``
    (OWASP's rule); numbers, negative ones included, stay numbers.

    >>> import pandas as pd
    >>> spreadsheet_safe(pd.DataFrame({"gpu": ["=HYPERLINK(1)", "h100"], "usd": [-1.5, 2.0]})).to_dict("list")
    {'gpu': ["'=HYPERLINK(1)", 'h100'], 'usd': [-1.5, 2.0]}
    """
    import pandas as pd  # here: most commands write no table, and pandas costs start-up time

    def cell(value: object) -> object:
        return f"'{value}" if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value

    safe = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object or pd.api.types.is_string_dtype(frame[column]):
            safe[column] = frame[column].map(cell)
    return safe


def write_csv(path: str | Path, frame: pd.DataFrame) -> Path:
    """Write ``frame`` as CSV (no index), spreadsheet-safe (:func:`spreadsheet_safe`), atomically."""
    return write_text(path, spreadsheet_safe(frame).to_csv(index=False))


def write_text(path: str | Path, text: str, mode: int = 0o644) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`write_bytes`)."""
    return write_bytes(path, text.encode(), mode)


# servopt's own files: job.json, front.json (a front of thousands of points is a few MB).
MAX_OWN_FILE_BYTES = 512 * 2**20


def read_text(path: str | Path, what: str) -> str:
    """Read a file servopt wrote, refusing a symbolic link in its place (and a FIFO or device:
    opened non-blocking, checked to be a regular file of bounded size). FileNotFoundError when absent."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as err:
        if path.is_symlink():
            raise InputError(f"{what} '{shown(path)}' is a symbolic link; servopt does not follow links in its "
                             "folders. Remove it and rerun") from None
        raise InputError(f"{what} '{shown(path)}' cannot be read: {err.strerror}") from None
    with os.fdopen(checked_descriptor(fd, path, what, MAX_OWN_FILE_BYTES), "rb") as handle:
        data = handle.read(MAX_OWN_FILE_BYTES + 1)
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise InputError(f"{what} '{shown(path)}' is not UTF-8 text") from None

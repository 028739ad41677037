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

import os
import tempfile
from pathlib import Path

from .errors import InputError


def ensure_folder(folder: str | Path) -> Path:
    """Create ``folder`` (and its parents) if needed; an existing non-folder is an error."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(f"'{folder}' exists and is not a folder; choose another output folder") from None
    except OSError as err:
        raise InputError(f"cannot create folder '{folder}': {err.strerror}") from None
    return folder


def write_bytes(path: str | Path, data: bytes, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder, then rename)."""
    path = Path(path)
    folder = ensure_folder(path.parent)
    try:
        fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise InputError(f"cannot write in '{folder}': {err.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        # os.replace renames the temporary file over the name: a symlink there is replaced, not followed.
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    return path


def write_text(path: str | Path, text: str, mode: int = 0o644) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`write_bytes`)."""
    return write_bytes(path, text.encode(), mode)


def read_text(path: str | Path, what: str) -> str:
    """Read a file servopt wrote, refusing a symbolic link in its place."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise
    except OSError as err:
        if path.is_symlink():
            raise InputError(f"{what} '{path}' is a symbolic link; servopt does not follow links in its folders. "
                             "Remove it and rerun") from None
        raise InputError(f"{what} '{path}' cannot be read: {err.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read()
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise InputError(f"{what} '{path}' is not UTF-8 text") from None

"""Reading the files users hand servopt (YAML specs, JSON configs and profiles, CSV tables).

Every way a file can be unusable (missing, unreadable, not UTF-8, malformed, empty, the wrong
shape) becomes one :class:`~servopt.costmodels.errors.InputError` naming the file and the problem.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "w.yaml"
    >>> _ = path.write_text("model: [")
    >>> try:
    ...     read_yaml_mapping(path, "workload file")
    ... except InputError as err:
    ...     print(str(err).split(":")[0])
    workload file '...w.yaml' is not valid YAML at line 1, column 9
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

import pandas as pd
import yaml

from .errors import InputError


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except OSError as err:
        raise InputError(f"{what} '{path}' cannot be read: {err.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{what} '{path}' is not a UTF-8 text file") from None


def read_json(path: str | Path, what: str) -> Any:
    """Parse a JSON file."""
    path = Path(path)
    text = _read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{what} '{path}' is not valid JSON (line {err.lineno}: {err.msg})") from None


def read_yaml_mapping(path: str | Path, what: str) -> dict:
    """Parse a YAML file that must hold a mapping of keys to values."""
    path = Path(path)
    text = _read_text(path, what)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(f"{what} '{path}' is not valid YAML{where}: {getattr(err, 'problem', err)}") from None
    if data is None:
        raise InputError(f"{what} '{path}' is empty; see examples/ for the format")
    if not isinstance(data, dict):
        raise InputError(f"{what} '{path}' must be a YAML mapping of keys to values, not {type(data).__name__}")
    return data


def read_csv_table(path: str | Path | TextIO, what: str, name: str | None = None) -> pd.DataFrame:
    """Read a CSV table (a path or an open text buffer, called ``name``) that must have rows."""
    label = name or path
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise InputError(f"{what} '{label}' does not exist") from None
    except OSError as err:
        raise InputError(f"{what} '{label}' cannot be read: {err.strerror}") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise InputError(f"{what} '{label}' is not a readable CSV: {str(err).splitlines()[0]}") from None
    if frame.empty:
        raise InputError(f"{what} '{label}' has no rows")
    return frame

"""Reading the files users hand servopt: YAML specs, JSON configs and results, CSV tables, JSONL traces.

Every reader goes through here. Every way a file can be unusable (missing, a folder, too large, not
UTF-8, malformed, nested too deep, a key given twice, empty, a header without rows, a ragged row, a
cell that is not the number its column holds) becomes one :class:`~servopt.costmodels.errors.InputError`
naming the file, where in it, and what to write instead.

- YAML: safe loading only, duplicate keys refused (YAML's last-one-wins would silently drop the
  first), YAML 1.2 exponent floats (``1e-3``) read as numbers, nesting, size and alias expansion bounded.
- JSON: duplicate keys refused, nesting bounded (a 1,000-deep document is an error, not a RecursionError).
- CSV: the header's fields are unique; every row has exactly the header's number of fields; numeric
  columns are converted strictly (:class:`Number`), each bad cell reported with its line and column.

Example:
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "w.yaml").write_text("model: [")
    >>> try:
    ...     read_yaml_mapping(folder / "w.yaml", "workload file")
    ... except InputError as err:
    ...     print(str(err).split(": ")[0])
    workload file '...w.yaml' is not valid YAML at line 1, column 9
    >>> _ = (folder / "t.csv").write_text("isl,latency_ms\\n128,0.5\\n1.5,0.7\\n")
    >>> try:
    ...     read_csv_table(folder / "t.csv", "kernel table", columns={"isl": Number(integer=True)})
    ... except InputError as err:
    ...     print(str(err).split("t.csv' ")[1])
    line 3, column 'isl': '1.5' is not a whole number
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np
import yaml

from .errors import MAX_INT, InputError, one_line, quote

if TYPE_CHECKING:
    import pandas as pd

MAX_DEPTH = 32  # nesting of mappings and lists; servopt's own files need 5
MAX_SPEC_BYTES = 4 * 2**20  # a YAML spec (PyYAML reads about 1 MB/s)
MAX_JSON_BYTES = 512 * 2**20  # profiles, vllm bench results with per-request latencies, job files
MAX_DATA_BYTES = 8 * 2**30  # tables and traces (the Azure one-week traces are about 1 GB)
MAX_YAML_NODES = 200_000  # values after anchors and aliases are expanded
MAX_COLUMNS = 1000
MAX_CELL_CHARS = 2**20
MAX_PATH_SHOWN = 160


def shown(path: str | Path) -> str:
    """A path as messages show it: one line, long ones clipped in the middle."""
    text = one_line(str(path))
    if len(text) <= MAX_PATH_SHOWN:
        return text
    half = MAX_PATH_SHOWN // 2
    return f"{text[:half]}...{text[-half:]}"


def _checked_file(path: str | Path, what: str, max_bytes: int) -> Path:
    """``path`` as a readable regular file of at most ``max_bytes``, or an InputError saying why not."""
    path = Path(path)
    try:
        size = path.stat().st_size
        is_file = path.is_file()
    except FileNotFoundError:
        raise InputError(f"{what} '{shown(path)}' does not exist (cannot be read); check the path") from None
    except (OSError, ValueError) as err:  # too long a name, a NUL byte, no permission
        reason = getattr(err, "strerror", None) or str(err)
        raise InputError(f"{what} '{shown(path)}' cannot be read: {reason}") from None
    if not is_file:
        raise InputError(f"{what} '{shown(path)}' is not a file (a folder or a device); give the file's path")
    if size > max_bytes:
        raise InputError(f"{what} '{shown(path)}' is {size / 2**20:,.0f} MiB, more than the {max_bytes / 2**20:,.0f} MiB "
                         "servopt reads; cut it down (a trace: keep the window you want to replay)")
    return path


def read_text(path: str | Path, what: str, max_bytes: int = MAX_SPEC_BYTES) -> str:
    """The text of a UTF-8 file (a byte-order mark is dropped), bounded in size."""
    path = _checked_file(path, what, max_bytes)
    try:
        return path.read_bytes().decode("utf-8-sig")
    except OSError as err:
        raise InputError(f"{what} '{shown(path)}' cannot be read: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise InputError(f"{what} '{shown(path)}' is not UTF-8 text (bad byte at offset {err.start}); "
                         "save it as UTF-8") from None


# --- JSON ---------------------------------------------------------------------------------------
class _DuplicateKey(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    result = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _check_depth(data: Any, where: str) -> None:
    """Refuse data nested deeper than MAX_DEPTH (checked without recursion)."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > MAX_DEPTH:
                raise InputError(f"{where} is nested more than {MAX_DEPTH} levels deep; no servopt file needs that")
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)


def parse_json(text: str, where: str) -> Any:
    """Parse JSON text (``where`` names it in errors): duplicate keys and deep nesting are refused."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as err:
        raise InputError(f"{where} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
    except _DuplicateKey as err:
        raise InputError(f"{where} gives the key {quote(err.args[0])} twice; keep one") from None
    except RecursionError:
        raise InputError(f"{where} is nested more than {MAX_DEPTH} levels deep; no servopt file needs that") from None
    except ValueError as err:  # an integer of thousands of digits
        raise InputError(f"{where} holds an unreadable value: {one_line(str(err))[:120]}") from None
    _check_depth(data, where)
    return data


def read_json(path: str | Path, what: str, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Parse a JSON file."""
    return parse_json(read_text(path, what, max_bytes), f"{what} '{shown(path)}'")


def read_json_object(path: str | Path, what: str, hint: str = "") -> dict:
    """Parse a JSON file that must hold one object of keys to values."""
    data = read_json(path, what)
    if not isinstance(data, dict):
        kind = "list" if isinstance(data, list) else type(data).__name__
        raise InputError(f"{what} '{shown(path)}' must hold a JSON object of keys to values, not a {kind}"
                         + (f"; {hint}" if hint else ""))
    return data


# --- YAML ---------------------------------------------------------------------------------------
class _Refused(yaml.YAMLError):
    def __init__(self, problem: str, mark: yaml.Mark | None):
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, deep nesting and alias bombs."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested more than {MAX_DEPTH} levels deep; no servopt file needs that",
                               self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _count_nodes(node)
        return node

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # '<<: *defaults' merges; keys written after it override on purpose
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key: SafeLoader reports it
                    continue
                if duplicate:
                    raise _Refused(f"the key {quote(key)} is given twice in one mapping; keep one",
                                   key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


# YAML 1.1 (PyYAML) reads 1e-3 as a string; YAML 1.2 and every user read it as a number.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _count_nodes(root: yaml.Node) -> None:
    """Refuse documents whose aliases expand to more than MAX_YAML_NODES values, or refer to themselves."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_nodes: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_nodes.discard(key)
            children = _children(node)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            if sizes[key] > MAX_YAML_NODES:
                raise _Refused(f"expands to more than {MAX_YAML_NODES:,} values (anchors and aliases)", node.start_mark)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise _Refused("an alias refers to the value that contains it", node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def parse_yaml(text: str, where: str) -> Any:
    """Parse YAML text (``where`` names it in errors)."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise InputError(one_line(f"{where} is not valid YAML{at}: {problem}")) from None
    except RecursionError:
        raise InputError(f"{where} is nested more than {MAX_DEPTH} levels deep; no servopt file needs that") from None
    except ValueError as err:  # an integer of thousands of digits
        raise InputError(f"{where} holds an unreadable value: {one_line(str(err))[:120]}") from None


def read_yaml_mapping(path: str | Path, what: str) -> dict:
    """Parse a YAML file that must hold a mapping of keys to values."""
    where = f"{what} '{shown(path)}'"
    data = parse_yaml(read_text(path, what), where)
    if data is None:
        raise InputError(f"{where} is empty; see examples/ for the format")
    if not isinstance(data, dict):
        kind = "list" if isinstance(data, list) else type(data).__name__
        raise InputError(f"{where} must be a YAML mapping of keys to values, not a {kind}")
    return data


# --- CSV and JSONL ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Number:
    """How a numeric column is read: whole numbers or not, and its smallest allowed value.

    Whole-number columns accept ``4`` and ``4.0`` (pandas writes integer columns that have gaps as
    floats) but not ``4.5``. Empty cells are missing values (NaN) unless ``filled``. ``annotated``
    columns may follow the number with a note in parentheses, as hand-collected tables do
    (``0.9 (default; not set)``).
    """

    integer: bool = False
    minimum: float | None = None
    positive: bool = False
    maximum: float | None = None
    filled: bool = False
    annotated: bool = False

    @property
    def describe(self) -> str:
        kind = "whole number" if self.integer else "number"
        if self.positive:
            kind = f"positive {kind}"
        elif self.minimum is not None:
            kind = f"{kind} >= {self.minimum:g}"
        return kind if self.maximum is None else f"{kind} <= {self.maximum:g}"

    @property
    def example(self) -> str:
        return "128" if self.integer else "0.5"

    def problem(self, value: float) -> str:
        """Why an already-parsed number does not fit ('' when it does)."""
        if not np.isfinite(value):
            return "is not a finite number"
        if self.integer and (value != np.floor(value) or abs(value) > MAX_INT):
            return "is not a whole number"
        if (self.positive and value <= 0 or self.minimum is not None and value < self.minimum
                or self.maximum is not None and value > self.maximum):
            return f"is not a {self.describe}"
        return ""


def _csv_rows(stream: TextIO) -> Iterator[tuple[int, list[str]]]:
    reader = csv.reader(stream)
    for row in reader:
        if row:  # blank lines are skipped, as pandas does
            yield reader.line_num, row


def _check_csv(stream: TextIO, where: str) -> list[str]:
    """Walk the CSV once without keeping it: the header (returned) and every row's field count."""
    rows = _csv_rows(stream)
    try:
        first = next(rows, None)
        if first is None:
            raise InputError(f"{where} is empty; it needs a header line and rows")
        header = [name.strip() for name in first[1]]
        if len(header) > MAX_COLUMNS:
            raise InputError(f"{where} has {len(header):,} columns in its header; at most {MAX_COLUMNS} are read")
        blank = [i + 1 for i, name in enumerate(header) if not name]
        if blank:
            raise InputError(f"{where}: header field {blank[0]} is empty; name every column")
        twice = sorted({name for name in header if header.count(name) > 1})
        if twice:
            raise InputError(f"{where}: the header names column {quote(twice[0])} twice; keep one")
        count = 0
        for line, row in rows:
            count += 1
            if len(row) != len(header):
                raise InputError(f"{where} line {line} has {len(row):,} fields but the header has {len(header)}; "
                                 "every row needs one value per column (leave a value empty, not out)")
        if not count:
            raise InputError(f"{where} has a header but no rows")
    except (csv.Error, OSError, EOFError, lzma.LZMAError) as err:  # also a damaged compressed file
        raise InputError(f"{where} is not a readable CSV: {one_line(str(err))}") from None
    except UnicodeDecodeError as err:
        raise InputError(f"{where} is not UTF-8 text (bad byte at offset {err.start}); save it as UTF-8") from None
    return header


# Compressed tables, by suffix (as pandas reads them).
_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def _open_text(path: str | Path | TextIO, what: str, max_bytes: int) -> TextIO:
    if isinstance(path, io.TextIOBase):
        return path
    path = _checked_file(path, what, max_bytes)
    opener = _OPENERS.get(path.suffix.lower(), open)
    try:
        return opener(path, "rt", encoding="utf-8-sig", newline="")  # noqa: SIM115 (closed by the caller)
    except OSError as err:
        raise InputError(f"{what} '{shown(path)}' cannot be read: {err.strerror}") from None


def read_csv_table(path: str | Path | TextIO, what: str, name: str | None = None,
                   columns: Mapping[str, Number] | None = None, required: Iterable[str] = ()) -> pd.DataFrame:
    """Read a CSV table (a path, or an open text buffer called ``name``) that must have rows.

    Columns listed in ``columns`` are converted to float64 strictly (NaN where empty); the others
    stay text, with empty cells as NaN. ``required`` columns must be in the header.
    """
    import pandas as pd  # here: pandas costs half a second of start-up, and few commands read CSV

    where = f"{what} '{shown(name or path)}'"
    previous = csv.field_size_limit()
    csv.field_size_limit(MAX_CELL_CHARS)
    stream = _open_text(path, what, MAX_DATA_BYTES)
    try:
        header = _check_csv(stream, where)
        stream.seek(0)
        frame = pd.read_csv(stream, dtype=str, keep_default_na=False, na_filter=False, index_col=False,
                            skip_blank_lines=True, header=0, names=header)
    except InputError:
        raise
    except (pd.errors.ParserError, ValueError) as err:
        raise InputError(f"{where} is not a readable CSV: {one_line(str(err))[:200]}") from None
    finally:
        csv.field_size_limit(previous)
        if stream is not path:
            stream.close()
    missing = [column for column in required if column not in frame]
    if missing:
        raise InputError(f"{where} lacks the column(s) {', '.join(missing)}")
    frame = frame.where(frame != "", np.nan)
    for column, number in (columns or {}).items():
        if column in frame:
            frame[column] = numeric_column(frame[column], number, where, column)
    return frame


def numeric_column(cells: pd.Series, number: Number, where: str, column: str) -> np.ndarray:
    """Text cells (NaN when empty) as float64, strictly: the first bad cell is reported by line and column."""
    import pandas as pd

    if pd.api.types.is_numeric_dtype(cells) and not pd.api.types.is_bool_dtype(cells):  # parquet, already typed
        values = cells.to_numpy(dtype=float, na_value=np.nan)
        empty = pd.Series(np.isnan(values), index=cells.index)
    else:
        text = cells.astype("string").str.strip()
        if number.annotated:
            text = text.str.replace(r"\s*\([^()]*\)$", "", regex=True)
        empty = text.isna() | (text == "")
        values = pd.to_numeric(text.mask(empty), errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    unparsed = np.isnan(values) & ~empty.to_numpy()
    bad = unparsed.copy()
    checked = ~np.isnan(values)
    if checked.any():
        v = values[checked]
        wrong = ~np.isfinite(v)
        if number.integer:
            wrong |= (v != np.floor(np.where(np.isfinite(v), v, 0))) | (np.abs(v) > MAX_INT)
        if number.positive:
            wrong |= v <= 0
        if number.minimum is not None:
            wrong |= v < number.minimum
        if number.maximum is not None:
            wrong |= v > number.maximum
        bad[np.flatnonzero(checked)[wrong]] = True
    if number.filled and empty.any():
        row = int(np.flatnonzero(empty.to_numpy())[0])
        raise InputError(f"{where} line {row + 2}, column '{column}' is empty; every row needs a "
                         f"{number.describe} there")
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        value = cells.iloc[row]
        if unparsed[row]:
            why = f"is not a number; write a plain {number.describe} such as {number.example}"
        else:
            why = number.problem(values[row]) or f"is not a {number.describe}"
        raise InputError(f"{where} line {row + 2}, column '{column}': {quote(value)} {why}")
    return values


def json_number(value: Any, number: Number, where: str) -> float:
    """One JSON value as a number, strictly (``where`` names the record and key in errors)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        given = "true/false" if isinstance(value, bool) else ("text" if isinstance(value, str) else "not a number")
        raise InputError(f"{where} = {quote(value)} is {given}; write a plain {number.describe} such as "
                         f"{number.example}")
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise InputError(f"{where} = {quote(value)} is out of range")
    why = number.problem(float(value))
    if why:
        raise InputError(f"{where} = {quote(value)} {why}")
    return float(value)


def read_jsonl_records(path: str | Path, what: str) -> list[dict]:
    """The objects of a JSON Lines file (one object per line; blank lines skipped)."""
    where = f"{what} '{shown(path)}'"
    records = []
    stream = _open_text(path, what, MAX_DATA_BYTES)
    try:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            if len(line) > MAX_CELL_CHARS:
                raise InputError(f"{where} line {number} is {len(line):,} characters long; a record needs far fewer")
            record = parse_json(line, f"{where} line {number}")
            if not isinstance(record, dict):
                raise InputError(f"{where} line {number} must be a JSON object, not {quote(record)}")
            records.append(record)
    except UnicodeDecodeError as err:
        raise InputError(f"{where} is not UTF-8 text (bad byte at offset {err.start}); save it as UTF-8") from None
    finally:
        stream.close()
    if not records:
        raise InputError(f"{where} is empty; it needs one JSON object per line")
    return records

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
import fcntl
import gzip
import io
import json
import lzma
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

import numpy as np
import yaml

from .errors import MAX_INT, InputError, label, one_line, quote

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


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a device"),
          (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def _open_error(err: OSError | ValueError, path: str | Path, what: str) -> InputError:
    if isinstance(err, FileNotFoundError):
        return InputError(f"{what} '{shown(path)}' does not exist (cannot be read); check the path")
    reason = getattr(err, "strerror", None) or str(err)  # too long a name, a NUL byte, no permission, a link loop
    return InputError(f"{what} '{shown(path)}' cannot be read: {reason}")


def checked_descriptor(fd: int, path: str | Path, what: str, max_bytes: int) -> int:
    """``fd`` if it is a regular file of at most ``max_bytes``, made blocking again; else it is closed
    and an InputError says why (a folder, a FIFO, a device, a socket, or too large)."""
    info = os.fstat(fd)
    problem = ""
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
        problem = (f"is {kind}, not a regular file; servopt reads files whose size it can check first "
                   "(save the data to a file and give that file's path)")
    elif info.st_size > max_bytes:
        problem = (f"is {info.st_size / 2**20:,.0f} MiB, more than the {max_bytes / 2**20:,.0f} MiB servopt reads; "
                   "cut it down (a trace: keep the window you want to replay)")
    if problem:
        os.close(fd)
        raise InputError(f"{what} '{shown(path)}' {problem}")
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def open_descriptor(path: str | Path, what: str, max_bytes: int, follow_links: bool = True) -> int:
    """A file descriptor of the regular file ``path`` (see :func:`checked_descriptor`). The file is
    opened non-blocking, so that a FIFO in its place is refused instead of waiting for a writer."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as err:
        if not follow_links and Path(path).is_symlink():
            raise InputError(f"{what} '{shown(path)}' is a symbolic link; servopt does not follow links in its "
                             "folders. Remove it and rerun") from None
        raise _open_error(err, path, what) from None
    return checked_descriptor(fd, path, what, max_bytes)


# --- compressed files: named by suffix, checked by their first bytes, bounded in what they expand to
COMPRESSIONS = {".gz": ("gzip", b"\x1f\x8b", lambda raw: gzip.GzipFile(fileobj=raw, mode="rb")),
                ".bz2": ("bzip2", b"BZh", lambda raw: bz2.BZ2File(raw, mode="rb")),
                ".xz": ("xz", b"\xfd7zXZ\x00", lambda raw: lzma.LZMAFile(raw, mode="rb"))}
# A compressed file may expand to at most this many times the compressed bytes read so far (once past
# MIN_EXPANDED_BYTES): CSV tables and traces expand 2-35 times (the shipped ones); a 2 MB gzip of 2 GB
# of one repeated byte, 1,000 times.
MAX_EXPANSION = 200
MIN_EXPANDED_BYTES = 16 * 2**20
_DECOMPRESS_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error)


def compression_of(path: str | Path) -> str | None:
    """The compression a file's name says (``.gz``, ``.bz2``, ``.xz``), or None."""
    suffix = Path(path).suffix.lower()
    return suffix if suffix in COMPRESSIONS else None


def data_suffix(path: str | Path) -> str:
    """The suffix that names the data (``.csv`` of ``t.csv.gz``), lowercased."""
    path = Path(path)
    return Path(path.stem).suffix.lower() if compression_of(path) else path.suffix.lower()


class _Expansion(io.RawIOBase):
    """What a decompressor reads out, bounded in size and in expansion; its errors name the file."""

    def __init__(self, raw: BinaryIO, suffix: str, where: str, max_bytes: int):
        self._raw, self._where, self._max_bytes = raw, where, max_bytes
        self._name, _, opener = COMPRESSIONS[suffix]
        self._inner = opener(raw)
        self._out = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            count = self._inner.readinto(buffer)
        except _DECOMPRESS_ERRORS as err:
            cut = isinstance(err, EOFError)
            raise InputError(f"{self._where} is {'cut short' if cut else 'damaged'}: not a whole {self._name} file "
                             f"({one_line(str(err))[:80] or type(err).__name__}); compress it again, or give the "
                             "uncompressed file") from None
        self._out += count
        read = max(self._raw.tell(), 1)
        if self._out > self._max_bytes or self._out > max(MIN_EXPANDED_BYTES, MAX_EXPANSION * read):
            limit = (f"more than {self._max_bytes / 2**20:,.0f} MiB" if self._out > self._max_bytes else
                     f"more than {MAX_EXPANSION} times its compressed size (a compression bomb?)")
            raise InputError(f"{self._where} expands to {limit}; decompress it yourself and give servopt the "
                             "uncompressed file, or cut it down")
        return count

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._raw.close()
            super().close()


def open_binary(path: str | Path, what: str, max_bytes: int) -> BinaryIO:
    """A regular file's bytes, decompressed when its name ends in ``.gz``, ``.bz2`` or ``.xz``: at most
    ``max_bytes`` on disk and expanded (see :class:`_Expansion`). A compression suffix on a file that is
    not so compressed, or compressed data under another name, is refused naming the file."""
    raw = os.fdopen(open_descriptor(path, what, max_bytes), "rb")
    where = f"{what} '{shown(path)}'"
    suffix = compression_of(path)
    head = raw.peek(8)[:8] if hasattr(raw, "peek") else b""
    named = next((name for name, magic, _ in COMPRESSIONS.values() if head.startswith(magic)), None)
    if suffix is None:
        if named is not None:
            raw.close()
            ending = next(s for s, (n, _, _) in COMPRESSIONS.items() if n == named)
            raise InputError(f"{where} is {named}-compressed but its name does not end in {ending}; "
                             f"rename it (e.g. '{Path(path).name}{ending}') or decompress it")
        return raw
    name, magic, _ = COMPRESSIONS[suffix]
    if not head.startswith(magic):
        raw.close()
        what_it_is = f"{named}-compressed" if named else "not compressed"
        raise InputError(f"{where} is named {suffix} but is not {name} data ({what_it_is}); rename it to what "
                         "it holds, or compress it with " + name)
    return io.BufferedReader(_Expansion(raw, suffix, where, max_bytes))


def open_text(path: str | Path, what: str, max_bytes: int) -> TextIO:
    """:func:`open_binary` as UTF-8 text (a byte-order mark dropped, line ends kept as written)."""
    return io.TextIOWrapper(open_binary(path, what, max_bytes), encoding="utf-8-sig", newline="")


def not_utf8(where: str, err: UnicodeDecodeError) -> InputError:
    return InputError(f"{where} is not UTF-8 text (bad byte at offset {err.start}); save it as UTF-8")


def read_bytes(path: str | Path, what: str, max_bytes: int) -> bytes:
    """A whole file's bytes (decompressed as :func:`open_binary` does)."""
    with open_binary(path, what, max_bytes) as stream:
        try:
            data = stream.read(max_bytes + 1)
        except OSError as err:
            raise _open_error(err, path, what) from None
    if len(data) > max_bytes:  # it grew after it was checked
        raise InputError(f"{what} '{shown(path)}' is more than the {max_bytes / 2**20:,.0f} MiB servopt reads; cut it down")
    return data


def read_text(path: str | Path, what: str, max_bytes: int = MAX_SPEC_BYTES) -> str:
    """The text of a UTF-8 file (a byte-order mark is dropped), bounded in size."""
    try:
        return read_bytes(path, what, max_bytes).decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise not_utf8(f"{what} '{shown(path)}'", err) from None


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


# Integers with more digits than this are beyond every float (1.8e308): no count or size servopt reads.
MAX_INT_DIGITS = 308


class _HugeInt(str):
    """An integer literal beyond every float, kept as its digits until the key that holds it is named."""


def field_path(parts: Iterable[Any]) -> str:
    """Keys and list positions as a field path, as spec errors write it: ``traffic.classes.1.share``."""
    return ".".join(label(part) for part in parts) or "(top level)"


def _first_path(data: Any, found: Callable[[Any], bool]) -> tuple[list[Any], Any]:
    """The key path and value of the first value (depth first, in order) for which ``found`` is true."""
    stack: list[tuple[Any, list[Any]]] = [(data, [])]
    while stack:
        node, path = stack.pop()
        if found(node):
            return path, node
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        stack.extend((child, [*path, key]) for key, child in reversed(list(items)))
    return [], None


class _Decoder(json.JSONDecoder):
    """Python's JSON decoder that refuses duplicate keys and keeps integers beyond every float as
    :class:`_HugeInt` (``huge`` counts them), so that the caller names the key that holds one."""

    def __init__(self) -> None:
        super().__init__(object_pairs_hook=_no_duplicates, parse_int=self._int)
        self.huge = 0

    def _int(self, digits: str) -> int | str:
        if len(digits) <= MAX_INT_DIGITS:
            return int(digits)
        self.huge += 1
        return _HugeInt(digits)


def parse_json(text: str, where: str, decoder: _Decoder | None = None) -> Any:
    """Parse JSON text (``where`` names it in errors): duplicate keys, deep nesting and integers
    beyond every float are refused. ``decoder``: one to reuse over many small documents (JSON Lines)."""
    decoder = decoder or _Decoder()
    before = decoder.huge
    try:
        data = decoder.decode(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{where} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
    except _DuplicateKey as err:
        raise InputError(f"{where} gives the key {quote(err.args[0])} twice; keep one") from None
    except RecursionError:
        raise InputError(f"{where} is nested more than {MAX_DEPTH} levels deep; no servopt file needs that") from None
    if text.count("[") + text.count("{") > MAX_DEPTH:  # fewer brackets cannot nest deeper
        _check_depth(data, where)
    if decoder.huge > before:
        path, value = _first_path(data, lambda v: isinstance(v, _HugeInt))
        raise InputError(f"{where}: {field_path(path)} is a number of {len(value.lstrip('-')):,} digits, beyond any "
                         "value servopt reads; check the file")
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
            _check_spellings(node)
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


# Numbers that YAML 1.1 (PyYAML) and YAML 1.2 read differently, and no reader would guess right:
# 010 is octal 8 in 1.1 and 10 in 1.2; 1:30 is base 60 (90) in 1.1 and text in 1.2; 0b11 and 1_000 are
# numbers in 1.1 and text in 1.2 (as yes/no/on/off are true/false in 1.1 and text in 1.2).
_YAML11_SPELLINGS = (
    (re.compile(r"^[-+]?0[0-7]+$"), "octal {value} in YAML 1.1 (which servopt's YAML reader follows) but "
     "{decimal} in YAML 1.2; write {decimal} without the leading zero, or quote it as text"),
    (re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$"), "base 60 in YAML 1.1 ({value}) but text in "
     "YAML 1.2; write the number itself ({value}), or quote it as text"),
    # 0b101 (binary) and digits grouped by '_' (1_000, 0x_1F) are numbers in 1.1 only.
    (re.compile(r"^[-+]?0b[01_]+$"), "binary {value} in YAML 1.1 (which servopt's YAML reader follows) but text in "
     "YAML 1.2; write {value}, or quote it as text"),
    (re.compile(r"_"), "{value} in YAML 1.1 (which servopt's YAML reader follows) but text in YAML 1.2; write the "
     "digits without '_', or quote it as text"),
)
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _check_spellings(root: yaml.Node) -> None:
    """Refuse plain scalars spelled as YAML 1.1 octal, binary, digit-grouped or base-60 numbers or as
    YAML 1.1 booleans (yes/no/on/off), and integers beyond every float, naming the field that holds them."""
    stack: list[tuple[yaml.Node, tuple]] = [(root, ())]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                stack += [(key, path), (value, (*path, name))]
        elif isinstance(node, yaml.SequenceNode):
            stack += [(item, (*path, i)) for i, item in enumerate(node.value)]
        elif node.tag in _NUMBER_TAGS and node.style is None:
            problem = _spelling_problem(node.value)
            if problem:
                raise _Misspelled(f"{field_path(path)}: {label(node.value)} is {problem}", node.start_mark)
        elif node.tag == "tag:yaml.org,2002:bool" and node.style is None and node.value.lower() not in ("true", "false"):
            # yes/no/on/off: true or false in YAML 1.1, text in 1.2 (`speculation: off` means the name 'off').
            meant = node.value.lower() in ("yes", "on")
            raise _Misspelled(f"{field_path(path)}: {label(node.value)} is {str(meant).lower()} in YAML 1.1 (which "
                              f"servopt's YAML reader follows) but text in YAML 1.2; write {str(meant).lower()}, or "
                              f"quote it ('{node.value}') as text", node.start_mark)


def _spelling_problem(text: str) -> str:
    digits = text.lstrip("+-").replace("_", "")
    if digits.isdigit() and len(digits) > MAX_INT_DIGITS:
        return f"a number of {len(digits):,} digits, beyond any value servopt reads"
    for pattern, why in _YAML11_SPELLINGS:
        if pattern.search(text):
            value = yaml.load(text, Loader=yaml.SafeLoader)  # noqa: S506 (what YAML 1.1 makes of it)
            decimal = int(digits) * (-1 if text.startswith("-") else 1) if digits.isdigit() else None
            if decimal == value and "_" not in text:  # 00 to 07: the same number either way
                return ""
            return why.format(value=value, decimal=decimal)
    return ""


class _Misspelled(_Refused):
    """A value YAML reads in a way the writer is unlikely to mean (its message names the field)."""


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
    except _Misspelled as err:
        mark = err.problem_mark
        raise InputError(one_line(f"{where} line {mark.line + 1}, column {mark.column + 1}: {err.problem}")) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise InputError(one_line(f"{where} is not valid YAML{at}: {problem}")) from None
    except RecursionError:
        raise InputError(f"{where} is nested more than {MAX_DEPTH} levels deep; no servopt file needs that") from None
    except ValueError as err:  # an integer of thousands of digits
        raise InputError(f"{where} holds an unreadable value: {one_line(str(err))[:120]}") from None


# libyaml's parser with PyYAML's safe constructor (PyYAML's own parser when libyaml is absent): the
# same objects from servopt's shipped data files, several times faster (each file is read at start-up).
_SHIPPED_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_shipped_yaml(text: str) -> Any:
    """Parse one of servopt's own data files (trusted, written by its scripts: no user-file checks)."""
    return yaml.load(text, Loader=_SHIPPED_LOADER)  # noqa: S506 (a safe loader)


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

    def misfits(self, values: np.ndarray) -> np.ndarray:
        """Which parsed numbers (NaN: none given) do not fit, vectorized (:meth:`problem` says why)."""
        given = ~np.isnan(values)
        v = np.where(given, values, 0.0)
        wrong = ~np.isfinite(v)
        if self.integer:
            wrong |= (v != np.floor(np.where(np.isfinite(v), v, 0))) | (np.abs(v) > MAX_INT)
        if self.positive:
            wrong |= v <= 0
        if self.minimum is not None:
            wrong |= v < self.minimum
        if self.maximum is not None:
            wrong |= v > self.maximum
        return wrong & given


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
    except (csv.Error, OSError) as err:
        raise InputError(f"{where} is not a readable CSV: {one_line(str(err))}") from None
    except UnicodeDecodeError as err:
        raise not_utf8(where, err) from None
    return header


def _open_table(path: str | Path | TextIO, what: str, max_bytes: int) -> AbstractContextManager[TextIO]:
    """A path opened (and closed after), or the caller's open text buffer (left open)."""
    return nullcontext(path) if isinstance(path, io.TextIOBase) else open_text(path, what, max_bytes)


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
    try:
        with _open_table(path, what, MAX_DATA_BYTES) as stream:  # walked once to check it, then parsed
            header = _check_csv(stream, where)
        if isinstance(path, io.TextIOBase):
            path.seek(0)
        with _open_table(path, what, MAX_DATA_BYTES) as stream:
            frame = pd.read_csv(stream, dtype=str, keep_default_na=False, na_filter=False, index_col=False,
                                skip_blank_lines=True, header=0, names=header)
    except InputError:
        raise
    except (pd.errors.ParserError, ValueError) as err:
        raise InputError(f"{where} is not a readable CSV: {one_line(str(err))[:200]}") from None
    finally:
        csv.field_size_limit(previous)
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
        empty = np.isnan(values)
    else:
        text = cells.astype("string").str.replace(r"\s*\([^()]*\)\s*$", "", regex=True) if number.annotated else cells
        # pandas' parser takes surrounding blanks; only the cells it cannot read are looked at again.
        values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        empty = np.zeros(len(values), dtype=bool)
        missing = np.flatnonzero(np.isnan(values))
        if len(missing):
            unread = cells.iloc[missing]
            empty[missing] = (unread.isna() | (unread.astype(str).str.strip() == "")).to_numpy()
    unparsed = np.isnan(values) & ~empty
    bad = unparsed | number.misfits(values)
    if number.filled and empty.any():
        row = int(np.flatnonzero(empty)[0])
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


def json_numbers(values: list, number: Number, where_of: Callable[[int], str]) -> np.ndarray:
    """JSON values as float64, strictly (:func:`json_number`), vectorized; ``where_of(i)`` names entry
    ``i`` in the error about the first bad one."""
    kinds = set(map(type, values))
    if kinds <= {int, float}:
        array = np.asarray(values, dtype=float)  # ints have at most MAX_INT_DIGITS digits (parse_json)
        bad = np.flatnonzero(number.misfits(array) | np.isnan(array))
        if not len(bad):
            return array
        first = int(bad[0])
    else:
        first = next(i for i, v in enumerate(values) if type(v) not in (int, float))
    json_number(values[first], number, where_of(first))  # raises, saying why
    raise InputError(f"{where_of(first)} = {quote(values[first])} is not a {number.describe}")


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


_LONG_DIGITS = re.compile(rf"[0-9]{{{MAX_INT_DIGITS + 1}}}")
_BATCH_LINES = 10_000


def _flat_records(texts: list[str]) -> list[dict] | None:
    """The records of stripped JSON Lines read by Python's C decoder alone, when that is exact: each
    line one flat object (one ``{`` at its start, one ``}`` at its end) with as many colons as keys
    (so no key twice and nothing nested) and no run of 309 digits (no integer beyond a float); else
    None. Five times faster than the checking decoder on a million-record trace."""
    if not all(t[:1] == "{" and t[-1:] == "}" and t.count("{") == 1 and t.count("}") == 1 for t in texts):
        return None
    joined = "[" + ",".join(texts) + "]"  # each element is exactly one line's text
    if _LONG_DIGITS.search(joined):
        return None
    try:
        records = json.loads(joined)
    except ValueError:
        return None
    if len(records) != len(texts) or any(t.count(":") != len(r) for t, r in zip(texts, records, strict=True)):
        return None
    return records


def _batch(lines: list[tuple[int, str]], where: str, decoder: _Decoder) -> list[dict]:
    """The records of (line number, text) lines: :func:`_flat_records`, else one by one through
    :func:`parse_json`, which names the line of a problem."""
    fast = _flat_records([text for _, text in lines])
    if fast is not None:
        return fast
    records = []
    for number, text in lines:
        record = parse_json(text, f"{where} line {number}", decoder)
        if not isinstance(record, dict):
            raise InputError(f"{where} line {number} must be a JSON object, not {quote(record)}")
        records.append(record)
    return records


def read_jsonl_records(path: str | Path, what: str) -> list[dict]:
    """The objects of a JSON Lines file (one object per line; blank lines skipped)."""
    where = f"{what} '{shown(path)}'"
    records: list[dict] = []
    decoder = _Decoder()
    lines: list[tuple[int, str]] = []
    with open_text(path, what, MAX_DATA_BYTES) as stream:
        try:
            # readline with a limit: one endless line is refused without being held whole in memory.
            for number, line in enumerate(iter(lambda: stream.readline(MAX_CELL_CHARS + 1), ""), start=1):
                if len(line) > MAX_CELL_CHARS:
                    raise InputError(f"{where} line {number} is more than {MAX_CELL_CHARS:,} characters long; a "
                                     "record needs far fewer")
                text = line.strip()
                if text:
                    lines.append((number, text))
                if len(lines) == _BATCH_LINES:
                    records += _batch(lines, where, decoder)
                    lines = []
        except UnicodeDecodeError as err:
            raise not_utf8(where, err) from None
    records += _batch(lines, where, decoder)
    if not records:
        raise InputError(f"{where} is empty; it needs one JSON object per line")
    return records

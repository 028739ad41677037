"""Request traces: arrival times and token counts from the files people have, read without guessing.

One :class:`TraceFormat` per layout, tried in order when ``format`` is ``auto``:

- ``azure``: the Azure LLM inference traces (github.com/Azure/AzurePublicDataset, 2023 and 2024;
  CC-BY): CSV ``TIMESTAMP,ContextTokens,GeneratedTokens`` with datetimes such as
  ``2023-11-16 18:17:03.9799600`` or ``2024-05-10 00:00:00.009930+00:00`` (naive times are UTC).
- ``mooncake``: Mooncake's FAST'25 traces (github.com/kvcache-ai/Mooncake, FAST25-release/traces):
  JSONL ``{"timestamp", "input_length", "output_length", "hash_ids"}``, timestamps in
  milliseconds since the first request, ``hash_ids`` one id per 512-token block of the prompt
  (equal ids are equal content). Detected by its ``hash_ids``.
- ``plain``: a CSV or JSONL with an arrival-time column and token columns under the common names of
  :data:`PLAIN_COLUMNS` (``cached_tokens``, optional: each prompt's own prefix-cache hit); times in
  seconds unless the column name ends in ``_ms``/``_us`` or ``time_unit`` says otherwise.

Times are never silently read in the wrong unit. Times that are Unix epochs of another unit
(milliseconds read as seconds fall in the year 55,000) are refused; unless ``time_unit`` states the
unit, a trace whose distinct arrival times are typically (median) more than a minute or less than
0.1 ms apart is refused with the likely unit (milliseconds read as seconds turn gaps of 0.1-1 s into
2-17 minutes), until ``time_unit`` says which it is. A replay spans at most :data:`MAX_TRACE_SPAN_S` and :data:`MAX_TRACE_REQUESTS` requests
(``start_s`` and ``duration_s`` pick a window of a longer trace).

Example:
    >>> import tempfile, pathlib, json
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "trace.jsonl"
    >>> _ = path.write_text("\\n".join(json.dumps(r) for r in [
    ...     {"timestamp": 0, "input_length": 1100, "output_length": 50, "hash_ids": [0, 1, 2]},
    ...     {"timestamp": 3000, "input_length": 1300, "output_length": 20, "hash_ids": [0, 1, 3]}]))
    >>> trace = read_trace(path)
    >>> trace.format, trace.arrival_s.tolist(), trace.cached_tokens.tolist()
    ('mooncake', [0.0, 3.0], [0, 1024])
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import MAX_TOKENS, InputError, quote
from ..userfiles import Number, json_number, numeric_column, read_csv_table, read_jsonl_records, shown

if TYPE_CHECKING:
    import pandas as pd

TIME_UNITS = ("s", "ms", "us")
SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
MAX_TRACE_SPAN_S = 31 * 86400.0
MAX_TRACE_REQUESTS = 1_000_000
# Typical gaps between distinct arrival times outside this band (seconds) mean the times are in
# another unit than assumed: milliseconds read as seconds turn 0.1-1 s gaps into 2-17 minutes.
TYPICAL_GAP_S = (1e-4, 60.0)
# Unix epochs between 2000-01-01 and 2100-01-01, in seconds.
EPOCH_RANGE_S = (946_684_800.0, 4_102_444_800.0)
MOONCAKE_BLOCK_TOKENS = 512

_TOKENS = Number(integer=True, minimum=1, filled=True)
_TIME = Number(minimum=0, filled=True)
_CACHED = Number(integer=True, minimum=0, filled=True)


@dataclass(frozen=True)
class TraceFormat:
    """One trace layout: the accepted column names (lowercase) and how its times are written."""

    name: str
    time: tuple[str, ...]
    input: tuple[str, ...]
    output: tuple[str, ...]
    cached: tuple[str, ...] = ()  # each prompt's own prefix-cache hit, when the layout records it
    datetimes: bool = False
    unit: str = "s"
    signature: tuple[str, ...] = ()  # columns that identify the layout when format is auto

    def pick(self, columns: list[str], role: str) -> str | None:
        """The file's column for ``role`` (time, input, output), matched case-insensitively."""
        names = {c.strip().lower(): c for c in columns}
        return next((names[n] for n in getattr(self, role) if n in names), None)

    def matches(self, columns: list[str]) -> bool:
        lowered = {c.strip().lower() for c in columns}
        return bool(self.signature) and set(self.signature) <= lowered


AZURE = TraceFormat("azure", ("timestamp",), ("contexttokens",), ("generatedtokens",), datetimes=True,
                    signature=("timestamp", "contexttokens", "generatedtokens"))
MOONCAKE = TraceFormat("mooncake", ("timestamp",), ("input_length",), ("output_length",), unit="ms",
                       signature=("timestamp", "input_length", "output_length", "hash_ids"))
PLAIN_COLUMNS = {
    "time": ("arrival_s", "arrival_time_s", "timestamp_s", "time_s", "arrival_ms", "timestamp_ms", "time_ms",
             "arrival_us", "timestamp_us", "time_us", "arrival_time", "timestamp", "time"),
    "input": ("input_tokens", "input_len", "prompt_tokens", "input_length", "prompt_len"),
    "output": ("output_tokens", "output_len", "completion_tokens", "output_length"),
    "cached": ("cached_tokens", "prefix_cached_tokens"),
}
PLAIN = TraceFormat("plain", *(PLAIN_COLUMNS[role] for role in ("time", "input", "output", "cached")))
FORMATS = {f.name: f for f in (AZURE, MOONCAKE, PLAIN)}
TRACE_FORMATS = tuple(FORMATS)


@dataclass(frozen=True)
class RequestTrace:
    """Arrival times (seconds from the first request, sorted) and token counts of a replayed trace.

    Lengths are None when the file has no such column and they were not required.
    ``cached_tokens``, when the trace has them, is each prompt's own prefix-cache hit: a plain
    trace's ``cached_tokens`` column, or from Mooncake's ``hash_ids`` the leading tokens an earlier
    request already sent, as an unbounded prefix cache would hit them.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray | None
    output_tokens: np.ndarray | None
    cached_tokens: np.ndarray | None = None
    format: str = "plain"

    def __len__(self) -> int:
        return len(self.arrival_s)


@dataclass(frozen=True)
class _Columns:
    """The raw columns of a trace file, whatever its container: a CSV table, or JSONL records whose
    columns are the keys of all of them (so the layout is told by every record, not the first alone)."""

    names: list[str]
    values: pd.DataFrame | list[dict]
    jsonl: bool

    def row(self, index: int) -> str:
        """Where record ``index`` sits: a CSV line (after the header) or a JSONL record."""
        return f"record {index + 1}" if self.jsonl else f"line {index + 2}"

    def cells(self, column: str, where: str) -> list:
        """A JSONL column that servopt reads: every record must have it."""
        missing = next((i for i, record in enumerate(self.values) if column not in record), None)
        if missing is not None:
            raise InputError(f"{where} {self.row(missing)} has no {quote(column)}; every record needs it "
                             "(other records have it)")
        return [record[column] for record in self.values]

    def numbers(self, column: str, number: Number, where: str) -> np.ndarray:
        if not self.jsonl:
            return numeric_column(self.values[column], number, where, column)
        cells = self.cells(column, where)
        return np.array([json_number(v, number, f"{where} {self.row(i)}: {column}") for i, v in enumerate(cells)],
                        dtype=float)

    def datetimes_s(self, column: str, where: str) -> np.ndarray:
        """Datetime cells as seconds since the Unix epoch (naive times are UTC)."""
        import pandas as pd  # on first use: pandas costs half a second of start-up

        if self.jsonl:
            raise InputError(f"{where}: Azure traces are CSV files; this one is JSON Lines")
        cells = self.values[column].astype("string").str.strip()
        empty = np.flatnonzero((cells.isna() | (cells == "")).to_numpy())
        if len(empty):
            raise InputError(f"{where} line {int(empty[0]) + 2}, column '{column}' is empty; every request needs "
                             "its arrival time")
        parsed = pd.to_datetime(cells, format="ISO8601", utc=True, errors="coerce")
        bad = np.flatnonzero(parsed.isna().to_numpy())
        if len(bad):
            row = int(bad[0])
            raise InputError(f"{where} line {row + 2}, column '{column}': {quote(self.values[column].iloc[row])} is "
                             "not a date and time such as 2024-05-10 00:00:00.009930; numeric times need format: plain")
        return (parsed - pd.Timestamp("1970-01-01", tz="UTC")).dt.total_seconds().to_numpy()


def _load(path: Path, where: str) -> _Columns:
    jsonl = path.suffix.lower() in (".jsonl", ".ndjson", ".json") or _starts_with_brace(path)
    if not jsonl:
        frame = read_csv_table(path, "trace")
        return _Columns(list(frame.columns), frame, jsonl=False)
    records = read_jsonl_records(path, "trace")
    return _Columns(list(dict.fromkeys(key for record in records for key in record)), records, jsonl=True)


def _starts_with_brace(path: Path) -> bool:
    try:
        with open(path, "rb") as stream:
            return stream.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")
    except OSError:
        return False  # the CSV reader reports why


def _format_for(columns: _Columns, requested: str, where: str) -> TraceFormat:
    if requested != "auto":
        return FORMATS[requested]
    return next((f for f in (AZURE, MOONCAKE) if f.matches(columns.names)), PLAIN)


def _unit_for(fmt: TraceFormat, column: str, requested: str | None, where: str) -> str:
    """The time unit: ``time_unit``, else the column name's suffix, else the format's."""
    named = next((u for u in TIME_UNITS if column.strip().lower().endswith(f"_{u}")), None)
    if requested and named and requested != named:
        raise InputError(f"{where}: time_unit is '{requested}' but the column '{column}' says '{named}'; "
                         "drop time_unit or rename the column")
    return requested or named or fmt.unit


def _check_unit(raw: np.ndarray, unit: str, stated: bool, where: str, column: str) -> None:
    """Refuse times that are clearly in another unit than ``unit`` (see the module docstring); when
    the workload ``stated`` the unit, only epochs of another unit are refused."""
    import pandas as pd

    first = float(raw.min())
    for other, scale in SECONDS_PER_UNIT.items():
        if other != unit and EPOCH_RANGE_S[0] <= first * scale <= EPOCH_RANGE_S[1]:
            stamp = pd.Timestamp(first * scale, unit="s").strftime("%Y-%m-%d")
            raise InputError(f"{where}: the times in '{column}' look like Unix timestamps in {other} ({first:.0f} "
                             f"is {stamp} in {other}), not {unit}; set traffic.arrival.time_unit: {other}")
    # The typical gap between distinct arrival times (robust to bursts of equal times and to outliers).
    gaps = np.diff(np.unique(raw)) * SECONDS_PER_UNIT[unit]
    if stated or len(raw) < 20 or not len(gaps):
        return
    gap_s = float(np.median(gaps))
    low, high = TYPICAL_GAP_S
    if low <= gap_s <= high:
        return
    scaled = {u: gap_s * SECONDS_PER_UNIT[u] / SECONDS_PER_UNIT[unit] for u in TIME_UNITS if u != unit}
    guess = next((u for u, g in scaled.items() if low <= g <= high), "s" if gap_s < low else "ms")
    raise InputError(f"{where}: read as {unit}, the times in '{column}' are typically {gap_s:.3g} s apart, which "
                     f"looks like another unit; set traffic.arrival.time_unit: {guess} (or time_unit: {unit} if "
                     f"the times really are {unit})")


def _prefix_hits(hash_lists: list, inputs: np.ndarray | None, where: str) -> np.ndarray:
    """Leading prompt tokens whose 512-token blocks an earlier request sent (Mooncake's hash_ids)."""
    seen: set[int] = set()
    hits = np.zeros(len(hash_lists), dtype=np.int64)
    for i, ids in enumerate(hash_lists):
        if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
            raise InputError(f"{where} record {i + 1}: hash_ids must be a list of whole numbers, not {quote(ids)}")
        matched = 0
        while matched < len(ids) and ids[matched] in seen:
            matched += 1
        hits[i] = matched * MOONCAKE_BLOCK_TOKENS
        seen.update(ids)
    if inputs is not None:
        hits = np.minimum(hits, inputs - 1)
    return hits


def read_trace(path: str | Path, *, format: str = "auto", time_unit: str | None = None, need_lengths: bool = True,
               time_scale: float = 1.0, start_s: float = 0.0, duration_s: float | None = None) -> RequestTrace:
    """Read a trace (see the module docstring for the formats), sorted by arrival, first request at zero.

    Every way the file can be unusable raises :class:`InputError` naming the file, the line and
    column where it can, and the fix.
    """
    path = Path(path)
    where = f"trace '{shown(path)}'"
    columns = _load(path, where)
    fmt = _format_for(columns, format, where)
    time_column = fmt.pick(columns.names, "time")
    if time_column is None:
        raise InputError(f"{where} has no arrival-time column for the {fmt.name} format; name it one of "
                         f"{', '.join(fmt.time)} (columns found: {', '.join(c[:40] for c in columns.names[:8])})")
    if fmt.datetimes:
        if time_unit is not None:
            raise InputError(f"{where}: time_unit does not apply to an {fmt.name} trace, whose times are dates; drop it")
        arrival = columns.datetimes_s(time_column, where)
    else:
        unit = _unit_for(fmt, time_column, time_unit, where)
        raw = columns.numbers(time_column, _TIME, where)
        _check_unit(raw, unit, time_unit is not None, where, time_column)
        arrival = raw * SECONDS_PER_UNIT[unit]
    lengths = {}
    for role in ("input", "output"):
        column = fmt.pick(columns.names, role)
        if column is None and (need_lengths or fmt.name != "plain"):
            raise InputError(f"{where} has no {role}-token column for the {fmt.name} format; name it one of "
                             f"{', '.join(getattr(fmt, role))}")
        values = None if column is None else columns.numbers(column, _TOKENS, where)
        if values is not None and values.max() > MAX_TOKENS:
            row = int(np.argmax(values))
            raise InputError(f"{where} {columns.row(row)}: {column} = {values[row]:.0f} tokens is more than any "
                             f"model's context ({MAX_TOKENS:,})")
        lengths[role] = None if values is None else values.astype(np.int64)
    cached = None
    if fmt is MOONCAKE and "hash_ids" in columns.names and columns.jsonl:
        cached = _prefix_hits(columns.cells("hash_ids", where), lengths["input"], where)
    elif fmt is PLAIN and (column := fmt.pick(columns.names, "cached")) is not None:
        cached = columns.numbers(column, _CACHED, where).astype(np.int64)
    return replay(arrival, lengths["input"], lengths["output"], cached, where, time_scale=time_scale,
                  start_s=start_s, duration_s=duration_s, row_of=columns.row, time_column=time_column, format=fmt.name)


def replay(arrival_s: np.ndarray, inputs: np.ndarray | None, outputs: np.ndarray | None, cached: np.ndarray | None,
           where: str, *, time_scale: float = 1.0, start_s: float = 0.0, duration_s: float | None = None,
           row_of=lambda i: f"entry {i + 1}", time_column: str = "arrival_s", format: str = "plain") -> RequestTrace:
    """The requests a trace replays: sorted by arrival, the window ``[start_s, start_s + duration_s)``
    kept, the first at zero; at most :data:`MAX_TRACE_SPAN_S` and :data:`MAX_TRACE_REQUESTS`."""
    order = np.argsort(arrival_s, kind="stable")
    arrival = (arrival_s[order] - arrival_s[order][0]) * time_scale
    keep = arrival >= start_s
    if duration_s is not None:
        keep &= arrival < start_s + duration_s
    if not keep.any():
        raise InputError(f"{where}: no request arrives in the window start_s={start_s:g}, duration_s={duration_s}; "
                         f"the trace spans {arrival[-1]:,.6g} s")
    span = float(arrival[keep][-1] - arrival[keep][0])
    if span > MAX_TRACE_SPAN_S:
        last = int(order[np.flatnonzero(keep)[-1]])
        raise InputError(f"{where}: the replay spans {span:.3g} s, more than the {MAX_TRACE_SPAN_S / 86400:.0f} days "
                         f"servopt replays (the latest arrival, {time_column} on {row_of(last)}); check the "
                         "time column and time_unit, or replay a window with start_s and duration_s")
    count = int(keep.sum())
    if count > MAX_TRACE_REQUESTS:
        raise InputError(f"{where}: the replay holds {count:,} requests, more than the {MAX_TRACE_REQUESTS:,} servopt "
                         "simulates in one run; replay a window with start_s and duration_s")
    picked = order[keep]
    arrival = arrival[keep] - arrival[keep][0]

    def take(values: np.ndarray | None) -> np.ndarray | None:
        return None if values is None else values[picked]

    return RequestTrace(arrival, take(inputs), take(outputs), take(cached), format)

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
  :data:`PLAIN_COLUMNS` (``cached_tokens``, optional: each prompt's own prefix-cache hit); the unit
  of its times is stated by ``time_unit`` or by the column name's ``_s``/``_ms``/``_us`` suffix.

Times are never read in a unit nothing states or the numbers do not single out. ``time_unit`` is
taken as said, unless the times are Unix epochs of another unit (milliseconds read as seconds fall in
the year 55,000). A unit named by the column or the format is taken unless, besides, the typical
(median) gap between distinct arrivals is a trace's (0.1 ms to 60 s) in another unit only
(milliseconds read as seconds turn gaps of 0.1-1 s into 2-17 minutes). With no unit stated, the
times are seconds only if no other unit fits their typical gap (gaps of 0.02 are 20 ms, not 20 us;
gaps no unit fits are left to the span check); gaps of 0.1 to 60 fit both
seconds and milliseconds (a Mooncake trace without its ``hash_ids`` has millisecond gaps of 1 to 60),
and gaps of 100 to 60,000 milliseconds and microseconds; they are refused, every reading that fits
named, until ``time_unit`` says which, however few the rows. Every request at one time
needs no unit. Two columns that could hold one role (``arrival_s`` and ``Arrival_S``, or
``input_tokens`` and ``prompt_tokens``) are refused: which one is meant is not for servopt to pick. A
replay spans at most :data:`MAX_TRACE_SPAN_S` and :data:`MAX_TRACE_REQUESTS` requests (``start_s`` and
``duration_s`` pick a window of a longer trace).

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
from ..userfiles import (MAX_DATA_BYTES, Number, data_suffix, json_numbers, numeric_column, open_binary,
                         read_csv_table, read_jsonl_records, shown)

if TYPE_CHECKING:
    import pandas as pd

TIME_UNITS = ("s", "ms", "us")
SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
MAX_TRACE_SPAN_S = 31 * 86400.0
# Requests one replay simulates. The simulator takes about 15 s of CPU per 100,000 requests (8 H100
# replicas of Llama-3.1-8B at 20 requests/s, measured on a loaded machine; 1,000,000 took 400-860 s of
# wall time there): this bound keeps the longest replay, reading included, within a minute or so.
MAX_TRACE_REQUESTS = 200_000
# Typical gaps between distinct arrival times outside this band (seconds) mean the times are in
# another unit than assumed: milliseconds read as seconds turn 0.1-1 s gaps into 2-17 minutes.
TYPICAL_GAP_S = (1e-4, 60.0)
# Unix epochs between 2000-01-01 and 2100-01-01, in seconds.
EPOCH_RANGE_S = (946_684_800.0, 4_102_444_800.0)
MOONCAKE_BLOCK_TOKENS = 512

_TOKENS = Number(integer=True, minimum=1, filled=True)
_TIME = Number(minimum=0, filled=True)
_CACHED = Number(integer=True, minimum=0, filled=True)


_ROLES = {"time": "arrival time", "input": "input tokens", "output": "output tokens", "cached": "cached tokens"}


@dataclass(frozen=True)
class TraceFormat:
    """One trace layout: the accepted column names (lowercase) and how its times are written."""

    name: str
    time: tuple[str, ...]
    input: tuple[str, ...]
    output: tuple[str, ...]
    cached: tuple[str, ...] = ()  # each prompt's own prefix-cache hit, when the layout records it
    datetimes: bool = False
    unit: str | None = None  # what the format's documentation says its numeric times count, if it says
    signature: tuple[str, ...] = ()  # columns that identify the layout when format is auto

    def pick(self, columns: list[str], role: str, where: str) -> str | None:
        """The file's column for ``role`` (time, input, output, cached), matched case-insensitively;
        two columns that could hold it are refused."""
        accepted = getattr(self, role)
        found = [c for c in columns if c.strip().lower() in accepted]
        if len(found) > 1:
            raise InputError(f"{where} has {len(found)} columns that could hold the {_ROLES[role]}: "
                             f"{', '.join(quote(c) for c in found[:4])}; keep one (rename or drop the others)")
        return found[0] if found else None

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
        try:
            return [record[column] for record in self.values]
        except KeyError:
            missing = next(i for i, record in enumerate(self.values) if column not in record)
            raise InputError(f"{where} {self.row(missing)} has no {quote(column)}; every record needs it "
                             "(other records have it)") from None

    def numbers(self, column: str, number: Number, where: str) -> np.ndarray:
        if not self.jsonl:
            return numeric_column(self.values[column], number, where, column)
        return json_numbers(self.cells(column, where), number, lambda i: f"{where} {self.row(i)}: {column}")

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
    jsonl = data_suffix(path) in (".jsonl", ".ndjson", ".json") or _starts_with_brace(path)
    if not jsonl:
        frame = read_csv_table(path, "trace")
        return _Columns(list(frame.columns), frame, jsonl=False)
    records = read_jsonl_records(path, "trace")
    return _Columns(list(dict.fromkeys(key for record in records for key in record)), records, jsonl=True)


def _starts_with_brace(path: Path) -> bool:
    """Whether the (decompressed) file starts with '{': JSON Lines under another name."""
    with open_binary(path, "trace", MAX_DATA_BYTES) as stream:
        return stream.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")


def _format_for(columns: _Columns, requested: str, where: str) -> TraceFormat:
    if requested != "auto":
        return FORMATS[requested]
    return next((f for f in (AZURE, MOONCAKE) if f.matches(columns.names)), PLAIN)


def _named_unit(fmt: TraceFormat, column: str, requested: str | None, where: str) -> str | None:
    """The time unit the column's name (``_s``/``_ms``/``_us``) or the format's documentation gives;
    None when neither does."""
    named = next((u for u in TIME_UNITS if column.strip().lower().endswith(f"_{u}")), None)
    if requested and named and requested != named:
        raise InputError(f"{where}: time_unit is '{requested}' but the column '{column}' says '{named}'; "
                         "drop time_unit or rename the column")
    return named or fmt.unit


_UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}


def _time_unit(raw: np.ndarray, requested: str | None, named: str | None, where: str, column: str) -> str:
    """The unit of the times in ``raw`` (see the module docstring): ``time_unit`` (``requested``) unless
    the times are Unix epochs of another unit; the column's or format's unit (``named``) unless, besides,
    their typical gap is no trace's in it; with neither, the one unit their typical gap fits, and an
    InputError asking for ``time_unit`` when none or several do."""
    import pandas as pd  # on first use: pandas costs half a second of start-up

    stated = requested or named
    first = float(raw.min())
    for other, scale in SECONDS_PER_UNIT.items():
        if other != stated and EPOCH_RANGE_S[0] <= first * scale <= EPOCH_RANGE_S[1]:
            stamp = pd.Timestamp(first * scale, unit="s").strftime("%Y-%m-%d")
            read = f", not {_UNIT_NAMES[stated]}" if stated else ""
            raise InputError(f"{where}: the times in '{column}' look like Unix timestamps in {other} ({first:.0f} "
                             f"is {stamp} in {other}){read}; set traffic.arrival.time_unit: {other}")
    # The typical gap between distinct arrival times (robust to bursts of equal times and to outliers).
    gaps = np.diff(np.unique(raw))
    if requested or not len(gaps):
        return requested or named or "s"  # every request at one time: the unit changes nothing
    gap = float(np.median(gaps))
    low, high = TYPICAL_GAP_S
    fits = [u for u in TIME_UNITS if low <= gap * SECONDS_PER_UNIT[u] <= high]
    if not fits or named in fits or fits == ["s"] and named is None:
        # No unit fits: an outlier or an extreme burst, for the span and window checks to judge in seconds.
        return named or "s"
    ask = f"set traffic.arrival.time_unit (s, ms or us), or name the column {column}_s, {column}_ms or {column}_us"
    if len(fits) == 1:  # named, or not seconds: the one unit that fits
        read = named or "s"
        raise InputError(f"{where}: read as {_UNIT_NAMES[read]}, the times in '{column}' are typically "
                         f"{gap * SECONDS_PER_UNIT[read]:.3g} s apart, which looks like {_UNIT_NAMES[fits[0]]}; set "
                         f"traffic.arrival.time_unit: {fits[0]} (or time_unit: {read} if they really are "
                         f"{_UNIT_NAMES[read]})")
    readings = " or ".join(f"{gap * SECONDS_PER_UNIT[u]:.3g} s ({_UNIT_NAMES[u]}: "
                           f"{1 / (gap * SECONDS_PER_UNIT[u]):.3g} requests/s)" for u in fits)
    # Several fit (seconds and milliseconds, or milliseconds and microseconds): naming one would be a guess.
    said = (f"read as {_UNIT_NAMES[named]}, the times in '{column}' are no trace's, and more than one other unit fits"
            if named else f"the times in '{column}' do not say their unit, and more than one fits")
    raise InputError(f"{where}: {said}: typically {gap:.3g} apart is {readings}; {ask}")


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
    time_column = fmt.pick(columns.names, "time", where)
    if time_column is None:
        raise InputError(f"{where} has no arrival-time column for the {fmt.name} format; name it one of "
                         f"{', '.join(fmt.time)} (columns found: {', '.join(c[:40] for c in columns.names[:8])})")
    if fmt.datetimes:
        if time_unit is not None:
            raise InputError(f"{where}: time_unit does not apply to an {fmt.name} trace, whose times are dates; drop it")
        arrival = columns.datetimes_s(time_column, where)
    else:
        raw = columns.numbers(time_column, _TIME, where)
        unit = _time_unit(raw, time_unit, _named_unit(fmt, time_column, time_unit, where), where, time_column)
        arrival = raw * SECONDS_PER_UNIT[unit]
    lengths = {}
    for role in ("input", "output"):
        column = fmt.pick(columns.names, role, where)
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
    elif fmt is PLAIN and (column := fmt.pick(columns.names, "cached", where)) is not None:
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

"""``vllm bench serve`` result files: what a live deployment was sent and what it measured.

:func:`read_bench_result` reads the JSON that ``vllm bench serve --save-result`` (and
``benchmarks/benchmark_serving.py`` before it) writes into a :class:`BenchResult`. What the file
holds depends on the flags (``vllm/benchmarks/serve.py``, ``main_async``):

- always: the settings (``model_id``, ``num_prompts``, ``request_rate`` (a number, or ``"inf"``: every
  prompt at once), ``burstiness``, ``max_concurrency``; ``ramp_up_*`` when the rate ramps), the totals
  (``duration``, ``completed``, ``failed`` from 0.9, ``total_input_tokens``, ``total_output_tokens``)
  and the statistics ``mean_/median_/std_/pNN_{ttft,tpot,itl}_ms`` (``e2el`` when asked with
  ``--percentile-metrics``);
- with ``--save-detailed`` (always before 0.10): per request ``input_lens``, ``output_lens``, ``ttfts``,
  ``itls``, ``errors`` (empty when it succeeded), and from later versions ``latencies`` and
  ``start_times`` (the client's clock when each request was sent).

The dataset and the seed are not saved. :meth:`BenchResult.trace` rebuilds what the client sent:
the saved send times when the file has them, else the seeded gaps of ``vllm bench serve``
(:func:`~.bench_clients.vllm_bench_send_times`, ``--seed`` default 0 unless told); per-request
lengths when saved, else every request at the run's mean lengths (``total_*_tokens / completed``:
exact for the ``random`` dataset at its default range ratio, an approximation for ShareGPT).

Measured latencies (:meth:`BenchResult.measured`) are the file's own statistics, as the client
printed them; a statistic the file lacks (P90 unless asked for, end-to-end unless ``e2el`` was) is
recomputed from the per-request data as the client computes it (:meth:`BenchResult.recomputed`).

Example:
    >>> import json, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "run.json"
    >>> _ = path.write_text(json.dumps({"model_id": "m", "num_prompts": 2, "request_rate": "inf", "burstiness": 1.0,
    ...     "max_concurrency": None, "duration": 1.5, "completed": 2, "total_input_tokens": 300,
    ...     "total_output_tokens": 8, "input_lens": [100, 200], "output_lens": [4, 4], "ttfts": [0.05, 0.08],
    ...     "itls": [[0.01, 0.01, 0.012], [0.01, 0.011, 0.01]], "errors": ["", ""],
    ...     "median_ttft_ms": 65.0, "p99_ttft_ms": 79.7}))
    >>> run = read_bench_result(path)
    >>> run.detailed, run.request_rate, round(run.measured()["ttft"].p50, 3)
    (True, inf, 0.065)
    >>> run.trace(seed=0, vllm_version="0.8.3")["arrival_s"]
    [0.0, 0.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..costmodels.errors import MAX_INT, MAX_TOKENS, InputError
from ..costmodels.serving.metrics import LatencyStats
from ..costmodels.serving.traffic import MAX_RATE_PER_S
from ..costmodels.userfiles import Number, json_number, read_json
from .bench_clients import SessionCache, routed_hits, vllm_bench_send_times

METRICS = ("ttft", "tpot", "itl", "e2e")
# The statistic names vllm bench serve writes per metric (e2e is "e2el" there).
_BENCH_NAMES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}
_DETAIL_FIELDS = ("input_lens", "output_lens", "ttfts", "itls")
_SAVE_HINT = "save one with `vllm bench serve --save-result` (add --save-detailed for per-request data)"


def printable(text: object, limit: int = 120) -> str:
    """A string from a file, safe to print on one line: control characters become '?', long ones are cut."""
    out = "".join(ch if ch.isprintable() else "?" for ch in str(text))
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _number(data: dict, key: str, path: Path, *, required: bool = True, default: float = math.nan) -> float:
    """A number of the file; "inf" only where vllm writes it (``request_rate``), no text, no true/false."""
    value = data.get(key)
    if value is None:
        if required:
            raise InputError(f"vllm bench result '{path}' lacks '{key}': it is not a `vllm bench serve` result; {_SAVE_HINT}")
        return default
    if key == "request_rate" and isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise InputError(f"vllm bench result '{path}': '{key}' is {printable(value, 40)!r}, not a number")
    return float(value)


def _count(data: dict, key: str, path: Path, *, required: bool = True, default: int = 0) -> int:
    """A count of the file (requests, tokens): a whole number >= 0."""
    value = _number(data, key, path, required=required, default=default)
    if not math.isfinite(value) or value < 0 or value != math.floor(value) or value > MAX_INT:
        raise InputError(f"vllm bench result '{path}': '{key}' is {printable(data.get(key), 40)!r}, not a whole "
                         "number of at least 0")
    return int(value)


def _list(data: dict, key: str, path: Path, n: int | None) -> list | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or (n is not None and len(value) != n):
        raise InputError(f"vllm bench result '{path}': '{key}' must be a list with one entry per request"
                         + (f" ({n}, as input_lens has)" if n is not None else ""))
    return value


# Per-request durations (TTFT, token gaps, latencies) beyond this are not seconds of one request.
MAX_REQUEST_S = 1e7


def _floats(values: list, key: str, path: Path, durations: bool = True) -> np.ndarray:
    """Per-request numbers (None where a request has none: a failed one); no text, no true/false;
    ``durations`` are seconds from 0 to :data:`MAX_REQUEST_S`."""
    def bad(v: object) -> bool:
        if v is None:
            return False
        if isinstance(v, bool) or not isinstance(v, int | float):
            return True
        return durations and not 0 <= v <= MAX_REQUEST_S  # NaN too: a request without one says None
    index = next((i for i, v in enumerate(values) if bad(v)), None)
    if index is not None:
        what = "a duration in seconds" if durations else "a number"
        raise InputError(f"vllm bench result '{path}': '{key}' entry {index} is {printable(values[index], 40)!r}, "
                         f"not {what}")
    return np.asarray([math.nan if v is None else float(v) for v in values], dtype=float)


def _lengths(values: list, key: str, path: Path, missing: int | None = None) -> np.ndarray:
    """Per-request token counts: whole numbers from 0 to MAX_TOKENS (``missing`` stands in for None)."""
    number = Number(integer=True, minimum=0, maximum=MAX_TOKENS)
    out = [missing if v is None and missing is not None else
           json_number(v, number, f"vllm bench result '{path}': '{key}' entry {i}") for i, v in enumerate(values)]
    return np.asarray(out, dtype=np.int64)


@dataclass(frozen=True)
class BenchResult:
    """One ``vllm bench serve`` result (see the module docstring). Per-request arrays are None
    when the run was saved without ``--save-detailed``; times are in seconds."""

    path: str
    model_id: str
    num_prompts: int
    request_rate: float
    burstiness: float
    max_concurrency: int | None
    duration_s: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    stats_ms: dict[str, float] = field(repr=False)
    input_lens: np.ndarray | None = field(default=None, repr=False)
    output_lens: np.ndarray | None = field(default=None, repr=False)
    ttfts_s: np.ndarray | None = field(default=None, repr=False)
    itls_s: list[np.ndarray] | None = field(default=None, repr=False)
    latencies_s: np.ndarray | None = field(default=None, repr=False)
    start_times_s: np.ndarray | None = field(default=None, repr=False)
    errors: list[str] | None = field(default=None, repr=False)

    @property
    def detailed(self) -> bool:
        """Whether the file has per-request data (``--save-detailed``)."""
        return self.input_lens is not None

    @property
    def num_requests(self) -> int:
        """Requests the client sent (the initial test prompt not counted)."""
        return len(self.input_lens) if self.detailed else self.num_prompts

    @property
    def succeeded(self) -> np.ndarray:
        """Per request: it completed (no error and at least one output token)."""
        ok = self.output_lens > 0
        if self.errors is not None:
            ok &= np.asarray([not e for e in self.errors])
        return ok & np.isfinite(self.ttfts_s)

    @property
    def mean_input_tokens(self) -> float:
        return self.total_input_tokens / max(self.completed, 1)

    @property
    def mean_output_tokens(self) -> float:
        return self.total_output_tokens / max(self.completed, 1)

    def latencies(self) -> np.ndarray:
        """End-to-end latency of each request: saved, else TTFT plus its token gaps."""
        if self.latencies_s is not None:
            return self.latencies_s
        return self.ttfts_s + np.asarray([float(np.sum(gaps)) for gaps in self.itls_s])

    def recomputed(self) -> dict[str, LatencyStats]:
        """Mean, P50, P90 and P99 of TTFT, TPOT, ITL and end-to-end from the per-request data, as the
        client computes them (successful requests; TPOT over requests of two or more output tokens).
        Files without ``latencies`` (before 0.10) give end-to-end as TTFT plus the token gaps, which
        misses the stream's closing message: TPOT and end-to-end come out a little low."""
        ok = self.succeeded
        ttft, latency, out = self.ttfts_s[ok], self.latencies()[ok], self.output_lens[ok]
        many = out > 1
        tpot = (latency[many] - ttft[many]) / (out[many] - 1)
        gaps = [g for keep, gaps in zip(ok, self.itls_s) if keep for g in gaps]
        return {"ttft": LatencyStats.of(ttft), "tpot": LatencyStats.of(tpot),
                "itl": LatencyStats.of(np.asarray(gaps, dtype=float)), "e2e": LatencyStats.of(latency)}

    def measured(self) -> dict[str, LatencyStats]:
        """Measured mean, P50, P90 and P99 of TTFT, TPOT, ITL and end-to-end: the file's own statistics
        (what the client printed), the per-request data where the file has no statistic (NaN where neither)."""
        fallback = self.recomputed() if self.detailed else {}
        out = {}
        for metric in METRICS:
            name, stats = _BENCH_NAMES[metric], self.stats_ms
            saved = {"mean": stats.get(f"mean_{name}_ms"), "p50": stats.get(f"median_{name}_ms", stats.get(f"p50_{name}_ms")),
                     "p90": stats.get(f"p90_{name}_ms"), "p99": stats.get(f"p99_{name}_ms")}
            backup = fallback.get(metric)
            out[metric] = LatencyStats(**{stat: value / 1e3 if value is not None else
                                          (getattr(backup, stat) if backup else math.nan) for stat, value in saved.items()})
        return out

    def offered_in_flight(self) -> float:
        """Requests in flight an open-loop client at this rate keeps on a server as fast as measured
        (Little's law: rate x mean end-to-end latency)."""
        measured = self.measured()
        e2e = measured["e2e"].mean
        if not math.isfinite(e2e):
            e2e = measured["ttft"].mean + measured["tpot"].mean * max(self.mean_output_tokens - 1, 0)
        return self.request_rate * e2e

    def client(self) -> str:
        """How the client sent the requests: 'open' (send times), 'burst' (all at once) or 'closed'
        (a concurrency cap that binds: at most ``max_concurrency`` in flight)."""
        cap = self.max_concurrency
        if cap is not None and cap < self.num_requests and (not math.isfinite(self.request_rate)
                                                            or self.offered_in_flight() >= cap):
            return "closed"
        return "open" if math.isfinite(self.request_rate) else "burst"

    def send_times_s(self, seed: int, vllm_version: str | None) -> list[float]:
        """When each request was sent, from the run's start: saved, else the client's seeded gaps."""
        if self.start_times_s is not None and np.all(np.isfinite(self.start_times_s)):
            return (self.start_times_s - self.start_times_s.min()).tolist()
        return vllm_bench_send_times(self.num_requests, self.request_rate, burstiness=self.burstiness, seed=seed,
                                     vllm_version=vllm_version)

    def lengths(self) -> tuple[list[int], list[int]]:
        """(input, output) tokens of each request: saved, else the run's means."""
        if self.detailed:
            return [max(int(x), 1) for x in self.input_lens], [max(int(x), 1) for x in self.output_lens]
        n = self.num_requests
        return [max(round(self.mean_input_tokens), 1)] * n, [max(round(self.mean_output_tokens), 1)] * n

    def trace(self, *, seed: int, vllm_version: str | None, cache: SessionCache | None = None,
              engines: int = 1) -> dict[str, Any]:
        """The open-loop requests as a ``trace`` arrival's records; with ``cache`` (the server's prefix
        cache across a session of runs) each prompt's cached prefix on the engine it is routed to
        (one of ``engines``), and the cache updated."""
        inputs, outputs = self.lengths()
        records: dict[str, Any] = {"arrival_s": self.send_times_s(seed, vllm_version), "input_tokens": inputs,
                                   "output_tokens": outputs}
        if cache is not None:
            # Prompt i of a seeded dataset is the same prompt in every run of the session; the tool
            # sends request 0 alone first (its initial test run).
            keys = list(range(len(inputs)))
            cache.warm(keys[0], inputs[0], outputs[0])
            records["cached_tokens"] = routed_hits(cache.hits(keys, inputs), engines, self.path).tolist()
            cache.record(keys, inputs, outputs)
        return records

    def traffic_spec(self, *, seed: int, vllm_version: str | None, cache: SessionCache | None = None,
                     engines: int = 1) -> dict:
        """The ``traffic:`` mapping that reproduces the run.

        The requests go as the client sent them: at their send times, behind ``max_concurrency``
        when it is below the number of prompts (vllm bench serve's semaphore: a request goes at its
        time or when a slot frees, :class:`~.bench_clients.VllmBenchServe`).
        """
        arrival: dict[str, Any] = {"kind": "trace", "records": self.trace(seed=seed, vllm_version=vllm_version,
                                                                          cache=cache, engines=engines)}
        if self.max_concurrency is not None and self.max_concurrency < self.num_requests:
            arrival["max_concurrency"] = int(self.max_concurrency)
        return {"arrival": arrival}


def length_histogram(values, max_bins: int | None = None) -> dict[str, Any]:
    """A ``histogram`` length distribution of token counts (at least 1 each): every distinct value, or
    beyond ``max_bins`` distinct values that many equal-count bins at their mean."""
    values = np.sort(np.maximum(np.asarray(values, dtype=int), 1))
    unique, counts = np.unique(values, return_counts=True)
    if max_bins is None or len(unique) <= max_bins:
        return {"kind": "histogram", "values": unique.tolist(), "weights": counts.astype(float).tolist()}
    bins = np.array_split(values, max_bins)
    return {"kind": "histogram", "values": [int(round(b.mean())) for b in bins], "weights": [float(len(b)) for b in bins]}


def result_from_table_row(row: dict[str, Any]) -> dict[str, Any]:
    """The summary a ``vllm bench serve`` run saves without ``--save-detailed``, from a row of the
    measured tables (``vllm_bench_*.csv``: one row per run, the printed result block's figures;
    ``input_len`` and ``output_len`` the run's mean lengths). Only what the row states is written."""

    def number(key: str) -> float:
        try:
            return float(row.get(key))
        except (TypeError, ValueError):
            return math.nan

    completed = number("completed")
    inputs, outputs = number("input_len"), number("output_len")
    if not (completed > 0 and inputs > 0 and outputs > 0):
        raise InputError("the row needs completed, input_len and output_len (the run's mean lengths)")
    rate, cap = number("request_rate"), number("max_concurrency")
    out: dict[str, Any] = {
        "model_id": str(row.get("model", "")).split(" (")[0].strip(),
        "num_prompts": int(number("num_prompts")) if number("num_prompts") > 0 else int(completed),
        "request_rate": rate if math.isfinite(rate) else "inf", "burstiness": 1.0,
        "max_concurrency": int(cap) if math.isfinite(cap) else None,
        "duration": number("duration_s"), "completed": int(completed),
        "total_input_tokens": int(round(inputs * completed)), "total_output_tokens": int(round(outputs * completed)),
    }
    for key in ("request_throughput", "output_throughput"):
        if math.isfinite(number(key)):
            out[key] = number(key)
    for metric in ("ttft", "tpot", "itl"):
        for stat in ("mean", "median", "p99"):
            value = number(f"{stat}_{metric}_ms")
            if math.isfinite(value):
                out[f"{stat}_{metric}_ms"] = value
    return out


def read_bench_result(path: str | Path) -> BenchResult:
    """Read one ``vllm bench serve`` result JSON; anything that is not one is an InputError naming the field."""
    path = Path(path)
    data = read_json(path, "vllm bench result")
    if not isinstance(data, dict):
        raise InputError(f"vllm bench result '{path}' holds a JSON {type(data).__name__}, not the object "
                         f"`vllm bench serve` writes; {_SAVE_HINT}")
    for key in ("completed", "duration", "request_rate"):
        _number(data, key, path)
    if data.get("ramp_up_strategy"):
        raise InputError(f"vllm bench result '{path}': a ramp-up run (ramp_up_strategy "
                         f"{printable(data['ramp_up_strategy'], 20)!r}) changes its rate as it goes and is not simulated; "
                         "diagnose runs at a fixed --request-rate")
    completed = _count(data, "completed", path)
    if completed <= 0:
        raise InputError(f"vllm bench result '{path}': completed is 0 (every request failed); fix the server "
                         "or the benchmark's errors, then benchmark again")
    model_id = data.get("model_id")
    if not isinstance(model_id, str) or not model_id.strip():
        raise InputError(f"vllm bench result '{path}' lacks 'model_id': it is not a `vllm bench serve` result; {_SAVE_HINT}")
    rate = _number(data, "request_rate", path)
    if not 0 < rate <= MAX_RATE_PER_S and rate != math.inf:
        raise InputError(f"vllm bench result '{path}': request_rate must be positive (at most {MAX_RATE_PER_S:g}) "
                         f"or \"inf\", not {rate:g}")
    burstiness = _number(data, "burstiness", path, required=False, default=1.0)
    if not 0 < burstiness <= 1e6:
        raise InputError(f"vllm bench result '{path}': burstiness must be a positive number, not {burstiness:g}")
    duration = _number(data, "duration", path)
    if not 0 <= duration < math.inf:
        raise InputError(f"vllm bench result '{path}': duration must be a finite number of seconds, not {duration:g}")
    cap = _count(data, "max_concurrency", path, required=False) if data.get("max_concurrency") is not None else None
    if cap == 0:
        raise InputError(f"vllm bench result '{path}': max_concurrency must be at least 1 (or null)")
    stats = {}
    for key, value in data.items():
        # A statistic of no requests is NaN in Python's JSON: absent, not zero. Only TPOT and ITL can
        # have none (every request produced one token); every completed request has a TTFT and an
        # end-to-end latency, so a NaN there is a damaged file.
        if key.endswith("_ms") and isinstance(value, float) and math.isnan(value):
            if key.split("_")[-2] in ("tpot", "itl"):
                continue
            raise InputError(f"vllm bench result '{path}': '{key}' is NaN, but {completed} requests completed and "
                             "each has one; the file is damaged: save the run again")
        if key.endswith("_ms") and value is not None:
            number = _number(data, key, path)
            if not 0 <= number < math.inf:
                raise InputError(f"vllm bench result '{path}': '{key}' is {printable(value, 40)!r}, not a "
                                 "latency of at least 0 ms")
            stats[key] = number
    detail: dict[str, Any] = {}
    if data.get("input_lens") is not None:
        inputs = _list(data, "input_lens", path, None)
        n = len(inputs)
        if n < completed:  # one entry per request sent, failed ones included
            raise InputError(f"vllm bench result '{path}': input_lens has {n} entries but {completed} requests "
                             "completed; the per-request data is cut short: save the run again with --save-detailed")
        for key in _DETAIL_FIELDS[1:]:
            if _list(data, key, path, n) is None:
                raise InputError(f"vllm bench result '{path}' has input_lens but no '{key}': the per-request data is "
                                 "cut short; save the run again with --save-detailed")
        if any(gaps is not None and not isinstance(gaps, list) for gaps in data["itls"]):
            raise InputError(f"vllm bench result '{path}': 'itls' must hold one list of gaps (seconds) per request")
        itls = [_floats(gaps or [], f"itls entry {i}", path) for i, gaps in enumerate(data["itls"])]
        errors = _list(data, "errors", path, n)
        detail = {
            "input_lens": _lengths(inputs, "input_lens", path),
            "output_lens": _lengths(data["output_lens"], "output_lens", path, missing=0),
            "ttfts_s": _floats(data["ttfts"], "ttfts", path), "itls_s": itls,
            "errors": None if errors is None else [str(e or "") for e in errors],
        }
        for key, name in (("latencies", "latencies_s"), ("start_times", "start_times_s")):
            values = _list(data, key, path, n)
            if values is not None:
                detail[name] = _floats(values, key, path, durations=key == "latencies")
    elif not any(k.startswith(("mean_ttft", "median_ttft", "p99_ttft")) for k in stats):
        raise InputError(f"vllm bench result '{path}' has neither per-request data (input_lens, ttfts) nor TTFT "
                         f"statistics (mean_ttft_ms, p99_ttft_ms): it is not a `vllm bench serve` result; {_SAVE_HINT}")
    num_prompts = _count(data, "num_prompts", path, required=False, default=completed)
    failed = _count(data, "failed", path, required=False, default=0)
    if completed + failed > num_prompts:  # each prompt sent completes or fails, once
        raise InputError(f"vllm bench result '{path}': completed ({completed}) and failed ({failed}) requests add up "
                         f"to more than the num_prompts sent ({num_prompts}); the counts do not describe one run "
                         "(its mean lengths would be read wrong): save the run again")
    return BenchResult(
        path=str(path), model_id=model_id.strip(),
        num_prompts=num_prompts,
        request_rate=rate, burstiness=burstiness, max_concurrency=cap, duration_s=duration, completed=completed,
        failed=failed,
        total_input_tokens=_count(data, "total_input_tokens", path),
        total_output_tokens=_count(data, "total_output_tokens", path),
        stats_ms=stats, **detail,
    )

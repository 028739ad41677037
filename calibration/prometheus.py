"""A scrape of vLLM's Prometheus ``/metrics``: the engine's own view of a live run.

:func:`read_vllm_metrics` parses the text exposition format (``# HELP`` / ``# TYPE`` comments, then
``name{label="value",...} value [timestamp]`` samples) and keeps vLLM's series, summed over engines
(data-parallel ranks carry an ``engine`` label) unless noted. Names changed over releases
(``vllm/v1/metrics/loggers.py``; ``vllm/engine/metrics.py`` for the V0 engine); each signal is read
from the first name present:

| signal | names | kind |
| --- | --- | --- |
| running, waiting requests | ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` | gauge |
| KV-cache use (0-1) | ``vllm:kv_cache_usage_perc`` (0.10+), ``vllm:gpu_cache_usage_perc`` (before; deprecated) | gauge, max over engines |
| preemptions | ``vllm:num_preemptions_total`` (V1 and V0) | counter |
| prompt, generated tokens | ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total`` | counter |
| prefix cache | ``vllm:prefix_cache_{queries,hits}_total`` (0.10+), ``vllm:gpu_prefix_cache_{queries,hits}_total`` | counter |
| TTFT | ``vllm:time_to_first_token_seconds`` | histogram |
| ITL | ``vllm:inter_token_latency_seconds`` (0.11+), ``vllm:time_per_output_token_seconds`` (before, the same gaps) | histogram |
| end-to-end, queue time | ``vllm:e2e_request_latency_seconds``, ``vllm:request_queue_time_seconds`` | histogram |
| tokens per step | ``vllm:iteration_tokens_total`` | histogram |
| KV pool | ``vllm:cache_config_info`` labels ``num_gpu_blocks``, ``block_size`` | info gauge, per engine |

Gauges are what the engine held at the moment of the scrape (meaningful only when scraped during
the run); counters and histograms accumulate from the server's start. Two scrapes, before and after
the run, give the run's own counts (:meth:`VllmMetrics.since`). Histogram quantiles interpolate
linearly inside the bucket, as PromQL's ``histogram_quantile`` does.

Example:
    >>> text = '''# TYPE vllm:num_preemptions_total counter
    ... vllm:num_preemptions_total{engine="0",model_name="m"} 3.0
    ... vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.97
    ... vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 50.0
    ... vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 100.0
    ... vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 100.0
    ... vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 12.0
    ... vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 100.0
    ... '''
    >>> m = parse_vllm_metrics(text, "scrape")
    >>> m.preemptions, m.kv_cache_usage, round(m.quantile("ttft", 0.75), 3), m.mean("ttft")
    (3.0, 0.97, 0.3, 0.12)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..costmodels.errors import InputError, quote
from ..costmodels.userfiles import read_text, shown

# name{labels} value [timestamp]; label values are quoted strings with \\, \" and \n escapes.
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(\S+)(?:\s+-?\d+)?\s*$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
_HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "queue": ("vllm:request_queue_time_seconds",),
    "tokens_per_step": ("vllm:iteration_tokens_total",),
}
_COUNTERS = {
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
}
_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
           "vllm:gpu_cache_usage_perc")
# Every series servopt reads.
_READ = {*_GAUGES, *(n for names in _COUNTERS.values() for n in names),
         *(f"{n}_{part}" for names in _HISTOGRAMS.values() for n in names for part in ("bucket", "sum", "count"))}
# Series that count (requests, tokens, preemptions, observations): whole numbers, written as 3.0.
_WHOLE = {*_GAUGES[:2], *(n for names in _COUNTERS.values() for n in names),
          *(f"{n}_{part}" for names in _HISTOGRAMS.values() for n in names for part in ("bucket", "count"))}
_HINT = "save vLLM's metrics with `curl -s http://HOST:PORT/metrics > metrics.txt`"


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts by upper bound (``+Inf`` last), with the sum and count."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    def minus(self, before: Histogram | None) -> Histogram:
        if before is None:
            return self
        earlier = dict(before.buckets)
        return Histogram(tuple((le, n - earlier.get(le, 0.0)) for le, n in self.buckets), self.sum - before.sum,
                         self.count - before.count)

    def quantile(self, q: float) -> float:
        """PromQL's ``histogram_quantile``: linear inside the bucket the rank falls in."""
        if self.count <= 0 or not self.buckets:
            return math.nan
        rank = q * self.buckets[-1][1]
        lower_bound, lower_count = 0.0, 0.0
        for le, n in self.buckets:
            if n >= rank:
                if math.isinf(le):
                    return lower_bound  # the rank lies beyond the last finite bucket
                width = n - lower_count
                return lower_bound + (le - lower_bound) * ((rank - lower_count) / width if width > 0 else 1.0)
            lower_bound, lower_count = le, n
        return lower_bound


@dataclass(frozen=True)
class VllmMetrics:
    """The vLLM signals of one scrape (or of the interval between two: :meth:`since`)."""

    source: str
    model_names: tuple[str, ...]
    running: float | None
    waiting: float | None
    kv_cache_usage: float | None
    counters: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)
    kv_cache_tokens: float | None = None  # one engine's KV pool (num_gpu_blocks x block_size)

    @property
    def preemptions(self) -> float | None:
        return self.counters.get("preemptions")

    @property
    def under_load(self) -> bool:
        """Whether the gauges were read while requests were in the engine (a scrape during the run)."""
        return bool((self.running or 0) + (self.waiting or 0) > 0)

    def quantile(self, metric: str, q: float) -> float:
        hist = self.histograms.get(metric)
        return hist.quantile(q) if hist else math.nan

    def mean(self, metric: str) -> float:
        hist = self.histograms.get(metric)
        return hist.sum / hist.count if hist and hist.count > 0 else math.nan

    def since(self, before: VllmMetrics) -> VllmMetrics:
        """This scrape's counters and histograms minus an earlier scrape's: what happened in between."""
        counters = {k: v - before.counters.get(k, 0.0) for k, v in self.counters.items()}
        if any(v < 0 for v in counters.values()):
            raise InputError(f"metrics '{before.source}' counts more than '{self.source}': give the scrape taken "
                             "before the run first (the server may have restarted in between)")
        histograms = {k: h.minus(before.histograms.get(k)) for k, h in self.histograms.items()}
        return VllmMetrics(f"{before.source} -> {self.source}", self.model_names, self.running, self.waiting,
                           self.kv_cache_usage, counters, histograms, self.kv_cache_tokens)


def _labels(text: str | None) -> dict[str, str]:
    return {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\") for k, v in _LABEL.findall(text or "")}


def _value(text: str) -> float:
    return float(text.replace("+Inf", "inf").replace("-Inf", "-inf"))


def parse_vllm_metrics(text: str, source: str) -> VllmMetrics:
    """Parse Prometheus text exposition; a line that is not a sample or comment, a series given twice,
    a bucket bound that is not a number and a vLLM value out of its range are InputErrors."""
    samples: dict[str, list[tuple[dict[str, str], float, int]]] = {}
    seen: dict[tuple, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        try:
            value = _value(match.group(3)) if match else None
        except ValueError:
            value = None
        if value is None:
            raise InputError(f"metrics '{source}' line {number} is not Prometheus text (expected `name{{labels}} value`): "
                             f"{_HINT}")
        name, labels = match.group(1), _labels(match.group(2))
        series = (name, tuple(sorted(labels.items())))
        if series in seen:
            # Summing two copies would double every count: two scrapes pasted into one file, most often.
            raise InputError(f"metrics '{source}' line {number} repeats the series {_clip(name)} of line {seen[series]} "
                             "(same labels); a scrape holds each series once: give two scrapes as two --metrics files")
        seen[series] = number
        if name in _READ and not (math.isfinite(value) and value >= 0):
            raise InputError(f"metrics '{source}' line {number}: {_clip(name)} is {match.group(3)[:30]}; vLLM's "
                             f"counts, gauges and sums are finite and at least 0: {_HINT}")
        if name in _WHOLE and not value.is_integer():
            raise InputError(f"metrics '{source}' line {number}: {_clip(name)} is {match.group(3)[:30]}, but it "
                             f"counts (vLLM writes whole numbers, as 3.0): {_HINT}")
        samples.setdefault(name, []).append((labels, value, number))
    if not any(name.startswith("vllm:") for name in samples):
        raise InputError(f"metrics '{source}' has no vllm: series (is it a vLLM server's /metrics?): {_HINT}")

    def first(names: tuple[str, ...]) -> list[tuple[dict[str, str], float, int]] | None:
        return next((samples[n] for n in names if n in samples), None)

    def total(names: tuple[str, ...]) -> float | None:
        rows = first(names)
        return None if rows is None else float(sum(v for _, v, _ in rows))

    kv = first(("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"))
    for labels, value, number in kv or ():
        if value > 1:
            raise InputError(f"metrics '{source}' line {number}: the KV-cache usage is {value:g}, but vLLM writes it as "
                             "a fraction from 0 to 1 (1 means 100 percent); is the file edited or from another exporter?")
    histograms = {}
    for metric, names in _HISTOGRAMS.items():
        name = next((n for n in names if f"{n}_bucket" in samples), None)
        if name is None:
            continue
        bounds: dict[float, float] = {}
        lines: dict[float, int] = {}
        for labels, value, number in samples[f"{name}_bucket"]:
            try:
                le = _value(labels.get("le", "+Inf"))
            except ValueError:
                raise InputError(f"metrics '{source}' line {number}: the bucket bound le={quote(labels['le'])} of "
                                 f"{_clip(name)} is not a number (expected e.g. le=\"0.5\" or le=\"+Inf\")") from None
            if not le >= 0:  # vLLM's histograms count seconds and tokens
                raise InputError(f"metrics '{source}' line {number}: the bucket bound le={quote(labels['le'])} of "
                                 f"{_clip(name)} is below 0; vLLM's histograms count seconds and tokens: {_HINT}")
            bounds[le] = bounds.get(le, 0.0) + value
            lines[le] = number
        ordered = sorted(bounds.items())
        for (_, earlier), (le, later) in zip(ordered, ordered[1:]):
            if later < earlier:  # buckets are cumulative: a falling count is no histogram (nor are its quantiles)
                raise InputError(f"metrics '{source}' line {lines[le]}: the buckets of {_clip(name)} are not cumulative "
                                 f"(le={le:g} counts {later:g}, fewer than a smaller bound's {earlier:g}); is the file "
                                 f"edited, or are two scrapes mixed? {_HINT}")
        histograms[metric] = Histogram(tuple(sorted(bounds.items())), total((f"{name}_sum",)) or 0.0,
                                       total((f"{name}_count",)) or 0.0)
    counters = {k: v for k, names in _COUNTERS.items() if (v := total(names)) is not None}
    pools = []
    for labels, _, _ in samples.get("vllm:cache_config_info", []):
        try:
            pools.append(float(labels["num_gpu_blocks"]) * float(labels["block_size"]))
        except (KeyError, ValueError):
            pass  # V0 before 0.6 had no num_gpu_blocks label; "None" before the pool is sized
    pools = [p for p in pools if math.isfinite(p) and p > 0]
    names = sorted({labels["model_name"] for rows in samples.values() for labels, _, _ in rows if "model_name" in labels})
    return VllmMetrics(source, tuple(names), total(("vllm:num_requests_running",)), total(("vllm:num_requests_waiting",)),
                       max(v for _, v, _ in kv) if kv else None, counters, histograms,
                       sum(pools) / len(pools) if pools else None)


def _clip(name: str) -> str:
    return name if len(name) <= 80 else name[:77] + "..."


# A scrape of one server is tens of kilobytes; a thousand LoRA adapters' labels would still fit.
MAX_METRICS_BYTES = 64 * 2**20


def read_vllm_metrics(paths: list[str | Path]) -> VllmMetrics:
    """One scrape, or two (before and after the run: the run's own counts)."""
    if len(paths) > 2:
        raise InputError("--metrics takes one scrape, or two (before and after the run)")
    scrapes = []
    for path in paths:
        text = read_text(path, "metrics file", MAX_METRICS_BYTES)
        if "\x00" in text:  # the exposition format is UTF-8 text; anything else is not a scrape
            raise InputError(f"metrics file '{shown(path)}' is not text: {_HINT}")
        scrapes.append(parse_vllm_metrics(text, shown(path)))
    return scrapes[-1].since(scrapes[0]) if len(scrapes) == 2 else scrapes[0]

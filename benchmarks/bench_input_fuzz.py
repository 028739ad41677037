"""Seeded fuzzer over every file servopt reads, each case run as a user runs it.

    python benchmarks/bench_input_fuzz.py [--cases 2000] [--seed 1] [--jobs 2] [--timeout 30] [--show N]

File kinds: workload YAML (open, bursty, closed-loop, optimize; tenant classes with priorities and
their own SLOs; multi-turn sessions with dataset length presets), deployment YAML (plain, speculative,
P/D, pipeline, priority scheduling), traces (plain CSV, plain JSONL, Mooncake JSONL, Azure 2023 and
2024 CSV), profile JSON, hardware YAML, ``vllm bench serve`` JSON, measured CSV tables (end-to-end, memory, kernel) and
an optimize job's job.json. Each case takes a valid file, applies one seeded mutation (a deleted or
unknown key, a type swap, NaN/inf/huge/negative/fractional numbers, bools, strings, unicode and
control characters, deep nesting, a duplicate key, truncation, binary garbage, ragged or 100k-field
CSV rows, a header without rows, bad cells, times in the wrong unit, ...) and runs the ``servopt``
command that reads it, through the CLI's ``main`` in a forked process (the same exit-code
handling as the ``servopt`` script), killed after ``--timeout`` seconds.

A case passes when there is no traceback, no hang and exit code 0 or 2, an exit-2 message is one
line starting ``servopt <command>: error:``, and the oracle agrees: a mutation that must be refused
(a non-finite, negative, boolean, textual or absurdly large number; an unknown or missing required
key; a duplicate key; deep nesting; a ragged row; ...) exits 2 with a message naming the field,
column or problem; a mutation that keeps the file valid (a byte-order mark, CRLF line ends, comments,
reordered keys or rows, blank lines, YAML 1.2 exponent floats) exits 0, and the output shows the input
was read as written (every trace request replayed, every table row predicted). The oracle is written
from the file formats, not from servopt's validators. Mutations whose outcome depends on the model
(a string changed to unicode, zero, a value scaled by 1000, a truncated file) only need a clean exit.

Issue 21's kinds (special files, compressed traces, YAML 1.1 spellings, ...) and issue 30's add what a
hostile user tries beyond a file's values, each case with what must hold of its folder afterwards:
``markdown`` (study, tenant class, model-folder and GPU names with HTML, links or escape codes: report.md
shows them as text, checked raw and, when python-markdown is installed, rendered), ``terminal`` (the same
in --study, file and folder names and a hardware file's text: no control character printed, no line
forged), ``storage_links`` (a SQLite database, its WAL file or a folder on the way planted as a link, a
job.json edited to name a storage outside the job, an export folder that is a link: refused, nothing
outside the folder created or changed), ``resume`` (a job run again after its price, local config.json,
profile or workload changed: refused naming the change; with --restart, started afresh; unchanged,
resumed), ``config_extremes`` (one value of a shipped config.json set to 0, NaN, Infinity, text, a list,
a mapping or a huge number, from a folder or a Hugging Face cache entry), ``yaml_spellings`` (node
selectors and images spelled as YAML 1.1/1.2 numbers, booleans or nulls: quoted in every manifest),
``seed_job`` (a --seed-job folder of a user's files) and ``misread`` (each misread the issue lists).

Prints the pass rate, per file kind and per mutation, and the distinct failure classes with one
example each (the case number reproduces it: ``--only N``).
"""

from __future__ import annotations

import argparse
import bz2
import copy
import gzip
import io
import json
import lzma
import math
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# Every case reads local files only: a model id must resolve from the shipped catalog, not wait on the Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
VALID, INVALID, EITHER = "valid", "invalid", "either"
DEEP = 1000

# --- base files -----------------------------------------------------------------------------------
W_OPEN = {
    "model": "llama-3.1-8b",
    "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 4.0},
                "input_tokens": {"kind": "lognormal", "mean": 1024.0, "sigma": 0.5, "min": 16, "max": 8192},
                "output_tokens": {"kind": "fixed", "value": 128}},
    "slo": {"p99_ttft_s": 2.0, "p99_tpot_s": 0.1},
    "objective": {"latency": "e2e", "cost": "usd_per_hour"},
    "accuracy": {"max_drop_pct": 3.0},
    "limits": {"max_gpus": 16, "gpus_per_node": 8},
    "redundancy": 0.2,
    "budget": {"trials": 40, "time_s": 60.0},
    "seed": 3,
}
W_BURSTY = {
    "model": "qwen3-8b",
    "traffic": {"arrival": {"kind": "gamma", "rate_per_s": 3.0, "cv": 2.0},
                "input_tokens": {"kind": "uniform", "low": 200, "high": 2000},
                "output_tokens": {"kind": "histogram", "values": [32, 128, 512], "weights": [1.0, 2.0, 1.0]},
                "shared_prefix_fraction": 0.25, "max_context": 4096},
    "slo": {"p99_e2e_s": 30.0},
    "fidelity": {"search_requests": 300, "final_requests": 600, "screen_margin": 0.25},
}
W_CLOSED = {
    "model": "llama-3.1-8b",
    "traffic": {"arrival": {"kind": "closed_loop", "concurrency": 8, "think_time_s": 0.5, "requests_per_client": 4},
                "input_tokens": {"kind": "fixed", "value": 512},
                "output_tokens": {"kind": "uniform", "low": 16, "high": 64}},
    "slo": {"p99_ttft_s": 1.0},
}
W_OPTIMIZE = {
    "model": "llama-3.1-8b",
    "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 6.0},
                "input_tokens": {"kind": "fixed", "value": 512},
                "output_tokens": {"kind": "fixed", "value": 64}},
    "slo": {"p99_ttft_s": 2.0, "p99_tpot_s": 0.1},
    "gpus": {"h100": {"price_per_gpu_hour": 2.5}},
    "space": {"mode": "aggregated", "speculation": "off", "quantization": ["bf16"], "max_num_seqs": [64],
              "max_num_batched_tokens": [8192], "tp": [1, 2]},
    "budget": {"trials": 4},
    "fidelity": {"search_requests": 100, "final_requests": 100},
}
W_CLASSES = {
    "model": "llama-3.1-8b",
    "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 6.0},
                "classes": [
                    {"name": "chat", "share": 0.5, "priority": 0, "slo": {"p99_ttft_s": 0.5},
                     "input_tokens": {"kind": "lognormal", "mean": 512.0, "sigma": 0.6, "max": 8192},
                     "output_tokens": {"kind": "fixed", "value": 128}},
                    {"name": "batch", "share": 0.5, "priority": 1, "slo": {"p99_e2e_s": 120.0},
                     "input_tokens": {"kind": "uniform", "low": 1000, "high": 3000},
                     "output_tokens": {"kind": "histogram", "values": [64, 256], "weights": [1.0, 1.0]}}]},
    "slo": {"p99_tpot_s": 0.1},
}
W_SESSIONS = {
    "model": "llama-3.1-8b",
    "traffic": {"arrival": {"kind": "sessions", "rate_per_s": 2.0, "turns": {"kind": "uniform", "low": 1, "high": 6},
                            "think_time": {"kind": "lognormal", "mean_s": 10.0, "sigma": 0.8}},
                "input_tokens": {"kind": "dataset", "name": "sharegpt"},
                "output_tokens": {"kind": "dataset", "name": "sharegpt"}},
    "slo": {"p99_ttft_s": 1.0},
}
W_SESSIONS_FIXED = {
    "model": "llama-3.1-8b",
    "traffic": {"arrival": {"kind": "sessions", "rate_per_s": 1.0, "turns": {"kind": "fixed", "value": 3},
                            "think_time": {"kind": "fixed", "value_s": 5.0}},
                "input_tokens": {"kind": "dataset", "name": "azure-conv-2023"},
                "output_tokens": {"kind": "fixed", "value": 64}, "max_context": 8192},
}
D_PLAIN = {"gpu": "h100", "tp": 1, "max_num_seqs": 128, "max_num_batched_tokens": 8192,
           "gpu_memory_utilization": 0.9, "max_model_len": 16384, "enable_prefix_caching": True}
D_SPEC = {"gpu": "h100", "tp": 2, "replicas": 2, "quantization": "fp8", "kv_cache_dtype": "fp8",
          "router": "round_robin", "speculative": {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.5}}
D_PD = {"gpu": "h100", "max_model_len": 8192,
        "disaggregation": {"prefill_instances": 1, "prefill_tp": 1, "decode_instances": 1, "decode_tp": 1,
                           "rdma_gbps": 50.0}}
D_PRIORITY = {"gpu": "h100", "max_num_seqs": 64, "max_model_len": 16384, "scheduling_policy": "priority"}
D_PP = {"gpu": "a100-80gb", "tp": 2, "pp": 2, "internode_gbps": 25.0, "block_size": 16, "enable_chunked_prefill": True}
HARDWARE = {"gpus": {"h100": {"price_per_gpu_hour": 2.1},
                     "h100-lab": {"base": "h100", "memory_gib": 93.0, "memory_bandwidth_tbps": 3.9,
                                  "price_per_gpu_hour": 2.5, "gpus_per_node": 8}}}
TRACE_ROWS = 60


def _trace_rows(rng: random.Random) -> list[tuple[float, int, int]]:
    times, t = [], 0.0
    for _ in range(TRACE_ROWS):
        t += rng.expovariate(2.0)
        times.append(round(t, 4))
    return [(times[i], rng.randint(100, 2000), rng.randint(10, 200)) for i in range(TRACE_ROWS)]


def _bench(rng: random.Random) -> dict:
    """What ``vllm bench serve --save-result --save-detailed`` writes (the fields servopt reads and a few others)."""
    inputs = [rng.randint(50, 600) for _ in range(24)]
    outputs = [rng.randint(20, 120) for _ in range(24)]
    return {"date": "20250414-141505", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct",
            "num_prompts": 24, "request_rate": 4.0, "burstiness": 1.0, "max_concurrency": None, "duration": 7.1,
            "completed": 24, "total_input_tokens": sum(inputs), "total_output_tokens": sum(outputs),
            "input_lens": inputs, "output_lens": outputs, "ttfts": [0.031] * 24,
            "itls": [[0.0095] * (o - 1) for o in outputs], "errors": [""] * 24,
            "median_tpot_ms": 9.5, "median_ttft_ms": 31.0, "p99_ttft_ms": 60.0}


# --- what the formats say (the oracle's knowledge, from the docs of each format) -------------------
# Keys that must be present where they appear; deleting one must be refused naming it.
REQUIRED = {
    "workload": {"model", "traffic", "arrival", "kind", "rate_per_s", "cv", "concurrency", "input_tokens",
                 "output_tokens", "value", "low", "high", "mean", "sigma", "values", "weights", "name", "share",
                 "turns", "think_time", "mean_s", "value_s"},
    "deployment": {"gpu", "prefill_instances", "decode_instances", "method", "num_speculative_tokens"},
    "hardware": {"gpus"},
    "profile": {"gpu", "calibrated", "source", "gemm", "attention_prefill", "attention_decode", "allreduce",
                "elementwise_memory_efficiency", "elementwise_overhead_s", "step_overhead_s",
                "step_overhead_per_seq_s", "log2_m_knots", "compute_efficiency", "memory_efficiency", "overhead_s",
                "latency_s", "bandwidth_efficiency", "bf16"},
    "bench": {"input_lens", "output_lens", "median_tpot_ms", "model_id", "completed", "duration", "request_rate",
              "total_input_tokens", "total_output_tokens", "ttfts", "itls"},
    "job": {"study", "storage", "workload"},
}
# Whole-number fields: a fractional value must be refused.
INT_KEYS = {"tp", "pp", "replicas", "max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size",
            "num_speculative_tokens", "prefill_instances", "prefill_tp", "decode_instances", "decode_tp",
            "concurrency", "requests_per_client", "value", "low", "high", "min", "max", "values", "max_context",
            "gpus_per_node", "max_gpus", "trials", "seed", "search_requests", "final_requests", "input_lens",
            "output_lens", "max_concurrency", "input_length", "output_length", "hash_ids", "input_len", "output_len",
            "completed", "num_prompts", "total_input_tokens", "total_output_tokens", "priority"}
# Numbers that may be negative (vLLM's request priority: lower first, any whole number).
SIGNED_KEYS = {"priority"}
# Mappings whose keys are names (GPUs, dtypes, knobs) rather than fields, and values servopt only reports.
FREE_KEYS = {"gpus", "profiles", "space", "overrides", "peak_tflops", "fit_report", "latency_s",
             "bandwidth_efficiency_by_gpus", "gemm"}
# Keys of files servopt does not read (vllm bench writes many; job.json's extra keys are ignored).
IGNORED = {
    "bench": {"date", "backend", "errors"},
    "profile": {"fit_report", "notes", "source", "framework"},
    # A workload's knob ranges are checked when the search space is built (optimize), not by predict
    # or by report, which first finds the job's study started with another workload.
    "workload": {"space"},
    "job": {"space"},
}
# CSV columns servopt reads as numbers (whole numbers marked), and those every row must fill.
CSV_NUMBERS = {
    "trace_csv": {"arrival_s": False, "input_tokens": True, "output_tokens": True},
    "azure": {"ContextTokens": True, "GeneratedTokens": True},
    "e2e": {"isl": True, "osl": True, "batch_size": True, "tp_size": True, "pp_size": True, "attention_dp_size": True,
            "silicon_concurrency": True, "silicon_ttft_ms": False, "silicon_tpot_ms": False},
    "memory": {"tp": True, "pp": True, "dp": True, "max_model_len": True, "kv_cache_tokens": False,
               "gpu_memory_utilization": False},
    "kernel": {"m": True, "n": True, "k": True, "latency_ms": False, "tflops": False},
}
CSV_FILLED = {"trace_csv": {"arrival_s", "input_tokens", "output_tokens"}, "azure": {"TIMESTAMP", "ContextTokens",
              "GeneratedTokens"}, "kernel": {"m", "n", "k", "latency_ms"}}
CSV_REQUIRED = {
    "trace_csv": {"arrival_s", "input_tokens", "output_tokens"},
    "azure": {"TIMESTAMP", "ContextTokens", "GeneratedTokens"},
    "e2e": {"backend", "model_path", "system", "isl", "osl", "tp_size", "silicon_ttft_ms", "silicon_tpot_ms"},
    # The rest may be missing: a row is then explained, not predicted (and KV blocks stand in for tokens).
    "memory": {"model"},
    "kernel": {"m", "n", "k", "latency_ms"},
}


@dataclass
class Case:
    """One fuzz case: the files of its folder, the command, and what the oracle expects."""

    index: int
    kind: str
    mutation: str
    files: dict[str, str | bytes]
    argv: list[str]
    expect: str
    needle: str | None = None
    check: Callable[[str], str] | None = None
    copy_from: Path | None = None  # a folder copied in first (a finished optimize job)
    setup: Callable[[Path], None] | None = None  # makes what files cannot hold: a FIFO, a link, a folder
    forbidden: tuple[str, ...] = ()  # text no output and no file of the folder may hold (a password)
    after: Callable[[Path], str] | None = None  # what must hold of the folder afterwards ('' when it does)
    prelude: list[list[str]] = field(default_factory=list)  # commands run first (a job to resume), exit 0 or 2
    between: Callable[[Path], None] | None = None  # what changes after the prelude (a price, a config.json)
    env: dict[str, str] = field(default_factory=dict)  # environment of the command (paths relative to the folder)


@dataclass
class Outcome:
    case: Case
    code: int | None
    out: str
    err: str
    seconds: float
    verdict: str = "pass"


# --- mutations of structured files (YAML and JSON) ------------------------------------------------
def _paths(data, prefix=()) -> list[tuple]:
    """Every key path into nested dicts and lists (leaves and containers)."""
    found = []
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else []
    for key, value in items:
        path = (*prefix, key)
        found.append(path)
        if isinstance(value, (dict, list)) and len(found) < 5000:
            found.extend(_paths(value, path))
    return found


def _get(data, path):
    for key in path:
        data = data[key]
    return data


def _set(data, path, value) -> None:
    _get(data, path[:-1])[path[-1]] = value


def _name(path: tuple) -> str:
    """The field an error must name: the last key (the list's key for a list item)."""
    return next((str(k) for k in reversed(path) if isinstance(k, str)), "")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int_field(path: tuple) -> bool:
    return _name(path) in INT_KEYS


def _name_position(path: tuple) -> bool:
    """Whether the last key of ``path`` is a name (a GPU, a dtype, a knob), not a field."""
    return len(path) >= 2 and isinstance(path[-2], str) and path[-2] in FREE_KEYS


def _ignored(kind: str, path: tuple) -> bool:
    return any(isinstance(k, str) and k in IGNORED.get(kind, ()) for k in path)


def _exp_text(value: float) -> str | None:
    mantissa, exponent = f"{value:e}".split("e")
    text = f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return text if float(text) == value else None


VALUE_MUTATIONS = ["delete_key", "unknown_key", "null", "bool", "number_as_text", "list", "mapping", "nan", "inf",
                   "negative", "huge_float", "huge_int", "zero", "fraction", "times_1000", "divided_1000",
                   "unicode", "control_chars", "long_text", "empty_text", "empty_list", "deep_nesting",
                   "whole_float"]
TEXT_MUTATIONS = ["duplicate_key", "truncate", "binary", "empty_file", "not_a_mapping", "bom", "crlf", "reorder"]


def mutate_structured(rng: random.Random, kind: str, data, fmt: str) -> tuple[str, str | bytes, str, str | None]:
    """(mutation, file text, expectation, needle) for one mutation of a YAML or JSON document."""
    data = copy.deepcopy(data)
    dump = (lambda d: yaml.safe_dump(d, sort_keys=False, allow_unicode=True)) if fmt == "yaml" else \
        (lambda d: json.dumps(d, indent=1))
    pool = VALUE_MUTATIONS + TEXT_MUTATIONS + (["comment", "exponent_float"] if fmt == "yaml" else [])
    mutation = rng.choice(pool)
    paths = _paths(data)
    if mutation in VALUE_MUTATIONS:
        path = rng.choice(paths)
        value, name = _get(data, path), _name(path)
        skip = _ignored(kind, path)
        expect, needle = EITHER, name

        def refuse() -> str:
            return EITHER if skip else INVALID

        if mutation == "delete_key":
            if isinstance(path[-1], int):
                _get(data, path[:-1]).pop(path[-1])
                needle = None
            else:
                del _get(data, path[:-1])[path[-1]]
                expect = INVALID if name in REQUIRED.get(kind, ()) and not _name_position(path) and not skip else EITHER
        elif mutation == "unknown_key":
            holder = path if isinstance(value, dict) else path[:-1]
            if not isinstance(_get(data, holder), dict):
                holder = ()
            _get(data, holder)["colour_typo"] = 1
            free = (_name_position((*holder, "colour_typo")) or _ignored(kind, holder) or kind == "bench"
                    or kind == "job" and holder == ())
            expect, needle = (EITHER if free else INVALID), "colour_typo"
        elif mutation == "null":  # a required key's value (a list entry may say "none here": a failed request)
            _set(data, path, None)
            required = name in REQUIRED.get(kind, ()) and not _name_position(path) and not isinstance(path[-1], int)
            expect = refuse() if required else EITHER
        elif mutation == "bool":
            _set(data, path, True)
            expect = EITHER if isinstance(value, bool) or _name_position(path) else refuse()
        elif mutation == "number_as_text":
            if _number(value):
                _set(data, path, repr(value))
                expect = refuse()
            else:
                _set(data, path, "12")
        elif mutation == "list":
            _set(data, path, [1, 2])
            expect = refuse() if not isinstance(value, (list, dict)) and not _name_position(path) else EITHER
        elif mutation == "mapping":
            _set(data, path, {"a": 1})
            expect = refuse() if not isinstance(value, dict) and not _name_position(path) else EITHER
        elif mutation in ("nan", "inf", "negative", "huge_float", "huge_int", "fraction", "zero", "times_1000",
                          "divided_1000"):
            if not _number(value):
                mutation = "zero"
                _set(data, path, 0)
            elif _name_position(path):
                _set(data, path, -1)
            else:
                new = {"nan": float("nan"), "inf": rng.choice([float("inf"), float("-inf")]),
                       "negative": -abs(value) - 1, "huge_float": 1e300, "huge_int": 10**30,
                       "fraction": value + 0.5, "zero": 0, "times_1000": value * 1000,
                       "divided_1000": value / 1000}[mutation]
                _set(data, path, new)
                if mutation in ("nan", "inf", "huge_float", "huge_int") or (
                        mutation == "negative" and name not in SIGNED_KEYS):
                    expect = refuse()
                elif mutation == "fraction" and _is_int_field(path):
                    expect = refuse()
        elif mutation in ("unicode", "control_chars", "long_text", "empty_text"):
            text = {"unicode": "Ωmégα-模型-🚀", "control_chars": "a\x00b\nc\x1b[31m", "long_text": "x" * 20000,
                    "empty_text": ""}[mutation]
            _set(data, path, (value + text) if isinstance(value, str) and mutation != "empty_text" else text)
            expect = EITHER if isinstance(value, str) or _name_position(path) else refuse()
        elif mutation == "empty_list":
            _set(data, path, [])
        elif mutation == "whole_float":  # 2.0 written as 2: still the same number for a float field
            floats = [p for p in paths if isinstance(_get(data, p), float) and _get(data, p).is_integer()
                      and not _ignored(kind, p)]
            if floats:
                target = rng.choice(floats)
                _set(data, target, int(_get(data, target)))
                expect = VALID
        elif mutation == "deep_nesting":
            _set(data, path, "__DEEP__")  # written as text: the dumpers themselves recurse
            expect, needle = INVALID, "nested"
        return mutation, dump(data).replace("'__DEEP__'", "__DEEP__").replace('"__DEEP__"', "__DEEP__").replace(
            "__DEEP__", "[" * DEEP + "]" * DEEP), expect, needle
    text = dump(data)
    if mutation == "duplicate_key":
        lines = text.splitlines()
        keyed = [i for i, line in enumerate(lines) if re.match(r'^\s*"?[A-Za-z_][\w.-]*"?\s*:', line)]
        i = rng.choice(keyed)
        key = re.match(r'^\s*"?([A-Za-z_][\w.-]*)"?\s*:', lines[i]).group(1)
        duplicate = lines[i] if fmt == "yaml" or lines[i].rstrip().endswith(",") else lines[i].rstrip() + ","
        if fmt == "json" and lines[i].rstrip().endswith(("{", "[")):
            duplicate = re.sub(r"[{\[]\s*$", "null,", lines[i])
        lines.insert(i, duplicate)
        return mutation, "\n".join(lines) + "\n", INVALID, key
    if mutation == "truncate":
        return mutation, text[: rng.randrange(len(text))], EITHER, None
    if mutation == "binary":
        return mutation, b"\xff\xfe\x00" + bytes(rng.randrange(128, 256) for _ in range(200)), INVALID, "UTF-8"
    if mutation == "empty_file":
        return mutation, "", INVALID, "empty" if fmt == "yaml" else None
    if mutation == "not_a_mapping":
        return mutation, rng.choice(["[1, 2, 3]\n", "42\n", '"text"\n']), INVALID, None
    if mutation == "bom":
        return mutation, "\ufeff" + text, VALID, None
    if mutation == "crlf":
        return mutation, text.replace("\n", "\r\n"), VALID, None
    if mutation == "reorder":
        mappings = [p for p in paths if isinstance(_get(data, p), dict)]
        target = _get(data, rng.choice(mappings)) if mappings and rng.random() < 0.7 else data
        items = list(target.items())
        rng.shuffle(items)
        target.clear()
        target.update(items)
        return mutation, dump(data), VALID, None
    if mutation == "comment":
        lines = text.splitlines()
        lines.insert(rng.randrange(len(lines) + 1), "# a comment: with a colon, and 'quotes'")
        return mutation, "\n".join(lines) + "\n", VALID, None
    floats = [p for p in paths if isinstance(_get(data, p), float) and _exp_text(_get(data, p))
              and not _ignored(kind, p)]
    if not floats:
        return "bom", "\ufeff" + text, VALID, None
    path = rng.choice(floats)
    exponent = _exp_text(_get(data, path))
    _set(data, path, "__EXPONENT__")
    return mutation, dump(data).replace("__EXPONENT__", exponent, 1), VALID, None


# --- mutations of CSV tables ----------------------------------------------------------------------
def _csv(header: list[str], rows: list[list[str]], newline: str = "\n") -> str:
    buffer = io.StringIO()
    import csv

    writer = csv.writer(buffer, lineterminator=newline)
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


CELL_MUTATIONS = {"cell_text": "abc", "cell_nan": "nan", "cell_inf": "inf", "cell_huge": "1e400", "cell_bool": "TRUE",
                  "cell_comma": "1,000", "cell_negative": "-5", "cell_fraction": "2.5", "cell_empty": "",
                  "cell_spaces": None, "cell_unicode": "Ωmégα"}
TABLE_MUTATIONS = [*CELL_MUTATIONS, "ragged_more", "ragged_fewer", "header_only", "wide_row", "duplicate_column",
                   "drop_column", "rename_column", "shuffle_rows", "blank_lines", "crlf", "bom", "quote_all",
                   "truncate", "binary", "empty_file"]


def mutate_table(rng: random.Random, kind: str, header: list[str], rows: list[list[str]],
                 extra: list[str] = ()) -> tuple[str, str | bytes, str, str | None]:
    """(mutation, file text, expectation, needle) for one mutation of a CSV table."""
    rows = [list(r) for r in rows]
    mutation = rng.choice([*TABLE_MUTATIONS, *extra])
    numbers, filled, required = CSV_NUMBERS.get(kind, {}), CSV_FILLED.get(kind, set()), CSV_REQUIRED.get(kind, set())
    if mutation in CELL_MUTATIONS:
        row, col = rng.randrange(len(rows)), rng.randrange(len(header))
        column = header[col]
        old = rows[row][col]
        new = CELL_MUTATIONS[mutation] if mutation != "cell_spaces" else f"  {old}  "
        if mutation == "cell_fraction" and not numbers.get(column):
            new = "2.5"
        rows[row][col] = new
        expect = EITHER
        if column in numbers and mutation in ("cell_text", "cell_nan", "cell_inf", "cell_huge", "cell_bool",
                                              "cell_comma", "cell_negative", "cell_unicode"):
            expect = INVALID
        if mutation == "cell_fraction" and numbers.get(column):
            expect = INVALID
        if mutation == "cell_empty" and column in filled:
            expect = INVALID
        if kind == "azure" and column == "TIMESTAMP" and mutation not in ("cell_spaces",):
            expect = INVALID
        return mutation, _csv(header, rows), expect, column
    if mutation in ("ragged_more", "ragged_fewer"):
        row = rng.randrange(len(rows))
        rows[row] = rows[row] + ["7"] if mutation == "ragged_more" else rows[row][:-1]
        return mutation, _csv(header, rows), INVALID, f"line {row + 2}"
    if mutation == "header_only":
        return mutation, _csv(header, []), INVALID, "no rows"
    if mutation == "wide_row":
        rows.insert(rng.randrange(len(rows) + 1), ["1"] * 100_000)
        return mutation, _csv(header, rows), INVALID, "fields"
    if mutation == "duplicate_column":
        a, b = rng.sample(range(len(header)), 2)
        header = list(header)
        header[b] = header[a]
        return mutation, _csv(header, rows), INVALID, "twice"
    if mutation in ("drop_column", "rename_column"):
        col = rng.randrange(len(header))
        column = header[col]
        if mutation == "drop_column":
            header = header[:col] + header[col + 1:]
            rows = [r[:col] + r[col + 1:] for r in rows]
        else:
            header = [*header[:col], column + "_x", *header[col + 1:]]
        expect = INVALID if column in required else EITHER
        return mutation, _csv(header, rows), expect, None if kind in ("trace_csv", "azure") else column
    if mutation == "shuffle_rows":
        rng.shuffle(rows)
        return mutation, _csv(header, rows), VALID, None
    if mutation == "blank_lines":
        text = _csv(header, rows).splitlines()
        text.insert(rng.randrange(1, len(text) + 1), "")
        return mutation, "\n".join(text) + "\n\n", VALID, None
    if mutation == "crlf":
        return mutation, _csv(header, rows, "\r\n"), VALID, None
    if mutation == "bom":
        return mutation, "\ufeff" + _csv(header, rows), VALID, None
    if mutation == "quote_all":
        return mutation, "\n".join(",".join(f'"{c}"' for c in r) for r in [header, *rows]) + "\n", VALID, None
    if mutation == "truncate":
        text = _csv(header, rows)
        return mutation, text[: rng.randrange(len(text))], EITHER, None
    if mutation == "binary":
        return mutation, b"\xff\xfe" + bytes(rng.randrange(128, 256) for _ in range(300)), INVALID, "UTF-8"
    if mutation == "empty_file":
        return mutation, "", INVALID, "empty"
    return mutation, _csv(header, rows), EITHER, None  # one of ``extra``: the caller applies it


# --- the file kinds -------------------------------------------------------------------------------
def _json_check(predicate: Callable[[dict], str]) -> Callable[[str], str]:
    def check(out: str) -> str:
        try:
            data = json.loads(out)
        except json.JSONDecodeError:
            return "output is not JSON"
        return predicate(data)
    return check


def _requests_check(expected: int) -> Callable[[str], str]:
    return _json_check(lambda d: "" if d.get("num_requests") == expected else
                       f"replayed {d.get('num_requests')} requests, not the {expected} of the input")


def _predicted_check(expected: int) -> Callable[[str], str]:
    return _json_check(lambda d: "" if d.get("predicted") == expected else
                       f"predicted {d.get('predicted')} rows, not {expected}")


HAS_TTFT = _json_check(lambda d: "" if "ttft_s" in d else "no prediction in the output")
PREDICT = ["predict", "w.yaml", "--deployment", "d.yaml", "--json"]


def _yaml(data) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def _structured_case(rng, kind, primary, base, fmt, files, argv, check, label=None) -> Case:
    mutation, text, expect, needle = mutate_structured(rng, kind, base, fmt)
    return Case(0, label or kind, mutation, {**files, primary: text}, argv, expect, needle,
                check if expect == VALID else None)


def case_workload(rng: random.Random) -> Case:
    rows = [[str(c) for c in r] for r in _trace_rows(rng)]
    w_trace = {"model": "llama-3.1-8b", "traffic": {"arrival": {"kind": "trace", "path": "t.csv", "time_unit": "s",
                                                                "time_scale": 1.0}},
               "slo": {"p99_ttft_s": 2.0}, "max_model_len": 4096}
    base, argv, check = rng.choice([(W_OPEN, [*PREDICT, "--analytic"], HAS_TTFT),
                                    (W_BURSTY, [*PREDICT, "--analytic"], HAS_TTFT),
                                    (W_CLOSED, PREDICT, _requests_check(32)),
                                    (w_trace, PREDICT, _requests_check(TRACE_ROWS))])
    files = {"d.yaml": _yaml(D_PLAIN), "t.csv": _csv(["arrival_s", "input_tokens", "output_tokens"], rows)}
    return _structured_case(rng, "workload", "w.yaml", base, "yaml", files, argv, check)


def case_classes(rng: random.Random) -> Case:
    """Tenant classes under priority scheduling: every class must come back with its own figures."""
    argv = rng.choice([[*PREDICT, "--analytic"], [*PREDICT, "--requests", "400"]])
    check = _json_check(lambda d: "" if set(d.get("classes") or {}) == {"chat", "batch"} else
                        f"classes {sorted(d.get('classes') or {})} reported, not chat and batch")
    return _structured_case(rng, "workload", "w.yaml", W_CLASSES, "yaml", {"d.yaml": _yaml(D_PRIORITY)}, argv, check,
                            label="classes")


def _sessions_check(requests: int | None) -> Callable[[str], str]:
    """Read as sessions: the estimate's cache-retention note, or the simulation's turns of conversations."""
    def read(d: dict) -> str:
        notes = " ".join(d.get("notes") or [])
        if requests is None:
            return "" if "multi-turn sessions" in notes else "no multi-turn sessions in the estimate's notes"
        if d.get("num_requests") != requests or f"{requests} turns of" not in notes:
            return f"simulated {d.get('num_requests')} requests, not {requests} turns of conversations"
        return ""
    return _json_check(read)


def case_sessions(rng: random.Random) -> Case:
    """Multi-turn sessions with dataset length presets (a pair from one set, or a preset and a fixed length)."""
    base = rng.choice([W_SESSIONS, W_SESSIONS_FIXED])
    requests = rng.choice([None, 300])
    argv = [*PREDICT, "--analytic"] if requests is None else [*PREDICT, "--requests", str(requests)]
    return _structured_case(rng, "workload", "w.yaml", base, "yaml", {"d.yaml": _yaml(D_PLAIN)}, argv,
                            _sessions_check(requests), label="sessions")


def case_deployment(rng: random.Random) -> Case:
    base = rng.choice([D_PLAIN, D_SPEC, D_PD, D_PP, D_PRIORITY])
    return _structured_case(rng, "deployment", "d.yaml", base, "yaml", {"w.yaml": _yaml(W_OPEN)},
                            [*PREDICT, "--analytic"], HAS_TTFT)


def case_hardware(rng: random.Random) -> Case:
    files = {"w.yaml": _yaml(W_OPEN), "d.yaml": _yaml({**D_PLAIN, "gpu": "h100-lab"})}
    return _structured_case(rng, "hardware", "hw.yaml", HARDWARE, "yaml", files,
                            [*PREDICT, "--analytic", "--hardware", "hw.yaml"], HAS_TTFT)


def case_profile(rng: random.Random) -> Case:
    base = json.loads((ROOT / "calibration/profiles/h100.json").read_text())
    files = {"w.yaml": _yaml(W_OPEN), "d.yaml": _yaml(D_PLAIN)}
    return _structured_case(rng, "profile", "p.json", base, "json", files,
                            [*PREDICT, "--analytic", "--profile", "p.json"], HAS_TTFT)


def case_bench(rng: random.Random) -> Case:
    argv = ["calibrate", "import", "--vllm-bench", "r.json", "--deployment", "d.yaml", "--out", "fitted.json"]
    check = (lambda out: "" if "step overhead fitted" in out else "no fit reported")
    return _structured_case(rng, "bench", "r.json", _bench(rng), "json", {"d.yaml": _yaml(D_PLAIN)}, argv, check)


def case_optimize(rng: random.Random) -> Case:
    argv = ["optimize", "w.yaml", "--out", "out", "--no-progress", "--json"]
    check = _json_check(lambda d: "" if d.get("front") else "empty front")
    return _structured_case(rng, "workload", "w.yaml", W_OPTIMIZE, "yaml", {}, argv, check, label="optimize")


def _trace_workload(path: str, **arrival) -> str:
    return _yaml({"model": "llama-3.1-8b", "traffic": {"arrival": {"kind": "trace", "path": path, **arrival}},
                  "slo": {"p99_ttft_s": 2.0}})


TRACE_EXTRA = ["times_in_ms", "times_in_ms_with_unit", "epoch_ms", "far_arrival", "zero_tokens", "huge_tokens"]


def _trace_mutation(rng, mutation: str, rows: list[tuple[float, int, int]]) -> tuple[list, dict, str, str]:
    """Time-unit and magnitude mutations of a trace: (rows, arrival options, expectation, needle)."""
    rows = [list(r) for r in rows]
    if mutation in ("times_in_ms", "times_in_ms_with_unit"):
        rows = [[round(t * 1000), i, o] for t, i, o in rows]
        if mutation == "times_in_ms_with_unit":
            return rows, {"time_unit": "ms"}, VALID, ""
        return rows, {}, INVALID, "time_unit"
    if mutation == "epoch_ms":
        return [[1.7e12 + t * 1000, i, o] for t, i, o in rows], {}, INVALID, "time_unit"
    if mutation == "far_arrival":
        rows[rng.randrange(len(rows))][0] = 1e300
        return rows, {"time_unit": "s"}, INVALID, "spans"
    column = rng.choice([1, 2])
    rows[rng.randrange(len(rows))][column] = 0 if mutation == "zero_tokens" else 10**12
    return rows, {"time_unit": "s"}, INVALID, ["input", "output"][column - 1]


def case_trace_csv(rng: random.Random) -> Case:
    rows = _trace_rows(rng)
    header = ["arrival_s", "input_tokens", "output_tokens"]
    extra = TRACE_EXTRA
    if rng.random() < 0.3:
        mutation = rng.choice(extra)
        mutated, arrival, expect, needle = _trace_mutation(rng, mutation, rows)
        if mutation == "times_in_ms_with_unit":  # said by time_unit (a column name saying no unit) or by the name
            header = ["timestamp", *header[1:]] if rng.random() < 0.5 else ["arrival_ms", *header[1:]]
            arrival = arrival if header[0] == "timestamp" else {}
        else:
            arrival = {}  # arrival_s says the unit
        files = {"t.csv": _csv(header, [[str(c) for c in r] for r in mutated]), "w.yaml": _trace_workload("t.csv", **arrival)}
    else:
        mutation, text, expect, needle = mutate_table(rng, "trace_csv", header, [[str(c) for c in r] for r in rows])
        files = {"t.csv": text, "w.yaml": _trace_workload("t.csv")}
    return Case(0, "trace_csv", mutation, {**files, "d.yaml": _yaml(D_PLAIN)}, PREDICT, expect, needle,
                _requests_check(TRACE_ROWS) if expect == VALID else None)


AZURE_STAMPS = {2023: "2023-11-16 18:17:{s:010.7f}", 2024: "2024-05-10 00:00:{s:09.6f}+00:00"}


def case_azure(rng: random.Random) -> Case:
    year = rng.choice([2023, 2024])
    rows = [[AZURE_STAMPS[year].format(s=t % 60 if t < 60 else 59.9), str(i), str(o)]
            for t, i, o in sorted(_trace_rows(rng))]
    rows = [r for r in rows]
    header = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
    mutation, text, expect, needle = mutate_table(rng, "azure", header, rows, extra=["numeric_times", "bad_date"])
    if mutation == "numeric_times":
        text = _csv(header, [[str(k * 0.5), i, o] for k, (_, i, o) in enumerate(rows)])
        expect, needle = INVALID, "TIMESTAMP"
    elif mutation == "bad_date":
        rows[rng.randrange(len(rows))][0] = "2023-13-45 99:00:00"
        text, expect, needle = _csv(header, rows), INVALID, "TIMESTAMP"
    files = {"AzureLLMInferenceTrace_conv.csv": text, "w.yaml": _trace_workload("AzureLLMInferenceTrace_conv.csv"),
             "d.yaml": _yaml(D_PLAIN)}
    return Case(0, f"azure_{year}", mutation, files, PREDICT, expect, needle,
                _requests_check(len(rows)) if expect == VALID else None)


JSONL_MUTATIONS = ["record_not_object", "bad_json_line", "missing_key", "value", "deep_line", "duplicate_key_line",
                   "blank_lines", "shuffle", "bom", "crlf", "truncate", "binary", "empty_file"]


def case_trace_jsonl(rng: random.Random) -> Case:
    mooncake = rng.random() < 0.5
    rows = _trace_rows(rng)
    if mooncake:
        records = [{"timestamp": round(t * 1000), "input_length": i, "output_length": o,
                    "hash_ids": [0] + [1000 * k + b for b in range(1, i // 512 + 1)]} for k, (t, i, o) in enumerate(rows)]
        keys = {"timestamp": False, "input_length": True, "output_length": True}
    else:
        records = [{"timestamp": t, "input_len": i, "output_len": o} for t, i, o in rows]
        keys = {"timestamp": False, "input_len": True, "output_len": True}
    mutation = rng.choice(JSONL_MUTATIONS + (TRACE_EXTRA[:4] if not mooncake else []))
    # A plain trace's "timestamp" says no unit: the workload states it (Mooncake's is the format's).
    expect, needle, arrival = VALID, None, ({} if mooncake else {"time_unit": "s"})
    if mutation in TRACE_EXTRA:
        mutated, arrival, expect, needle = _trace_mutation(rng, mutation, rows)
        records = [{"timestamp": t, "input_len": i, "output_len": o} for t, i, o in mutated]
    lines = [json.dumps(r) for r in records]
    row = rng.randrange(len(lines))
    if mutation == "record_not_object":
        lines[row], expect, needle = "[1, 2, 3]", INVALID, "JSON object"
    elif mutation == "bad_json_line":
        lines[row], expect, needle = lines[row][:-3], INVALID, "not valid JSON"
    elif mutation == "missing_key":
        key = rng.choice(list(keys))
        record = dict(records[row])
        del record[key]
        lines[row], expect, needle = json.dumps(record), INVALID, key
    elif mutation == "value":
        key = rng.choice(list(keys) + (["hash_ids"] if mooncake else []))
        new = rng.choice([True, "12", None, float("nan"), -3, 1e300, [1], 2.5])
        record = dict(records[row])
        record[key] = new
        lines[row] = json.dumps(record)
        refused = new is not None and (new is True or isinstance(new, (str, list)) or new != new or new == 1e300
                                       or new == -3 or (new == 2.5 and keys.get(key)))
        if key == "hash_ids":
            refused = not (isinstance(new, list) and all(isinstance(h, int) for h in new))
        expect, needle = (INVALID if refused or new is None else EITHER), key
    elif mutation == "deep_line":
        lines[row], expect, needle = '{"a": ' * DEEP + "1" + "}" * DEEP, INVALID, "nested"
    elif mutation == "duplicate_key_line":
        key = next(iter(keys))
        lines[row], expect, needle = lines[row][:-1] + f', "{key}": 1}}', INVALID, "twice"
    elif mutation == "blank_lines":
        lines.insert(row, "")
        lines.append("")
    elif mutation == "shuffle":
        rng.shuffle(lines)
    text: str | bytes = "\n".join(lines) + "\n"
    if mutation == "bom":
        text = "\ufeff" + text
    elif mutation == "crlf":
        text = text.replace("\n", "\r\n")
    elif mutation == "truncate":
        text, expect = text[: rng.randrange(len(text))], EITHER
    elif mutation == "binary":
        text, expect, needle = b"\xff\xfe" + bytes(rng.randrange(128, 256) for _ in range(300)), INVALID, "UTF-8"
    elif mutation == "empty_file":
        text, expect, needle = "", INVALID, "empty"
    name = "conversation_trace.jsonl" if mooncake else "t.jsonl"
    files = {name: text, "w.yaml": _trace_workload(name, **arrival), "d.yaml": _yaml(D_PLAIN)}
    return Case(0, "mooncake" if mooncake else "trace_jsonl", mutation, files, PREDICT, expect, needle,
                _requests_check(TRACE_ROWS) if expect == VALID else None)


def _read_rows(path: Path, limit: int | None = None) -> tuple[list[str], list[list[str]]]:
    import csv

    with open(path, newline="") as stream:
        rows = list(csv.reader(stream))
    return rows[0], rows[1:limit + 1 if limit else None]


def case_table(rng: random.Random, kind: str) -> Case:
    path, argv_flag, limit = {"e2e": ("silicon_dense_h100_excerpt.csv", "--e2e", None),
                              "memory": ("vllm_memory_profiles_dev.csv", "--memory", None),
                              "kernel": ("aic_gemm_h100_excerpt.csv", "--kernels", 12)}[kind]
    header, rows = _read_rows(ROOT / "tests" / "data" / path, limit)
    if kind == "e2e":  # two vLLM aggregated rows to simulate, one other framework, one disaggregated run
        rows = [rows[0], rows[3], rows[4], rows[5]]
    predicted = {"e2e": 2, "memory": len(rows), "kernel": len(rows)}[kind]
    mutation, text, expect, needle = mutate_table(rng, kind, header, rows)
    return Case(0, kind, mutation, {"table.csv": text}, ["validate", argv_flag, "table.csv", "--json"], expect,
                needle, _predicted_check(predicted) if expect == VALID else None)


# A job.json that is unreadable as a whole (not JSON, a key twice, nested absurdly, its own keys
# missing or mistyped) is rebuilt from the study in the folder: refusing or recovering are both right.
JOB_REBUILT = {"duplicate_key", "truncate", "binary", "empty_file", "not_a_mapping", "deep_nesting"}
JOB_KEYS = {"study", "storage", "workload", "name", "hardware"}


# Where a copied job's job.json names its storage: the copy's own journal once the case's folder is
# known (servopt opens no storage outside the job folder on job.json's word).
OWN_JOURNAL = "journal:///COPIED-JOB-FOLDER/study.journal"


def _own_journal_named(folder: Path) -> None:
    from servopt.optimizer._storage import journal_url

    path = folder / "job" / "job.json"
    own = journal_url(folder / "job" / "study.journal").encode()
    path.write_bytes(path.read_bytes().replace(OWN_JOURNAL.encode(), own))


def case_job(rng: random.Random, job_dir: Path) -> Case:
    base = {**json.loads((job_dir / "job.json").read_text()), "storage": OWN_JOURNAL}
    mutation, text, expect, needle = mutate_structured(rng, "job", base, "json")
    if expect == INVALID and (mutation in JOB_REBUILT or needle in JOB_KEYS):
        expect = EITHER
    check = _json_check(lambda d: "" if "report.md" in d else "no report written")
    return Case(0, "job", mutation, {"job/job.json": text}, ["report", "job", "--json"], expect, needle, check,
                copy_from=job_dir, setup=_own_journal_named)


# --- issue 21: hostile inputs of kinds the mutations above do not make ----------------------------
# Each kind below makes one class of the issue anew from a seed (other files, fields, commands and
# values than the issue's), with the oracle written from what the formats and the docs say.
METRICS_FIXTURE = ROOT / "tests" / "data" / "diagnose" / "metrics_vllm_0_25_1_loaded.txt"
D_BENCH = {**D_PLAIN, "max_model_len": 16384}
DIAGNOSE = ["diagnose", "r.json", "--deployment", "d.yaml", "--json"]
SPECIAL_FILES = ["fifo", "device", "folder", "link_to_device", "link_loop", "oversized"]
SPECIAL_NEEDLES = {"fifo": "FIFO", "device": "device", "folder": "folder", "link_to_device": "device",
                   "link_loop": "symbolic links", "oversized": "MiB"}
# Size caps of the readers (costmodels/userfiles.py, calibration/prometheus.py): one byte over each.
CAPS = {"yaml": 4 * 2**20, "json": 512 * 2**20, "data": 8 * 2**30, "metrics": 64 * 2**20}


def _special(kind: str, name: str, cap: int) -> Callable[[Path], None]:
    """A setup that puts ``kind`` in place of the file ``name``."""
    def setup(folder: Path) -> None:
        path = folder / name
        path.unlink(missing_ok=True)
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "device":  # endless zeros
            os.symlink("/dev/zero", path)
        elif kind == "folder":
            path.mkdir()
        elif kind == "link_to_device":  # endless random bytes
            os.symlink("/dev/urandom", path)
        elif kind == "link_loop":
            os.symlink(name, path)
        else:  # a sparse file one byte over the cap: refused by its size, never read
            with open(path, "wb") as stream:
                stream.truncate(cap + 1)
    return setup


def case_special_file(rng: random.Random) -> Case:
    """An input file that is not a regular file of a readable size: the reader refuses it at once."""
    kind = rng.choice(SPECIAL_FILES)
    rows = [[str(c) for c in r] for r in _trace_rows(rng)]
    target, files, argv, cap = rng.choice([
        ("w.yaml", {"d.yaml": _yaml(D_PLAIN)}, [*PREDICT, "--analytic"], CAPS["yaml"]),
        ("d.yaml", {"w.yaml": _yaml(W_OPEN)}, [*PREDICT, "--analytic"], CAPS["yaml"]),
        ("t.csv", {"w.yaml": _trace_workload("t.csv"), "d.yaml": _yaml(D_PLAIN)}, PREDICT, CAPS["data"]),
        ("t.jsonl", {"w.yaml": _trace_workload("t.jsonl", time_unit="s"), "d.yaml": _yaml(D_PLAIN)}, PREDICT,
         CAPS["data"]),
        ("m.txt", {"r.json": json.dumps(_bench(rng)), "d.yaml": _yaml(D_BENCH)}, [*DIAGNOSE, "--metrics", "m.txt"],
         CAPS["metrics"]),
        ("p.json", {"w.yaml": _yaml(W_OPEN), "d.yaml": _yaml(D_PLAIN)}, [*PREDICT, "--analytic", "--profile", "p.json"],
         CAPS["json"]),
        ("hw.yaml", {"w.yaml": _yaml(W_OPEN), "d.yaml": _yaml(D_PLAIN)},
         [*PREDICT, "--analytic", "--hardware", "hw.yaml"], CAPS["yaml"]),
        ("r.json", {"d.yaml": _yaml(D_BENCH)}, DIAGNOSE, CAPS["json"]),
        ("table.csv", {}, ["validate", "--memory", "table.csv", "--json"], CAPS["data"]),
    ])
    files = {**files, "t.csv": _csv(["arrival_s", "input_tokens", "output_tokens"], rows)} if target != "t.csv" else files
    return Case(0, "special_file", f"{kind}:{target}", files, argv, INVALID, SPECIAL_NEEDLES[kind],
                setup=_special(kind, target, cap))


COMPRESSORS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}
COMPRESSED_MUTATIONS = ["valid", "valid", "multi_member", "wrong_suffix", "plain_named", "unnamed", "truncated",
                        "corrupted", "bomb"]


def case_compressed(rng: random.Random) -> Case:
    """A compressed trace: read whole when it is what its name says; every damage, disguise or bomb
    refused naming the file."""
    jsonl = rng.random() < 0.4
    rows = _trace_rows(rng)
    if jsonl:
        text = "".join(json.dumps({"timestamp": t, "input_len": i, "output_len": o}) + "\n" for t, i, o in rows)
    else:
        text = _csv(["arrival_s", "input_tokens", "output_tokens"], [[str(c) for c in r] for r in rows])
    suffix = rng.choice(list(COMPRESSORS))
    mutation = rng.choice(COMPRESSED_MUTATIONS)
    data = COMPRESSORS[suffix](text.encode())
    name, expect, needle = ("t.jsonl" if jsonl else "t.csv") + suffix, INVALID, None
    if mutation in ("valid", "multi_member"):
        expect = VALID
        if mutation == "multi_member":  # gzip, bzip2 and xz all read concatenated streams as one
            cut = len(text) // 2
            data = COMPRESSORS[suffix](text[:cut].encode()) + COMPRESSORS[suffix](text[cut:].encode())
    elif mutation == "wrong_suffix":
        other = rng.choice([s for s in COMPRESSORS if s != suffix])
        data, needle = COMPRESSORS[other](text.encode()), "is named"
    elif mutation == "plain_named":
        data, needle = text.encode(), "is named"
    elif mutation == "unnamed":
        name, needle = "t.jsonl" if jsonl else "t.csv", "compressed but its name"
    elif mutation == "truncated":
        data = data[: rng.randrange(10, len(data) - 4)]
    elif mutation == "corrupted":
        at = rng.randrange(len(data) // 3, len(data) - 8)
        data = data[:at] + bytes(b ^ 0xA5 for b in data[at:at + 4]) + data[at + 4:]
    else:  # a small file of one row repeated, expanding past every plausible trace: refused as it is read
        first, row = text.splitlines(keepends=True)[:2]
        body = (first if jsonl else first + row) + row * (24 * 2**20 // len(row))
        data, needle = COMPRESSORS[suffix](body.encode()), "expands"
    arrival = {"time_unit": "s"} if jsonl else {}
    files = {name: data, "w.yaml": _trace_workload(name, **arrival), "d.yaml": _yaml(D_PLAIN)}
    return Case(0, "compressed", f"{mutation}{suffix}", files, PREDICT, expect, needle,
                _requests_check(TRACE_ROWS) if expect == VALID else None)


YAML11_MUTATIONS = ["octal", "octal", "base60", "huge_int", "hex", "plus_sign", "binary", "grouped", "bool11"]


def case_yaml11(rng: random.Random) -> Case:
    """A whole number (or a true/false) of a YAML file spelled as YAML 1.1 and 1.2 read differently
    (octal, base 60, binary, digits grouped by '_', yes/no/on/off: refused naming the field), too large
    for any float (refused), or in a spelling both read alike (read)."""
    base, primary, files, argv = rng.choice([
        (W_OPEN, "w.yaml", {"d.yaml": _yaml(D_PLAIN)}, [*PREDICT, "--analytic"]),
        (W_CLOSED, "w.yaml", {"d.yaml": _yaml(D_PLAIN)}, PREDICT),
        (D_PLAIN, "d.yaml", {"w.yaml": _yaml(W_OPEN)}, [*PREDICT, "--analytic"]),
        (D_PP, "d.yaml", {"w.yaml": _yaml(W_OPEN)}, [*PREDICT, "--analytic"]),
    ])
    data = copy.deepcopy(base)
    whole = [p for p in _paths(data) if type(_get(data, p)) is int and _get(data, p) >= 8]
    path = rng.choice(whole)
    value, mutation = _get(data, path), rng.choice(YAML11_MUTATIONS)
    if mutation == "octal":  # 010 is 8 in YAML 1.1 and 10 in YAML 1.2; 09 is no octal (then text)
        spelling, expect = "0" + str(value), INVALID
    elif mutation == "base60":
        spelling, expect = f"{value // 60}:{value % 60:02d}", INVALID
    elif mutation == "huge_int":
        spelling, expect = "1" + "0" * rng.randrange(309, 420), INVALID
    elif mutation == "hex":
        spelling, expect = hex(value), VALID
    elif mutation == "binary":  # a number in YAML 1.1, text in 1.2
        spelling, expect = bin(value), INVALID
    elif mutation == "grouped":  # 1_024: a number in YAML 1.1, text in 1.2
        spelling = f"{value:_}" if value >= 1000 else "_".join(str(value)) if value >= 10 else f"{value}_"
        expect = INVALID
    elif mutation == "bool11":  # a true/false field spelled as YAML 1.1 only reads it (text in 1.2)
        flags = [p for p in _paths(data) if type(_get(data, p)) is bool]
        if flags:
            path = rng.choice(flags)
        spelling, expect = rng.choice(["yes", "no", "on", "off", "On", "OFF", "Yes"]), INVALID
    else:
        spelling, expect = f"+{value}", VALID
    _set(data, path, "__SPELLING__")
    text = _yaml(data).replace("'__SPELLING__'", spelling).replace("__SPELLING__", spelling)
    check = HAS_TTFT if "--analytic" in argv else _requests_check(32)
    return Case(0, "yaml11", mutation, {**files, primary: text}, argv, expect, _name(path),
                check if expect == VALID else None)


UNIT_MUTATIONS = ["few_ms", "mooncake_no_hash", "ambiguous_s", "fast_seconds", "stated_ms", "stated_s",
                  "case_columns", "rival_columns", "epoch_s_said_ms", "beside_missing", "beside", "micro_unstated",
                  "stated_us"]


def _arrivals(rng: random.Random, n: int, gap: tuple[float, float], integer: bool) -> list[float]:
    times, t = [], rng.uniform(0, gap[1])
    for _ in range(n):
        times.append(round(t) if integer else round(t, 6))
        t += rng.uniform(*gap)
    return times


def case_units(rng: random.Random) -> Case:
    """Traces whose time unit is stated, singled out by the numbers, or neither: read in that unit, or
    refused asking for time_unit (never guessed), however few the rows."""
    mutation = rng.choice(UNIT_MUTATIONS)
    n = rng.randrange(3, 20) if mutation == "few_ms" else rng.randrange(20, 80)
    lengths = [(rng.randint(100, 2000), rng.randint(10, 200)) for _ in range(n)]
    header, arrival, expect, needle, name = ["timestamp", "input_tokens", "output_tokens"], {}, INVALID, "time_unit", "t.csv"
    workload_name, argv = "w.yaml", PREDICT
    if mutation == "few_ms":  # milliseconds, gaps of 0.2-3 s: no unit fits seconds
        times = _arrivals(rng, n, (200, 3000), True)
    elif mutation == "mooncake_no_hash":  # Mooncake's columns and unit, without the hash_ids that name the format
        times = _arrivals(rng, n, (1, 60), True)
        name = "t.jsonl"
        records = [{"timestamp": t, "input_length": i, "output_length": o} for t, (i, o) in zip(times, lengths)]
    elif mutation == "ambiguous_s":
        times = _arrivals(rng, n, (0.2, 20), False)
    elif mutation == "fast_seconds":  # 20-100 requests/s: as milliseconds 20-100 us apart, no trace's gap
        times, expect, needle = _arrivals(rng, n, (0.01, 0.05), False), VALID, None
    elif mutation == "micro_unstated":  # microseconds 10-100 ms apart: as ms 10-100 s, no less a trace's gap
        times = _arrivals(rng, n, (10_000, 100_000), True)
    elif mutation in ("stated_ms", "stated_s", "stated_us"):
        unit = mutation[-2:].lstrip("_")
        gap = {"ms": (1, 60), "s": (0.2, 20), "us": (10_000, 100_000)}[unit]
        times = _arrivals(rng, n, gap, unit != "s")
        arrival, expect, needle = {"time_unit": unit}, VALID, None
    elif mutation in ("case_columns", "rival_columns"):
        times = _arrivals(rng, n, (0.01, 0.05), False)
        extra = rng.choice(["ARRIVAL_S", "Arrival_s"]) if mutation == "case_columns" else "prompt_tokens"
        header, needle = ["arrival_s", "input_tokens", "output_tokens", extra], "could hold"
    elif mutation == "epoch_s_said_ms":
        times = [1.7e9 + t for t in _arrivals(rng, n, (0.2, 5), False)]
        arrival, needle = {"time_unit": "ms"}, "Unix timestamps"
    else:  # a relative path is relative to the workload file, and looked for nowhere else
        times = _arrivals(rng, n, (0.2, 20), False)
        arrival, workload_name = {"time_unit": "s"}, "sub/w.yaml"
        argv = ["predict", "sub/w.yaml", "--deployment", "d.yaml", "--json"]
        expect, needle = (VALID, None) if mutation == "beside" else (INVALID, "does not exist")
    if name == "t.csv":
        rows = [[str(t), str(i), str(o)] + ([str(i)] if len(header) == 4 else []) for t, (i, o) in zip(times, lengths)]
        trace = _csv(header, rows)
    else:
        trace = "".join(json.dumps(r) + "\n" for r in records)
    where = "sub/" + name if mutation == "beside" else name
    files = {where: trace, workload_name: _trace_workload(name, **arrival), "d.yaml": _yaml(D_PLAIN)}
    return Case(0, "units", mutation, files, argv, expect, needle, _requests_check(n) if expect == VALID else None)


PROFILE_GPUS = {"h100": "h100", "h200": "h200", "a100-80gb": "a100-80gb", "l40s": "l40s", "b200": "b200"}


def case_profile_gpu(rng: random.Random) -> Case:
    """A --profile fitted for one GPU given for a deployment on another: refused; on the same GPU, by
    any of its names: read."""
    fitted = rng.choice(list(PROFILE_GPUS))
    same = rng.random() < 0.4
    deployed = fitted if same else rng.choice([g for g in PROFILE_GPUS if g != fitted])
    spelled = deployed.upper().replace("-", "_") if rng.random() < 0.5 else deployed
    profile = (ROOT / "calibration" / "profiles" / f"{fitted}.json").read_text()
    files = {"p.json": profile, "w.yaml": _yaml(W_OPEN), "d.yaml": _yaml({**D_PLAIN, "gpu": spelled})}
    argv = [*PREDICT, "--analytic", "--profile", "p.json"]
    return Case(0, "profile_gpu", "same" if same else "other", files, argv, VALID if same else INVALID,
                None if same else "fitted for", HAS_TTFT if same else None)


CATALOG_NAMES = ["h100", "H100_SXM", "a100-80gb", "l40s", "h200", "b200", "l4"]
SHADOW_MUTATIONS = ["alias_of_catalog", "name_with_base", "alias_twice", "override_takes_alias", "fresh_alias",
                    "override_price"]


def case_shadow(rng: random.Random) -> Case:
    """A hardware file may add GPUs and change known ones; a name or alias of another GPU it may not take."""
    mutation = rng.choice(SHADOW_MUTATIONS)
    taken = rng.choice(CATALOG_NAMES)
    new = {"base": rng.choice(["h100", "a100-80gb"]), "memory_gib": 70.0, "price_per_gpu_hour": 1.5}
    expect, needle, gpu = INVALID, "already", taken
    if mutation == "alias_of_catalog":
        gpus = {"lab-gpu": {**new, "aliases": [taken]}}
    elif mutation == "name_with_base":
        gpus = {taken.swapcase(): new}
    elif mutation == "alias_twice":
        gpus = {"lab-a": {**new, "aliases": ["shared-x"]}, "lab-b": {**new, "aliases": ["shared-x"]}}
        gpu = "shared-x"
    elif mutation == "override_takes_alias":
        other = rng.choice([n for n in ("h200", "l40s", "b200") if n != taken.lower()])
        gpus = {other: {"aliases": [taken]}}
    elif mutation == "fresh_alias":
        gpus, gpu, expect, needle = {"lab-gpu": {**new, "aliases": ["my-lab-card"]}}, "my-lab-card", VALID, None
    else:
        gpus, gpu, expect, needle = {taken: {"price_per_gpu_hour": 3.25}}, taken, VALID, None
    files = {"hw.yaml": _yaml({"gpus": gpus}), "w.yaml": _yaml(W_OPEN), "d.yaml": _yaml({**D_PLAIN, "gpu": gpu})}
    return Case(0, "shadow", mutation, files, [*PREDICT, "--analytic", "--hardware", "hw.yaml"], expect, needle,
                HAS_TTFT if expect == VALID else None)


SCRAPE_MUTATIONS = ["duplicate_series", "duplicate_reordered_labels", "kv_out_of_range", "bad_le", "nan_counter",
                    "negative_le", "falling_bucket", "shuffle", "extra_series", "crlf", "other_engine"]


def _read_kv(expected: float | None) -> Callable[[str], str]:
    def read(d: dict) -> str:
        got = (d.get("metrics") or {}).get("kv_cache_usage")
        return "" if got == expected else f"KV-cache usage read as {got}, not {expected}"
    return _json_check(read)


def case_scrape(rng: random.Random) -> Case:
    """A vLLM /metrics scrape: a series twice (counts doubled if summed), a gauge outside its range, a
    bucket bound or value that is no number, a negative bound, buckets that are not cumulative: refused
    naming the line; reordered, extra, CRLF: read."""
    lines = METRICS_FIXTURE.read_text().splitlines()
    samples = [i for i, line in enumerate(lines) if line.startswith("vllm:")]
    kv_line = next(i for i in samples if lines[i].startswith("vllm:kv_cache_usage_perc"))
    kv = float(lines[kv_line].rsplit(" ", 1)[1])
    mutation = rng.choice(SCRAPE_MUTATIONS)
    expect, needle, newline = INVALID, None, "\n"
    if mutation == "duplicate_series":
        i = rng.choice(samples)
        lines.insert(rng.randrange(len(lines) + 1), lines[i])
        needle = "repeats the series"
    elif mutation == "duplicate_reordered_labels":
        i = rng.choice([j for j in samples if lines[j].count("=") >= 2])
        name, rest = lines[i].split("{", 1)
        labels, value = rest.rsplit("} ", 1)
        parts = labels.split('",')
        parts = [p if p.endswith('"') else p + '"' for p in parts]
        lines.append(f"{name}{{{','.join(reversed(parts))}}} {value}")
        needle = "repeats the series"
    elif mutation == "kv_out_of_range":
        value = rng.choice([1.5, 97.0, 100.0, -0.5])
        lines[kv_line] = lines[kv_line].rsplit(" ", 1)[0] + f" {value}"
        needle = f"line {kv_line + 1}"
    elif mutation == "bad_le":
        buckets = [i for i in samples if "_bucket{" in lines[i]]
        i = rng.choice(buckets)
        lines[i] = re.sub(r'le="[^"]*"', 'le="' + rng.choice(["abc", "", "1,5", "0.5s", "∞"]) + '"', lines[i])
        needle = "bucket bound"
    elif mutation == "negative_le":
        i = rng.choice([j for j in samples if "_bucket{" in lines[j] and 'le="+Inf"' not in lines[j]])
        lines[i] = re.sub(r'le="([^"]*)"', r'le="-\1"', lines[i])
        needle = "below 0"
    elif mutation == "falling_bucket":  # a bucket counting more than the next larger bound: not cumulative
        i = rng.choice([j for j in samples[:-1] if "_bucket{" in lines[j] and "_bucket{" in lines[j + 1]
                        and lines[j].split("{")[0] == lines[j + 1].split("{")[0]])
        above = float(lines[i + 1].rsplit(" ", 1)[1])
        lines[i] = lines[i].rsplit(" ", 1)[0] + f" {above + rng.randint(1, 1000)}"
        needle = "not cumulative"
    elif mutation == "nan_counter":
        i = rng.choice([j for j in samples if lines[j].startswith(("vllm:num_preemptions_total",
                                                                    "vllm:prompt_tokens_total"))])
        lines[i] = lines[i].rsplit(" ", 1)[0] + " " + rng.choice(["NaN", "-Inf", "+Inf", "-3"])
        needle = f"line {i + 1}"
    else:
        expect = VALID
        if mutation == "shuffle":
            rng.shuffle(lines)
        elif mutation == "extra_series":
            lines += ["# HELP process_cpu_seconds_total CPU time.", "process_cpu_seconds_total 12.5",
                      'python_info{version="3.12"} 1', ""]
        elif mutation == "crlf":
            newline = "\r\n"
        else:  # a second engine's KV gauge: the scrape reports the fuller one
            other = lines[kv_line].replace('engine="0"', 'engine="1"').rsplit(" ", 1)[0] + f" {kv / 2}"
            lines.append(other)
    files = {"m.txt": newline.join(lines) + newline, "r.json": json.dumps(_bench(rng)), "d.yaml": _yaml(D_BENCH)}
    return Case(0, "scrape", mutation, files, [*DIAGNOSE, "--metrics", "m.txt"], expect, needle,
                _read_kv(kv) if expect == VALID else None)


BENCH_EXTREMES = ["huge_int", "huge_int_entry", "empty_lists", "short_lists", "table_huge_cell"]
BENCH_TABLE = ROOT / "calibration" / "measured" / "e2e" / "vllm_bench_public.csv"
BENCH_TABLE_NUMBERS = ["num_gpus", "tp", "num_prompts", "request_rate", "completed", "duration_s", "mean_ttft_ms",
                       "p99_itl_ms", "output_throughput"]


def case_bench_extremes(rng: random.Random) -> Case:
    """A vllm bench serve result with a number beyond every float, or per-request lists empty or
    shorter than the completed requests: refused naming the key, in every command that reads it."""
    data = _bench(rng)
    mutation = rng.choice(BENCH_EXTREMES)
    huge = "1" + "0" * rng.randrange(309, 400)
    if mutation == "table_huge_cell":  # the same numbers as a table of results (validate --e2e)
        header, rows = _read_rows(BENCH_TABLE, 3)
        column = rng.choice(BENCH_TABLE_NUMBERS)
        rows[rng.randrange(len(rows))][header.index(column)] = rng.choice([huge, "-" + huge, "1e400"])
        return Case(0, "bench_extremes", mutation, {"table.csv": _csv(header, rows)},
                    ["validate", "--e2e", "table.csv", "--json"], INVALID, column)
    if mutation == "huge_int":
        key = rng.choice(["completed", "num_prompts", "total_input_tokens", "total_output_tokens", "duration",
                          "median_ttft_ms", "request_rate"])
        data[key], needle = "__HUGE__", key
    elif mutation == "huge_int_entry":
        key = rng.choice(["input_lens", "output_lens", "ttfts"])
        data[key][rng.randrange(len(data[key]))], needle = "__HUGE__", key
    elif mutation == "empty_lists":
        for key in ("input_lens", "output_lens", "ttfts", "itls", "errors"):
            data[key] = []
        needle = "input_lens"
    else:
        keep = rng.randrange(1, data["completed"])
        for key in ("input_lens", "output_lens", "ttfts", "itls", "errors"):
            data[key] = data[key][:keep]
        needle = "input_lens"
    text = json.dumps(data).replace('"__HUGE__"', huge)
    argv = rng.choice([DIAGNOSE, ["calibrate", "import", "--vllm-bench", "r.json", "--deployment", "d.yaml", "--out",
                                  "fitted.json"]])
    return Case(0, "bench_extremes", mutation, {"r.json": text, "d.yaml": _yaml(D_BENCH)}, argv, INVALID, needle)


# (command, flag, whole number?, low, high, low open?, the rest of the command line); a valid value runs
# only where the command is quick (plan; predict's estimate).
CLI_FLAGS = [
    ("predict", "--seed", True, 0, 2**32 - 1, False, ["w.yaml", "--deployment", "d.yaml", "--analytic", "--json"]),
    ("predict", "--requests", True, 1, 200_000, False, ["w.yaml", "--deployment", "d.yaml", "--json"]),
    ("diagnose", "--bench-seed", True, 0, 2**32 - 1, False, ["r.json", "--deployment", "d.yaml", "--json"]),
    ("plan", "--concurrency", True, 1, 2**20, False, ["--model", "llama-3.1-8b", "--gpu", "h100", "--json"]),
    ("plan", "--tp", True, 1, 512, False, ["--model", "llama-3.1-8b", "--gpu", "h100", "--json"]),
    ("plan", "--context", True, 1, 10**7, False, ["--model", "llama-3.1-8b", "--gpu", "h100", "--json"]),
    ("plan", "--max-num-seqs", True, 1, 2**20, False, ["--model", "llama-3.1-8b", "--gpu", "h100", "--json"]),
    ("plan", "--gpu-memory-utilization", False, 0, 1, True, ["--model", "llama-3.1-8b", "--gpu", "h100", "--json"]),
    ("optimize", "--jobs", True, 1, 1024, False, ["w.yaml", "--out", "out", "--no-progress"]),
    ("optimize", "--trials", True, 1, 10**6, False, ["w.yaml", "--out", "out", "--no-progress"]),
    ("optimize", "--time", False, 0, 365 * 86400, True, ["w.yaml", "--out", "out", "--no-progress"]),
]
CLI_VALUES = ["-1", "0", "1", "7", "10**k", "-10**k", "1.5", "2.0", "1e3", "nan", "inf", "-inf", "", " ", "²", "0x10",
              "1_000", "⁴", "12abc", "0.5"]


def _accepted(text: str, whole: bool, low: float, high: float, low_open: bool) -> bool:
    """What the flag's documented type and bounds accept (Python's int() and float() spellings)."""
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        return False
    inside = (low < value if low_open else low <= value) and value <= high
    return inside and (whole or value == value and abs(value) != float("inf"))


def case_cli_numbers(rng: random.Random) -> Case:
    """A numeric flag given out of its bounds, in a spelling no number has, or absurdly large: one line
    naming the flag and exit 2; inside its bounds: run."""
    command, flag, whole, low, high, low_open, rest = rng.choice(CLI_FLAGS)
    text = rng.choice(CLI_VALUES).replace("10**k", "1" + "0" * rng.choice([7, 12, 29, 40, 400, 5000]))
    ok = _accepted(text, whole, low, high, low_open)
    if ok and (command == "optimize" or (flag == "--requests" and int(text) > 400) or
               (flag == "--context" and int(text) > 100_000) or (flag == "--concurrency" and int(text) > 4096)):
        text = "-1"  # a valid value would run a whole search (or a long simulation): not a quick case
        ok = False
    files = {"w.yaml": _yaml(W_OPEN), "d.yaml": _yaml(D_PLAIN if command != "diagnose" else D_BENCH),
             "r.json": json.dumps(_bench(rng))}
    argv = [command, *rest[:1], flag, text, *rest[1:]] if command in ("predict", "optimize", "diagnose") else \
        [command, flag, text, *rest]
    expect = EITHER if ok else INVALID  # a valid value may still be refused by the model (a TP of 7)
    return Case(0, "cli_numbers", f"{flag}={text[:12]}", files, argv, expect, None if ok else flag)


STORAGE_MUTATIONS = ["memory", "journal_device", "journal_folder", "journal_fifo", "password_user", "password_encoded",
                     "password_query", "password_key_encoded", "password_at", "password_in_workload"]


def case_storage(rng: random.Random) -> Case:
    """A storage URL that cannot hold a study (in memory, a device, a folder, a FIFO): refused; one with a
    password in any spelling libpq takes, to a server that is not there: refused, the password in no
    output and no file."""
    mutation = rng.choice(STORAGE_MUTATIONS)
    secret = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789") for _ in range(14))
    host = "127.0.0.1:1/studies"  # nothing listens on port 1: refused at once
    workload = dict(W_OPTIMIZE)
    setup, forbidden, needle = None, (), None
    if mutation == "memory":
        url = rng.choice(["sqlite://", "sqlite:///:memory:", "sqlite:///file::memory:?cache=shared",
                          "sqlite:///x.db?mode=memory"])
        needle = "in-memory"
    elif mutation == "journal_device":
        url, needle = "journal:///dev/" + rng.choice(["null", "zero", "full"]), "not a regular file"
    elif mutation in ("journal_folder", "journal_fifo"):
        url, needle = "journal:j.journal", "not a regular file"
        setup = (lambda f: (f / "j.journal").mkdir()) if mutation == "journal_folder" else \
            (lambda f: os.mkfifo(f / "j.journal"))
    else:
        forbidden = (secret,)
        encoded = "".join(f"%{ord(c):02X}" if rng.random() < 0.3 else c for c in secret)
        url = {"password_user": f"postgresql+psycopg2://servopt:{secret}@{host}",
               "password_encoded": f"postgresql+psycopg2://servopt:{encoded}%40x@{host}",
               "password_query": f"postgresql+psycopg2://servopt@{host}?sslmode=disable&password={secret}",
               "password_key_encoded": f"postgresql+psycopg2://servopt@{host}?PassW%6Frd={secret}",
               "password_at": f"postgresql+psycopg2://servopt:{secret[:7]}@{secret[7:]}@{host}",
               "password_in_workload": f"postgresql+psycopg2://servopt:{secret}@{host}"}[mutation]
        if mutation == "password_at":
            forbidden = (secret[:7], secret[7:])
    argv = ["optimize", "w.yaml", "--out", "out", "--no-progress"]
    if mutation == "password_in_workload":
        workload["storage"] = url
    else:
        argv += ["--storage", url]
    return Case(0, "storage", mutation, {"w.yaml": _yaml(workload)}, argv, INVALID, needle, setup=setup,
                forbidden=forbidden)


OUT_MUTATIONS = ["optimize_foreign_folder", "optimize_file", "import_folder", "import_fifo", "calibrate_run_folder",
                 "validate_folder", "export_foreign_folder", "import_new_file"]


def case_out_paths(rng: random.Random, job_dir: Path) -> Case:
    """An --out that is the wrong kind of thing: a folder of someone else's files, a file where a folder
    goes, a folder or FIFO where a file goes: refused naming the user's path, before any work."""
    mutation = rng.choice(OUT_MUTATIONS)
    files = {"w.yaml": _yaml(W_OPTIMIZE), "r.json": json.dumps(_bench(rng)), "d.yaml": _yaml(D_BENCH),
             "keep/notes.txt": "mine"}
    table = (ROOT / "tests" / "data" / "vllm_memory_profiles_dev.csv").read_text()
    copy_from, setup, expect, needle, check = None, None, INVALID, None, None
    importing = ["calibrate", "import", "--vllm-bench", "r.json", "--deployment", "d.yaml", "--out"]
    if mutation == "optimize_foreign_folder":
        argv, needle = ["optimize", "w.yaml", "--out", "keep", "--no-progress"], "holds other files"
    elif mutation == "optimize_file":
        argv, needle = ["optimize", "w.yaml", "--out", "keep/notes.txt", "--no-progress"], "not a folder"
    elif mutation == "import_folder":
        argv, needle = [*importing, "keep"], "'keep' is a folder"
    elif mutation == "import_fifo":
        argv, needle, setup = [*importing, "pipe.json"], "FIFO", (lambda f: os.mkfifo(f / "pipe.json"))
    elif mutation == "calibrate_run_folder":
        argv, needle = ["calibrate", "run", "--device", "cpu", "--quick", "--out", "keep"], "'keep' is a folder"
    elif mutation == "validate_folder":
        files["table.csv"] = table
        argv, needle = ["validate", "--memory", "table.csv", "--out", "keep"], "'keep' is a folder"
    elif mutation == "export_foreign_folder":
        argv, needle, copy_from = ["export", "job", "--out", "keep"], "holds other files", job_dir
    else:
        argv, expect, check = [*importing, "new/fitted.json"], VALID, (lambda out: "" if "step overhead fitted" in out
                                                                      else "no fit reported")
    return Case(0, "out_paths", mutation, files, argv, expect, needle, check, copy_from=copy_from, setup=setup,
                after=lambda f: "" if (f / "keep" / "notes.txt").read_text() == "mine" else "a user's file was changed")


def _local_model(folder: Path, name: str) -> None:
    """A checkpoint folder with a config.json (a shipped config, without servopt's notes)."""
    config = json.loads((ROOT / "costmodels" / "data" / "models" / "meta-llama--Llama-3.2-1B-Instruct.json").read_text())
    config.pop("_servopt")
    (folder / name).mkdir()
    (folder / name / "config.json").write_text(json.dumps(config))


def case_model_ids(rng: random.Random) -> Case:
    """A model id or local folder that begins with '-' (a launch command would take it for an option):
    refused; the same folder written as ./-x: read."""
    name = rng.choice(["--trust-remote-code", "-x", "--model=evil", "-"])
    dotted = rng.random() < 0.4
    workload = {**W_OPEN, "model": f"./{name}" if dotted else name}
    return Case(0, "model_ids", "dotted" if dotted else "dash", {"w.yaml": _yaml(workload), "d.yaml": _yaml(D_PLAIN)},
                [*PREDICT, "--analytic"], VALID if dotted else INVALID, None if dotted else "begins with '-'",
                HAS_TTFT if dotted else None, setup=lambda f: _local_model(f, name))


FRONT_MUTATIONS = ["points_not_list", "point_not_object", "no_serve_id", "metric_text", "no_gpu", "negative_trial",
                   "zero_gpus_per_node", "roles_not_list", "objective_missing", "pick"]
PICKS = ["²", "-1", "+1", " 1", "1.0", "1e3", "٣", "0x1", "", "cheapest ", "9" * 40]


def case_front(rng: random.Random, job_dir: Path) -> Case:
    """front.json edited into another shape, or --pick given what is no trial number: one line, exit 2."""
    front = json.loads((job_dir / "front.json").read_text())
    mutation = rng.choice(FRONT_MUTATIONS)
    argv = ["export", "job", "--format", rng.choice(["json", "yaml", "vllm", "sglang"])]
    point = front["points"][0] if front["points"] else {}
    needle = None
    if mutation == "points_not_list":
        front["points"], needle = {"0": point}, "points"
    elif mutation == "point_not_object":
        front["points"], needle = [rng.choice([5, "x", None, [point]])], "points"
    elif mutation == "no_serve_id":
        point.pop("serve_id", None)
        needle = "serve_id"
    elif mutation == "metric_text":
        key = rng.choice(list(point.get("metrics") or {"cost_usd_per_hour": 0}))
        point.setdefault("metrics", {})[key], needle = "cheap", key
    elif mutation == "no_gpu":  # the deployment record's spec
        point.get("deployment", {}).get("spec", {}).pop("gpu", None)
        needle = "gpu"
    elif mutation == "negative_trial":
        point["trial"], needle = -rng.randrange(1, 10**6), "trial"
    elif mutation == "zero_gpus_per_node":
        point.setdefault("deployment", {})["gpus_per_node"], needle = 0, "gpus_per_node"
    elif mutation == "roles_not_list":
        point.setdefault("deployment", {})["roles"] = rng.choice([{"role": "replica"}, "replica", [5]])
        needle = "roles"
    elif mutation == "objective_missing":
        front["workload"].pop("objective", None)
        needle = "objective"
    else:
        argv += ["--pick", rng.choice(PICKS)]
        needle = "--pick"
    return Case(0, "front", mutation, {"job/front.json": json.dumps(front)}, argv, INVALID, needle, copy_from=job_dir)


JOURNAL_MUTATIONS = ["torn_tail", "torn_record_appended", "old_torn_mid_file", "planted_link", "planted_lock_link",
                     "fifo", "garbage"]
VICTIM = "victim's data, not a journal\n"


def _finished_trials(journal: Path) -> int:
    import optuna

    from servopt.optimizer._storage import journal_url, open_storage

    storage = open_storage(journal_url(journal))
    name = optuna.get_all_study_summaries(storage)[0].study_name
    study = optuna.load_study(study_name=name, storage=storage)
    return sum(t.state.name in ("COMPLETE", "PRUNED") for t in study.trials)


def _own_journal(folder: Path) -> None:
    """Point the copied job's job.json at the copy's own journal (it names the original's)."""
    from servopt.optimizer._storage import journal_url

    path = folder / "job" / "job.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "storage": journal_url(folder / "job" / "study.journal")}))


def case_journal(rng: random.Random, job_dir: Path) -> Case:
    """A job's study.journal cut mid-line (a full disk, a kill), left torn mid-file by an older servopt,
    replaced by a link, a FIFO or another file: reports read every whole record, or refuse in one line;
    the target of a planted link stays as it was."""
    mutation = rng.choice(JOURNAL_MUTATIONS)
    data = (job_dir / "study.journal").read_bytes()
    before = _finished_trials(job_dir / "study.journal")
    lines = data.split(b"\n")[:-1]
    files: dict[str, str | bytes] = {"job/victim.txt": VICTIM}
    setup, expect, needle, after = _own_journal, VALID, None, None
    if mutation == "torn_tail":
        last = lines[-1]
        files["job/study.journal"] = data[: len(data) - 1 - rng.randrange(1, len(last))]
    elif mutation == "torn_record_appended":
        files["job/study.journal"] = data + lines[rng.randrange(len(lines))][: rng.randrange(1, 40)]
    elif mutation == "old_torn_mid_file":
        i = rng.randrange(1, len(lines))
        lines[i] = lines[rng.randrange(len(lines))][: rng.randrange(5, 30)] + lines[i]
        files["job/study.journal"] = b"\n".join(lines) + b"\n"
    elif mutation in ("planted_link", "planted_lock_link"):
        name = "study.journal" if mutation == "planted_link" else "study.journal.lock"

        def setup(folder: Path, name: str = name) -> None:
            _own_journal(folder)
            (folder / "job" / name).unlink(missing_ok=True)
            os.symlink("victim.txt", folder / "job" / name)
        expect, needle = INVALID, "symbolic link"
    elif mutation == "fifo":
        def setup(folder: Path) -> None:
            _own_journal(folder)
            (folder / "job" / "study.journal").unlink()
            os.mkfifo(folder / "job" / "study.journal")
        expect, needle = INVALID, "FIFO"
    else:
        files["job/study.journal"] = bytes(rng.randrange(256) for _ in range(300))
        expect, needle = INVALID, "journal"

    def after(folder: Path) -> str:
        if (folder / "job" / "victim.txt").read_text() != VICTIM:
            return "the target of a planted link was written"
        if expect == VALID and _finished_trials(folder / "job" / "study.journal") < before - 1:
            return "finished trials were lost"
        return ""
    check = _json_check(lambda d: "" if "report.md" in d else "no report written")
    return Case(0, "journal", mutation, files, ["report", "job", "--json"], expect, needle, check if expect == VALID
                else None, copy_from=job_dir, setup=setup, after=after)


FORMULA_NAMES = ["=HYPERLINK(1)", "+1+1", "-2+3", "@SUM(A1)", "=cmd|' /C calc'!A0"]


def _no_formula_cells(folder: Path) -> str:
    import csv as csv_module

    for name in ("trials.csv", "pareto.csv"):
        with open(folder / "out" / name, newline="") as stream:
            for row in csv_module.reader(stream):
                bad = next((c for c in row if c[:1] in ("=", "+", "@", "\t", "\r")
                            or c[:1] == "-" and not re.fullmatch(r"-[0-9.e+-]+|-inf", c)), None)
                if bad is not None:
                    return f"{name} holds the formula cell {bad[:30]!r}"
    return ""


def case_formula(rng: random.Random) -> Case:
    """A GPU named like a spreadsheet formula reaches trials.csv and pareto.csv as text, never a formula."""
    name = rng.choice(FORMULA_NAMES)
    hardware = {"gpus": {name: {"base": "h100", "price_per_gpu_hour": 2.0}}}
    workload = {**W_OPTIMIZE, "gpus": {name: {}}}
    files = {"w.yaml": _yaml(workload), "hw.yaml": _yaml(hardware)}
    argv = ["optimize", "w.yaml", "--out", "out", "--hardware", "hw.yaml", "--no-progress", "--json"]
    return Case(0, "formula", name[:6], files, argv, EITHER, None,
                after=lambda f: _no_formula_cells(f) if (f / "out" / "trials.csv").exists() else "")


# --- issue 30: writes outside the job, markup and escape codes from user strings, resumes that mix jobs ----
# Each kind makes one class anew from a seed; several run a command first (Case.prelude) and change an
# input between the two runs (Case.between), as a user resuming a job does.
W_QUICK = {**W_OPTIMIZE, "space": {**W_OPTIMIZE["space"], "tp": [1]}, "budget": {"trials": 2},
           "fidelity": {"search_requests": 50, "final_requests": 50}}
QUICK = ["optimize", "w.yaml", "--out", "out", "--no-progress"]
# Names a user may give that markdown would render as HTML or links, or a terminal would obey.
HOSTILE_NAMES = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "[x](javascript:alert(1))",
                 "<a href='http://evil'>x</a>", "**bold** _em_ `code", "a|b|c", "<!-- hidden -->", "&lt;script&gt;",
                 "esc\x1b[31mred", "two\nFORGED: line", "cr\rFORGED", "bell\x07", "csi\x9b2J", "bidi\u202eevil",
                 "# FORGED heading", "![i](http://evil/x.png)"]
REPORT_HEADINGS = ("# servopt optimize: ", "## ")
# Characters a terminal acts on: C0 controls but the line feed, DEL, C1 controls, bidi and other format characters.
TERMINAL_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def _markdown_problem(text: str) -> str:
    """What in a report.md would not show a user's name as text: a control character, raw HTML, a
    link or image, a heading servopt did not write; and, when python-markdown is installed, any tag
    beyond those of tables and emphasis in what it renders."""
    if TERMINAL_CONTROL.search(text):
        return "a control character in report.md"
    if re.search(r"(?<!\\)<[A-Za-z!/?]", text):
        return "raw HTML in report.md"
    if re.search(r"(?<!\\)\]\(", text):
        return "a link or image in report.md"
    forged = [line for line in text.splitlines() if line.startswith("#") and not line.startswith(REPORT_HEADINGS)]
    if forged or any(line.startswith("FORGED") for line in text.splitlines()):
        return "a forged line in report.md"
    try:
        import markdown
    except ImportError:
        return ""
    rendered = markdown.markdown(text, extensions=["tables"])
    tags = set(re.findall(r"<([a-z0-9]+)", rendered)) - {"h1", "h2", "p", "ul", "li", "table", "thead", "tbody", "tr",
                                                       "th", "td", "strong", "em", "code"}
    return f"report.md renders as <{sorted(tags)[0]}>" if tags else ""


def _report_safe(folder: Path) -> str:
    report = folder / "out" / "report.md"
    return _markdown_problem(report.read_text()) if report.is_file() else ""


def _terminal_safe(folder: Path) -> str:
    """What a command printed must hold no character a terminal acts on, nor a line a name forged."""
    for name in ("stdout.txt", "stderr.txt"):
        text = (folder / name).read_text(errors="replace") if (folder / name).exists() else ""
        if TERMINAL_CONTROL.search(text):
            return f"a control character in {name}"
        if any(line.startswith("FORGED") for line in text.splitlines()):
            return f"a forged line in {name}"
    return ""


MARKDOWN_PLACES = ["class", "study", "model_folder", "gpu", "alternative_folder"]


def case_markdown(rng: random.Random) -> Case:
    """A study, tenant class, local model folder or GPU named with markup or escape codes: report.md
    shows each as text (no HTML, link, control character or forged line), whatever the exit."""
    place, name = rng.choice(MARKDOWN_PLACES), rng.choice(HOSTILE_NAMES)
    workload = copy.deepcopy(W_QUICK)
    files, argv, setup = {}, list(QUICK), None
    if place == "class":
        classes = copy.deepcopy(W_CLASSES["traffic"]["classes"])
        classes[rng.randrange(2)]["name"] = name
        workload["traffic"] = {**workload["traffic"], "classes": classes}
    elif place == "study":
        argv += ["--study", name]
    elif place in ("model_folder", "alternative_folder"):
        folder = name.replace("/", "_")
        setup = (lambda f, n=folder: _local_model(f, n))
        if place == "model_folder":
            workload["model"] = f"./{folder}"
        else:
            workload["alternatives"] = [{"model": f"./{folder}", "accuracy_drop_pct": 1.0}]
    else:
        files["hw.yaml"] = _yaml({"gpus": {name: {"base": "h100", "price_per_gpu_hour": 2.0}}})
        workload["gpus"] = {name: {}}
        argv += ["--hardware", "hw.yaml"]
    files["w.yaml"] = _yaml(workload)
    return Case(0, "markdown", place, files, argv, EITHER, None, setup=setup,
                after=lambda f: _report_safe(f) or _terminal_safe(f))


TERMINAL_MUTATIONS = ["study", "workload_file", "hardware_text", "out_folder", "config_name"]
HARDWARE_TEXT = ["price_source", "interconnect", "memory_type", "notes", "display_name", "price_date"]


def case_terminal(rng: random.Random) -> Case:
    """A --study name, a workload file's name, an --out folder or a hardware file's text fields holding
    ESC, carriage returns, bidi overrides or line breaks: nothing printed drives the terminal or forges
    a line."""
    mutation, name = rng.choice(TERMINAL_MUTATIONS), rng.choice(HOSTILE_NAMES)
    files = {"w.yaml": _yaml(W_QUICK)}
    if mutation == "study":
        argv = [*QUICK, "--study", name]
    elif mutation == "workload_file":
        file = name.replace("/", "_") + ".yaml"
        files[file] = files.pop("w.yaml")
        argv = ["optimize", file, "--out", "out", "--no-progress"]
    elif mutation == "out_folder":
        argv = ["optimize", "w.yaml", "--out", name.replace("/", "_"), "--no-progress"]
    elif mutation == "config_name":  # a local model's config.json names it (_name_or_path)
        config = json.loads((ROOT / "costmodels" / "data" / "models" / "meta-llama--Llama-3.2-1B-Instruct.json").read_text())
        config.pop("_servopt")
        files["m/config.json"] = json.dumps({**config, "_name_or_path": name})
        argv = rng.choice([["plan", "--model", "./m", "--gpu", "h100"],
                           ["predict", "w.yaml", "--deployment", "d.yaml", "--analytic"]])
        files["w.yaml"], files["d.yaml"] = _yaml({**W_OPEN, "model": "./m"}), _yaml({"gpu": "h100", "max_model_len": 16384})
    else:
        field = rng.choice(HARDWARE_TEXT)
        files["hw.yaml"] = _yaml({"gpus": {"lab-gpu": {"base": "h100", field: name}}})
        argv = ["gpus", "--hardware", "hw.yaml"] + (["--json"] if rng.random() < 0.3 else [])
    return Case(0, "terminal", mutation, files, argv, EITHER, None, after=_terminal_safe)


STORAGE_LINK_MUTATIONS = ["sqlite_link", "sqlite_wal_link", "sqlite_folder_link", "journal_folder_link",
                          "jobjson_journal", "jobjson_sqlite", "jobjson_server", "export_folder_link"]


def case_storage_links(rng: random.Random, job_dir: Path) -> Case:
    """A storage reached through a link planted in the job folder, or named by an edited job.json
    outside it, and an export folder that is a planted link: refused, and no file outside the folder
    created or changed."""
    mutation = rng.choice(STORAGE_LINK_MUTATIONS)
    files: dict[str, str | bytes] = {"w.yaml": _yaml(W_QUICK), "victim.txt": "", "elsewhere/keep.txt": VICTIM}
    copy_from, needle = None, "symbolic link"
    if mutation in ("sqlite_link", "sqlite_wal_link", "sqlite_folder_link", "journal_folder_link"):
        # The out folder is a job folder by its marker (a study.db, or a study.journal), so that the
        # storage is what refuses it; the link is the database, SQLite's WAL file, or a folder on the way.
        storage = {"sqlite_link": "sqlite:///out/study.db", "sqlite_wal_link": "sqlite:///out/study.db",
                   "sqlite_folder_link": "sqlite:///out/sub/study.db", "journal_folder_link": "journal:out/sub/j.journal"}
        argv = [*QUICK, "--storage", storage[mutation]]

        def setup(folder: Path, mutation: str = mutation) -> None:
            out = folder / "out"
            out.mkdir()
            if mutation == "sqlite_link":
                os.symlink(folder / "victim.txt", out / "study.db")
            elif mutation == "sqlite_wal_link":
                (out / "study.db").write_bytes(b"")
                os.symlink(folder / "victim.txt", out / "study.db-wal")
            else:
                (out / "study.journal").write_bytes(b"")
                os.symlink(folder / "elsewhere", out / "sub")
    elif mutation.startswith("jobjson"):
        storage = {"jobjson_journal": "journal:elsewhere.journal", "jobjson_sqlite": "sqlite:///new.db",
                   "jobjson_server": "postgresql+psycopg2://servopt@127.0.0.1:1/studies"}[mutation]
        data = json.loads((job_dir / "job.json").read_text())
        files["job/job.json"] = json.dumps({**data, "storage": storage})
        argv, needle, copy_from, setup = ["report", "job", "--json"], "outside the job folder", job_dir, None
    else:
        front = json.loads((job_dir / "front.json").read_text())
        trials = [p["trial"] for p in front["points"]]
        argv, copy_from = ["export", "job", "--pick", str(rng.choice(trials))], job_dir

        def setup(folder: Path, trials: list[int] = trials) -> None:
            for trial in trials:
                os.symlink(folder / "elsewhere", folder / "job" / f"export-trial-{trial}")

    def after(folder: Path) -> str:
        if (folder / "victim.txt").read_bytes() or (folder / "elsewhere" / "keep.txt").read_text() != VICTIM:
            return "a file outside the job folder was written"
        made = sorted({p.name for p in folder.iterdir()} - {"w.yaml", "victim.txt", "elsewhere", "out", "job",
                                                             "stdout.txt", "stderr.txt"})
        if made or sorted(p.name for p in (folder / "elsewhere").iterdir()) != ["keep.txt"]:
            return f"created outside the job folder: {(made or ['elsewhere/...'])[0]}"
        return ""
    return Case(0, "storage_links", mutation, files, argv, INVALID, needle, copy_from=copy_from, setup=setup,
                after=after)


RESUME_MUTATIONS = ["price", "price_restart", "config", "config_restart", "workload", "workload_restart", "unchanged",
                    "profile"]


def _change_config(folder: Path, rng_seed: int) -> None:
    path = folder / "lm" / "config.json"
    config = json.loads(path.read_text())
    key = random.Random(rng_seed).choice(["num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size"])
    config[key] = config[key] * 2
    path.write_text(json.dumps(config))


def case_resume(rng: random.Random) -> Case:
    """The same job run again after a price, a local model's config.json, a profile or the workload
    changed: refused in one line naming what changed, or started afresh with --restart; unchanged, it
    resumes."""
    mutation = rng.choice(RESUME_MUTATIONS)
    workload = copy.deepcopy(W_QUICK)
    hardware = {"gpus": {"h100": {"price_per_gpu_hour": 2.0}}}
    workload["gpus"] = {"h100": {}}
    argv = first = [*QUICK, "--hardware", "hw.yaml"]
    setup, between, needle, expect = None, None, "changed since", INVALID
    if mutation.startswith("price"):
        between = lambda f: (f / "hw.yaml").write_text(_yaml({"gpus": {"h100": {"price_per_gpu_hour": 3.25}}}))
        needle = "price"
    elif mutation.startswith("config"):
        workload["model"] = "./lm"
        setup, seed = (lambda f: _local_model(f, "lm")), rng.randrange(10**6)
        between = lambda f, seed=seed: _change_config(f, seed)
        needle = "its config"
    elif mutation.startswith("workload"):
        between = lambda f: (f / "w.yaml").write_text(_yaml({**workload, "slo": {"p99_ttft_s": 3.0}}))
        needle = "restart"
    elif mutation == "profile":
        profile = json.loads((ROOT / "calibration" / "profiles" / "h100.json").read_text())
        workload["profiles"] = {"h100": "p.json"}
        setup = lambda f, p=profile: (f / "p.json").write_text(json.dumps(p))
        between = lambda f, p=profile: (f / "p.json").write_text(
            json.dumps({**p, "step_overhead_s": p["step_overhead_s"] * 2}))
        needle = "calibration profile"
    else:
        expect, needle = VALID, None
    if mutation.endswith("restart"):
        argv, expect, needle = [*argv, "--restart"], EITHER, None
    files = {"w.yaml": _yaml(workload), "hw.yaml": _yaml(hardware)}

    def after(folder: Path) -> str:
        out = (folder / "stdout.txt").read_text()
        if mutation.endswith("restart") and "--restart: the" not in out:
            return "--restart kept the earlier trials"
        if mutation == "unchanged" and "(0 run here" not in out:
            return "an unchanged rerun did not resume"
        return ""
    return Case(0, "resume", mutation, files, argv, expect, needle, setup=setup, prelude=[first], between=between,
                after=after)


CONFIG_FILES = ["meta-llama--Llama-3.1-8B.json", "Qwen--Qwen3-30B-A3B.json", "deepseek-ai--DeepSeek-V3.json",
                "google--gemma-3-27b-it.json", "openai--gpt-oss-20b.json", "mistralai--Mistral-7B-v0.1.json",
                "google--gemma-2-9b-it.json", "Qwen--Qwen2.5-VL-7B-Instruct.json", "Qwen--Qwen3-VL-8B-Instruct.json",
                "MiniMaxAI--MiniMax-M2.5.json", "microsoft--Phi-3.5-mini-instruct.json", "mistralai--Mixtral-8x7B-v0.1.json",
                "moonshotai--Kimi-K2.5.json", "nvidia--Qwen3-32B-NVFP4.json", "deepseek-ai--DeepSeek-V2-Lite.json"]
CONFIG_VALUES = [0, -1, float("nan"), float("inf"), float("-inf"), "abc", True, None, [], {}, 1.5, 10**30, -10**30, 2**63]
# Sizes no model has 0 of, at the top of the configs that keep them there (a 0 divided by it).
CONFIG_SIZES = {"num_attention_heads", "hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size"}


def case_config_extremes(rng: random.Random) -> Case:
    """A shipped model config with one value set to 0, a negative, NaN, Infinity, text, a list, a
    mapping or a number beyond every float, read from a local folder or a Hugging Face cache entry:
    planned, or refused in one line (NaN and Infinity anywhere, and a zero size, naming the key)."""
    name = rng.choice(CONFIG_FILES)
    config = json.loads((ROOT / "costmodels" / "data" / "models" / name).read_text())
    config.pop("_servopt", None)
    path = rng.choice(_paths(config))
    value = rng.choice(CONFIG_VALUES)
    _set(config, path, value)
    text = json.dumps(config)
    expect, needle = EITHER, None
    if isinstance(value, float) and not math.isfinite(value):
        expect, needle = INVALID, "finite"
    elif value == 0 and not isinstance(value, bool) and len(path) == 1 and path[0] in CONFIG_SIZES \
            and "text_config" not in config:
        expect, needle = INVALID, path[0]
    via_cache = rng.random() < 0.3
    if via_cache:
        files = {"hfc/models--acme--m/snapshots/abc/config.json": text, "hfc/models--acme--m/refs/main": "abc"}
        argv, env = ["plan", "--model", "acme/m", "--gpu", "h100", "--json"], {"HF_HUB_CACHE": "hfc", "HF_HUB_OFFLINE": "1"}
    else:
        files, argv, env = {"m/config.json": text}, ["plan", "--model", "./m", "--gpu", "h100", "--json"], {}
    label = f"{'cache' if via_cache else 'folder'}:{_name(path) or path[-1]}={str(value)[:8]}"
    return Case(0, "config_extremes", label, files, argv, expect, needle, env=env)


YAML_SPELLINGS = ["1e3", "0o17", "0x1F", "yes", "Y", "n", "on", "Off", "null", "NULL", "~", "1_000", "1:20", "0b101",
                  ".5", "1.", "+1", "-1", ".inf", ".NaN", "2001-12-14", "true", "False", "012", "1e-3", "h100", "gpu-a"]
# Kubernetes' label value grammar (kubernetes.io "Labels and Selectors": at most 63 characters,
# alphanumerics at both ends, '-', '_' and '.' between) and an image reference's characters.
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")
# Plain scalars a YAML 1.2 core-schema reader, or a YAML 1.1 one (Kubernetes' go-yaml), reads as no string.
NOT_TEXT = re.compile(r"[-+]?[0-9][0-9_]*(\.[0-9_]*)?([eE][-+]?[0-9]+)?|[-+]?\.[0-9]+([eE][-+]?[0-9]+)?|0o[0-7]+|"
                      r"0x[0-9a-fA-F_]+|0b[01_]+|[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?|[-+]?\.(inf|Inf|INF)|"
                      r"\.(nan|NaN|NAN)|y|Y|n|N|yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|"
                      r"Off|OFF|null|Null|NULL|~|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}.*|=|<<")


def _yaml_problem(text: str) -> str:
    """A plain scalar a YAML 1.1 or 1.2 reader would read as a number, boolean, null or date."""
    for document in yaml.compose_all(text):
        stack = [document]
        while stack:
            node = stack.pop()
            if isinstance(node, yaml.MappingNode):
                stack += [part for pair in node.value for part in pair]
            elif isinstance(node, yaml.SequenceNode):
                stack += node.value
            elif node is not None and node.style is None and node.tag.endswith(":str") and NOT_TEXT.fullmatch(node.value):
                return f"{node.value!r} is written unquoted"
    return ""


def case_yaml_spellings(rng: random.Random, job_dir: Path) -> Case:
    """--node-selector values, --image and names spelled as YAML 1.1 or 1.2 numbers, booleans or nulls:
    the manifests (and export --format yaml) quote them, so every reader gets the text back."""
    value, image = rng.choice(YAML_SPELLINGS), rng.choice(YAML_SPELLINGS + ["vllm/vllm-openai:v0.33.0"])
    fmt = rng.choice(["kubernetes", "kubernetes", "yaml"])
    if fmt == "yaml":
        argv, expect, needle = ["export", "job", "--format", "yaml"], VALID, None
    else:
        argv = ["export", "job", "--format", "kubernetes", "--node-selector", f"gpu={value}", "--image", image,
                "--out", "k8s"]
        ok = bool(LABEL_VALUE.fullmatch(value)) and bool(IMAGE.fullmatch(image))
        expect = VALID if ok else INVALID
        needle = None if ok else ("--image" if not IMAGE.fullmatch(image) else "--node-selector")

    def after(folder: Path) -> str:
        path = folder / "k8s" / "kubernetes.yaml"
        text = path.read_text() if path.exists() else (folder / "stdout.txt").read_text()
        if not text.strip() or expect == INVALID:
            return ""
        problem = _yaml_problem(text)
        if not problem and fmt != "yaml":
            docs = [d for d in yaml.safe_load_all(text) if d]
            selectors = [d["spec"]["template"]["spec"].get("nodeSelector") for d in docs
                         if d.get("kind") == "Deployment" and "vllm" in str(d["spec"]["template"]["spec"]["containers"])]
            if selectors and selectors[0] != {"gpu": value}:
                problem = f"the node selector reads back as {selectors[0]!r}"
        return problem
    return Case(0, "yaml_spellings", f"{fmt}:{value}", {}, argv, expect, needle, copy_from=job_dir, after=after)


SEED_JOB_MUTATIONS = ["hand_workload", "hand_deployment", "servopt_earlier", "empty_folder", "new_folder"]


def case_seed_job(rng: random.Random) -> Case:
    """diagnose --seed-job into a folder holding a hand-written workload.yaml or deployment.yaml: refused,
    the file kept; a folder of servopt's earlier seed, an empty or a new folder: written."""
    mutation = rng.choice(SEED_JOB_MUTATIONS)
    mine = "# my own workload, do not lose\nmodel: llama-3.1-8b\n"
    files = {"r.json": json.dumps(_bench(rng)), "d.yaml": _yaml(D_BENCH)}
    expect, needle = VALID, None
    if mutation in ("hand_workload", "hand_deployment"):
        files[f"sj/{'workload' if mutation == 'hand_workload' else 'deployment'}.yaml"] = mine
        expect, needle = INVALID, "did not write"
    elif mutation == "servopt_earlier":
        files["sj/workload.yaml"] = "# Written by servopt diagnose from an earlier run\nmodel: x\n"
    setup = (lambda f: (f / "sj").mkdir()) if mutation == "empty_folder" else None

    def after(folder: Path) -> str:
        for name in ("workload.yaml", "deployment.yaml"):
            if files.get(f"sj/{name}") == mine and (folder / "sj" / name).read_text() != mine:
                return f"the user's {name} was replaced"
        return ""
    check = _json_check(lambda d: "" if d.get("seed_job") else "no seed job written")
    return Case(0, "seed_job", mutation, files, [*DIAGNOSE, "--seed-job", "sj"], expect, needle, check,
                setup=setup, after=after)


MISREAD_MUTATIONS = ["gpu_twice_workload", "gpu_twice_hardware", "model_twice", "foreign_checkpoint",
                     "foreign_alternative_checkpoint", "bench_completed", "bench_nan_ttft", "quant_bits",
                     "quant_group", "kv_cache_memory", "empty_flag", "gpus_json", "tenant_n_minus_1", "stale_export",
                     "runaway"]
H100_NAMES = ["H100", "h100-sxm", "H100_SXM", "h100-80gb", "H100-SXM5"]


def _quantized_model(folder: Path, quant: dict) -> None:
    _local_model(folder, "q")
    path = folder / "q" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "quantization_config": quant}))


def _stale_export(folder: Path, trial: int) -> None:
    out = folder / "job" / f"export-trial-{trial}"
    out.mkdir()
    head = "#!/usr/bin/env bash\n# servopt export for vLLM 0.33: trial {t}, 6 replica(s) on 48 x h100 (6 node(s)); node {n}\n"
    for node in range(1, 4):
        (out / f"node-{node}.sh").write_text(head.format(t=trial + 1, n=node) + "exit 0\n")
    (out / "node-7.sh").write_text("#!/bin/sh\necho my own script\n")
    (out / "notes.txt").write_text("mine")
    (out / "plan.json").write_text(json.dumps({"vllm_version": "0.33", "trial": trial + 1}, indent=2))


def case_misread(rng: random.Random, job_dir: Path) -> Case:
    """Each misread of issue 30 made anew: refused in one line naming what is wrong, or read right."""
    mutation = rng.choice(MISREAD_MUTATIONS)
    workload = copy.deepcopy(W_QUICK)
    files: dict[str, str | bytes] = {}
    argv, expect, needle, check, setup, after, copy_from = list(QUICK), INVALID, None, None, None, None, None
    if mutation == "gpu_twice_workload":
        workload["gpus"] = {"h100": {"price_per_gpu_hour": 2.0}, rng.choice(H100_NAMES): {"price_per_gpu_hour": 9.0}}
        needle = "listed already"
    elif mutation == "gpu_twice_hardware":
        files["hw.yaml"] = _yaml({"gpus": {"h100": {"price_per_gpu_hour": 2.0},
                                           rng.choice(H100_NAMES): {"price_per_gpu_hour": 9.0}}})
        argv, needle = ["gpus", "--hardware", "hw.yaml"], "same GPU"
    elif mutation == "model_twice":
        pair = rng.choice([("llama-3.2-3b", "meta-llama/Llama-3.2-3B-Instruct"), ("qwen3-8b", "Qwen/Qwen3-8B")])
        workload["alternatives"] = [{"model": m, "accuracy_drop_pct": float(d)} for m, d in zip(pair, (4, 9), strict=True)]
        needle = "lists already"
    elif mutation == "foreign_checkpoint":
        workload["checkpoints"] = rng.choice([{"fp8": "nvidia/Llama-3.1-70B-Instruct-FP8"}, {"fp8": "Qwen/Qwen3-32B-FP8"},
                                              {"int8": "RedHatAI/Llama-3.3-70B-Instruct-quantized.w8a8"},
                                              {"int8": "RedHatAI/Llama-3.2-3B-Instruct-quantized.w8a8"}])
        needle = "not a checkpoint"
    elif mutation == "foreign_alternative_checkpoint":
        workload["alternatives"] = [{"model": "llama-3.2-3b", "accuracy_drop_pct": 5.0,
                                     "checkpoint": rng.choice(["nvidia/Llama-3.1-70B-Instruct-FP8", "Qwen/Qwen3-32B-FP8"])}]
        needle = "not a checkpoint"
    elif mutation in ("bench_completed", "bench_nan_ttft"):
        bench = _bench(rng)
        if mutation == "bench_completed":
            bench = {key: value for key, value in bench.items() if key not in ("input_lens", "output_lens", "ttfts",
                                                                              "itls", "errors")}
            bench["completed"], needle = bench["num_prompts"] * rng.choice([2, 5]), "num_prompts"
        else:
            bench["mean_ttft_ms"], needle = float("nan"), "NaN"
        files["r.json"], files["d.yaml"] = json.dumps(bench), _yaml(D_BENCH)
        argv = list(DIAGNOSE)
    elif mutation in ("quant_bits", "quant_group"):
        method = rng.choice(["gptq", "awq"])
        quant = {"quant_method": method, "bits": rng.choice([0, 3, -4]) if mutation == "quant_bits" else 4}
        if mutation == "quant_group":
            quant["group_size"] = rng.choice([0, -128, -2])
        setup, needle = (lambda f, q=quant: _quantized_model(f, q)), "bits" if mutation == "quant_bits" else "group_size"
        argv = ["plan", "--model", "./q", "--gpu", "h100", "--json"]
    elif mutation == "kv_cache_memory":
        big = rng.random() < 0.5
        files["d.yaml"] = _yaml({"gpu": "h100" if big else "l40s", "kv_cache_memory_gib": 1000.0 if big else 4.0,
                                 "max_model_len": 16384})
        files["w.yaml"] = _yaml({**W_OPEN, "model": "llama-3.1-8b" if big else "llama-3.1-70b"})
        argv, needle = ["predict", "w.yaml", "--deployment", "d.yaml", "--analytic", "--json"], "kv_cache_memory_gib"
    elif mutation == "empty_flag":
        flag = rng.choice(["--out", "--study", "--storage", "--hardware"])
        argv, needle = [*QUICK[:2], *(["--out", "out"] if flag != "--out" else []), flag, rng.choice(["", " "])], flag
    elif mutation == "gpus_json":
        argv, expect = ["gpus", "--json"], VALID

        def check(out: str) -> str:
            try:
                json.loads(out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
            except ValueError as err:
                return f"not JSON: {err}"
            return ""
    elif mutation == "tenant_n_minus_1":
        classes = copy.deepcopy(W_CLASSES["traffic"]["classes"])
        for c in classes:
            c["slo"] = {**c["slo"], "n_minus_1": rng.choice([False, True])}
        workload["traffic"] = {**workload["traffic"], "classes": classes}
        expect = EITHER
        after = lambda f: "a report lists n_minus_1 as a P99 target" if (f / "out" / "report.md").exists() and \
            "NUS" in (f / "out" / "report.md").read_text() else ""
    elif mutation == "stale_export":
        trial = json.loads((job_dir / "front.json").read_text())["points"][0]["trial"]
        argv, expect, copy_from = ["export", "job", "--pick", str(trial)], VALID, job_dir
        setup = lambda f, t=trial: _stale_export(f, t)

        def after(folder: Path, t: int = trial) -> str:
            out = folder / "job" / f"export-trial-{t}"
            if any((out / f"node-{n}.sh").exists() for n in range(1, 4)):
                return "an earlier export's node scripts were left beside the new plan"
            if not (out / "node-7.sh").exists() or not (out / "notes.txt").exists():
                return "a file servopt did not write was removed"
            return ""
    else:  # runaway: nothing can be simulated at the schema's largest rate; every trial must stay cheap
        workload["traffic"] = {**workload["traffic"], "arrival": {"kind": "poisson", "rate_per_s": 1e6}}
        workload["budget"], workload["gpus"] = {"trials": 40}, {"h100": {}, "l40s": {}}
        workload["space"] = {k: v for k, v in workload["space"].items() if k != "tp"}
        expect = EITHER
    files.setdefault("w.yaml", _yaml(workload))
    return Case(0, "misread", mutation, files, argv, expect, needle, check, copy_from=copy_from, setup=setup,
                after=after)


KINDS: list[tuple[str, float]] = [
    ("workload", 10), ("classes", 6), ("sessions", 6), ("deployment", 8), ("hardware", 6), ("profile", 8),
    ("bench", 5), ("trace_csv", 8), ("trace_jsonl", 8), ("azure", 6), ("e2e", 6), ("memory", 6), ("kernel", 6),
    ("job", 4), ("optimize", 1),
    # issue 21's classes
    ("special_file", 4), ("compressed", 4), ("yaml11", 3), ("units", 4), ("profile_gpu", 2), ("shadow", 2),
    ("scrape", 3), ("bench_extremes", 2), ("cli_numbers", 4), ("storage", 2), ("out_paths", 2), ("model_ids", 1),
    ("front", 2), ("journal", 2), ("formula", 0.5),
    # issue 30's classes
    ("markdown", 2), ("terminal", 2), ("storage_links", 2), ("resume", 2), ("config_extremes", 3),
    ("yaml_spellings", 2), ("seed_job", 1), ("misread", 3),
]
# Kinds built on the finished optimize job that the run makes first.
ON_JOB = ("job", "out_paths", "front", "journal", "storage_links", "yaml_spellings", "misread")


def build_cases(seed: int, count: int, job_dir: Path, kinds: list[str] | None = None) -> list[Case]:
    """``count`` cases of ``seed``, their kinds drawn by :data:`KINDS`' weights (among ``kinds`` only
    when given)."""
    drawn = [(k, w) for k, w in KINDS if not kinds or k in kinds]
    cases = []
    for index in range(count):
        rng = random.Random(seed * 1_000_003 + index)
        kind = rng.choices([k for k, _ in drawn], weights=[w for _, w in drawn])[0]
        if kind in ("e2e", "memory", "kernel"):
            case = case_table(rng, kind)
        elif kind in ON_JOB:
            case = globals()[f"case_{kind}"](rng, job_dir)
        else:
            case = globals()[f"case_{kind}"](rng)
        case.index = index
        cases.append(case)
    return cases


# --- running ---------------------------------------------------------------------------------------
def _child(folder: Path, case: Case) -> None:
    """In the forked process: run the case's prelude, change what it changes, then run the CLI as the
    ``servopt`` script does and exit with its code."""
    argv = case.argv
    from servopt.optimizer.cli import main

    os.chdir(folder)
    os.environ.update({key: os.path.abspath(value) if key.endswith("_CACHE") else value
                       for key, value in case.env.items()})

    def output_to(prefix: str) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, name in ((1, f"{prefix}stdout.txt"), (2, f"{prefix}stderr.txt")):
            target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)

    output_to("prelude-" if case.prelude else "")
    sys.stdout = open(1, "w", closefd=False, encoding="utf-8")  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False, encoding="utf-8")  # noqa: SIM115
    if case.prelude:
        for step in case.prelude:  # a job to resume: it must end cleanly (an empty front is exit 2)
            if main(step) not in (0, 2):
                os._exit(3)
        output_to("")
    if case.between is not None:
        case.between(folder)
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 (the traceback is what the fuzzer looks for)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _folder(case: Case, root: Path) -> Path:
    return root / f"case{case.index:05d}"


def _prepare(case: Case, root: Path) -> Path:
    folder = _folder(case, root)
    if case.copy_from is not None:
        shutil.copytree(case.copy_from, folder / "job")
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8", newline="")
    if case.setup is not None:
        case.setup(folder)
    return folder


def _leaks(case: Case, outcome: Outcome, folder: Path) -> bool:
    """Whether a forbidden text (a password) is in the output or any regular file servopt wrote (the
    case's own input files aside: a workload may hold its storage URL)."""
    if not case.forbidden:
        return False
    texts = [outcome.out, outcome.err]
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.relative_to(folder).as_posix() not in case.files:
            texts.append(path.read_bytes().decode("utf-8", errors="replace"))
    return any(secret in text for secret in case.forbidden for text in texts)


EMPTY_FRONT = re.compile(r"^(None of the [0-9]+ trials met every constraint|No trial finished)", re.MULTILINE)


def _verdict(outcome: Outcome, timeout_s: float, folder: Path) -> str:
    case, code, err = outcome.case, outcome.code, outcome.err
    command = case.argv[0]
    if code is None:
        return f"hang (> {timeout_s:.0f} s)"
    if _leaks(case, outcome, folder):
        return "secret in output or files"
    if case.after is not None and case.after(folder):
        return f"left the folder wrong: {case.after(folder)[:60]}"
    if "Traceback" in err or code not in (0, 2):
        last = err.strip().splitlines()[-1] if err.strip() else f"exit {code}"
        return f"crash: {last.split(':')[0][:60]}"
    if outcome.seconds > timeout_s:
        return f"slow (> {timeout_s:.0f} s)"
    if code == 2 and command == "optimize" and not err.strip() and EMPTY_FRONT.search(outcome.out):
        # docs/reference.md: an empty front (targets nothing meets) is explained on stdout, with exit code 2
        return "refused valid input" if case.expect == VALID else "pass"
    if code == 2:
        lines = err.strip("\n").split("\n")
        if len(lines) != 1 or not lines[0].startswith(f"servopt {command}: error: "):
            return "exit 2 without a one-line error"
        if case.expect == VALID:
            return "refused valid input"
        if case.expect == INVALID and case.needle and case.needle not in err:
            return "message does not name the field"
        return "pass"
    if case.expect == INVALID:
        return "accepted invalid input"
    if case.check is not None:  # what was read must be what the file says (or, for a job, rebuilt)
        problem = case.check(outcome.out)
        if problem:
            return "misread valid input"
    return "pass"


def run_cases(cases: list[Case], root: Path, jobs: int = 2, timeout_s: float = 30.0,
              progress: Callable[[int], None] | None = None, keep_passed: bool = False) -> list[Outcome]:
    """Run every case in a forked process, ``jobs`` at a time, each killed after ``timeout_s``."""
    pending = list(reversed(cases))
    running: dict[int, tuple[Case, float, Path]] = {}
    outcomes = []
    while pending or running:
        while pending and len(running) < jobs:
            case = pending.pop()
            folder = _prepare(case, root)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(folder, case)
            running[pid] = (case, time.perf_counter(), folder)
        time.sleep(0.003)
        for pid, (case, start, folder) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            elapsed = time.perf_counter() - start
            if not done and elapsed <= timeout_s:
                continue
            code = None
            if done:
                code = os.waitstatus_to_exitcode(status)
            else:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            del running[pid]
            out = (folder / "stdout.txt").read_text(errors="replace") if (folder / "stdout.txt").exists() else ""
            err = (folder / "stderr.txt").read_text(errors="replace") if (folder / "stderr.txt").exists() else ""
            outcome = Outcome(case, code, out, err, elapsed)
            outcome.verdict = _verdict(outcome, timeout_s, folder)
            outcomes.append(outcome)
            if outcome.verdict == "pass" and not keep_passed:
                shutil.rmtree(folder, ignore_errors=True)
            if progress:
                progress(len(outcomes))
    return sorted(outcomes, key=lambda o: o.case.index)


def make_job(root: Path) -> Path:
    """A finished optimize job (the base of the job.json cases), made in a forked process."""
    case = Case(0, "job", "base", {"w.yaml": _yaml(W_OPTIMIZE)},
                ["optimize", "w.yaml", "--out", "job", "--no-progress", "--json"], VALID)
    (outcome,) = run_cases([case], root / "base", jobs=1, timeout_s=300, keep_passed=True)
    if outcome.code != 0:
        raise RuntimeError(f"the base optimize job failed: {outcome.err[-2000:]}")
    return _folder(case, root / "base") / "job"


def fuzz(seed: int, count: int, jobs: int = 2, timeout_s: float = 30.0, keep: Path | None = None,
         only: list[int] | None = None, progress: Callable[[int], None] | None = None,
         kinds: list[str] | None = None, per_kind: bool = False) -> list[Outcome]:
    """Build and run ``count`` cases of ``seed`` (or the ``only`` ones; ``count`` of each kind when
    ``per_kind``); failed cases' folders are kept."""
    root = Path(keep or tempfile.mkdtemp(prefix="servopt-fuzz-"))
    root.mkdir(parents=True, exist_ok=True)
    from servopt.costmodels.architectures import resolve_model
    from servopt.costmodels.hardware import builtin_catalog
    from servopt.optimizer import cli  # noqa: F401 (imported once here, not in every forked case)

    builtin_catalog()  # warm the caches the forked cases share
    resolve_model("llama-3.1-8b")
    job_dir = make_job(root)
    if per_kind:  # every kind of ``kinds`` (else all), ``count`` cases each
        cases = [case for kind in kinds or [k for k, _ in KINDS] for case in build_cases(seed, count, job_dir, [kind])]
        for index, case in enumerate(cases):
            case.index = index
    else:
        cases = build_cases(seed, count, job_dir, kinds)
    if only:
        cases = [c for c in cases if c.index in set(only)]
    outcomes = run_cases(cases, root, jobs, timeout_s, progress)
    if keep is None and all(o.verdict == "pass" for o in outcomes):
        shutil.rmtree(root, ignore_errors=True)
    return outcomes


def report(outcomes: list[Outcome], seed: int, command: str, show: int = 3) -> str:
    passed = sum(o.verdict == "pass" for o in outcomes)
    lines = [f"{passed}/{len(outcomes)} cases passed ({100 * passed / max(len(outcomes), 1):.2f}%), seed {seed}",
             f"time per case: median {sorted(o.seconds for o in outcomes)[len(outcomes) // 2]:.2f} s, "
             f"max {max(o.seconds for o in outcomes):.2f} s", "", "by file kind (passed / cases):"]
    by_kind, by_expect = defaultdict(Counter), Counter(o.case.expect for o in outcomes)
    for o in outcomes:
        by_kind[o.case.kind][o.verdict == "pass"] += 1
    lines += [f"  {kind:14} {c[True]:5d} / {c[True] + c[False]:5d}" for kind, c in sorted(by_kind.items())]
    lines.append(f"oracle: {by_expect[INVALID]} must be refused, {by_expect[VALID]} must be read, "
                 f"{by_expect[EITHER]} need only a clean exit")
    classes = defaultdict(list)
    for o in outcomes:
        if o.verdict != "pass":
            classes[(o.verdict, o.case.kind, o.case.mutation)].append(o)
    lines += ["", f"distinct failure classes: {len(classes)}"]
    for (verdict, kind, mutation), items in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        example = items[0]
        message = (example.err.strip().splitlines() or [""])[-1][:220]
        lines.append(f"  {len(items):4d} x {verdict} | {kind} / {mutation} | e.g. case {example.case.index} "
                     f"(expect {example.case.expect}, needle {example.case.needle!r}): {message}")
    lines += ["", f"command: {command}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds a case may take")
    parser.add_argument("--keep", type=Path, default=None, help="keep every case's folder here")
    parser.add_argument("--only", type=int, nargs="*", help="run only these case numbers")
    parser.add_argument("--kinds", default=None, help="draw only these file kinds (comma-separated names of KINDS)")
    parser.add_argument("--per-kind", action="store_true", help="--cases cases of each kind")
    args = parser.parse_args()
    start = time.perf_counter()

    def progress(done: int) -> None:
        if done % 100 == 0:
            print(f"  {done} cases in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)

    kinds = args.kinds.split(",") if args.kinds else None
    unknown = sorted(set(kinds or ()) - {k for k, _ in KINDS})
    if unknown:
        parser.error(f"unknown kind(s) {', '.join(unknown)}; known: {', '.join(k for k, _ in KINDS)}")
    outcomes = fuzz(args.seed, args.cases, args.jobs, args.timeout, args.keep, args.only, progress, kinds,
                    args.per_kind)
    command = "python benchmarks/bench_input_fuzz.py " + " ".join(sys.argv[1:])
    print(report(outcomes, args.seed, command.strip()))
    print(f"wall time {time.perf_counter() - start:.0f} s with {args.jobs} worker(s)")


if __name__ == "__main__":
    main()

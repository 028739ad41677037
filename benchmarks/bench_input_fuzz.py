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

Prints the pass rate, per file kind and per mutation, and the distinct failure classes with one
example each (the case number reproduces it: ``--only N``).
"""

from __future__ import annotations

import argparse
import copy
import io
import json
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


def case_job(rng: random.Random, job_dir: Path) -> Case:
    base = json.loads((job_dir / "job.json").read_text())
    mutation, text, expect, needle = mutate_structured(rng, "job", base, "json")
    if expect == INVALID and (mutation in JOB_REBUILT or needle in JOB_KEYS):
        expect = EITHER
    check = _json_check(lambda d: "" if "report.md" in d else "no report written")
    return Case(0, "job", mutation, {"job/job.json": text}, ["report", "job", "--json"], expect, needle, check,
                copy_from=job_dir)


KINDS: list[tuple[str, float]] = [
    ("workload", 10), ("classes", 6), ("sessions", 6), ("deployment", 8), ("hardware", 6), ("profile", 8),
    ("bench", 5), ("trace_csv", 8), ("trace_jsonl", 8), ("azure", 6), ("e2e", 6), ("memory", 6), ("kernel", 6),
    ("job", 4), ("optimize", 1),
]


def build_cases(seed: int, count: int, job_dir: Path) -> list[Case]:
    cases = []
    for index in range(count):
        rng = random.Random(seed * 1_000_003 + index)
        kind = rng.choices([k for k, _ in KINDS], weights=[w for _, w in KINDS])[0]
        if kind in ("e2e", "memory", "kernel"):
            case = case_table(rng, kind)
        elif kind == "job":
            case = case_job(rng, job_dir)
        else:
            case = globals()[f"case_{kind}"](rng)
        case.index = index
        cases.append(case)
    return cases


# --- running ---------------------------------------------------------------------------------------
def _child(folder: Path, argv: list[str]) -> None:
    """In the forked process: run the CLI as the ``servopt`` script does, then exit with its code."""
    from servopt.optimizer.cli import main

    os.chdir(folder)
    for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", closefd=False, encoding="utf-8")  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False, encoding="utf-8")  # noqa: SIM115
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
    return folder


def _verdict(outcome: Outcome, timeout_s: float) -> str:
    case, code, err = outcome.case, outcome.code, outcome.err
    command = case.argv[0]
    if code is None:
        return f"hang (> {timeout_s:.0f} s)"
    if "Traceback" in err or code not in (0, 2):
        last = err.strip().splitlines()[-1] if err.strip() else f"exit {code}"
        return f"crash: {last.split(':')[0][:60]}"
    if outcome.seconds > timeout_s:
        return f"slow (> {timeout_s:.0f} s)"
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
                _child(folder, case.argv)
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
            outcome.verdict = _verdict(outcome, timeout_s)
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
         only: list[int] | None = None, progress: Callable[[int], None] | None = None) -> list[Outcome]:
    """Build and run ``count`` cases of ``seed`` (or the ``only`` ones); failed cases' folders are kept."""
    root = Path(keep or tempfile.mkdtemp(prefix="servopt-fuzz-"))
    root.mkdir(parents=True, exist_ok=True)
    from servopt.costmodels.architectures import resolve_model
    from servopt.costmodels.hardware import builtin_catalog
    from servopt.optimizer import cli  # noqa: F401 (imported once here, not in every forked case)

    builtin_catalog()  # warm the caches the forked cases share
    resolve_model("llama-3.1-8b")
    job_dir = make_job(root)
    cases = build_cases(seed, count, job_dir)
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
    args = parser.parse_args()
    start = time.perf_counter()

    def progress(done: int) -> None:
        if done % 100 == 0:
            print(f"  {done} cases in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)

    outcomes = fuzz(args.seed, args.cases, args.jobs, args.timeout, args.keep, args.only, progress)
    command = "python benchmarks/bench_input_fuzz.py " + " ".join(sys.argv[1:])
    print(report(outcomes, args.seed, command.strip()))
    print(f"wall time {time.perf_counter() - start:.0f} s with {args.jobs} worker(s)")


if __name__ == "__main__":
    main()

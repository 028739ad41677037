"""How aiconfigurator's silicon rows were measured, translated into a servopt run.

The shared silicon tables come from two different benchmark harnesses; each row is simulated with
the server flags and the client of the harness that measured it, as that harness's public source
shows (``file@commit:line``). A row says which harness by its ``silicon_data_source``.

**Dense rows** (``silicon_dense_h100.csv``: vLLM 0.12.0, Qwen3-32B, 8 x H100, from aiconfigurator-core
0.12.0's ``silicon_sample.csv``). Their source cells name aiconfigurator's private gap-analysis data
(``aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/...``); its collector is not public
(aiconfigurator ``docs/universe/index.html@095f58a:551-555``: "AIC ... predictions ... compared
with AIPerf or other silicon measurements", code in a private ``revati-poc``). What the public
record does show:

- **Server.** The dated fp8 rows of the same data set name their image,
  ``nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.8.0`` (Dynamo 0.8.0, measured 2026-01-23 and 25), the
  day aiconfigurator's generator was aligned with Dynamo 0.8.0 (#278, ``b2fe277b6``). The generator
  serves vLLM behind Dynamo's HTTP front end (``backend_templates/vllm/run.sh.j2@b2fe277b6:11``
  ``python3 -m dynamo.frontend``, ``:32`` ``python3 -m dynamo.vllm``) with, for an aggregated worker of
  per-worker batch ``b`` (the row's ``batch_size``), ``--max-num-seqs b``,
  ``--max-num-batched-tokens b + ISL + 1500`` and ``--max-model-len ISL + OSL + 1500``
  (``rule_plugin/vllm.rule@b2fe277b6:10-11``; ``cli_args.j2@b2fe277b6:8-10`` passes them, since #238,
  2026-01-08) and prefix caching off unless the model names a shared prefix
  (``vllm.rule@b2fe277b6:13-14``, ``backend_config_mapping.yaml@b2fe277b6:62-67``). Everything else
  is vLLM 0.12.0's default (:mod:`servopt.costmodels.engines.vllm`).
- **Client.** The rows do not record aiperf's request count or warm-up. Every public NVIDIA aiperf
  recipe that existed when the dated rows were measured sends the same protocol:
  aiconfigurator's ``aiconfigurator eval`` (``src/aiconfigurator/eval/benchmarks/genai_perf_runner.py
  @c0a8817:190-229``, aiperf since #57, 2025-10-14, removed by #504 on 2026-03-03) and Dynamo's
  ``benchmarks/llm/perf.sh`` (``@3324b28``, its ``aiperf profile`` call) both run ``aiperf profile
  --endpoint-type chat --endpoint /v1/chat/completions --streaming
  --synthetic-input-tokens-mean ISL --synthetic-input-tokens-stddev 0 --output-tokens-mean OSL
  --output-tokens-stddev 0 --extra-inputs max_tokens:OSL --extra-inputs min_tokens:OSL
  --extra-inputs ignore_eos:true --concurrency C --request-count 10C --warmup-request-count 2C
  --num-dataset-entries 12C``. The generator's own script with 50C requests
  (``backend_templates/benchmark/bench_run.sh.j2``) was first committed on 2026-02-06 (``5245062``,
  merged as #334 on 2026-02-11), after those rows were measured; it sends 20C since #584
  (2026-03-17). So servopt simulates 10C (:data:`REQUESTS_PER_CLIENT`): the count of the recipes of
  the rows' time, not the count that scores best (``benchmarks/bench_e2e_accuracy.py`` prints all
  three). aiperf drops a request whenever a credit returns (``aiperf/timing/request_rate_strategy.py
  @aiperf-0.4.0:41-43, 53-54, 87-96``) and waits for its warm-up before profiling, so the profiling
  phase opens with C simultaneous requests on an idle server and the reported means cover all 10C
  requests: the opening burst, the steady state and the closing drain. Its TTFT is the first
  streamed chunk with text (``aiperf/parsers/openai_parsers.py@db4f639:50-55, 123-128``; role-only
  chunks are dropped) minus the request's start (``aiperf/metrics/types/ttft_metric.py@db4f639:46-53``).

**MiniMax-M2.5 rows** (``silicon_moe_minimax_m25.csv``). Their source cells carry an InferenceX
``config_id`` and ``workflow_run_id`` (``db-dump``) or an export date, and a ``vllm/vllm-openai``
image: they are SemiAnalysis InferenceX runs (aiconfigurator reads such records with
``sdk/config_adapter/inferencex.py@095f58a``), and their layouts, concurrency sweeps and sequence
lengths are those of InferenceX's configs (``.github/configs/nvidia-master.yaml@a363463``: H200,
``vllm/vllm-openai:v0.16.0``, TP4, concurrency 4-64, 1k/1k, 1k/8k and 8k/1k). So:

- **Server.** ``vllm serve`` (vLLM's own API server, not Dynamo) with the flags of the model's
  InferenceX script at the row's date (:data:`INFERENCEX_SCRIPTS`, each with its file@commit:lines);
  ``--max-model-len ISL + OSL + 200`` (``utils/matrix_logic/generate_sweep_configs.py@1d5cae1:347``).
  The token budget is vLLM's default (8192 on H100/H200/B200/B300 for these releases) unless the
  script sets ``--max-num-batched-tokens 2 x ISL`` (the Blackwell scripts from 2026-04-03).
- **Client.** ``utils/bench_serving/benchmark_serving.py`` through ``run_benchmark_serving``
  (``benchmarks/benchmark_lib.sh@a363463:260-279``): the random dataset with
  ``--random-range-ratio 0.8`` (``.github/workflows/benchmark-tmpl.yml@a363463:67``), so input and
  output lengths are drawn uniformly from ``[0.8 x ISL, ISL]`` and ``[0.8 x OSL, OSL]`` by numpy's
  generator seeded with 0 (``benchmark_serving.py@a363463:112-120``, ``:636-637``, ``--seed`` default
  0 at ``:871``); ``--num-prompts 10C --max-concurrency C --request-rate inf --ignore-eos`` (the
  scripts' ``run_benchmark_serving`` call and ``benchmark_lib.sh@a363463:269-272``): all requests
  queue at once behind a semaphore of C slots (``benchmark_serving.py@a363463:427-442``), each timed
  from when it holds a slot; ``--num-warmups 2C`` copies of the first prompt, waited for
  (``:371-387``), so only that prompt is in the prefix cache when the run starts (where the script
  leaves prefix caching on). The endpoint is ``/v1/completions`` with ``stream: true``
  (``backend_request_func.py@a363463:245-257``) and TTFT is the first chunk that carries a choice
  (``:290-299``).

Why the generator's budget and not vLLM's own default of 8192 tokens on the dense rows: the generator
sets it (above). The physics agrees: with identical requests, closed-loop clients fall into lockstep
groups (a group's prompts are admitted in one step, so its members finish together and return
together); at ISL 1024 and 8 clients on TP2, a budget of 8192 would let seven prompts share a step,
at least 238 ms of compute even at 100% of the H100's bf16 peak, against a measured mean TTFT of
154 ms.

Example:
    >>> run = silicon_run({"backend": "vllm", "model_path": "Qwen/Qwen3-32B", "system": "h100_sxm", "isl": 1024,
    ...                    "osl": 128, "tp_size": 2, "batch_size": 8, "silicon_concurrency": 8})
    >>> run.deployment.max_num_batched_tokens, run.deployment.frontend, run.traffic.arrival.benchmark_requests
    (2532, 'dynamo', 80)
    >>> ix = silicon_run({"backend": "vllm", "model_path": "MiniMaxAI/MiniMax-M2.5", "system": "h200_sxm", "isl": 1024,
    ...                   "osl": 1024, "tp_size": 4, "batch_size": 8, "silicon_concurrency": 8, "precision": "fp8",
    ...                   "backend_version": "0.16.0", "silicon_data_source": "db-dump/2026-04-27; config_id=1; "
    ...                   "measured=2026-03-01T00:00:00.000Z; vllm/vllm-openai:v0.16.0"})
    >>> ix.deployment.frontend, ix.deployment.max_num_batched_tokens, ix.deployment.gpu_memory_utilization
    ('vllm', None, 0.95)
    >>> records = ix.traffic.arrival.records
    >>> len(records.input_tokens), min(records.input_tokens) >= 819, max(records.input_tokens) <= 1024
    (80, True, True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
import pandas as pd

from ..costmodels.deployment import Deployment
from ..costmodels.errors import InputError
from ..costmodels.serving.traffic import Traffic
from .bench_clients import AiperfConcurrency, SessionCache, VllmBenchServe, routed_hits

# aiconfigurator's generator: budget and context margin beyond the prompt (vllm.rule@b2fe277b6:10-11).
GENERATOR_MARGIN_TOKENS = 1500
# aiperf --request-count C x 10 (genai_perf_runner.py@c0a8817:222-223, Dynamo's perf.sh): the recipes
# of the dense rows' time (module docstring), not a value picked for its score.
REQUESTS_PER_CLIENT = 10
# --warmup-request-count C x 2 (genai_perf_runner.py@c0a8817:224-225): waited for before profiling.
WARMUP_PER_CLIENT = 2

# InferenceX (benchmark_lib.sh@a363463:260-279, the MiniMax scripts' run_benchmark_serving call):
# --num-prompts 10C, --num-warmups 2C, --random-range-ratio 0.8 (benchmark-tmpl.yml@a363463:67),
# --max-model-len ISL + OSL + 200 (generate_sweep_configs.py@1d5cae1:347), --seed 0.
INFERENCEX_PROMPTS_PER_CLIENT = 10
INFERENCEX_RANGE_RATIO = 0.8
INFERENCEX_CONTEXT_MARGIN_TOKENS = 200
INFERENCEX_SEED = 0
# The two harnesses behind the silicon rows (module docstring).
HARNESSES = ("aiperf", "inferencex")
# The image a row's source cell names when vLLM's own API server served it (InferenceX rows).
_VLLM_OPENAI_IMAGE = re.compile(r"vllm/vllm-openai:")
_MEASURED = re.compile(r"measured=([0-9]{4}-[0-9]{2}-[0-9]{2})(?:T([0-9:.]+)Z?)?")


@dataclass(frozen=True)
class InferenceXScript:
    """The ``vllm serve`` flags of one InferenceX script from one commit on.

    ``family``: what the row's model path contains ('minimax', '70b'); ``budget_per_isl``: the
    script's ``--max-num-batched-tokens`` over ISL, or ``budget_tokens`` a fixed one (None: vLLM's
    default); ``max_num_seqs`` None: vLLM's default, 0: the run's concurrency (``--max-num-seqs
    $CONC``); ``max_model_len`` None: ISL + OSL + 200; ``source``: ``file@commit:lines``.
    """

    family: str
    system: str
    precision: str
    since: datetime
    gpu_memory_utilization: float
    prefix_caching: bool
    source: str
    max_num_seqs: int | None = None
    budget_per_isl: int | None = None
    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    budget_tokens: int | None = None
    max_model_len: int | None = None


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(timezone.utc)


_SCRIPTS = "benchmarks/single_node/minimaxm2.5_{}_{}.sh@{}"
# Every script version that ran a shared MiniMax row (commit times from the InferenceX history), and
# the Llama-3.1-70B FP8 scripts of InferenceMAX's first sweeps (vLLM 0.10.2, 2025-09/10; their
# --async-scheduling is not modelled: servopt takes the release's default).
INFERENCEX_SCRIPTS: tuple[InferenceXScript, ...] = (
    InferenceXScript("70b", "h100_sxm", "fp8", _utc("2025-09-12T21:32:37+00:00"), 0.90, False,
                     "benchmarks/70b_fp8_h100_slurm.sh@24ea7de:19-37", max_num_seqs=0, budget_tokens=8192,
                     kv_cache_dtype="fp8", max_model_len=10240),
    InferenceXScript("70b", "h200_sxm", "fp8", _utc("2025-09-12T21:32:37+00:00"), 0.90, False,
                     "benchmarks/70b_fp8_h200_slurm.sh@24ea7de:34-47", max_num_seqs=0, budget_tokens=8192,
                     kv_cache_dtype="fp8"),
    InferenceXScript("70b", "b200_sxm", "fp8", _utc("2025-09-12T21:32:37+00:00"), 0.90, False,
                     "benchmarks/70b_fp8_b200_docker.sh@24ea7de:27-44", max_num_seqs=512, budget_tokens=8192,
                     kv_cache_dtype="fp8"),
    InferenceXScript("minimax", "h200_sxm", "fp8", _utc("2026-03-01T15:34:03-05:00"), 0.95, True,
                     _SCRIPTS.format("fp8", "h200", "a363463:25-30")),
    InferenceXScript("minimax", "h200_sxm", "fp8", _utc("2026-03-27T03:59:46-04:00"), 0.95, True,
                     _SCRIPTS.format("fp8", "h200", "1d5cae1:35-40")),
    InferenceXScript("minimax", "h200_sxm", "fp8", _utc("2026-03-27T19:17:39-07:00"), 0.95, False,
                     _SCRIPTS.format("fp8", "h200", "0f78cf4:35-41")),
    InferenceXScript("minimax", "h100_sxm", "fp8", _utc("2026-03-27T03:59:46-04:00"), 0.90, True,
                     _SCRIPTS.format("fp8", "h100", "1d5cae1:39-46"), max_num_seqs=256),
    InferenceXScript("minimax", "h100_sxm", "fp8", _utc("2026-03-27T19:17:39-07:00"), 0.90, False,
                     _SCRIPTS.format("fp8", "h100", "0f78cf4:39-47"), max_num_seqs=256),
    InferenceXScript("minimax", "b200_sxm", "fp8", _utc("2026-03-11T11:39:27-07:00"), 0.95, True,
                     _SCRIPTS.format("fp8", "b200", "f342df1:37-43"), block_size=32),
    InferenceXScript("minimax", "b200_sxm", "fp8", _utc("2026-03-27T19:17:39-07:00"), 0.95, False,
                     _SCRIPTS.format("fp8", "b200", "0f78cf4:40-47"), block_size=32),
    InferenceXScript("minimax", "b200_sxm", "fp8", _utc("2026-04-03T11:31:35-05:00"), 0.90, False,
                     _SCRIPTS.format("fp8", "b200", "bddbf40:43-53"), budget_per_isl=2, kv_cache_dtype="fp8",
                     block_size=32),
    InferenceXScript("minimax", "b200_sxm", "fp4", _utc("2026-04-08T13:55:08-05:00"), 0.90, False,
                     _SCRIPTS.format("fp4", "b200", "79bd988:44-52"), budget_per_isl=2, kv_cache_dtype="fp8"),
    InferenceXScript("minimax", "b300_sxm", "fp8", _utc("2026-04-17T08:47:21-04:00"), 0.90, False,
                     _SCRIPTS.format("fp8", "b300", "340d785:47-57"), budget_per_isl=2, kv_cache_dtype="fp8",
                     block_size=32),
    InferenceXScript("minimax", "b300_sxm", "fp4", _utc("2026-04-17T08:43:53-04:00"), 0.90, False,
                     _SCRIPTS.format("fp4", "b300", "22d0f12:48-56"), budget_per_isl=2, kv_cache_dtype="fp8"),
)


@dataclass(frozen=True)
class SiliconRun:
    """A silicon row as a servopt simulation: the model, what the server ran, what the client sent."""

    model: str
    deployment: Deployment
    traffic: Traffic


# 4-bit float formats a row's quant-mode columns name when its precision says only "fp4".
FP4_FORMATS = ("nvfp4", "mxfp4")


def _cell(row: dict, column: str) -> str:
    value = row.get(column)
    return value.strip().lower() if isinstance(value, str) else ""


def weight_scheme(row: dict) -> str | None:
    """servopt's weight scheme for a row's ``precision`` (or ``gemm_quant_mode``): None for 16-bit.

    ``fp4`` names no format by itself (NVFP4 and MXFP4 differ in group size, scale type and
    kernels): such a row is read through its quant-mode columns, the experts' (``moe_quant_mode``)
    first, since they hold most of an MoE model's weights.

    Example:
        >>> weight_scheme({"precision": "fp4", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4"})
        'nvfp4'
        >>> weight_scheme({"precision": "fp8_block"}), weight_scheme({"precision": "bfloat16"})
        ('fp8', None)
    """
    text = _cell(row, "precision") or _cell(row, "gemm_quant_mode") or "bf16"
    if text == "fp4":
        modes = [_cell(row, c) for c in ("moe_quant_mode", "gemm_quant_mode")]
        text = next((m for m in modes if m.startswith(FP4_FORMATS)), "")
        if not text:
            raise InputError("precision 'fp4' needs a moe_quant_mode or gemm_quant_mode column naming the format "
                             f"({' or '.join(FP4_FORMATS)}); got {', '.join(m or 'empty' for m in modes)}")
    for prefix, scheme in (("fp8", "fp8"), ("nvfp4", "nvfp4"), ("mxfp4", "mxfp4"), ("int8", "int8"), ("w8a8", "int8"),
                           ("w4a16", "awq"), ("awq", "awq"), ("gptq", "gptq")):
        if text.startswith(prefix):
            return scheme
    if text in ("bf16", "fp16", "float16", "bfloat16", "auto"):
        return None
    raise InputError(f"precision '{text[:20]}' is not a weight format servopt models (bf16, fp16, fp8, int8, nvfp4, "
                     "mxfp4, awq, gptq)")


def measured_at(row: dict) -> datetime | None:
    """When a row was measured (its source cell's ``measured=``); a date alone counts as its day's end."""
    match = _MEASURED.search(str(row.get("silicon_data_source") or ""))
    if match is None:
        return None
    day, clock = match.groups()
    if clock is None or clock.startswith("00:00:00"):
        clock = "23:59:59"
    return datetime.fromisoformat(f"{day}T{clock.split('.')[0]}+00:00")


def served_by_vllm_api_server(row: dict) -> bool:
    """Whether a row names a ``vllm/vllm-openai`` image: an InferenceX run, served by ``vllm serve``."""
    return bool(_VLLM_OPENAI_IMAGE.search(str(row.get("silicon_data_source") or "")))


def inferencex_script(row: dict) -> InferenceXScript:
    """The InferenceX script version that ran a row: the newest committed by the row's measurement,
    else (a pull request's run before its merge) the first version merged."""
    system, precision = str(row["system"]).strip().lower(), str(row.get("precision") or "").strip().lower()
    model = str(row.get("model_path") or "").lower()
    scripts = [s for s in INFERENCEX_SCRIPTS if s.family in model and s.system == system
               and s.precision == (precision or "bf16")]
    if not scripts:
        raise InputError(f"no InferenceX script is known for {model[:60]} on {system} {precision or 'bf16'}")
    when = measured_at(row)
    earlier = [s for s in scripts if when is not None and s.since <= when]
    return max(earlier, key=lambda s: s.since) if earlier else min(scripts, key=lambda s: s.since)


def inferencex_lengths(n: int, isl: int, osl: int, seed: int = INFERENCEX_SEED) -> tuple[list[int], list[int]]:
    """The prompt and output lengths of InferenceX's random dataset: numpy's global generator seeded
    with ``seed``, input lengths drawn first, then output lengths, each uniform over
    ``[int(ratio x len), len]`` (``benchmark_serving.py@a363463:112-119``).

    >>> inputs, outputs = inferencex_lengths(4, 1024, 128)
    >>> inputs, outputs
    ([991, 866, 936, 1011], [105, 105, 109, 111])
    """
    rng = np.random.RandomState(seed)
    inputs = rng.randint(int(isl * INFERENCEX_RANGE_RATIO), isl + 1, size=n)
    outputs = rng.randint(int(osl * INFERENCEX_RANGE_RATIO), osl + 1, size=n)
    return inputs.tolist(), outputs.tolist()


def silicon_run(row: dict, gpu: str | None = None, requests_per_client: int = REQUESTS_PER_CLIENT, pp: int = 1,
                data_parallel_size: int = 1, expert_parallel: bool = False, harness: str | None = None) -> SiliconRun:
    """The deployment and benchmark traffic of one aggregated, closed-loop silicon row, as the
    harness that measured it ran it (module docstring): InferenceX for rows served by a
    ``vllm/vllm-openai`` image, aiconfigurator's generator and aiperf otherwise. ``harness``
    ('aiperf' or 'inferencex') overrides what the row says (the benchmark compares the two).

    ``gpu`` overrides the row's ``system`` name (servopt's GPU name when the caller resolved it);
    ``requests_per_client`` is aiperf's request count over its concurrency (the benchmark prints how
    the errors move with the generator script's 20 and 50; InferenceX rows always send 10 per
    client). ``pp``, ``data_parallel_size`` (the row's attention-DP ranks, each with the per-worker
    batch) and ``expert_parallel`` give its layout.
    """
    if harness not in (None, *HARNESSES):
        raise InputError(f"harness '{harness}' is not one of {', '.join(HARNESSES)}")
    if harness == "inferencex" or (harness is None and served_by_vllm_api_server(row)):
        return _inferencex_run(row, gpu, pp, data_parallel_size, expert_parallel)
    isl, osl = int(row["isl"]), int(row["osl"])
    concurrency = int(row["silicon_concurrency"])
    batch = int(row["batch_size"]) if not pd.isna(row.get("batch_size")) else concurrency
    version = row.get("backend_version")
    deployment = Deployment(
        gpu=gpu or str(row["system"]), tp=int(row["tp_size"]), pp=pp, data_parallel_size=data_parallel_size,
        enable_expert_parallel=expert_parallel,
        quantization=weight_scheme(row),
        max_num_seqs=batch, max_num_batched_tokens=batch + isl + GENERATOR_MARGIN_TOKENS,
        max_model_len=isl + osl + GENERATOR_MARGIN_TOKENS, enable_prefix_caching=False,
        vllm_version=str(version) if isinstance(version, str) and version else "0.12.0", frontend="dynamo",
    )
    count = concurrency * requests_per_client
    client = AiperfConcurrency(concurrency, request_count=count, warmup_request_count=WARMUP_PER_CLIENT * concurrency)
    return SiliconRun(str(row["model_path"]), deployment, client.traffic([isl] * count, [osl] * count))


def _inferencex_run(row: dict, gpu: str | None, pp: int, data_parallel_size: int, expert_parallel: bool) -> SiliconRun:
    isl, osl = int(row["isl"]), int(row["osl"])
    concurrency = int(row["silicon_concurrency"])
    script = inferencex_script(row)
    version = row.get("backend_version")
    deployment = Deployment(
        gpu=gpu or str(row["system"]), tp=int(row["tp_size"]), pp=pp, data_parallel_size=data_parallel_size,
        enable_expert_parallel=expert_parallel, quantization=weight_scheme(row),
        max_num_seqs=concurrency if script.max_num_seqs == 0 else script.max_num_seqs,
        max_num_batched_tokens=script.budget_per_isl * isl if script.budget_per_isl else script.budget_tokens,
        max_model_len=script.max_model_len or isl + osl + INFERENCEX_CONTEXT_MARGIN_TOKENS, enable_prefix_caching=script.prefix_caching,
        gpu_memory_utilization=script.gpu_memory_utilization, kv_cache_dtype=script.kv_cache_dtype,
        **({"block_size": script.block_size} if script.block_size else {}),
        vllm_version=str(version) if isinstance(version, str) and version else None, frontend="vllm",
    )
    count = concurrency * INFERENCEX_PROMPTS_PER_CLIENT
    inputs, outputs = inferencex_lengths(count, isl, osl)
    cached = None
    if script.prefix_caching:
        # The warm-up sends the first prompt 2C times: it alone is in the prefix cache (prompt i is
        # built from token ids offset_i + i + j, so no two prompts share a block).
        cache = SessionCache(capacity_tokens=float("inf"))
        cache.warm(0, inputs[0], outputs[0])
        hits = cache.hits(list(range(count)), inputs)
        cached = routed_hits(hits, data_parallel_size, str(row.get("id") or row["model_path"])).tolist()
    client = VllmBenchServe(request_rate=float("inf"), max_concurrency=concurrency, seed=INFERENCEX_SEED)
    return SiliconRun(str(row["model_path"]), deployment, client.traffic(inputs, outputs, cached))

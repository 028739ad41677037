"""How aiconfigurator's closed-loop silicon rows were measured, translated into a servopt run.

The rows of ``silicon_sample.csv`` (aiconfigurator-core 0.12.0; in the shared data as
``measured/e2e/silicon_dense_h100.csv``) come from aiconfigurator's gap analysis: a deployment made
by aiconfigurator's generator, served, and benchmarked with aiperf. The aiconfigurator repository
(github.com/ai-dynamo/aiconfigurator) documents both sides:

- **Server.** The generator's vLLM rule (``generator/rule_plugin/vllm.rule``, since 2025-12-04)
  gives an aggregated worker of per-worker batch ``b`` (the row's ``batch_size``) ``--max-num-seqs b``,
  ``--max-num-batched-tokens b + ISL + 1500``, ``--max-model-len ISL + OSL + 1500`` and
  ``--no-enable-prefix-caching`` (the budget and context flags reach ``vllm serve`` since 2026-01-08,
  #238; the dated vLLM rows of the same source were measured on 2026-01-23 and 25). Everything else is vLLM's
  default for the row's vLLM version (:mod:`servopt.costmodels.vllm_defaults`): ``gpu_memory_utilization``
  0.9 (up to vLLM 0.19), chunked prefill, no async scheduling before vLLM 0.14.
- **Client.** The aiperf request count is not recorded with the rows, so it is taken from the
  pipeline that deployed and benchmarked generated configurations at the time: aiconfigurator's
  ``aiconfigurator eval`` (``src/aiconfigurator/eval/benchmarks/genai_perf_runner.py``, from #57,
  2025-10-14, until #504 removed it on 2026-03-03; at commit 5e16187 the program it runs is
  ``genai-perf profile``, the same flags, with perf_analyzer's concurrency manager under it) runs
  ``aiperf profile --concurrency C
  --request-count 10C --warmup-request-count 2C --num-dataset-entries 12C --streaming`` against the chat
  endpoint with fixed ISL and OSL (``ignore_eos``, ``min_tokens`` = ``max_tokens`` = OSL), the recipe
  of Dynamo's own ``benchmarks/llm/perf.sh``. vLLM 0.12.0 is the engine of Dynamo 0.8.x
  (``generator/config/backend_version_matrix.yaml``), current until 2026-03, and the generator serves
  it behind Dynamo's HTTP front end (``python -m dynamo.frontend`` and ``python -m dynamo.vllm``,
  ``backend_templates/vllm/run.sh.j2``), so the front end that tokenizes is Dynamo's, not vLLM's
  API server. The generator's own benchmark script (``backend_templates/benchmark/bench_run.sh.j2``,
  #334 on 2026-02-11) sends 50C requests, 20C since #584 (2026-03-17); with 50 the simulated
  opening burst weighs a fifth as much and TTFT no longer grows with concurrency as measured
  (``benchmarks/bench_e2e_accuracy.py`` prints all three). aiperf waits for its warm-up responses before
  profiling (aiperf ``docs/tutorials/warmup.md``), so the profiling phase opens with C simultaneous
  requests on an idle server, and the reported means cover all 10C requests: the opening burst,
  the steady state and the closing drain.

Why the generator's budget and not vLLM's own default of 8192 tokens: the physics rules the
default out on these rows. With identical requests, closed-loop clients fall into lockstep groups
(a group's prompts are admitted in one step, so its members finish together and return together;
in the simulation the groups survive up to 50 ms of client jitter, because the long mixed step
re-collects whoever arrives during it). At ISL 1024 and 8 clients on TP2, a budget of 8192 lets seven
prompts share a step: at least 238 ms of compute even at 100% of the H100's bf16 peak, against a
measured mean TTFT of 154 ms. The generator's 2532 tokens admit two or three prompts per step.

Example:
    >>> run = silicon_run({"backend": "vllm", "model_path": "Qwen/Qwen3-32B", "system": "h100_sxm", "isl": 1024,
    ...                    "osl": 128, "tp_size": 2, "batch_size": 8, "silicon_concurrency": 8})
    >>> run.deployment.max_num_batched_tokens, run.deployment.max_num_seqs, run.traffic.arrival.benchmark_requests
    (2532, 8, 80)
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..costmodels.deployment import Deployment
from ..costmodels.errors import InputError
from ..costmodels.serving.traffic import Traffic
from .bench_clients import AiperfConcurrency

# aiconfigurator's generator: budget and context margin beyond the prompt (vllm.rule).
GENERATOR_MARGIN_TOKENS = 1500
# aiperf --request-count C x 10: aiconfigurator's eval pipeline and Dynamo's perf.sh (module docstring).
REQUESTS_PER_CLIENT = 10
# --warmup-request-count C x 2 (genai_perf_runner.py): waited for before profiling, so it moves nothing here.
WARMUP_PER_CLIENT = 2
# The shipped serving overheads are fitted to the rows of this ISL; the others are held out.
SERVING_FIT_ISL = 1024


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


def silicon_run(row: dict, gpu: str | None = None, requests_per_client: int = REQUESTS_PER_CLIENT, pp: int = 1,
                data_parallel_size: int = 1, expert_parallel: bool = False) -> SiliconRun:
    """The deployment and benchmark traffic of one aggregated, closed-loop silicon row.

    ``gpu`` overrides the row's ``system`` name (servopt's GPU name when the caller resolved it);
    ``requests_per_client`` is aiperf's request count over its concurrency (the benchmark prints how
    the errors move with the generator script's 20 and 50). ``pp``, ``data_parallel_size`` (the
    row's attention-DP ranks, each with the per-worker batch) and ``expert_parallel`` give its layout.
    """
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

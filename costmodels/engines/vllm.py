"""vLLM as servopt models it: what it does when a flag is not given, by version, and :class:`VllmEngine`.

servopt always exports these flags explicitly, but uses the same defaults when a user's file or
the command line leaves them out, so that a prediction describes what ``vllm serve`` would run, and
it simulates a measured run with the defaults of the vLLM version that ran it.

Each rule is written here once, and cites where vLLM decides it (``file@tag`` of vLLM's source; the
line numbers are those of the tag):

- ``gpu_memory_utilization``: 0.9 up to 0.19, 0.92 from 0.20 (``CacheConfig.gpu_memory_utilization``,
  ``vllm/config/cache.py@v0.33.0`` line 215): :func:`gpu_memory_utilization`.
- batch limits (``EngineArgs.get_batch_defaults``, V1 engine from 0.8): see :func:`default_batch_limits`;
  the token budget a step needs (``SchedulerConfig.verify_max_model_len``): :func:`min_batched_tokens`.
- the engine: V1 from 0.8 (V0 before, and for pipeline parallelism in 0.8), whose CPU costs per
  step differ (:func:`engine_generation`).
- async scheduling (the next step is scheduled while the GPU runs the current one, so the
  scheduler's CPU time hides behind the GPU): off before 0.14, on by default from 0.14
  (PR #27614, "Enable async scheduling by default"), except with pipeline parallelism.
- which all-reduce runs a TP collective (``CudaCommunicator.all_reduce``,
  ``device_communicators/all_reduce_utils.py``): the custom all-reduce (one IPC kernel over NVLink)
  up to its size limit, then torch symmetric memory (multimem/two-shot) up to its limit from 0.11
  on Hopper and Blackwell (PR #24111, "Enable Torch Symmetric Memory All-Reduce By Default"), then
  NCCL. Before 0.11 the custom all-reduce covers up to 8 MiB on every NVLink GPU.
- CUDA graphs: steps of at most :data:`MAX_CUDAGRAPH_TOKENS` tokens replay captured graphs (the
  largest default capture size, 512); larger steps launch every kernel eagerly.
- data parallelism (``docs/serving/data_parallel_deployment.md``): ``--max-num-seqs`` and the token
  budget apply per DP rank; the API server sends a request to the rank with the lowest
  ``4 x waiting + running`` (``DPLBAsyncMPClient.get_core_engine_for_request``,
  :data:`DP_LB_WAITING_WEIGHT`; the rule of the releases through 2025. vLLM 0.33 scores a rank
  ``max(clients x in-flight, waiting + running)`` and weighs waiting requests by the rank's KV
  pressure, ``vllm/v1/engine/core_client.py@v0.33.0`` lines 1767-1790, which servopt does not
  model yet).
- which collectives an MoE layer's dispatch and combine run over the DP ranks (``--all2all-backend``;
  earlier the ``VLLM_ALL2ALL_BACKEND`` variable): ``naive`` (broadcasts, i.e. an all-gather, and
  an all-reduce of the gathered buffer) until ``allgather_reducescatter`` (PR #23964, 2025-08-29)
  became the default; the v0.12 documentation names it the default backend, the v0.10.1.1
  documentation does not list it. DeepEP backends run true all-to-alls. With one DP rank there is
  no dispatch (``use_all2all_kernels`` needs ``dp_size > 1``): the TP all-reduce combines.
- the front end's tokenizer: vLLM's API server tokenizes every prompt on one thread
  (``ThreadPoolExecutor(max_workers=1)`` in ``serving_engine.py``), so prompts wait for each other:
  :func:`tokenize_s_per_token`.

**Releases as data.** What a release does when a flag is left out is one row of :data:`RELEASES`
(:class:`VllmRelease`), read from vLLM's source at the release's tag; every field cites its line
(``file@tag:line``; the files as the release's PyPI wheel ships them). :func:`release` picks the row
of a version (the newest row at or before it), and :func:`resolve_engine` applies the rules that
need more than the version: the V0 engine's long-context chunked prefill, the MLA rules of 0.7 and
0.8, the V1 engine's fallbacks to V0 (pipeline parallelism, ``--num-scheduler-steps``, priority
scheduling in 0.8).

**Behind the engine seam.** :class:`VllmEngine` is these rules as the cost models ask for an
engine's (:func:`~servopt.costmodels.engines.get_engine` ``("vllm")``), with ``vllm serve``'s flags
(:meth:`VllmEngine.launch_args`).

Example:
    >>> from servopt.costmodels.hardware import get_gpu
    >>> v = parse_vllm_version("0.12.0")
    >>> v, async_scheduling(v, pp=1), async_scheduling(parse_vllm_version("0.14.1"), pp=1)
    ((0, 12, 0), False, True)
    >>> allreduce_implementation(2 * 8192 * 2, 8, get_gpu("h100"), v, captured=True)
    'custom_graph'
    >>> allreduce_implementation(1024 * 8192 * 2, 8, get_gpu("h100"), v, captured=False)
    'symm_mem'
    >>> allreduce_implementation(1024 * 8192 * 2, 8, get_gpu("a100-80gb"), v, captured=False)
    'nccl'
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError
from ..hardware import GPUSpec
from ..quantization import MODEL_DTYPE_SCHEME
from ._base import EngineDefaults, EngineRules, StepRule, Version

VllmVersion = Version

# The vLLM a deployment describes when it names none (the version servopt's exports target).
CURRENT_VLLM = "0.33.0"
# CacheConfig.DEFAULT_BLOCK_SIZE (vllm/config/cache.py@v0.33.0 line 185).
BLOCK_SIZE = 16
# --scheduling-policy, the default first: first come, first served unless "priority" is asked for
# (SchedulerConfig.policy, vllm/config/scheduler.py@v0.33.0 line 159).
SCHEDULING_POLICIES = ("fcfs", "priority")
# Largest step (tokens) that replays a captured CUDA graph by default: max_cudagraph_capture_size
# "is capped at 512 by default" (CompilationConfig, vllm/config/compilation.py@v0.33.0 line 706).
MAX_CUDAGRAPH_TOKENS = 512
# CacheConfig.gpu_memory_utilization: 0.92 from 0.20 (vllm/config/cache.py@v0.33.0 line 215), 0.9 before.
GPU_MEMORY_UTILIZATION_FROM_0_20 = 0.92
GPU_MEMORY_UTILIZATION_BEFORE_0_20 = 0.9

# The context vLLM assumes when a model's config names no maximum length (``_get_and_verify_max_len``,
# vllm/config/model.py@v0.33.0 lines 2579-2596).
VLLM_DEFAULT_MAX_LEN = 2048

MiB = 1024 * 1024
# Custom all-reduce limits when symmetric memory is available (Hopper "9.0", Blackwell "10.0"):
# CUSTOM_ALL_REDUCE_MAX_SIZES and SYMM_MEM_ALL_REDUCE_MAX_SIZES in
# vllm/distributed/device_communicators/all_reduce_utils.py@v0.33.0 lines 31-70.
_CUSTOM_MAX_BYTES_WITH_SYMM = {
    "hopper": {2: 64 * MiB, 4: 32 * MiB, 6: MiB // 2, 8: MiB // 4},
    "blackwell": {2: 2 * MiB, 4: 2 * MiB, 6: 1 * MiB, 8: 1 * MiB},
}
_SYMM_MEM_MAX_BYTES = {
    "hopper": {2: 64 * MiB, 4: 32 * MiB, 6: 64 * MiB, 8: 64 * MiB},
    "blackwell": {2: 8 * MiB, 4: 32 * MiB, 6: 128 * MiB, 8: 128 * MiB},
}
# World sizes where vLLM's symmetric-memory all-reduce runs multimem (NVLS) instead of two-shot
# (SymmMemCommunicator._WORLD_SIZES_MULTIMEM, vllm/distributed/device_communicators/symm_mem.py@v0.33.0 line 26).
_SYMM_MEM_MULTIMEM_WORLD_SIZES = {"hopper": (4, 6, 8), "blackwell": (6, 8)}
# CustomAllreduce's own buffer, max_size=8192 * 1024 (vllm/distributed/device_communicators/
# custom_all_reduce.py@v0.33.0 line 138), all it covered before symmetric memory took the middle sizes.
_CUSTOM_MAX_BYTES = 8 * MiB
_CUSTOM_WORLD_SIZES = (2, 4, 6, 8)


def parse_vllm_version(text: str | None) -> VllmVersion:
    """(major, minor, patch) of a version string as tools write it ('0.10.1.1', 'v0.8.3', '0.14-0.15').

    The first version in the text counts; ``None`` or empty means :data:`CURRENT_VLLM`.

    Example:
        >>> parse_vllm_version("v0.8.3 (server image)"), parse_vllm_version("about 0.14-0.15"), parse_vllm_version(None)
        ((0, 8, 3), (0, 14, 0), (0, 33, 0))
    """
    if text is None or not str(text).strip():
        text = CURRENT_VLLM
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    if match is None:
        raise InputError(f"vllm_version '{text}' is not a version number such as 0.12.0")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


# --- releases as data ---------------------------------------------------------------------------
@dataclass(frozen=True)
class VllmRelease:
    """What ``vllm serve`` of one release line does by default (see the module docstring).

    ``chunked_prefill``: 'long_context' (the V0 engine chunks only when ``max_model_len`` > 32768 and
    the model has no sliding window, else not), 'forced' (the V1 engine up to 0.11 chunks whatever
    the flag says), or 'default' (on unless ``--no-enable-chunked-prefill``). ``v0_chunked_tokens``:
    the V0 token budget with chunked prefill on (without it the budget is
    ``max(max_model_len, 2048)``, and so it is with chunked prefill under multi-step scheduling).
    ``graph_max_seqs`` / ``graph_max_tokens``: CUDA graphs are captured for decode-only batches of up
    to ``min(max_num_seqs, graph_max_seqs)`` sequences (V0), or for steps of up to
    ``min(graph_seqs_factor x max_num_seqs, graph_max_tokens, max_num_batched_tokens)`` tokens (V1,
    mixed steps included; ``graph_seqs_factor`` 0 means no per-sequence cap); larger steps, and
    every step under ``--enforce-eager``, launch their kernels one by one. ``mla_unchunked``: MLA
    models run without chunked prefill and prefix caching (``'forced'``: whatever the flags say;
    ``'default'``: unless the flag asks for it). ``v1_fallbacks``: the deployment features that make
    this release's V1 engine fall back to V0. ``sources`` cites each field.
    """

    since: VllmVersion
    engine: str
    chunked_prefill: str
    v0_chunked_tokens: int
    prefix_caching: bool
    async_scheduling: bool
    multi_step: bool
    graph_max_seqs: int
    graph_max_tokens: int
    graph_seqs_factor: int
    graph_max_tokens_blackwell: int
    mla_unchunked: str
    v1_fallbacks: tuple[str, ...]
    sources: tuple[tuple[str, str], ...]

    def cite(self, name: str) -> str:
        """The source line of a field (``file@tag:line``)."""
        return dict(self.sources).get(name, "")


def _release(since: str, **fields) -> VllmRelease:
    return VllmRelease(since=parse_vllm_version(since), **fields)


# One row per release whose defaults differ from the row before; a version takes the newest row at
# or before it. Lines are those of the release's wheel (vllm/...), which is the tag's tree.
_V0 = dict(engine="v0", chunked_prefill="long_context", v0_chunked_tokens=512, prefix_caching=False,
           async_scheduling=False, multi_step=True, graph_max_tokens=0, graph_seqs_factor=0,
           graph_max_tokens_blackwell=0, mla_unchunked="", v1_fallbacks=())
_V1 = dict(engine="v1", chunked_prefill="forced", v0_chunked_tokens=2048, prefix_caching=True, async_scheduling=False,
           multi_step=True, graph_max_seqs=8192, graph_max_tokens=512, graph_seqs_factor=0,
           graph_max_tokens_blackwell=512, mla_unchunked="default")
_V1_LATE = {**_V1, "chunked_prefill": "default", "multi_step": False, "graph_seqs_factor": 2, "mla_unchunked": "",
            "v1_fallbacks": ()}
RELEASES: tuple[VllmRelease, ...] = (
    _release("0.5.5", **_V0, graph_max_seqs=256, sources=(
        ("chunked_prefill", "vllm/engine/arg_utils.py@v0.5.5:820 (use_long_context = max_model_len > 32768)"),
        ("v0_chunked_tokens", "vllm/config.py@v0.5.5:901 (max_num_batched_tokens = 512); unchunked: :909"),
        ("prefix_caching", "vllm/engine/arg_utils.py@v0.5.5:82 (enable_prefix_caching: bool = False)"),
        ("multi_step", "vllm/engine/arg_utils.py@v0.5.5:121 (num_scheduler_steps: int = 1), :548 the flag"),
        ("graph_max_seqs", "vllm/worker/model_runner.py@v0.5.5:64 (_BATCH_SIZES_TO_CAPTURE up to 8 x 32)"),
    )),
    _release("0.6.0", **_V0, graph_max_seqs=8192, sources=(
        ("chunked_prefill", "vllm/engine/arg_utils.py@v0.6.3:936 (use_long_context = max_model_len > 32768)"),
        ("v0_chunked_tokens", "vllm/config.py@v0.6.3:983 (512); multi-step or unchunked max(max_model_len, 2048): "
                              ":979, :987"),
        ("graph_max_seqs", "vllm/worker/model_runner.py@v0.6.3:73 (_BATCH_SIZES_TO_CAPTURE up to 8 x 1024, "
                           "capped at max_num_seqs)"),
    )),
    _release("0.7.0", **{**_V0, "v0_chunked_tokens": 2048}, graph_max_seqs=8192, sources=(
        ("v0_chunked_tokens", "vllm/config.py@v0.7.0:1460 (max_num_batched_tokens = 2048 with chunked prefill)"),
    )),
    _release("0.7.1", **{**_V0, "v0_chunked_tokens": 2048, "mla_unchunked": "forced"}, graph_max_seqs=8192, sources=(
        ("mla_unchunked", "vllm/config.py@v0.7.1:3255, @v0.7.2:3273, @v0.7.3:3327 ('MLA is enabled; forcing "
                          "chunked prefill and prefix caching to be disabled')"),
    )),
    _release("0.8.0", **_V1, v1_fallbacks=("pipeline_parallel", "num_scheduler_steps", "priority_scheduling"), sources=(
        ("chunked_prefill", "vllm/engine/arg_utils.py@v0.8.3:1615 ('V1 always uses chunked prefills')"),
        ("v0_chunked_tokens", "vllm/config.py@v0.8.3:1754 (_DEFAULT_MAX_NUM_BATCHED_TOKENS, 2048: :62)"),
        ("prefix_caching", "vllm/engine/arg_utils.py@v0.8.3:1618 ('V1 enables prefix caching by default')"),
        ("graph_max_tokens", "vllm/config.py@v0.8.3:3706 ([1, 2, 4] + range(8, 513, 8), up to max_num_batched_tokens)"),
        ("mla_unchunked", "vllm/engine/arg_utils.py@v0.8.3:1552 ('Chunked prefill not supported for Multimodal or "
                          "MLA in V0')"),
        ("v1_fallbacks", "vllm/engine/arg_utils.py@v0.8.3:1363 (--scheduling-policy), :1368 (--num-scheduler-steps); "
                         "@v0.8.0: pipeline parallelism ('PP is supported on V1, but off by default')"),
    )),
    _release("0.9.0", **_V1, v1_fallbacks=("num_scheduler_steps",), sources=(
        ("v1_fallbacks", "vllm/engine/arg_utils.py@v0.9.0:1227 (--num-scheduler-steps); :1380 pipeline parallelism "
                         "runs on V1 with the mp executor; priority scheduling no longer falls back"),
    )),
    _release("0.10.1", **{**_V1, "multi_step": False, "graph_seqs_factor": 2, "mla_unchunked": ""}, v1_fallbacks=(),
             sources=(
        ("multi_step", "vllm/engine/arg_utils.py@v0.10.0:803 has --num-scheduler-steps; @v0.10.1.1 has it no more"),
        ("graph_max_tokens", "vllm/config/scheduler.py@v0.10.1.1:79; vllm/config/vllm.py@v0.12.0:1039 "
                             "(min(max_num_seqs * 2, 512), then max_num_batched_tokens)"),
    )),
    _release("0.12.0", **_V1_LATE, sources=(
        ("chunked_prefill", "vllm/engine/arg_utils.py@v0.12.0:1897 (the flag's default only when not given); "
                            "@v0.11.0:1544 ('V1 always uses chunked prefills')"),
    )),
    _release("0.14.0", **{**_V1_LATE, "async_scheduling": True}, sources=(
        ("async_scheduling", "vllm/config/vllm.py@v0.14.0:628 (async_scheduling = True when not set; :593 off with "
                             "pipeline parallelism); vllm/config/scheduler.py@v0.12.0:131 (False)"),
    )),
    _release("0.33.0", **{**_V1_LATE, "async_scheduling": True, "graph_max_tokens_blackwell": 1024}, sources=(
        ("graph_max_tokens_blackwell", "vllm/config/vllm.py@v0.33.0:2403 (1024 on data-center Blackwell, else 512; "
                                       "512 everywhere at v0.20.0:1429)"),
    )),
)
OLDEST_RELEASE = ".".join(map(str, RELEASES[0].since))


def release(version: VllmVersion) -> VllmRelease:
    """The release row that describes ``version`` (InputError before the oldest one servopt knows).

    Example:
        >>> release(parse_vllm_version("0.7.3")).mla_unchunked, release(parse_vllm_version("0.12.0")).engine
        ('forced', 'v1')
    """
    if version < RELEASES[0].since:
        raise InputError(f"vllm_version {'.'.join(map(str, version))}: servopt models vLLM releases from "
                         f"{OLDEST_RELEASE} on; give vllm_version {OLDEST_RELEASE} or later")
    return [r for r in RELEASES if r.since <= version][-1]


def resolve_engine(version: VllmVersion, *, pp: int = 1, max_model_len: int, mla: bool = False,
                   sliding_window: bool = False, chunked_prefill: bool | None = None,
                   prefix_caching: bool | None = None, num_scheduler_steps: int = 1,
                   scheduling_policy: str = "fcfs", enforce_eager: bool = False, speculative: bool = False,
                   max_num_seqs: int = 256, max_num_batched_tokens: int | None = None,
                   blackwell: bool = False) -> EngineDefaults:
    """What ``vllm serve`` of ``version`` runs for a deployment (``None`` flags: the release's default).

    Example (vLLM 0.7.3 serving an MLA model turns chunked prefill off; 0.6.3 chunks a 128k-context model):
        >>> v = parse_vllm_version
        >>> e = resolve_engine(v("0.7.3"), max_model_len=8192, mla=True, chunked_prefill=True)
        >>> e.engine, e.chunked_prefill, e.prefix_caching, e.max_num_batched_tokens
        ('v0', False, False, 8192)
        >>> resolve_engine(v("0.6.3"), max_model_len=131072).max_num_batched_tokens
        512
        >>> resolve_engine(v("0.8.3"), pp=2, max_model_len=8192).engine
        'v0'
    """
    row = release(version)
    reasons: list[str] = []
    engine = row.engine
    if engine == "v1":
        wants = {"pipeline_parallel": pp > 1, "num_scheduler_steps": num_scheduler_steps > 1,
                 "priority_scheduling": scheduling_policy != "fcfs"}
        fallback = [name for name in row.v1_fallbacks if wants[name]]
        if fallback:
            engine = "v0"
            reasons.append(f"vLLM {'.'.join(map(str, version))} falls back to the V0 engine for "
                           f"{', '.join(fallback)} ({row.cite('v1_fallbacks')})")
    if engine == "v0":
        long_context = max_model_len > 32768 and not sliding_window and not speculative
        chunked = long_context if chunked_prefill is None else chunked_prefill
        cached = False if prefix_caching is None else prefix_caching
        if mla and row.mla_unchunked:
            if row.mla_unchunked == "forced" or chunked_prefill is None:
                chunked = False
            if row.mla_unchunked == "forced":
                cached = False
            reasons.append(f"MLA: chunked prefill off ({row.cite('mla_unchunked')})")
        multi_step = num_scheduler_steps > 1
        budget = row.v0_chunked_tokens if chunked and not multi_step else max(max_model_len, 2048)
        # V0 replays graphs of decode-only batches up to max_num_seqs (and the release's capture list).
        graph = 0 if enforce_eager else min(max_num_seqs, row.graph_max_seqs)
        return EngineDefaults("v0", chunked, cached, False, budget, graph, True, tuple(reasons))
    chunked = True if row.chunked_prefill == "forced" or chunked_prefill is None else chunked_prefill
    cached = row.prefix_caching if prefix_caching is None else prefix_caching
    tokens = max_num_batched_tokens or 2**31
    graph = 0
    if not enforce_eager:
        graph = row.graph_max_tokens_blackwell if blackwell else row.graph_max_tokens
        if row.graph_seqs_factor:
            graph = min(graph, row.graph_seqs_factor * max_num_seqs)
        graph = min(graph, tokens)
    return EngineDefaults("v1", chunked, cached, row.async_scheduling and pp == 1, None, graph, False,
                          tuple(reasons))


# vLLM's DP load balancer scores a rank 4 x waiting + running requests and picks the lowest (the
# releases through 2025; see the module docstring for 0.33's score).
DP_LB_WAITING_WEIGHT = 4
# --all2all-backend values servopt models, and the NCCL collectives (dispatch, combine) each runs
# (ParallelConfig.all2all_backend, default "allgather_reducescatter": vllm/config/parallel.py@v0.33.0 line 220).
ALL2ALL_COLLECTIVES = {
    "naive": ("all_gather", "all_reduce"),
    "allgather_reducescatter": ("all_gather", "reduce_scatter"),
    "deepep_high_throughput": ("all_to_all", "all_to_all"),
    "deepep_low_latency": ("all_to_all", "all_to_all"),
}


def default_all2all_backend(version: VllmVersion) -> str:
    """vLLM's default MoE dispatch/combine backend across data-parallel ranks."""
    return "allgather_reducescatter" if version >= (0, 12, 0) else "naive"


# Tokenization time per prompt token in vLLM's API server, as measured in vLLM PR #19334 ("microbatch
# tokenization", June 2025: 100 concurrent completions of a 10,000-token prompt took 1.34 s before
# and 0.62 s after batching the tokenizer calls). Dynamo's front end tokenizes in parallel.
TOKENIZE_S_PER_TOKEN_BEFORE_MICROBATCH = 1.34e-6
TOKENIZE_S_PER_TOKEN = 0.62e-6
MICROBATCH_TOKENIZATION_FROM = (0, 10, 0)


def tokenize_s_per_token(version: VllmVersion, frontend: str = "vllm") -> float:
    """Seconds the front end spends per prompt token, one request at a time (0 for a parallel front end)."""
    if frontend != "vllm":
        return 0.0
    return TOKENIZE_S_PER_TOKEN if version >= MICROBATCH_TOKENIZATION_FROM else TOKENIZE_S_PER_TOKEN_BEFORE_MICROBATCH


def gpu_memory_utilization(version: VllmVersion) -> float:
    """vLLM's default ``--gpu-memory-utilization``.

    >>> gpu_memory_utilization((0, 19, 0)), gpu_memory_utilization((0, 33, 0))
    (0.9, 0.92)
    """
    return GPU_MEMORY_UTILIZATION_FROM_0_20 if version >= (0, 20, 0) else GPU_MEMORY_UTILIZATION_BEFORE_0_20



def engine_generation(version: VllmVersion, pp: int) -> str:
    """'v0' or 'v1': which engine serves (the release row's, and V1's fallback to V0 for pipeline
    parallelism where the release has it: :func:`resolve_engine` covers the other fallbacks)."""
    row = release(version)
    if row.engine == "v1" and pp > 1 and "pipeline_parallel" in row.v1_fallbacks:
        return "v0"
    return row.engine


def async_scheduling(version: VllmVersion, pp: int) -> bool:
    """Whether vLLM overlaps scheduling with the GPU by default (never with pipeline parallelism)."""
    return release(version).async_scheduling and pp == 1


def default_batch_limits(gpu: GPUSpec, version: VllmVersion | None = None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of ``vllm serve`` on this GPU.

    From 0.9 (``EngineArgs.get_batch_defaults``, the OPENAI_API_SERVER column;
    ``vllm/engine/arg_utils.py@v0.33.0`` lines 2940-3006; the same rule at ``@v0.12.0:1827-1845``,
    ``@v0.16.0:1877-1895`` and ``@v0.18.0:2008-2026``, the releases of the silicon rows): >= 70 GiB
    and not A100 (H100, H200, MI300X): 8192 / 1024; other GPUs, the A100 included (large budgets
    cut A100 throughput, vLLM PR #17885): 2048 / 256. From 0.28 a tier for >= 160 GiB (B200, B300) serves 16384 / 1024
    (``arg_utils.py`` at tag v0.28.0; not in v0.27.0). The V1 engine of 0.8 served 2048 / 256
    everywhere; the V0 engine before it chunked prefills into 512-token steps (``SchedulerConfig``
    with chunked prefill on).
    """
    version = version or parse_vllm_version(None)
    if version < (0, 8, 0):
        return 512, 256
    if version < (0, 9, 0):
        return 2048, 256
    if version >= (0, 28, 0) and gpu.memory_gib >= 160:
        return 16384, 1024
    if gpu.memory_gib >= 70 and not gpu.name.startswith("a100"):
        return 8192, 1024
    return 2048, 256


def min_batched_tokens(max_num_seqs: int, drafts: int = 0, chunked_prefill: bool = True, max_model_len: int = 0) -> int:
    """The smallest ``--max-num-batched-tokens`` servopt serves with: every running sequence and its
    ``drafts`` in one step, and without chunked prefill a whole ``max_model_len`` prompt.

    vLLM refuses to start below ``max_num_seqs``, and without chunked prefill below
    ``max_model_len`` (``SchedulerConfig.verify_max_model_len``, ``vllm/config/scheduler.py@v0.33.0``
    lines 317-336). A decoding sequence verifies ``1 + drafts`` tokens a step; vLLM 0.33 starts
    below ``max_num_seqs x (1 + drafts)`` with a warning (``VllmConfig._set_max_num_scheduled_tokens``,
    ``vllm/config/vllm.py@v0.33.0`` lines 2341-2368) but then cannot run ``max_num_seqs`` sequences
    in one step, which servopt does not model: it asks for the budget instead.

    >>> min_batched_tokens(256), min_batched_tokens(256, drafts=3), min_batched_tokens(64, chunked_prefill=False, max_model_len=8192)
    (256, 1024, 8192)
    """
    return max(max_num_seqs * (1 + drafts), 0 if chunked_prefill else max_model_len)


def batch_limits_problem(max_num_seqs: int, max_num_batched_tokens: int, drafts: int = 0, chunked_prefill: bool = True,
                         max_model_len: int = 0) -> tuple[float, str] | None:
    """(amount, reason) of the first rule of :func:`min_batched_tokens` the limits break (amount > 0
    grows with how far off), or None.

    >>> batch_limits_problem(256, 128)
    (1.0, 'max_num_batched_tokens (128) < max_num_seqs (256), as vLLM requires')
    """
    seqs, tokens = max_num_seqs, max_num_batched_tokens
    need = min_batched_tokens(seqs, drafts)
    if tokens < need:
        what = f"max_num_seqs ({seqs})" + (f" x (1 + {drafts} drafts)" if drafts else "")
        return need / tokens - 1, f"max_num_batched_tokens ({tokens}) < {what}, as vLLM requires"
    if tokens < min_batched_tokens(seqs, drafts, chunked_prefill, max_model_len):
        return (max_model_len / tokens - 1,
                f"without chunked prefill max_num_batched_tokens ({tokens}) must cover max_model_len ({max_model_len}), "
                "as vLLM requires")
    return None


def allreduce_limits(num_gpus: int, gpu: GPUSpec, version: VllmVersion, nvlink: bool = True) -> tuple[float, float]:
    """(largest message of the custom all-reduce, largest of symmetric memory) in bytes; NCCL above both.

    ``nvlink``: the group stays inside one node's NVLink domain (the custom and symmetric-memory
    kernels need it: across nodes, and on PCIe GPUs, every message goes to NCCL).
    """
    nvlink = nvlink and gpu.interconnect.startswith("nvlink")
    if not nvlink or gpu.vendor != "nvidia" or num_gpus not in _CUSTOM_WORLD_SIZES:
        return 0.0, 0.0
    if version >= (0, 11, 0) and gpu.architecture in _SYMM_MEM_MAX_BYTES:
        return (float(_CUSTOM_MAX_BYTES_WITH_SYMM[gpu.architecture][num_gpus]),
                float(_SYMM_MEM_MAX_BYTES[gpu.architecture][num_gpus]))
    return float(_CUSTOM_MAX_BYTES), 0.0


def symm_mem_variant(num_gpus: int, gpu: GPUSpec) -> str:
    """The kernel vLLM's symmetric-memory all-reduce runs over ``num_gpus`` GPUs: 'multimem' or 'two_shot'."""
    return "multimem" if num_gpus in _SYMM_MEM_MULTIMEM_WORLD_SIZES.get(gpu.architecture, ()) else "two_shot"


ALLREDUCE_IMPLEMENTATIONS = ("custom_graph", "custom_eager", "symm_mem", "nccl")


def allreduce_implementation(message_bytes: float | np.ndarray, num_gpus: int, gpu: GPUSpec, version: VllmVersion,
                             captured: bool | np.ndarray, nvlink: bool = True) -> str | np.ndarray:
    """Which all-reduce vLLM runs for a message: 'custom_graph', 'custom_eager', 'symm_mem' or 'nccl'
    (``CudaCommunicator.all_reduce``: the custom kernel up to its limit, then symmetric memory up to
    its own, then NCCL; :func:`allreduce_limits`). For arrays of messages, an array of those names.

    ``captured``: the step replays a CUDA graph (:data:`MAX_CUDAGRAPH_TOKENS`); ``nvlink`` as in
    :func:`allreduce_limits`.
    """
    custom_max, symm_max = allreduce_limits(num_gpus, gpu, version, nvlink)
    message = np.asarray(message_bytes, dtype=float)
    custom = message <= custom_max
    kinds = np.select([custom & np.asarray(captured), custom, message <= symm_max], list(ALLREDUCE_IMPLEMENTATIONS[:3]),
                      ALLREDUCE_IMPLEMENTATIONS[3])
    return str(kinds) if kinds.ndim == 0 else kinds


# --- launch flags --------------------------------------------------------------------------------
# vLLM's --dtype for weights served in a model dtype's own scheme (bf16 -> bfloat16, ...).
DTYPES = {scheme: dtype for dtype, scheme in MODEL_DTYPE_SCHEME.items()}


def speculative_config(spec: Any) -> dict[str, Any]:
    """The JSON of ``--speculative-config`` for vLLM 0.33 (``spec``: a deployment's
    :class:`~servopt.costmodels.deployment.SpeculativeConfig`, which is built on the engines' rules).

    >>> from servopt.costmodels.deployment import SpeculativeConfig
    >>> speculative_config(SpeculativeConfig(method="ngram", num_speculative_tokens=3))
    {'method': 'ngram', 'num_speculative_tokens': 3, 'prompt_lookup_max': 4}
    """
    config: dict[str, Any] = {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens}
    if spec.method == "ngram":
        config["prompt_lookup_max"] = max(spec.num_speculative_tokens, 4)
    if spec.draft_model:
        config["model"] = spec.draft_model
    if spec.draft_tp:
        config["draft_tensor_parallel_size"] = spec.draft_tp
    return config


class VllmEngine(EngineRules):
    """vLLM behind the engine seam: each rule is this module's (see the module docstring).

    Example:
        >>> from servopt.costmodels.hardware import get_gpu
        >>> vllm = VllmEngine()
        >>> vllm.batch_limits(get_gpu("h100")), vllm.memory_fraction(vllm.version("0.19.1"))
        ((8192, 1024), 0.9)
        >>> vllm.step_rule(vllm.version("0.12.0"), pp=1)
        StepRule(generation='v1', async_scheduling=False, all2all_backend='allgather_reducescatter')
    """

    name = "vllm"
    current_version = CURRENT_VLLM
    export_format = "vllm"
    block_size = BLOCK_SIZE
    scheduling_policies = SCHEDULING_POLICIES
    allreduce_implementations = ALLREDUCE_IMPLEMENTATIONS
    all2all_collectives = ALL2ALL_COLLECTIVES
    dp_waiting_weight = DP_LB_WAITING_WEIGHT
    default_max_model_len = VLLM_DEFAULT_MAX_LEN
    graph_max_tokens = MAX_CUDAGRAPH_TOKENS

    def version(self, text: str | None) -> Version:
        return parse_vllm_version(text)

    def release_problem(self, version: Version, *, num_scheduler_steps: int = 1) -> str | None:
        row = release(version)
        if num_scheduler_steps > 1 and not row.multi_step:
            return (f"num_scheduler_steps: vLLM {'.'.join(map(str, version))} has no --num-scheduler-steps "
                    f"(removed in 0.10.1: {row.cite('multi_step')}); leave it at 1 or give vllm_version "
                    "0.10.0 or older")
        return None

    def resolve(self, version: Version, **flags) -> EngineDefaults:
        return resolve_engine(version, **flags)

    def batch_limits(self, gpu: GPUSpec, version: Version | None = None) -> tuple[int, int]:
        return default_batch_limits(gpu, version)

    def batch_problem(self, max_num_seqs: int, max_num_batched_tokens: int, drafts: int = 0,
                      chunked_prefill: bool = True, max_model_len: int = 0) -> tuple[float, str] | None:
        return batch_limits_problem(max_num_seqs, max_num_batched_tokens, drafts, chunked_prefill, max_model_len)

    def min_batched_tokens(self, max_num_seqs: int, drafts: int = 0, chunked_prefill: bool = True,
                           max_model_len: int = 0) -> int:
        return min_batched_tokens(max_num_seqs, drafts, chunked_prefill, max_model_len)

    def memory_fraction(self, version: Version | None = None) -> float:
        return gpu_memory_utilization(version or parse_vllm_version(None))

    def kv_pool_bytes(self, gpu_bytes: float, fraction: float, weights_bytes: float, draft_weights_bytes: float,
                      activation_bytes: float, non_torch_bytes: float) -> float:
        # The V1 pool (Worker.determine_available_memory, vllm/v1/worker/gpu_worker.py): what
        # --gpu-memory-utilization of the GPU leaves after the weights, the peak activations of a
        # profiled step and the memory outside torch, as memory.py's module docstring gives it
        # (checked against vLLM 0.19's start-up logs).
        return fraction * gpu_bytes - weights_bytes - draft_weights_bytes - activation_bytes - non_torch_bytes

    def step_rule(self, version: Version, pp: int) -> StepRule:
        generation = engine_generation(version, pp)
        return StepRule(generation, generation == "v1" and async_scheduling(version, pp),
                        default_all2all_backend(version))

    def allreduce_implementation(self, message_bytes: float | np.ndarray, num_gpus: int, gpu: GPUSpec,
                                 version: Version, captured: bool | np.ndarray,
                                 nvlink: bool = True) -> str | np.ndarray:
        return allreduce_implementation(message_bytes, num_gpus, gpu, version, captured, nvlink)

    def tokenize_s_per_token(self, version: Version, frontend: str) -> float:
        return tokenize_s_per_token(version, frontend)

    def launch_args(self, record: Any, role: Any) -> list[str]:
        """``vllm serve``'s flags after the model and port (the record names its weights: the
        export refuses one that does not before asking)."""
        d, weights = record.spec, record.weights
        args = ["--tensor-parallel-size", str(role.tp)]
        if role.pp > 1:
            args += ["--pipeline-parallel-size", str(role.pp), "--distributed-executor-backend", "ray"]
        if role.data_parallel_size > 1:
            args += ["--data-parallel-size", str(role.data_parallel_size)]
        if d.enable_expert_parallel:
            args.append("--enable-expert-parallel")
        if d.all2all_backend:
            args += ["--all2all-backend", d.all2all_backend]
        if weights.vllm_quantization:
            args += ["--quantization", weights.vllm_quantization]
        elif weights.scheme in DTYPES:
            args += ["--dtype", DTYPES[weights.scheme]]
        args += ["--kv-cache-dtype", d.kv_cache_dtype, "--max-num-seqs", str(role.max_num_seqs),
                 "--max-num-batched-tokens", str(role.max_num_batched_tokens)]
        args.append("--enable-chunked-prefill" if d.enable_chunked_prefill else "--no-enable-chunked-prefill")
        args += ["--max-model-len", str(record.max_model_len),
                 "--gpu-memory-utilization", f"{d.gpu_memory_utilization:g}"]
        args.append("--enable-prefix-caching" if d.enable_prefix_caching else "--no-enable-prefix-caching")
        if d.scheduling_policy == "priority":
            args += ["--scheduling-policy", "priority"]
        if d.enforce_eager:
            args.append("--enforce-eager")
        if d.num_scheduler_steps > 1:
            # Only releases up to 0.10.0 have the flag (Deployment refuses it for later ones).
            args += ["--num-scheduler-steps", str(d.num_scheduler_steps)]
        if d.speculative:
            args += ["--speculative-config", json.dumps(speculative_config(d.speculative), separators=(",", ":"))]
        return args

"""What vLLM does when a flag is not given, by vLLM version: the one module of vLLM's defaults.

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

import re

import numpy as np

from .errors import InputError
from .hardware import GPUSpec

VllmVersion = tuple[int, int, int]

# The vLLM a deployment describes when it names none (the version servopt's exports target).
CURRENT_VLLM = "0.33.0"
# CacheConfig.DEFAULT_BLOCK_SIZE (vllm/config/cache.py@v0.33.0 line 185).
BLOCK_SIZE = 16
# The V1 engine (the default from 0.8) chunks prefills and caches prefixes unless told not to:
# SchedulerConfig.enable_chunked_prefill (vllm/config/scheduler.py@v0.33.0 line 134) and
# CacheConfig.enable_prefix_caching (vllm/config/cache.py@v0.33.0 line 257).
ENABLE_CHUNKED_PREFILL = True
ENABLE_PREFIX_CACHING = True
# --scheduling-policy: first come, first served unless "priority" is asked for
# (SchedulerConfig.policy, vllm/config/scheduler.py@v0.33.0 line 159).
SCHEDULING_POLICIES = ("fcfs", "priority")
SCHEDULING_POLICY = "fcfs"
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

    >>> gpu_memory_utilization((0, 19, 0)), gpu_memory_utilization((0, 33, 0)) == GPU_MEMORY_UTILIZATION
    (0.9, True)
    """
    return GPU_MEMORY_UTILIZATION_FROM_0_20 if version >= (0, 20, 0) else GPU_MEMORY_UTILIZATION_BEFORE_0_20


# What vLLM starts with when the deployment names neither the release nor the fraction.
GPU_MEMORY_UTILIZATION = gpu_memory_utilization(parse_vllm_version(CURRENT_VLLM))


def engine_generation(version: VllmVersion, pp: int) -> str:
    """'v0' or 'v1': which engine serves. V1 is the default from 0.8; 0.8 still fell back to V0 for
    pipeline parallelism without Ray ("Pipeline Parallelism without Ray distributed executor is not
    supported by the V1 Engine. Falling back to V0"), which the mp executor supports from 0.9."""
    if version < (0, 8, 0) or (version < (0, 9, 0) and pp > 1):
        return "v0"
    return "v1"


def async_scheduling(version: VllmVersion, pp: int) -> bool:
    """Whether vLLM overlaps scheduling with the GPU by default (never with pipeline parallelism)."""
    return version >= (0, 14, 0) and pp == 1


def default_batch_limits(gpu: GPUSpec, version: VllmVersion | None = None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of ``vllm serve`` on this GPU.

    From 0.9 (``EngineArgs.get_batch_defaults``, the OPENAI_API_SERVER column;
    ``vllm/engine/arg_utils.py@v0.33.0`` lines 2940-3006): >= 70 GiB and not A100 (H100, H200,
    MI300X): 8192 / 1024; other GPUs, the A100 included (large budgets cut A100 throughput, vLLM PR
    #17885): 2048 / 256. From 0.28 a tier for >= 160 GiB (B200, B300) serves 16384 / 1024
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

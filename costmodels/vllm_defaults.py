"""Defaults vLLM picks when a flag is not given (vLLM 0.33 ``EngineArgs.get_batch_defaults``).

servopt always exports these flags explicitly, but uses the same defaults when a user's file or
the command line leaves them out, so that a prediction describes what ``vllm serve`` would run.
"""

from __future__ import annotations

from .hardware import GPUSpec

# vLLM 0.33 default (0.9 up to 0.15, 0.92 from 0.20).
GPU_MEMORY_UTILIZATION = 0.92
BLOCK_SIZE = 16


def default_batch_limits(gpu: GPUSpec) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of ``vllm serve`` on this GPU.

    >= 160 GiB (B200): 16384 / 1024; >= 70 GiB and not A100 (H100, H200, MI300X): 8192 / 1024;
    other GPUs, the A100 included (large budgets cut A100 throughput, vLLM PR #17885): 2048 / 256.
    """
    if gpu.memory_gib >= 160 and gpu.vendor == "nvidia":
        return 16384, 1024
    if gpu.memory_gib >= 70 and not gpu.name.startswith("a100"):
        return 8192, 1024
    return 2048, 256

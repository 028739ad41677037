"""Microbenchmarks: time the kernels a profile is fitted to, on a CUDA GPU or (to test the pipeline) the CPU.

A :class:`Backend` runs and times kernels on one device: :class:`TorchBackend` on CUDA (CUDA events,
bf16 and, where ``torch._scaled_mm`` runs, fp8) or on the CPU, :class:`NumpyBackend` on the CPU
without torch. Each op family is one :class:`Microbenchmark` that lists its shapes and builds the
kernel for a shape: :class:`GemmBench`, :class:`PrefillAttentionBench`, :class:`DecodeAttentionBench`,
:class:`MemcpyBench` and (more than one CUDA GPU) :class:`AllReduceBench`. Every measurement is the
median of ``repeats`` timed runs after ``warmup`` untimed ones. :func:`run_microbenchmarks` returns
a tidy kernel table (``calibration.tables`` layout) and the run's metadata.

Example (a tiny CPU sweep):
    >>> table, meta = run_microbenchmarks(NumpyBackend(), quick=True, max_work=1e8, repeats=2)
    >>> sorted(table["op"].unique())
    ['context_attention', 'gemm', 'generation_attention', 'memcpy']
    >>> meta["backend"], bool((table["latency_ms"] > 0).all())
    ('numpy', True)
"""

from __future__ import annotations

import datetime as dt
import platform
import time
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np
import pandas as pd

from ..costmodels.architectures import ModelSpec
from ..costmodels.errors import InputError
from .tables import KERNEL_COLUMNS, gpu_name_for

# (n, k) of the standard set: the projections of Llama-3.1-8B and -70B at TP 1 (QKV, O, gate/up, down).
STANDARD_GEMM_SHAPES = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (10240, 8192), (8192, 8192),
                        (57344, 8192), (8192, 28672)]
GEMM_M = [2**i for i in range(15)]  # 1 .. 16384
QUICK_GEMM_M = [1, 4, 16, 64, 256, 1024, 4096, 16384]
# Attention: Llama-3 head layout per GPU at TP 1 (32 query heads, 8 KV heads, head_dim 128).
ATTENTION_HEADS = (32, 8, 128)
PREFILL_LENGTHS = [16, 128, 512, 1024, 2048, 4096, 8192]
PREFILL_BATCH = [1, 4]
DECODE_BATCH = [1, 8, 32, 128, 256]
DECODE_CONTEXT = [16, 128, 1024, 4096, 16384]
COPY_BYTES = [2**i for i in range(16, 31, 2)]  # 64 KiB .. 1 GiB
ALLREDUCE_BYTES = [2**i for i in range(10, 29, 2)]  # 1 KiB .. 256 MiB


class Backend(ABC):
    """Allocates tensors and times kernels on one device."""

    name: str
    framework: str
    device_name: str
    is_gpu: bool = False

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """Library versions recorded with the run."""

    @abstractmethod
    def dtypes(self) -> list[str]:
        """GEMM math dtypes this device runs (servopt names)."""

    @abstractmethod
    def gemm(self, m: int, n: int, k: int, dtype: str) -> Callable[[], object]:
        """A closure running one [m, k] x [k, n] GEMM."""

    @abstractmethod
    def attention(self, batch: int, q_len: int, kv_len: int, heads: int, kv_heads: int, head_dim: int,
                  causal: bool) -> Callable[[], object]:
        """A closure running one attention kernel."""

    @abstractmethod
    def copy(self, num_bytes: int) -> Callable[[], object]:
        """A closure copying ``num_bytes`` within device memory."""

    @abstractmethod
    def time_ms(self, fn: Callable[[], object], warmup: int, repeats: int) -> float:
        """Median latency of ``fn`` in milliseconds."""

    def _wall_time_ms(self, fn: Callable[[], object], warmup: int, repeats: int, sync: Callable[[], None]) -> float:
        for _ in range(warmup):
            fn()
        sync()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            sync()
            times.append((time.perf_counter() - start) * 1e3)
        return float(np.median(times))


class NumpyBackend(Backend):
    """The CPU through numpy (fp32: numpy has no bf16 math); needs no torch."""

    name = framework = "numpy"

    def __init__(self):
        self.device_name = platform.processor() or platform.machine() or "cpu"

    def versions(self) -> dict[str, str]:
        return {"numpy": np.__version__, "python": platform.python_version()}

    def dtypes(self) -> list[str]:
        return ["fp32"]

    def gemm(self, m, n, k, dtype):
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        return lambda: a @ b

    def attention(self, batch, q_len, kv_len, heads, kv_heads, head_dim, causal):
        rng = np.random.default_rng(0)
        q = rng.standard_normal((batch, heads, q_len, head_dim), dtype=np.float32)
        k = rng.standard_normal((batch, kv_heads, kv_len, head_dim), dtype=np.float32)
        v = rng.standard_normal((batch, kv_heads, kv_len, head_dim), dtype=np.float32)
        group = heads // kv_heads
        mask = np.triu(np.full((q_len, kv_len), -np.inf, dtype=np.float32), 1 + kv_len - q_len) if causal else 0.0

        def run():
            # Grouped-query attention: each KV head serves ``group`` query heads.
            qg = q.reshape(batch, kv_heads, group * q_len, head_dim)
            scores = (qg @ k.transpose(0, 1, 3, 2)).reshape(batch, kv_heads, group, q_len, kv_len) + mask
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs = (scores / scores.sum(axis=-1, keepdims=True)).reshape(batch, kv_heads, group * q_len, kv_len)
            return probs @ v

        return run

    def copy(self, num_bytes):
        src = np.ones(num_bytes // 4, dtype=np.float32)
        dst = np.empty_like(src)
        return lambda: np.copyto(dst, src)

    def time_ms(self, fn, warmup, repeats):
        return self._wall_time_ms(fn, warmup, repeats, lambda: None)


class TorchBackend(Backend):
    """PyTorch on ``cuda`` (CUDA events) or ``cpu``; torch is imported only here (extra "gpu")."""

    framework = "torch"

    def __init__(self, device: str = "cuda"):
        try:
            import torch
        except ImportError:
            raise InputError("--device cuda needs PyTorch: pip install 'servopt[gpu]' (or use --device cpu)") from None
        if device == "cuda" and not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA GPU is visible to PyTorch (use --device cpu to test the pipeline)")
        self.torch = torch
        self.device = device
        self.is_gpu = device == "cuda"
        self.name = f"torch-{device}"
        self.device_name = torch.cuda.get_device_name(0) if self.is_gpu else (platform.processor() or "cpu")

    def versions(self) -> dict[str, str]:
        torch = self.torch
        versions = {"torch": torch.__version__, "python": platform.python_version()}
        if self.is_gpu:
            versions["cuda"] = str(torch.version.cuda)
            versions["cudnn"] = str(torch.backends.cudnn.version())
        return versions

    def _fp8_supported(self) -> bool:
        torch = self.torch
        if not self.is_gpu or not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            return False
        return torch.cuda.get_device_capability(0) >= (8, 9)

    def dtypes(self) -> list[str]:
        if not self.is_gpu:
            return ["fp32"]
        return ["bf16", "fp8"] if self._fp8_supported() else ["bf16"]

    def _tensor(self, *shape, dtype=None):
        return self.torch.randn(*shape, device=self.device, dtype=dtype or self._dtype())

    def _dtype(self):
        return self.torch.bfloat16 if self.is_gpu else self.torch.float32

    def gemm(self, m, n, k, dtype):
        torch = self.torch
        if dtype == "fp8":
            a = self._tensor(m, k).to(torch.float8_e4m3fn)
            # _scaled_mm wants the second operand column-major.
            b = self._tensor(n, k).to(torch.float8_e4m3fn).t()
            one = torch.ones((), device=self.device)
            return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        a, w = self._tensor(m, k), self._tensor(n, k)
        return lambda: torch.nn.functional.linear(a, w)

    def attention(self, batch, q_len, kv_len, heads, kv_heads, head_dim, causal):
        functional = self.torch.nn.functional
        q = self._tensor(batch, heads, q_len, head_dim)
        k, v = self._tensor(batch, kv_heads, kv_len, head_dim), self._tensor(batch, kv_heads, kv_len, head_dim)
        try:
            functional.scaled_dot_product_attention(q[:, :, :1], k[:, :, :1], v[:, :, :1], enable_gqa=True)
            return lambda: functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        except TypeError:
            # torch < 2.5 has no enable_gqa: expand the KV heads once, outside the timed kernel.
            group = heads // kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            return lambda: functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def copy(self, num_bytes):
        src = self.torch.ones(num_bytes // 2, device=self.device, dtype=self.torch.bfloat16)
        dst = self.torch.empty_like(src)
        return lambda: dst.copy_(src)

    def time_ms(self, fn, warmup, repeats):
        if not self.is_gpu:
            return self._wall_time_ms(fn, warmup, repeats, lambda: None)
        cuda = self.torch.cuda
        for _ in range(warmup):
            fn()
        cuda.synchronize()
        times = []
        for _ in range(repeats):
            start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return float(np.median(times))


class Microbenchmark(ABC):
    """One op family: its shapes, and the kernel that one shape runs."""

    op: str
    kernel_source: str

    @abstractmethod
    def shapes(self, backend: Backend, quick: bool, models: list[ModelSpec]) -> list[dict]:
        """Shape columns of each configuration to time (``dtype`` included)."""

    @abstractmethod
    def kernel(self, backend: Backend, shape: dict) -> Callable[[], object]:
        """The closure to time."""

    @abstractmethod
    def work(self, shape: dict) -> float:
        """FLOPs of one call (bytes moved for copies): the size that CPU runs cap."""


def model_gemm_shapes(model: ModelSpec) -> list[tuple[int, int]]:
    """(n, k) of a dense model's projections at TP 1: QKV, O, gate/up, down."""
    h = model.hidden_size
    qkv = model.q_dim + 2 * model.kv_dim
    up = (2 if model.gated_mlp else 1) * model.intermediate_size
    return [(int(qkv), h), (h, int(model.attn_out_dim)), (int(up), h), (h, int(model.intermediate_size))]


class GemmBench(Microbenchmark):
    op = "gemm"
    kernel_source = "linear"

    def shapes(self, backend, quick, models):
        nk = sorted({s for model in models for s in model_gemm_shapes(model)}) or STANDARD_GEMM_SHAPES
        if quick:
            nk = nk[:3]
        ms = QUICK_GEMM_M if quick else GEMM_M
        return [{"dtype": d, "m": m, "n": n, "k": k} for d in backend.dtypes() for n, k in nk for m in ms]

    def kernel(self, backend, shape):
        return backend.gemm(shape["m"], shape["n"], shape["k"], shape["dtype"])

    def work(self, shape):
        return 2.0 * shape["m"] * shape["n"] * shape["k"]


class _AttentionBench(Microbenchmark):
    kernel_source = "scaled_dot_product_attention"

    def _heads(self) -> dict:
        heads, kv_heads, head_dim = ATTENTION_HEADS
        return {"num_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim}

    def _dtype(self, backend: Backend) -> str:
        return "bf16" if backend.is_gpu else "fp32"


class PrefillAttentionBench(_AttentionBench):
    op = "context_attention"

    def shapes(self, backend, quick, models):
        lengths = PREFILL_LENGTHS[::2] if quick else PREFILL_LENGTHS
        dtype = self._dtype(backend)
        return [{"dtype": dtype, "kv_cache_dtype": dtype, "batch_size": b, "isl": s, "step": 0, **self._heads()}
                for b in PREFILL_BATCH for s in lengths]

    def kernel(self, backend, shape):
        return backend.attention(shape["batch_size"], shape["isl"], shape["isl"], shape["num_heads"],
                                 shape["num_key_value_heads"], shape["head_dim"], causal=True)

    def work(self, shape):
        return 2.0 * shape["num_heads"] * shape["head_dim"] * shape["batch_size"] * shape["isl"] ** 2


class DecodeAttentionBench(_AttentionBench):
    op = "generation_attention"

    def shapes(self, backend, quick, models):
        batches, contexts = (DECODE_BATCH[::2], DECODE_CONTEXT[::2]) if quick else (DECODE_BATCH, DECODE_CONTEXT)
        dtype = self._dtype(backend)
        # step counts the cached tokens before the new one (aiconfigurator's convention).
        return [{"dtype": dtype, "kv_cache_dtype": dtype, "batch_size": b, "isl": 1, "step": c - 1, **self._heads()}
                for b in batches for c in contexts]

    def kernel(self, backend, shape):
        return backend.attention(shape["batch_size"], 1, shape["step"] + 1, shape["num_heads"],
                                 shape["num_key_value_heads"], shape["head_dim"], causal=False)

    def work(self, shape):
        return 4.0 * shape["num_heads"] * shape["head_dim"] * shape["batch_size"] * (shape["step"] + 1)


class MemcpyBench(Microbenchmark):
    """Device-to-device copy; ``message_bytes`` counts bytes read plus bytes written."""

    op = "memcpy"
    kernel_source = "copy"

    def shapes(self, backend, quick, models):
        sizes = COPY_BYTES[::2] if quick else COPY_BYTES
        return [{"dtype": "bf16" if backend.is_gpu else "fp32", "message_bytes": 2 * size} for size in sizes]

    def kernel(self, backend, shape):
        return backend.copy(shape["message_bytes"] // 2)

    def work(self, shape):
        return float(shape["message_bytes"])


def _allreduce_worker(rank: int, world: int, sizes: list[int], warmup: int, repeats: int, port: int, queue) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    results = []
    for size in sizes:
        buffer = torch.ones(size // 2, device="cuda", dtype=torch.bfloat16)
        for _ in range(warmup):
            dist.all_reduce(buffer)
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            dist.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dist.all_reduce(buffer)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        results.append(float(np.median(times)))
    if rank == 0:
        queue.put(results)
    dist.destroy_process_group()


class AllReduceBench:
    """NCCL all-reduce over 2, 4, ... visible GPUs: one process per GPU, timed as a group per GPU count."""

    op = "all_reduce"
    kernel_source = "NCCL"

    def shapes(self, backend, quick, models):
        visible = backend.torch.cuda.device_count() if backend.is_gpu else 1
        counts = [n for n in (2, 4, 8) if n <= visible]
        sizes = ALLREDUCE_BYTES[::2] if quick else ALLREDUCE_BYTES
        return [{"dtype": "bf16", "num_gpus": n, "message_bytes": s} for n in counts for s in sizes]

    def measure_group(self, backend: TorchBackend, num_gpus: int, sizes: list[int], warmup: int, repeats: int) -> list[float]:
        import torch.multiprocessing as mp

        context = mp.get_context("spawn")
        queue = context.SimpleQueue()
        port = 29500 + num_gpus
        mp.start_processes(_allreduce_worker, args=(num_gpus, sizes, warmup, repeats, port, queue),
                           nprocs=num_gpus, start_method="spawn")
        return queue.get()


def make_backend(device: str) -> Backend:
    """``cuda``: torch on the first GPU; ``cpu``: torch on the CPU when installed, else numpy."""
    if device == "cuda":
        return TorchBackend("cuda")
    try:
        import torch  # noqa: F401
    except ImportError:
        return NumpyBackend()
    return TorchBackend("cpu")


def run_microbenchmarks(
    backend: Backend, quick: bool = False, models: list[ModelSpec] | None = None, warmup: int | None = None,
    repeats: int | None = None, max_work: float | None = None, progress: Callable[[str], None] | None = None,
) -> tuple[pd.DataFrame, dict]:
    """Time every op family on ``backend``; returns (tidy kernel table, run metadata).

    ``max_work`` skips configurations above that many FLOPs (bytes for copies) per call; CPU runs
    default to 2e9, so the CPU sweep covers the small end of the GPU sweep in seconds.
    """
    models = models or []
    warmup = warmup if warmup is not None else (3 if backend.is_gpu else 1)
    repeats = repeats if repeats is not None else (10 if backend.is_gpu else 3)
    max_work = max_work if max_work is not None else (np.inf if backend.is_gpu else 2e9)
    started = time.time()
    rows = []
    benches: list[Microbenchmark] = [GemmBench(), PrefillAttentionBench(), DecodeAttentionBench(), MemcpyBench()]
    for bench in benches:
        shapes = [s for s in bench.shapes(backend, quick, models) if bench.work(s) <= max_work]
        for shape in shapes:
            rows.append({**shape, "op": bench.op, "kernel_source": bench.kernel_source,
                         "latency_ms": backend.time_ms(bench.kernel(backend, shape), warmup, repeats)})
        if progress:
            progress(f"{bench.op}: {len(shapes)} configurations")
    if backend.is_gpu and backend.torch.cuda.device_count() > 1:
        bench = AllReduceBench()
        shapes = bench.shapes(backend, quick, models)
        for count in sorted({s["num_gpus"] for s in shapes}):
            group = [s for s in shapes if s["num_gpus"] == count]
            times = bench.measure_group(backend, count, [s["message_bytes"] for s in group], warmup, repeats)
            rows += [{**s, "op": bench.op, "kernel_source": bench.kernel_source, "latency_ms": t} for s, t in zip(group, times)]
        if progress:
            progress(f"all_reduce: {len(shapes)} configurations")
    versions = backend.versions()
    stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    table = pd.DataFrame(rows).assign(
        system=gpu_name_for(None, backend.device_name) if backend.is_gpu else "cpu",
        device=backend.device_name, framework=backend.framework, version=versions.get(backend.framework, ""),
        source=f"servopt calibrate run {stamp} ({backend.name})",
    ).reindex(columns=KERNEL_COLUMNS)
    meta = {
        "backend": backend.name, "device": backend.device_name, "is_gpu": backend.is_gpu, "quick": quick,
        "library_versions": versions, "started_at": stamp, "duration_s": round(time.time() - started, 2),
        "rows": len(table), "models": [m.name for m in models], "warmup": warmup, "repeats": repeats,
        "statistic": "median",
    }
    return table, meta

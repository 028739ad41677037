"""``servopt plan``: does a model fit on a GPU, what does each request cost, how fast are steps."""

from __future__ import annotations

import argparse
import json

from ...calibration.registry import load_profile
from ...costmodels.architectures import longer_context_fix, resolve_model
from ...costmodels.errors import MAX_TOKENS, InputError
from ...costmodels.hardware import GIB, load_catalog
from ...costmodels.deployment import MAX_BATCHED_TOKENS, MAX_PARALLEL, MAX_SEQS, Deployment
from ...costmodels.quantization import SCHEMES, math_dtype
from ...costmodels.roofline import Batch
from ...costmodels.serving.compiled import compile_deployment
from ...costmodels.vllm_defaults import CURRENT_VLLM, GPU_MEMORY_UTILIZATION
from . import COMMANDS
from .common import add_hardware_args, number_in, whole_number


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help=COMMANDS["plan"][1],
        description="Memory breakdown, maximum concurrency and roofline step times of one replica.",
    )
    parser.add_argument("--model", required=True, help="preset alias, Hugging Face id, or path to config.json")
    parser.add_argument("--gpu", required=True, help="GPU name (see `servopt gpus`)")
    parser.add_argument("--tp", type=whole_number(1, MAX_PARALLEL), default=1, help="tensor parallel size (default 1)")
    parser.add_argument("--pp", type=whole_number(1, MAX_PARALLEL), default=1, help="pipeline parallel size (default 1)")
    parser.add_argument("--quant", choices=sorted(SCHEMES), default=None,
                        help="weight quantization (default: the checkpoint's own, read from its config, else the model dtype)")
    parser.add_argument("--kv-dtype", choices=["auto", "fp8"], default="auto", help="KV cache dtype")
    parser.add_argument("--context", type=whole_number(1, MAX_TOKENS), default=4096, help="tokens per request (prompt + output)")
    parser.add_argument("--concurrency", type=whole_number(1, MAX_SEQS), default=1,
                        help="requests resident at once")
    parser.add_argument("--gpu-memory-utilization", type=number_in(0, 1), default=GPU_MEMORY_UTILIZATION,
                        help=f"vLLM's memory budget fraction (default {GPU_MEMORY_UTILIZATION:g}, vLLM {CURRENT_VLLM}'s default)")
    parser.add_argument("--max-num-seqs", type=whole_number(1, MAX_SEQS), default=None, help="default: vLLM's for the GPU")
    parser.add_argument("--max-num-batched-tokens", type=whole_number(1, MAX_BATCHED_TOKENS), default=None, help="default: vLLM's for the GPU")
    add_hardware_args(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def compute_plan(args: argparse.Namespace) -> dict:
    """Everything ``plan`` reports, as a JSON-ready dict (bytes summed over all GPUs unless *_per_gpu)."""
    catalog = load_catalog(args.hardware)
    gpu = catalog.get(args.gpu)
    resolved = resolve_model(args.model)
    model = resolved.spec
    quant = args.quant  # None: the checkpoint's own format, else the model dtype (compile_deployment)
    if args.context > model.max_context:
        raise InputError(f"--context {args.context} exceeds what vLLM accepts for {resolved.requested}: "
                         f"{longer_context_fix(model, resolved.requested, args.context)}")
    if args.tp * args.pp > 64:
        raise InputError(f"tp x pp = {args.tp * args.pp} GPUs is beyond what servopt plans for one replica (64)")
    profile = load_profile(gpu, args.profile)
    # One compiled deployment, as the search and the simulator build it: limits with vLLM's defaults
    # for the GPU, the memory plan and the step model.
    deployment = Deployment.model_construct(
        gpu=gpu.name, tp=args.tp, pp=args.pp, quantization=quant, kv_cache_dtype=args.kv_dtype,
        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.context)
    compiled = compile_deployment(model, deployment, gpu, profile)
    if compiled.error:
        raise InputError(compiled.error)
    role = compiled.roles[0]
    plan, cost = role.plan, role.cost
    max_tokens, max_seqs = role.limits.max_num_batched_tokens, role.limits.max_num_seqs
    kv_request = plan.kv_bytes_per_request(args.context)
    kv_total = kv_request * args.concurrency
    kv_needed_per_gpu = kv_total / args.tp
    max_concurrency = plan.max_concurrency(args.context)
    fits = plan.fits and args.concurrency <= max_concurrency
    problems = list(plan.problems)
    if plan.fits and not fits:
        problems.append(
            f"{args.concurrency} requests of {args.context} tokens need {kv_needed_per_gpu / GIB:.2f} GiB of KV per GPU "
            f"but the pool holds {plan.kv_cache_bytes_per_gpu / GIB:.2f} GiB (max {max_concurrency:.1f} requests)"
        )
    decode = cost.step(Batch(decode_context=[args.context] * args.concurrency))
    prefill_chunk = min(args.context, max_tokens)
    prefill_step = cost.step(Batch(prefill_tokens=[prefill_chunk]))
    dtype = math_dtype(plan.quantization, gpu)
    fmt = model.checkpoint if model.checkpoint is not None and model.checkpoint.scheme == plan.quantization else None
    return {
        "model": model.name,
        "requested": resolved.requested,
        "config_source": resolved.origin,
        "max_context": model.max_context,
        "vllm_quantization": fmt.method if fmt else SCHEMES[plan.quantization].vllm_quantization,
        "weights_format": fmt.describe() if fmt else SCHEMES[plan.quantization].description,
        "kernels": fmt.kernels if fmt else None,
        "gpu": gpu.name,
        "tp": args.tp,
        "pp": args.pp,
        "quantization": plan.quantization,
        "kv_cache_dtype": args.kv_dtype,
        # What vLLM stores: a checkpoint with FP8 KV scales gets an fp8 cache under 'auto'.
        "kv_cache_stored_dtype": model.kv_cache_dtype(args.kv_dtype),
        "context_tokens": args.context,
        "concurrency": args.concurrency,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "num_params": model.num_params,
        "weights_bytes": plan.weights_bytes,
        "weights_bytes_per_gpu": plan.weights_bytes_per_gpu,
        "kv_bytes_per_token": plan.kv_bytes_per_token,
        "kv_bytes_per_request": kv_request,
        "kv_bytes_total": kv_total,
        "activation_peak_bytes_per_gpu": plan.activation_peak_bytes_per_gpu,
        "non_torch_bytes_per_gpu": plan.non_torch_bytes_per_gpu,
        "cuda_graph_bytes_per_gpu": plan.cuda_graph_bytes_per_gpu,
        "budget_bytes_per_gpu": plan.budget_bytes_per_gpu,
        "kv_cache_bytes_per_gpu": plan.kv_cache_bytes_per_gpu,
        "kv_capacity_tokens": plan.kv_capacity_tokens,
        "kv_cache_blocks": plan.kv_cache_blocks,
        "fits": fits,
        "headroom_bytes_per_gpu": plan.kv_cache_bytes_per_gpu - kv_needed_per_gpu,
        "problems": problems,
        "warnings": list(plan.warnings),
        "max_concurrency": max_concurrency,
        "decode_floor_s_per_token": cost.weight_read_floor_s(args.context, args.concurrency),
        "balance_point_flops_per_byte": gpu.balance_point_flops_per_byte(dtype),
        "decode_arithmetic_intensity": decode.arithmetic_intensity,
        "prefill_arithmetic_intensity": prefill_step.arithmetic_intensity,
        "decode_step_s": decode.time_s,
        "decode_bound": decode.bound,
        "prefill_s": cost.prefill_time_s(args.context, max_tokens),
        "prefill_bound": prefill_step.bound,
        "max_num_batched_tokens": max_tokens,
        "max_num_seqs": max_seqs,
        "profile": profile.source,
        "profile_calibrated": profile.calibrated,
        "decode_operators_s": decode.operators_s,
    }


def _gib(value: float) -> str:
    return f"{value / GIB:8.2f} GiB"


def render(result: dict) -> str:
    r = result
    per_gpu = "per GPU" if r["tp"] * r["pp"] > 1 else ""
    lines = [
        f"{r['model']} on {r['gpu']} (tp={r['tp']}, pp={r['pp']}, weights {r['quantization']}, KV {r['kv_cache_dtype']}"
        f"{'' if r['kv_cache_stored_dtype'] == r['kv_cache_dtype'] else ' = ' + r['kv_cache_stored_dtype'] + ' (checkpoint KV scales)'}), "
        f"{r['concurrency']} x {r['context_tokens']} tokens",
        f"  requested               {r['requested']}",
        f"  config                  {r['config_source']}",
        f"  max context             {r['max_context']:,} tokens (vLLM's limit for this config)",
        f"  weights                 {r['weights_format']}; --quantization {r['vllm_quantization'] or '(none)'}"
        + (f"; kernels: {r['kernels']}" if r["kernels"] else ""),
        "",
        "Memory",
        f"  weights                 {_gib(r['weights_bytes'])}  ({r['num_params'] / 1e9:.2f} B params; {_gib(r['weights_bytes_per_gpu']).strip()} {per_gpu})",
        f"  KV per token            {r['kv_bytes_per_token'] / 1024:8.1f} KiB",
        f"  KV per request          {_gib(r['kv_bytes_per_request'])}",
        f"  KV for {r['concurrency']:<4} requests     {_gib(r['kv_bytes_total'])}",
        f"  activations (peak)      {_gib(r['activation_peak_bytes_per_gpu'])} {per_gpu}",
        f"  non-torch, CUDA graphs  {_gib(r['non_torch_bytes_per_gpu'])}, {_gib(r['cuda_graph_bytes_per_gpu']).strip()} {per_gpu}",
        f"  budget ({r['gpu_memory_utilization']:.2f} x GPU)    {_gib(r['budget_bytes_per_gpu'])} {per_gpu}",
        f"  KV cache pool           {_gib(r['kv_cache_bytes_per_gpu'])} {per_gpu}: {r['kv_capacity_tokens']:,} tokens, {r['kv_cache_blocks']:,} blocks",
        f"  fits                    {'yes' if r['fits'] else 'NO'} (headroom {r['headroom_bytes_per_gpu'] / GIB:+.2f} GiB {per_gpu})",
        f"  max concurrency         {r['max_concurrency']:8.1f} requests at {r['context_tokens']} tokens",
    ]
    lines += [f"  problem: {p}" for p in r["problems"]]
    lines += [f"  warning: {w}" for w in r["warnings"]]
    lines += [
        "",
        "Roofline",
        f"  decode floor            {r['decode_floor_s_per_token'] * 1e3:8.2f} ms/token ((weights + KV bytes) / bandwidth)",
        f"  balance point           {r['balance_point_flops_per_byte']:8.0f} FLOP/byte",
        f"  decode intensity        {r['decode_arithmetic_intensity']:8.1f} FLOP/byte at batch {r['concurrency']} ({r['decode_bound']}-bound)",
        f"  prefill intensity       {r['prefill_arithmetic_intensity']:8.1f} FLOP/byte ({r['prefill_bound']}-bound)",
        f"  decode step             {r['decode_step_s'] * 1e3:8.2f} ms at batch {r['concurrency']}",
        f"  prefill of one prompt   {r['prefill_s'] * 1e3:8.2f} ms ({r['context_tokens']} tokens, chunks of {r['max_num_batched_tokens']})",
        "",
        f"Profile: {r['profile']}" + ("" if r["profile_calibrated"] else "  [UNCALIBRATED]"),
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    result = compute_plan(args)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0

"""``servopt plan``: does a model fit on a GPU, what does each request cost, how fast are steps, and
how many GPUs a peak request rate needs (seed section 7).

When the requests do not fit, ``plan`` says which changes it knows would make them fit, each with
its numbers (seed 7.2): INT4 weights (AWQ), an FP8 KV cache, both, the smallest larger TP that fits,
a GPU with more memory, and the concurrency that fits as it is. With ``--rate`` it sizes the fleet (seed 7.4):
replicas that carry the rate, from one replica's saturation rate as the engine model predicts it
(or from a measured ``--occupancy-s`` and ``--concurrency``), then ``ceil(N x (1 + redundancy))``.
"""

from __future__ import annotations

import argparse
import json
import math

from ...calibration.registry import load_profile
from ...costmodels.architectures import longer_context_fix, resolve_model
from ...costmodels.capacity import fleet_size, replica_capacity, replicas_needed
from ...costmodels.errors import MAX_TOKENS, InputError
from ...costmodels.hardware import GIB, load_catalog
from ...costmodels.deployment import MAX_BATCHED_TOKENS, MAX_PARALLEL, MAX_SEQS, Deployment
from ...costmodels.quantization import SCHEMES, math_dtype, support_problem
from ...costmodels.roofline import Batch
from ...costmodels.serving.compiled import compile_deployment
from ...costmodels.serving.traffic import MAX_RATE_PER_S, Traffic
from ...costmodels.uncertainty import prediction_kind, shipped_error_bars
from ...costmodels.engines import DEFAULT_ENGINE, get_engine
from . import COMMANDS
from .common import add_hardware_args, number_in, whole_number

MAX_OCCUPANCY_S = 86400.0
# Larger GPUs offered as a fix: the cheapest that fits in each of this many memory sizes.
GPU_FIXES = 3


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
    engine = get_engine(DEFAULT_ENGINE)
    parser.add_argument("--gpu-memory-utilization", type=number_in(0, 1), default=engine.memory_fraction(),
                        help=f"vLLM's memory budget fraction (default {engine.memory_fraction():g}, vLLM "
                             f"{engine.current_version}'s default)")
    parser.add_argument("--max-num-seqs", type=whole_number(1, MAX_SEQS), default=None, help="default: vLLM's for the GPU")
    parser.add_argument("--max-num-batched-tokens", type=whole_number(1, MAX_BATCHED_TOKENS), default=None, help="default: vLLM's for the GPU")
    capacity = parser.add_argument_group(
        "capacity", "replicas for a peak request rate: ceil(QPS x occupancy / concurrency), then the spares "
        "ceil(N x (1 + redundancy)); occupancy and concurrency are the engine model's (one replica's saturation "
        "rate, as `servopt predict --analytic` finds it) unless --occupancy-s gives a measured occupancy")
    capacity.add_argument("--rate", type=number_in(0, MAX_RATE_PER_S), default=None, metavar="QPS",
                          help="peak requests per second to size the fleet for")
    capacity.add_argument("--output-tokens", type=whole_number(1, MAX_TOKENS), default=None,
                          help="mean output tokens of a request (the rest of --context is its prompt); needed for "
                               "the engine model's capacity")
    capacity.add_argument("--occupancy-s", type=number_in(0, MAX_OCCUPANCY_S), default=None, metavar="SECONDS",
                          help="measured mean time a request holds its slot; with --concurrency (requests one "
                               "replica holds at once) it replaces the engine model's figures")
    capacity.add_argument("--redundancy", type=number_in(0, 4, low_open=False), default=0.0,
                          help="spare share on top of the replicas the rate needs (0.3 = 30%%; default 0)")
    add_hardware_args(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def compute_plan(args: argparse.Namespace, with_fixes: bool = True) -> dict:
    """Everything ``plan`` reports, as a JSON-ready dict (bytes summed over all GPUs unless *_per_gpu)."""
    catalog, resolved, profile, compiled = plan_compiled(args)
    return _plan(args, catalog, resolved, profile, compiled, with_fixes)


def plan_compiled(args: argparse.Namespace):
    """The catalog, the resolved model, the profile and the compiled deployment ``plan`` reports on."""
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
    if args.output_tokens is not None and args.output_tokens >= args.context:
        raise InputError(f"--output-tokens {args.output_tokens} leaves no prompt in --context {args.context} "
                         "(the context is prompt + output)")
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
    return catalog, resolved, profile, compiled


def _plan(args: argparse.Namespace, catalog, resolved, profile, compiled, with_fixes: bool) -> dict:
    model, gpu = resolved.spec, compiled.gpu
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
    result = {
        "model": model.name,
        "requested": resolved.requested,
        "config_source": resolved.origin,
        "max_context": model.max_context,
        "vllm_quantization": fmt.method if fmt else SCHEMES[plan.quantization].vllm_quantization,
        "weights_format": fmt.describe() if fmt else SCHEMES[plan.quantization].description,
        "kernels": fmt.kernels if fmt else None,
        "gpu": gpu.name,
        "gpu_memory_gb": gpu.memory_gb_nominal,
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
        # One instance's KV per token (every GPU of it), and what each GPU of it stores: MLA's latent
        # is stored whole on every TP rank, other KV is split over them.
        "kv_bytes_per_token": plan.kv_bytes_per_token,
        "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token_per_gpu,
        "kv_latent_on_every_gpu": model.mla is not None and args.tp > 1,
        "kv_bytes_per_request": kv_request,
        "kv_bytes_total": kv_total,
        "activation_peak_bytes_per_gpu": plan.activation_peak_bytes_per_gpu,
        "non_torch_bytes_per_gpu": plan.non_torch_bytes_per_gpu,
        "cuda_graph_bytes_per_gpu": plan.cuda_graph_bytes_per_gpu,
        "budget_bytes_per_gpu": plan.budget_bytes_per_gpu,
        "kv_cache_bytes_per_gpu": plan.kv_cache_bytes_per_gpu,
        "kv_capacity_tokens": plan.kv_capacity_tokens,
        "kv_cache_blocks": plan.kv_cache_blocks,
        "gpu_memory_bytes": plan.gpu_memory_bytes,
        "fits": fits,
        "memory_fits": plan.fits,  # weights and activations, whatever the concurrency
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
    result["intervals"] = plan_intervals(result, model, gpu, profile, cost.engine)
    if with_fixes:
        result["fixes"] = [] if fits else fixes(args, result, model, catalog)
        result["capacity"] = capacity(args, compiled) if args.rate is not None else None
    return result


def plan_intervals(result: dict, model, gpu, profile, engine: str) -> dict[str, list[float]]:
    """The 80% interval of the plan's step times and maximum concurrency, from the held-out error of
    their kind (costmodels/uncertainty.py): a decode step alone is a light-load TPOT, one prompt's
    prefill a light-load TTFT (whose measured error also carries the front end), the maximum
    concurrency the KV pool's. An interval never reaches below the physics: no step shorter than
    reading its weights (and KV) at the GPU's full bandwidth."""
    kind = prediction_kind(calibrated=profile.calibrated, architecture=gpu.architecture, moe=model.moe is not None,
                           engine=engine, queue_share_p99_ttft=0.0, saturated=False)
    bars = shipped_error_bars()
    decode = bars.interval("mean_tpot", result["decode_step_s"], kind)
    floor = result["decode_floor_s_per_token"]
    intervals = {"decode_step_s": (max(decode[0], floor), max(decode[1], floor)),
                 "prefill_s": bars.interval("mean_ttft", result["prefill_s"], kind),
                 "max_concurrency": bars.interval("kv_capacity", result["max_concurrency"], kind)}
    # JSON has no NaN: a figure whose kind no run measured has no interval.
    return {key: [v if math.isfinite(v) else None for v in pair] for key, pair in intervals.items()}


def _fix(args: argparse.Namespace, text: str, why: str, **changes) -> dict | None:
    """The plan with ``changes`` to the arguments, as a fix: None when it cannot be planned at all."""
    changed = argparse.Namespace(**{**vars(args), **changes})
    try:
        planned = compute_plan(changed, with_fixes=False)
    except InputError:
        return None
    return {"change": text, "why": why, "flags": {k.replace("_", "-"): v for k, v in changes.items()},
            "fits": planned["fits"], "gpu": planned["gpu"], "tp": planned["tp"],
            "weights_bytes_per_gpu": planned["weights_bytes_per_gpu"],
            "kv_cache_bytes_per_gpu": planned["kv_cache_bytes_per_gpu"],
            "kv_bytes_total": planned["kv_bytes_total"], "max_concurrency": planned["max_concurrency"],
            "headroom_bytes_per_gpu": planned["headroom_bytes_per_gpu"]}


def fixes(args: argparse.Namespace, planned: dict, model, catalog) -> list[dict]:
    """What would make ``concurrency`` requests of ``context`` tokens fit (seed 7.2), each planned:
    INT4 weights, an FP8 KV cache, both, the smallest larger TP that fits a node, the cheapest larger
    GPU of each of the next :data:`GPU_FIXES` memory sizes, and the concurrency that fits as it is."""
    out = []
    gpu = catalog.get(args.gpu)
    int4 = planned["quantization"] not in ("awq", "gptq", "nvfp4", "mxfp4") and support_problem("awq", gpu) is None
    fp8_kv = args.kv_dtype != "fp8" and planned["kv_cache_stored_dtype"] != "fp8"
    if int4:
        out.append(_fix(args, "INT4 weights (--quant awq)", "a quarter of the 16-bit weight bytes", quant="awq"))
    if fp8_kv:
        out.append(_fix(args, "FP8 KV cache (--kv-dtype fp8)", "half the KV bytes per token", kv_dtype="fp8"))
    if int4 and fp8_kv:
        out.append(_fix(args, "INT4 weights and FP8 KV cache (--quant awq --kv-dtype fp8)", "both",
                        quant="awq", kv_dtype="fp8"))
    # The smallest larger TP that fits on one node (twice the TP when none does).
    tp_fixes = [_fix(args, f"TP {tp} (--tp {tp})", f"weights and KV spread over {tp * args.pp} GPUs", tp=tp)
                for tp in (args.tp * 2**k for k in range(1, 7)) if tp <= gpu.gpus_per_node]
    tp_fixes = [f for f in tp_fixes if f is not None]
    if tp_fixes:
        out.append(next((f for f in tp_fixes if f["fits"]), tp_fixes[0]))
    larger = sorted((g for g in catalog if g.memory_gib > gpu.memory_gib), key=lambda g: (g.memory_gb_nominal,
                                                                                                g.price_per_gpu_hour))
    sizes: list[float] = []
    for other in larger:
        if other.memory_gb_nominal in sizes or len(sizes) >= GPU_FIXES:
            continue
        size = f"{other.memory_gb_nominal:g}"
        article = "an" if size.startswith(("8", "11", "18")) else "a"  # "an 80 GB GPU"
        fix = _fix(args, f"{article} {size} GB GPU (--gpu {other.name})",
                   f"{other.memory_gib:.0f} GiB instead of {gpu.memory_gib:.0f} GiB", gpu=other.name)
        if fix is not None and fix["fits"]:
            sizes.append(other.memory_gb_nominal)
            out.append(fix)
    fitting = math.floor(planned["max_concurrency"])
    if 1 <= fitting < args.concurrency and planned["memory_fits"]:
        out.append(_fix(args, f"{fitting} concurrent requests (--concurrency {fitting})",
                        "what the KV pool holds as it is", concurrency=fitting))
    return [fix for fix in out if fix is not None]


def capacity(args: argparse.Namespace, compiled) -> dict:
    """Replicas and GPUs for ``--rate`` (seed 7.4): from measured ``--occupancy-s`` and
    ``--concurrency``, else from one replica's saturation rate on the engine model (Poisson arrivals
    of ``context - output_tokens``-token prompts and ``output_tokens``-token answers)."""
    gpus_per_replica = args.tp * args.pp
    if args.occupancy_s is not None:
        serving = replicas_needed(args.rate, args.occupancy_s, args.concurrency)
        per_replica, concurrency, occupancy = args.concurrency / args.occupancy_s, args.concurrency, args.occupancy_s
        basis, limit = "given (--occupancy-s, --concurrency)", ""
    else:
        if args.output_tokens is None:
            raise InputError("--rate: give --output-tokens (mean output tokens of a request) for the engine model's "
                             "capacity, or --occupancy-s and --concurrency measured on a replica")
        compiled.require()
        traffic = Traffic.model_validate({
            "arrival": {"kind": "poisson", "rate_per_s": max(args.rate, 1e-3)},
            "input_tokens": {"kind": "fixed", "value": args.context - args.output_tokens},
            "output_tokens": {"kind": "fixed", "value": args.output_tokens}})
        cap = replica_capacity(compiled, traffic)
        per_replica, concurrency, occupancy, limit = cap.requests_per_s, cap.concurrency, cap.occupancy_s, cap.limit
        serving = max(math.ceil(args.rate / per_replica - 1e-9), 1)
        basis = "the engine model: one replica's saturation rate (servopt predict --analytic)"
    replicas = fleet_size(serving, args.redundancy)
    return {"rate_per_s": args.rate, "measured": args.occupancy_s is not None, "requests_per_s_per_replica": per_replica, "concurrency": concurrency,
            "occupancy_s": occupancy, "basis": basis, "limit": limit, "replicas_needed": args.rate / per_replica,
            "serving_replicas": serving, "redundancy": args.redundancy, "replicas": replicas,
            "gpus_per_replica": gpus_per_replica, "gpus": replicas * gpus_per_replica}


def _gib(value: float) -> str:
    return f"{value / GIB:8.2f} GiB"


def _kv_per_token(r: dict) -> str:
    """KV per token, saying whose: an instance's, and each of its GPUs'."""
    gpus = r["tp"] * r["pp"]
    text = f"{r['kv_bytes_per_token'] / 1024:8.1f} KiB"
    if gpus == 1:
        return text
    text += f" per instance ({r['kv_bytes_per_token_per_gpu'] / 1024:.1f} KiB on each of its {gpus} GPUs"
    return text + (": the MLA latent is stored whole on every TP rank)" if r["kv_latent_on_every_gpu"] else ")")


def _fix_line(f: dict) -> str:
    verdict = "fits" if f["fits"] else "still does not fit"
    return (f"  - {f['change']}: weights {f['weights_bytes_per_gpu'] / GIB:.2f} GiB per GPU, KV pool "
            f"{f['kv_cache_bytes_per_gpu'] / GIB:.2f} GiB per GPU holds {f['max_concurrency']:.1f} requests; "
            f"{verdict} (headroom {f['headroom_bytes_per_gpu'] / GIB:+.2f} GiB per GPU); {f['why']}")


def _capacity_lines(c: dict) -> list[str]:
    lines = ["", "Capacity",
             f"  per replica             {c['requests_per_s_per_replica']:.3g} req/s: {c['concurrency']:.3g} requests at "
             f"once x {c['occupancy_s']:.3g} s each ({c['basis']})"]
    if c["limit"]:
        lines.append(f"  what limits it          {c['limit']}")
    how = (f"{c['rate_per_s']:g} x {c['occupancy_s']:g} / {c['concurrency']:g}" if c["measured"]
           else f"{c['rate_per_s']:g} / {c['requests_per_s_per_replica']:.3g}")
    lines.append(f"  {'replicas for ' + format(c['rate_per_s'], 'g') + ' req/s':<24s}ceil({how}) = "
                 f"ceil({c['replicas_needed']:.3g}) = {c['serving_replicas']}")
    spare = c["replicas"] - c["serving_replicas"]
    lines.append(f"  {'with ' + format(c['redundancy'], '.0%') + ' redundancy':<24s}ceil({c['serving_replicas']} x {1 + c['redundancy']:g}) = "
                 f"{c['replicas']} replicas ({spare} spare) = {c['gpus']} GPUs")
    return lines


def _spread(r: dict, key: str, scale: float, unit: str) -> str:
    """`` (80%: low-high unit)`` of a figure's interval, or nothing where no run measured its kind."""
    low, high = (r.get("intervals") or {}).get(key, (None, None))
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return ""
    digits = 1 if scale == 1.0 else 2
    return f" (80%: {low * scale:.{digits}f}-{high * scale:.{digits}f}{unit})"


def render(result: dict) -> str:
    r = result
    per_gpu = " per GPU" if r["tp"] * r["pp"] > 1 else ""
    per_instance = " per instance" if r["tp"] * r["pp"] > 1 else ""
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
        f"  weights                 {_gib(r['weights_bytes'])}  ({r['num_params'] / 1e9:.2f} B params; {_gib(r['weights_bytes_per_gpu']).strip()}{per_gpu})",
        f"  KV per token            {_kv_per_token(r)}",
        f"  KV per request          {_gib(r['kv_bytes_per_request'])}{per_instance}",
        f"  KV for {r['concurrency']:<4} requests     {_gib(r['kv_bytes_total'])}{per_instance}",
        f"  activations (peak)      {_gib(r['activation_peak_bytes_per_gpu'])}{per_gpu}",
        f"  non-torch, CUDA graphs  {_gib(r['non_torch_bytes_per_gpu'])}, {_gib(r['cuda_graph_bytes_per_gpu']).strip()}{per_gpu}",
        f"  budget ({r['gpu_memory_utilization']:.2f} x GPU)    {_gib(r['budget_bytes_per_gpu'])}{per_gpu}",
        f"  KV cache pool           {_gib(r['kv_cache_bytes_per_gpu'])}{per_gpu}: {r['kv_capacity_tokens']:,} tokens, {r['kv_cache_blocks']:,} blocks",
        f"  fits                    {'yes' if r['fits'] else 'NO'} (headroom {r['headroom_bytes_per_gpu'] / GIB:+.2f} GiB{per_gpu})",
        f"  max concurrency         {r['max_concurrency']:8.1f} requests at {r['context_tokens']} tokens"
        + _spread(r, "max_concurrency", 1.0, ""),
    ]
    lines += [f"  problem: {p}" for p in r["problems"]]
    lines += [f"  warning: {w}" for w in r["warnings"]]
    if not r["fits"]:
        fixes = r.get("fixes") or []
        lines.append(f"  {r['concurrency']} x {r['context_tokens']} tokens does not fit on {r['tp'] * r['pp']} x {r['gpu']} "
                     f"({r['gpu_memory_gb']:g} GB)" + ("; what would make it fit, each planned:" if fixes else
                                                       "; no change servopt knows makes it fit"))
        lines += [_fix_line(f) for f in fixes]
    lines += [
        "",
        "Roofline",
        f"  decode floor            {r['decode_floor_s_per_token'] * 1e3:8.2f} ms/token ((weights + KV bytes) / bandwidth)",
        f"  balance point           {r['balance_point_flops_per_byte']:8.0f} FLOP/byte",
        f"  decode intensity        {r['decode_arithmetic_intensity']:8.1f} FLOP/byte at batch {r['concurrency']} ({r['decode_bound']}-bound)",
        f"  prefill intensity       {r['prefill_arithmetic_intensity']:8.1f} FLOP/byte ({r['prefill_bound']}-bound)",
        f"  decode step             {r['decode_step_s'] * 1e3:8.2f} ms at batch {r['concurrency']}"
        + _spread(r, "decode_step_s", 1e3, " ms"),
        f"  prefill of one prompt   {r['prefill_s'] * 1e3:8.2f} ms ({r['context_tokens']} tokens, chunks of {r['max_num_batched_tokens']})"
        + _spread(r, "prefill_s", 1e3, " ms"),
    ]
    if r.get("capacity"):
        lines += _capacity_lines(r["capacity"])
    lines += ["", f"Profile: {r['profile']}" + ("" if r["profile_calibrated"] else "  [UNCALIBRATED]")]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    result = compute_plan(args)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0

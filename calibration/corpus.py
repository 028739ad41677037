"""The development corpus: every public measured vLLM serving run servopt is checked against, as a run it can simulate.

Each :class:`MeasuredRun` carries the deployment that served the run, the traffic its client sent
(:mod:`.bench_clients`: send times, lengths, what the prefix cache held), the vLLM version, and the
metrics the run measured. A run servopt cannot simulate faithfully keeps its row with ``skip`` saying
why (an unknown model, tensor parallelism across Kubernetes pods on an unknown network, per-request
lengths not published, a feature servopt does not model yet), so every measurement is accounted for.

Sources (all public, with provenance in ``../shared/data/measured/PROVENANCE.md`` and
``calibration/measured/PROVENANCE.md``):

- aiconfigurator's silicon rows of vLLM (``silicon_*.csv``: the dense H100 rows, aiperf closed-loop
  clients behind Dynamo; MiniMax-M2.5's MoE rows on H100 to B300, InferenceX's benchmark_serving
  behind ``vllm serve``), simulated as :mod:`.silicon` describes; a
  row whose quant-mode columns name a format its model's own checkpoint is not in (MiniMax-M2.5's
  ``fp4`` rows) runs the catalog's public release of that model in that format
  (:func:`~servopt.costmodels.checkpoints.checkpoints_of`: ``nvidia/MiniMax-M2.5-NVFP4``);
- ``vllm bench serve`` / ``benchmark_serving.py`` results (``vllm_bench_p99_dev.csv``,
  ``vllm_bench_a100_dennislee22.csv``, ``vllm_bench_public.csv``): open-loop or all-at-once runs,
  simulated request by request. Runs of one *session* (one server, one benchmark after another, as
  the sources' scripts ran them) share the server's prefix cache: :data:`SESSIONS` says, per source,
  which rows form a session and in which order, and why.

Groups for cross-validation are (model, GPU, weight dtype).

Example:
    >>> runs = load_corpus(SHARED_E2E, REPO_E2E) if SHARED_E2E.exists() else []
    >>> all(run.skip or run.deployment is not None for run in runs)
    True
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..costmodels.architectures import resolve_model
from ..costmodels.checkpoints import checkpoints_of
from ..costmodels.deployment import Deployment
from ..costmodels.errors import InputError
from ..costmodels.hardware import get_gpu
from ..costmodels.profile import PerformanceProfile
from ..costmodels.serving.compiled import compile_deployment
from ..costmodels.serving.traffic import Traffic
from ..costmodels.userfiles import read_json
from ..costmodels.engines.vllm import default_batch_limits, parse_vllm_version, resolve_engine
from .bench_clients import SessionCache, VllmBenchServe, routed_hits
from .silicon import REQUESTS_PER_CLIENT, served_by_vllm_api_server, silicon_run, weight_scheme
from .tables import gpu_name_for

ROOT = Path(__file__).resolve().parents[1]
SHARED_E2E = ROOT.parent / "shared" / "data" / "measured" / "e2e"
REPO_E2E = ROOT / "calibration" / "measured" / "e2e"
# The two harnesses behind the silicon rows (calibration/silicon.py).
SILICON_AIPERF = "aiperf closed loop (silicon)"
SILICON_INFERENCEX = "InferenceX benchmark_serving (silicon)"
BENCH_TABLES = ("vllm_bench_p99_dev.csv", "vllm_bench_a100_dennislee22.csv", "vllm_bench_public.csv")
# A bench table's optional ``prefix_cache`` column: 'cold' (the server had not seen the prompts; runs
# of one session still share its cache, :data:`SESSIONS`) or 'warm' (every prompt was served before).
PREFIX_CACHE_STATES = ("cold", "warm")
METRICS = ("ttft", "tpot", "itl")
STATS = ("mean", "median", "p99")
# Inter-node links of the sources' clusters (GB/s per GPU): Azure ND96asr_v4 has one 200 Gb/s HDR
# InfiniBand port per GPU; without it NCCL runs over TCP on the VM's 24 Gb/s Ethernet, of which
# sockets reach about two thirds.
INFINIBAND_HDR_GBPS = 25.0
TCP_24GBIT_GBPS = 2.0


@dataclass(frozen=True)
class MeasuredRun:
    """One measured serving run and how to simulate it."""

    run_id: str
    source: str
    model: str
    gpu: str
    dtype: str
    vllm_version: str
    protocol: str
    measured: dict[str, float]
    deployment: Deployment | None = None
    traffic: Traffic | None = None
    skip: str = ""
    notes: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def group(self) -> tuple[str, str, str]:
        """(model, GPU, weight dtype): the model as servopt's catalog names it (a quantized
        checkpoint counts as its base model, the dtype says how it was served)."""
        try:
            name = resolve_model(self.model).spec.name
        except InputError:
            name = self.model
        return (name.split("/")[-1], self.gpu, self.dtype)


def _text(value: object) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _number(value: object) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _measured(row: dict) -> dict[str, float]:
    out = {}
    for metric in METRICS:
        for stat in STATS:
            value = _number(row.get(f"{stat}_{metric}_ms"))
            if math.isfinite(value):
                out[f"{stat}_{metric}_ms"] = value
    return out


# --- aiconfigurator silicon rows ----------------------------------------------------------------
SILICON_COLUMNS = ("backend", "model_path", "system", "isl", "osl", "tp_size", "silicon_ttft_ms", "silicon_tpot_ms")


def _off_or_count(value: object) -> int:
    """A parallelism count where empty, 0 and 1 all mean "not used" (tools write any of them)."""
    number = _number(value)
    return int(number) if math.isfinite(number) and number > 1 else 1


_NIGHTLY = re.compile(r"nightly", re.IGNORECASE)


def _measured_date(row: dict) -> str:
    match = re.search(r"measured=(\d{4}-\d{2}-\d{2})", _text(row.get("silicon_data_source")))
    return match.group(1) if match else ""


def _nightly_releases(table: pd.DataFrame) -> dict[int, str]:
    """Rows whose version is a nightly image (``nightly-<commit>``): the newest release the same table
    ran on or before that row's measurement date, the release that nightly builds on."""
    records = table.to_dict("records")
    dated = []
    for row in records:
        version = _text(row.get("backend_version"))
        if version and not _NIGHTLY.search(version) and _measured_date(row):
            dated.append((_measured_date(row), parse_vllm_version(version), version))
    out = {}
    for i, row in enumerate(records):
        if _NIGHTLY.search(_text(row.get("backend_version"))):
            before = [d for d in dated if d[0] <= _measured_date(row)]
            if before:
                out[i] = max(before, key=lambda d: d[1])[2]
    return out


def _served_model(model: str, scheme: str | None) -> str:
    """The checkpoint a row ran: its model's own, or the catalog's release of it in the row's format."""
    try:
        own = resolve_model(model).quantization
    except InputError:
        return model
    if scheme is None or scheme == own:
        return model
    release = checkpoints_of(model).get(scheme)
    return release.id if release is not None else model


def _silicon_row_run(row: dict, index: int, name: str, requests_per_client: int,
                     nightly_release: str | None = None, harness: str | None = None) -> MeasuredRun:
    precision = _text(row.get("precision")) or "bf16"
    harness = harness or ("inferencex" if served_by_vllm_api_server(row) else "aiperf")
    gpu = _gpu(_text(row["system"])) or _text(row["system"])
    try:
        scheme = weight_scheme(row)
    except InputError as err:
        scheme, refused = None, str(err)
    else:
        refused = ""
    version = nightly_release or _text(row.get("backend_version")) or "0.12.0"
    base = dict(run_id=f"silicon:{name}:{index}", source=f"{name} row {index}", model=_text(row["model_path"]), gpu=gpu,
                dtype=precision if refused or scheme is None else scheme,
                vllm_version=version,
                protocol=SILICON_INFERENCEX if harness == "inferencex" else SILICON_AIPERF,
                measured={"mean_ttft_ms": _number(row["silicon_ttft_ms"]), "mean_tpot_ms": _number(row["silicon_tpot_ms"])},
                extra={"isl": row["isl"], "osl": row["osl"], "tp": row["tp_size"],
                       "concurrency": row.get("silicon_concurrency"), "row_id": _text(row.get("id")) or f"row {index}"})
    backend = _text(row["backend"]).lower()
    if backend != "vllm":
        return MeasuredRun(**base, skip=f"framework '{backend}' is not modelled (servopt predicts vLLM)")
    if _text(row.get("mode")) not in ("", "agg"):
        return MeasuredRun(**base, skip="disaggregated layout without its client concurrency")
    if not math.isfinite(_number(row.get("silicon_concurrency"))):
        return MeasuredRun(**base, skip="client concurrency not recorded")
    if _gpu(_text(row["system"])) is None:
        return MeasuredRun(**base, skip=f"GPU '{_text(row['system'])[:40]}' not in the catalog")
    if refused:
        return MeasuredRun(**base, skip=refused)
    if _NIGHTLY.search(version):
        return MeasuredRun(**base, skip=f"nightly image '{version[:40]}' with no dated release beside it")
    try:
        resolve_model(base["model"])
        row = {**row, "backend_version": version, "model_path": _served_model(base["model"], scheme)}
        run = silicon_run(row, gpu, requests_per_client, pp=_off_or_count(row.get("pp_size")),
                          data_parallel_size=_off_or_count(row.get("attention_dp_size")),
                          expert_parallel=_off_or_count(row.get("moe_ep_size")) > 1, harness=harness)
    except InputError as err:
        return MeasuredRun(**base, skip=str(err))
    except ValueError as err:  # a layout the deployment model refuses (pydantic names the rule)
        return MeasuredRun(**base, skip=f"layout not modelled: {str(err).splitlines()[-1].strip()}")
    return MeasuredRun(**{**base, "model": run.model}, deployment=run.deployment, traffic=run.traffic)


def silicon_runs(path: Path, table: pd.DataFrame | None = None,
                 requests_per_client: int = REQUESTS_PER_CLIENT, harness: str | None = None) -> list[MeasuredRun]:
    """Every row of a table in aiconfigurator's silicon layout; rows servopt cannot simulate are
    kept with ``skip`` saying why (other frameworks, disaggregated rows, no client concurrency).
    ``requests_per_client``: aiperf's request count over its concurrency; ``harness``: read every
    row as that harness ran it instead of as its source cell says (:mod:`.silicon`)."""
    table = pd.read_csv(path) if table is None else table
    nightly = _nightly_releases(table)
    return [_silicon_row_run(row, i, path.name, requests_per_client, nightly.get(i), harness)
            for i, row in enumerate(table.to_dict("records"))]


# --- vllm bench serve rows ----------------------------------------------------------------------
_FLAG_INT = {"max_num_seqs": r"--max-num-seqs[ =](\d+)", "max_num_batched_tokens": r"--max-num-batched-tokens[ =](\d+)",
             "max_model_len": r"--max-model-len[ =](\d+)", "data_parallel": r"(?:--data-parallel-size|-dp)[ =](\d+)",
             "num_scheduler_steps": r"--num-scheduler-steps[ =](\d+)"}


def _flags(text: str) -> dict:
    out: dict = {}
    for name, pattern in _FLAG_INT.items():
        match = re.search(pattern, text)
        if match:
            out[name] = int(match.group(1))
    match = re.search(r"--gpu-memory-utilization[ =]([0-9.]+)", text)
    if match:
        out["gpu_memory_utilization"] = float(match.group(1))
    # The KV cache a start-up log reported ("Available KV cache memory: 8.22 GiB" per GPU).
    match = re.search(r"available KV cache (?:memory:? )?([0-9.]+) GiB", text, flags=re.IGNORECASE)
    if match:
        out["kv_cache_memory_gib"] = float(match.group(1))
    if "--no-enable-prefix-caching" in text or "prefix caching off" in text:
        out["prefix_caching"] = False
    elif "--enable-prefix-caching" in text:
        out["prefix_caching"] = True
    if "--kv-cache-dtype fp8" in text:
        out["kv_cache_dtype"] = "fp8"
    if "--enable-expert-parallel" in text:
        out["expert_parallel"] = True
    if "--no-enable-chunked-prefill" in text or "--enable-chunked-prefill=False" in text or "chunked prefill off" in text:
        out["chunked_prefill"] = False
    elif "--enable-chunked-prefill" in text:
        out["chunked_prefill"] = True
    if "--enforce-eager" in text:
        out["enforce_eager"] = True
    return out


def _source_of(ref: str) -> str:
    match = re.search(r"github\.com/([^/@ ]+/[^/@ :]+)", ref)
    return match.group(1) if match else (ref.split() or [""])[0]


def run_json_path(ref: str, folders: list[Path]) -> Path | None:
    """The per-request result file a row's ``source_url_or_ref`` names (``vllm_bench_runs/<name>`` or
    the surajssd layout), in the first of ``folders`` that has it."""
    names = re.findall(r"vllm_bench_runs/([^\s;,)]+\.json)", ref)
    match = re.search(r"results_serving_[^/]+/([^/]+)/([^ ]+\.json)", ref)
    if match:
        names.append(f"{match.group(1)}__{match.group(2)}")
    for folder in folders:
        for name in names:
            path = folder / "vllm_bench_runs" / name
            if path.exists():
                return path
    return None


def _stated_version(text: str) -> str:
    """The version a provenance cell settles on: where the source did not log it, the cell gives its
    reasoning and ends "most likely X" (earlier versions in it are evidence, such as "fields added
    after v0.11.0")."""
    _, marker, conclusion = text.partition("most likely")
    return conclusion if marker else text


def _model_name(text: str) -> str:
    """The model id of a cell; a fine-tune the cell says keeps its base's architecture runs as the base."""
    base = re.search(r"fine-tune of ([\w.-]+/[\w.-]+), same architecture", text)
    return base.group(1) if base else text.split(" (")[0].strip()


def _dtype(quantization: str, model: str) -> str:
    text = f"{quantization} {model}".lower()
    for key, name in (("mxfp4", "mxfp4"), ("int4", "int4"), ("awq", "int4"), ("gptq", "int4"), ("w4a16", "int4"),
                      ("w8a8", "int8"), ("int8", "int8"), ("fp8", "fp8")):
        if key in text:
            return "fp8" if key == "fp8" or "fp8" in text.split("w8a8")[0] else name
    return "bf16"


# Per source: how its runs were made, where the shared tables do not say (cited from the source's
# own scripts). ``session`` lists the columns that identify one server's run of benchmarks, in the
# order the script ran them; ``order`` sorts the runs within a session.
SESSIONS = {
    # run_vllm_upstream_benchmark.sh: one server per layout, QPS 01, 04, 16, inf in turn, ShareGPT seed 0.
    "surajssd/llm-k8s": {"session": ["variant"], "order": "request_rate", "dataset_keys": "index"},
    # benchmaq/vllm/bench.py: one VLLMServer per config, its bench list (random 1024, 2048, 4096,
    # 8192, 15000) in turn; random dataset seed 0, so prompt i of a longer run extends prompt i.
    "Scicom-AI-Enterprise-Organization/llm-benchmaxxing": {"session": ["gpu", "model", "variant"], "order": "input_len",
                                                           "dataset_keys": "index"},
    # README sections "Test N": one server each, the tests in the README's order; random dataset, seed 0.
    "dennislee22/vLLM-benchmarking": {"session": ["test"], "order": None, "dataset_keys": "index"},
}


def _gpu(text: str) -> str | None:
    name = gpu_name_for(None, text)
    try:
        return get_gpu(name).name
    except InputError:
        return None


def _bench_row_run(row: dict, table: str, index: int, folders: list[Path]) -> MeasuredRun:
    ref = _text(row["source_url_or_ref"])
    source = _source_of(ref)
    model_id = _model_name(_text(row["model"]))
    gpu = _gpu(_text(row["gpu"])) or _text(row["gpu"])
    version_text = _text(row["vllm_version"])
    quantization = _text(row.get("quantization"))
    notes = f"{_text(row.get('variant'))}; {_text(row.get('notes'))}"
    base = dict(run_id=f"{table}:{index}", source=f"{table} row {index} ({source})", model=model_id, gpu=gpu,
                dtype=_dtype(quantization, model_id), vllm_version=version_text, protocol="vllm bench serve",
                measured=_measured(row), notes=notes[:300])
    try:
        if not version_text.strip():
            raise InputError("empty")
        version = parse_vllm_version(_stated_version(version_text))
    except InputError:
        return MeasuredRun(**base, skip=f"vLLM version unknown ({version_text[:40]})")
    try:
        resolved = resolve_model(model_id)
    except InputError:
        return MeasuredRun(**base, skip=f"model '{model_id}' is not in servopt's catalog")
    if _gpu(_text(row["gpu"])) is None:
        return MeasuredRun(**base, skip=f"GPU '{gpu[:40]}' not in the catalog")
    if not _number(row["tp"]) >= 1:
        return MeasuredRun(**base, skip="tensor parallelism (tp) not stated")
    lower = notes.lower()
    if re.search(r"\d+ gpu pods", lower) and int(_number(row["tp"])) > 1:
        # Ray places each TP rank in its own pod: NCCL then talks between containers (sockets, or
        # across nodes), over an interconnect the source does not record.
        return MeasuredRun(**base, skip="tensor parallelism across Kubernetes pods (interconnect between pods unknown)")
    json_path = run_json_path(ref, folders)
    run_json = None if json_path is None else read_json(json_path, "vllm bench result")
    dataset = _text(row.get("dataset")).lower()
    n = int(_number(row.get("num_prompts")) or 0)
    if run_json is not None and run_json.get("input_lens"):
        inputs = [int(x) for x in run_json["input_lens"]]
        outputs = [max(int(x), 1) for x in run_json["output_lens"]]
    elif "random" in dataset and math.isfinite(_number(row.get("input_len"))) and n:
        inputs = [int(round(_number(row["input_len"])))] * n
        outputs = [max(int(round(_number(row["output_len"]))), 1)] * n
    else:
        return MeasuredRun(**base, skip="per-request lengths not published")
    flags = _flags(_text(row.get("server_flags")))
    tp, pp = int(_number(row["tp"])), _off_or_count(row.get("pp"))
    # --data-parallel-size: ranks of one instance behind vLLM's own load balancer (for an MoE model
    # the experts span every rank).
    data_parallel = flags.get("data_parallel") or (2 if "DP2" in _text(row.get("variant")) else 1)
    gpu_spec = get_gpu(gpu)
    tokens, seqs = default_batch_limits(gpu_spec, version)
    # The run's release decides the flags its server left out (chunked prefill, prefix caching, the
    # V0 budget), as vllm serve of that version did.
    spec = resolved.spec
    steps = flags.get("num_scheduler_steps", 1)
    try:
        engine = resolve_engine(
            version, pp=pp, max_model_len=flags.get("max_model_len") or spec.max_context, mla=spec.mla is not None,
            sliding_window=bool(spec.sliding_window and spec.num_sliding_layers),
            chunked_prefill=flags.get("chunked_prefill"), prefix_caching=flags.get("prefix_caching"),
            num_scheduler_steps=steps, enforce_eager=flags.get("enforce_eager", False),
            max_num_seqs=flags.get("max_num_seqs", seqs))
    except InputError as err:
        return MeasuredRun(**base, skip=str(err))
    tokens = engine.max_num_batched_tokens or tokens
    across = "no InfiniBand" in _text(row["gpu"]) or "no-ib" in ref
    deployment = Deployment(
        gpu=gpu, tp=tp, pp=pp, data_parallel_size=data_parallel, enable_expert_parallel=flags.get("expert_parallel", False),
        vllm_version=".".join(map(str, version)),
        quantization=resolved.quantization,
        max_num_seqs=flags.get("max_num_seqs", seqs), max_num_batched_tokens=flags.get("max_num_batched_tokens", tokens),
        max_model_len=flags.get("max_model_len"),
        enable_prefix_caching=engine.prefix_caching, enable_chunked_prefill=engine.chunked_prefill,
        enforce_eager=flags.get("enforce_eager", False), num_scheduler_steps=steps,
        kv_cache_dtype=flags.get("kv_cache_dtype", "auto"),
        internode_gbps=TCP_24GBIT_GBPS if across else INFINIBAND_HDR_GBPS, kv_cache_memory_gib=flags.get("kv_cache_memory_gib"),
        **({"gpu_memory_utilization": flags["gpu_memory_utilization"]} if "gpu_memory_utilization" in flags else {}),
    )
    rate = _number(row.get("request_rate"))
    rate = math.inf if not math.isfinite(rate) else rate
    prefix_cache = _text(row.get("prefix_cache")).strip().lower() or "cold"
    if prefix_cache not in PREFIX_CACHE_STATES:
        raise InputError(f"{table} row {index}: prefix_cache '{prefix_cache[:20]}' is not one of "
                         f"{', '.join(PREFIX_CACHE_STATES)} (leave it empty for cold)")
    extra = {"inputs": inputs, "outputs": outputs, "rate": rate, "dataset": dataset, "source_repo": source,
             "session": None, "version": version, "max_concurrency": _number(row.get("max_concurrency")),
             "json_path": json_path, "prefix_cache": prefix_cache}
    rules = SESSIONS.get(source)
    if rules is not None:
        test = re.search(r"Test (\d+)", notes)
        keys = {"variant": _text(row.get("variant")), "gpu": gpu, "model": model_id, "test": test.group(1) if test else ""}
        extra["session"] = (source, *[keys[k] for k in rules["session"]])
        extra["order"] = {"request_rate": rate, "input_len": inputs[0], None: index}[rules["order"]]
    return MeasuredRun(**base, deployment=deployment, extra=extra)


def _kv_capacity_tokens(run: MeasuredRun) -> float:
    """Tokens of full-attention context the run's KV pools hold (its deployment compiled: its own
    limits and data-parallel ranks, vLLM's defaults for the rest)."""
    gpu = get_gpu(run.deployment.gpu)
    compiled = compile_deployment(resolve_model(run.model).spec, run.deployment, gpu, PerformanceProfile.spec_default(gpu))
    if compiled.error:
        raise InputError(f"run {run.run_id}: {compiled.error}")
    return compiled.kv_pool_tokens()


def _with_traffic(run: MeasuredRun, cache: SessionCache | None) -> MeasuredRun:
    """Build the run's traffic: send times from the client's seeded generator, prefix hits from the session."""
    extra = run.extra
    inputs, outputs = extra["inputs"], extra["outputs"]
    concurrency = extra["max_concurrency"]
    client = VllmBenchServe(request_rate=extra["rate"], max_concurrency=int(concurrency) if math.isfinite(concurrency)
                            else None, seed=0, vllm_version=run.vllm_version)
    keys = list(range(len(inputs)))
    cached = None
    if cache is not None and run.deployment.enable_prefix_caching:
        if extra.get("prefix_cache") == "warm":
            # The table says the server had served these prompts before the run.
            cache.record(keys, inputs, outputs)
        # The tool's initial test prompt (request 0) runs alone just before the run.
        cache.warm(keys[0], inputs[0], outputs[0])
        ranks = run.deployment.replicas * run.deployment.data_parallel_size
        cached = routed_hits(cache.hits(keys, inputs), ranks, run.run_id).tolist()
        cache.record(keys, inputs, outputs)
    return run.__class__(**{**run.__dict__, "traffic": client.traffic(inputs, outputs, cached)})


BENCH_COLUMNS = ("model", "gpu", "vllm_version", "tp")


def _with_sessions(runs: list[MeasuredRun]) -> list[MeasuredRun]:
    """Give every simulable run its traffic, runs of one session in order through one prefix cache."""
    out: list[MeasuredRun] = []
    sessions: dict = {}
    for run in runs:
        if run.skip:
            out.append(run)
        elif run.extra.get("session") is None:
            out.append(_with_traffic(run, SessionCache(_kv_capacity_tokens(run))))
        else:
            sessions.setdefault(run.extra["session"], []).append(run)
    for members in sessions.values():
        cache = SessionCache(_kv_capacity_tokens(members[0]))
        for run in sorted(members, key=lambda r: r.extra["order"]):
            out.append(_with_traffic(run, cache))
    return out


def bench_runs(folders: list[Path]) -> list[MeasuredRun]:
    """Every row of the ``vllm bench serve`` tables found in ``folders``, with its traffic."""
    runs: list[MeasuredRun] = []
    for folder in folders:
        for name in BENCH_TABLES:
            path = folder / name
            if path.exists():
                table = pd.read_csv(path)
                runs += [_bench_row_run(row, name, i, folders) for i, row in enumerate(table.to_dict("records"))]
    return _with_sessions(runs)


def table_runs(path: Path, table: pd.DataFrame) -> list[MeasuredRun]:
    """The runs of one measured table, in the input's row order, whichever layout it has:
    aiconfigurator's silicon rows (``silicon_ttft_ms``) or ``vllm bench serve`` results (``vllm_version``,
    the metrics as ``mean_ttft_ms``, ``p99_itl_ms`` and so on; per-request lengths in
    ``vllm_bench_runs/`` next to it). A row that cannot be simulated keeps ``skip`` with the reason."""
    silicon = "silicon_ttft_ms" in table
    missing = [c for c in (SILICON_COLUMNS if silicon else BENCH_COLUMNS) if c not in table]
    if missing:
        raise InputError(f"e2e table '{path}' lacks the column(s) {', '.join(missing)} (aiconfigurator's silicon "
                         f"layout needs {', '.join(SILICON_COLUMNS)}; vllm bench results need {', '.join(BENCH_COLUMNS)})")
    if silicon:
        runs = silicon_runs(path, table)
    else:
        table = table.reindex(columns=list(dict.fromkeys([*table.columns, "source_url_or_ref"])))
        runs = _with_sessions([_bench_row_run(row, path.name, i, [path.parent])
                               for i, row in enumerate(table.to_dict("records"))])
    return sorted(runs, key=lambda r: int(r.run_id.rsplit(":", 1)[1]))


def load_corpus(shared_e2e: Path = SHARED_E2E, repo_e2e: Path = REPO_E2E) -> list[MeasuredRun]:
    """Every measured run of the shared data and the repository's public tables."""
    runs: list[MeasuredRun] = []
    for silicon in sorted(shared_e2e.glob("silicon_*.csv")) if shared_e2e.exists() else ():
        runs += silicon_runs(silicon)
    runs += bench_runs([p for p in (shared_e2e, repo_e2e) if p.exists()])
    return runs


def compiled_run(run: MeasuredRun, profile: PerformanceProfile):
    """The run's deployment compiled for its model (the checkpoint's own format where the run names none)."""
    resolved = resolve_model(run.model)
    return compile_deployment(resolved.spec, run.deployment, get_gpu(run.deployment.gpu), profile)


def predict_run(run: MeasuredRun, profile: PerformanceProfile, seed: int = 0) -> dict[str, float]:
    """Simulate a run as measured: the same metric names as ``run.measured`` (ms), plus ``saturated``,
    the requests' mean lengths, the share of P99 TTFT spent queueing, and ``unloaded_ttft_ms``: one
    mean request's TTFT alone on the deployment (front end, tokenization and the prefill of its
    uncached prompt in the deployment's chunks)."""
    from ..costmodels.serving.simulator import simulate_compiled

    compiled = compiled_run(run, profile)
    result = simulate_compiled(compiled, run.traffic, seed=seed)
    summary, requests = result.summary, result.requests
    out = {"saturated": float(summary.saturated), "queue_share": summary.queueing_share_p99_ttft}
    for metric in METRICS:
        stats = getattr(summary, f"{metric}_s")
        for stat, value in (("mean", stats.mean), ("median", stats.p50), ("p99", stats.p99)):
            out[f"{stat}_{metric}_ms"] = value * 1e3
    prompt = float(requests.input_tokens.mean())
    uncached = max(prompt - float(requests.cached_tokens.mean()), 1.0)
    role = compiled.roles[0]
    prefill_s = role.cost.prefill_time_s(math.ceil(uncached), role.limits.max_num_batched_tokens)
    out.update(mean_input_tokens=prompt, mean_output_tokens=float(requests.output_tokens.mean()),
               unloaded_ttft_ms=1e3 * (compiled.request_overhead_s + compiled.tokenize_s_per_token * prompt + prefill_s))
    return out

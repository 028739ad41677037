"""The workload file: the model, the traffic it must serve, its targets, and how to search.

Every section but ``model`` and ``traffic`` is optional::

    model: llama-3.1-8b                      # preset alias, Hugging Face id, or path to config.json
    alternatives:                            # other models the search may pick instead
      - {model: llama-3.2-3b, accuracy_drop_pct: 6.0}
    traffic: {arrival: {kind: poisson, rate_per_s: 20}, input_tokens: ..., output_tokens: ...}
    slo: {p99_ttft_s: 1.0, p99_tpot_s: 0.05, p99_e2e_s: 20}   # n_minus_1: true: also with one replica down
    objective: {latency: e2e, cost: usd_per_hour}   # P99 to minimize: e2e, ttft or tpot
    # cost: usd_per_hour (the fleet), usd_per_output_mtoken ($ per million output tokens) or
    # usd_per_total_mtoken ($ per million tokens, input + output), at the offered load
    accuracy: {max_drop_pct: 2.0, overrides: {awq: 3.0}}
    gpus: {h100: {price_per_gpu_hour: 2.50}, a100-80gb: {}}   # or a list of names
    profiles: {h100: my_h100_profile.json}   # default: the shipped calibration, else spec defaults
    limits: {max_gpus: 32, gpus_per_node: 8}
    pricing: {whole_nodes: true}             # every GPU of each node a fleet occupies; false: the GPUs used;
                                             # default: as each GPU's price is quoted (a node's or a GPU's)
    redundancy: 0.2                          # spare replicas on top of what the traffic needs; > 0 also
                                             # reports each point's P99s with one replica down (N-1)
    budget: {trials: 200}                    # time_s: 600 adds a wall-clock ceiling
    sampler: nsga2                           # or tpe, or screen (every deployment estimated, the front simulated)
    seed: 0
    storage: sqlite:///runs/chat/study.db    # journal:///file or any SQLAlchemy URL; default: DIR/study.journal
    # (--storage and $SERVOPT_STORAGE come first; a password in it is used to connect, never saved)
    space: {tp: [1, 2], quantization: [bf16, fp8], max_num_seqs: {low: 16, high: 512}}
    speculation: [{method: ngram, acceptance_rate: 0.6}]   # default: off
    checkpoints: {awq: hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4}

Example:
    >>> w = Workload.model_validate({
    ...     "model": "llama-3.1-8b",
    ...     "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 10},
    ...                 "input_tokens": {"kind": "fixed", "value": 1024},
    ...                 "output_tokens": {"kind": "fixed", "value": 256}},
    ...     "slo": {"p99_ttft_s": 2.0}})
    >>> w.slo.p99_ttft_s, w.objective.latency, w.sampler
    (2.0, 'e2e', 'nsga2')
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from ..costmodels.deployment import MAX_ENGINES, SpeculativeMethod
from ..costmodels.errors import MAX_TOKENS, InputError, Name, Seconds, Spec, validate_spec
from ..costmodels.hardware import GPUPrice
from ..costmodels.model_sources import check_model_id
from ..costmodels.serving.slo import SLO
from ..costmodels.serving.traffic import Traffic
from ..costmodels.objectives import COSTS, LATENCIES
from ..costmodels.userfiles import read_yaml_mapping, shown

Percent = Annotated[float, Field(ge=0, le=100)]


LatencyMetric = Literal[tuple(LATENCIES)]  # type: ignore[valid-type]
CostMetric = Literal[tuple(COSTS)]  # type: ignore[valid-type]


class Objective(Spec):
    """What the search trades off: a cost against one P99 latency."""

    latency: LatencyMetric = Field(default="e2e", description="which P99 to minimize")
    cost: CostMetric = Field(
        default="usd_per_hour",
        description="fleet $/hour, or $ per million output tokens, or per million tokens (input + output), "
        "at the offered load",
    )

    @field_validator("cost", mode="before")
    @classmethod
    def _which_tokens(cls, value: Any) -> Any:
        if value == "usd_per_mtoken":  # the name once meant output tokens only: make the choice explicit
            raise ValueError("say which tokens: usd_per_output_mtoken (output tokens) or usd_per_total_mtoken "
                             "(input + output tokens)")
        return value


class Accuracy(Spec):
    """The quality budget: the largest drop (percent of the unquantized model's score) allowed."""

    max_drop_pct: Percent = 3.0
    overrides: dict[Name, Percent] = Field(
        default_factory=dict, description="scheme (or kv_fp8) -> drop in percent, replacing the shipped table"
    )
    model_score: float | None = Field(
        default=None, gt=0, le=1e9, description="the main model's score, when alternatives give accuracy_score"
    )


class Alternative(Spec):
    """Another model the search may serve instead, with what it costs in quality."""

    model: ModelId
    accuracy_drop_pct: Percent | None = Field(default=None, description="drop against the main model")
    accuracy_score: float | None = Field(default=None, gt=0, le=1e9, description="its score (needs accuracy.model_score)")
    checkpoint: ModelId | None = Field(default=None, description="the id to serve, when not the model name")

    @model_validator(mode="after")
    def _one_accuracy(self) -> Alternative:
        if (self.accuracy_drop_pct is None) == (self.accuracy_score is None):
            raise ValueError("give exactly one of accuracy_drop_pct and accuracy_score")
        return self


class GPUChoice(Spec):
    """A candidate GPU; a price set here replaces the catalog's."""

    price_per_gpu_hour: GPUPrice | None = None


class Limits(Spec):
    max_gpus: int = Field(default=64, ge=1, le=MAX_ENGINES,
                          description="the whole fleet, all replicas and roles (at most the engines servopt simulates)")
    gpus_per_node: int | None = Field(default=None, ge=1, le=1024, description="default: each GPU's catalog value")


class Pricing(Spec):
    """How a fleet is billed. By default as each GPU's price is quoted (the catalog's ``price_per``): a
    price of an 8-GPU instance rents whole nodes, every node the instances occupy, placed as
    ``servopt export`` places them (three TP1 prefill instances and one TP8 decode instance use 11
    GPUs and, on 8-GPU nodes, rent 16); a price per GPU rents the GPUs used. ``whole_nodes: true``
    rents whole nodes of every GPU, ``false`` only the GPUs used. Reports show GPUs used and GPUs
    rented either way."""

    whole_nodes: bool | None = Field(
        default=None, description="pay for every GPU of each node a fleet occupies (true), for the GPUs used (false), "
        "or as each GPU's price is quoted (default)")


MAX_TRIALS = 1_000_000
MAX_TIME_S = 365 * 86400.0  # the bound of every Seconds field


class Budget(Spec):
    """When the search stops: after ``trials`` finished trials (counted over every worker of the
    study), or at the optional ceiling of ``time_s`` seconds, whichever comes first. A budget in
    trials makes a seed reproduce the same front on any machine, loaded or idle; a time ceiling that
    cuts the search short depends on the machine's speed."""

    trials: int | None = Field(default=200, ge=1, le=MAX_TRIALS)
    time_s: Seconds | None = None

    @model_validator(mode="after")
    def _some_budget(self) -> Budget:
        if self.trials is None and self.time_s is None:
            raise ValueError("give trials, time_s or both")
        return self


class Fidelity(Spec):
    """Simulated requests: per promising trial (a short simulation first, the search's length only for
    trials it does not settle), and when the final front is re-checked."""

    search_requests: int = Field(default=1500, ge=50, le=100_000)
    final_requests: int = Field(default=6000, ge=50, le=100_000)
    first_requests: int | None = Field(
        default=None, ge=50, le=100_000,
        description="a short simulation first: a trial whose P99 interval lies above an SLO, or that a simulated "
        "configuration costing no more beats, stops there; default search_requests / 4 (at least 200, else one "
        "simulation); search_requests or more: one simulation")
    screen_margin: float = Field(
        default=0.25, ge=0, le=100,
        description="simulate a trial unless its estimate is this much worse than a simulated one, or than an SLO",
    )


class SpeculationOption(Spec):
    """A speculative decoding method the search may use (g, the drafted tokens, is searched)."""

    method: SpeculativeMethod
    draft_model: ModelId | None = None
    acceptance_rate: float | None = Field(default=None, gt=0, lt=1)

    @model_validator(mode="after")
    def _draft(self) -> SpeculationOption:
        if self.method in ("draft_model", "eagle", "eagle3") and not self.draft_model:
            raise ValueError(f"method '{self.method}' needs draft_model (the draft or head checkpoint)")
        return self

    @property
    def label(self) -> str:
        return self.method if not self.draft_model else f"{self.method}:{self.draft_model}"


def _model_id(value: str | None, info: ValidationInfo) -> str | None:
    """Model ids are checked where they are read: no control characters, the Hugging Face id
    grammar on the whole id, or an existing local path (they end up in launch scripts)."""
    if value is None:
        return value
    try:
        return check_model_id(value, info.field_name or "model")
    except InputError as err:
        raise ValueError(str(err).split(": ", 1)[1]) from None


ModelId = Annotated[str, AfterValidator(_model_id)]


class Checkpoints(Spec):
    """Pre-quantized checkpoints of the main model to serve for a weight scheme (each must be a
    checkpoint of that scheme). Without one, the search uses servopt's catalog of public checkpoints;
    a scheme with neither (and that vLLM cannot apply at start-up, as it does fp8) is not searched."""

    int8: ModelId | None = None
    awq: ModelId | None = None
    gptq: ModelId | None = None
    fp8: ModelId | None = None
    w8a16: ModelId | None = None
    nvfp4: ModelId | None = None


class Workload(Spec):
    """A user's workload file (see the module docstring for every section)."""

    model: ModelId = Field(description="catalog alias, Hugging Face id, or path to a checkpoint folder / config.json")
    alternatives: list[Alternative] = Field(default_factory=list)
    traffic: Traffic
    slo: SLO = Field(default_factory=SLO)
    objective: Objective = Field(default_factory=Objective)
    accuracy: Accuracy = Field(default_factory=Accuracy)
    gpus: dict[Name, GPUChoice] | None = Field(
        default=None, description="a list of GPU names, or name -> {price_per_gpu_hour}; default: the whole catalog"
    )
    limits: Limits = Field(default_factory=Limits)
    pricing: Pricing = Field(default_factory=Pricing)
    profiles: dict[Name, Name] = Field(
        default_factory=dict, description="GPU -> performance profile JSON (default: the shipped one)"
    )
    redundancy: float = Field(default=0.0, ge=0, le=4, description="0.3 = 30% spare replicas")
    budget: Budget = Field(default_factory=Budget)
    sampler: Literal["nsga2", "tpe", "screen"] = Field(
        default="nsga2", description="nsga2 or tpe: that sampler; screen: estimate every deployment of the space and "
        "simulate those that may reach the front, cheapest first (NSGA-II where the space is too large)")
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    storage: Name | None = Field(default=None, description="journal:///path/file or an SQLAlchemy URL; default: the "
                                 "journal file study.journal in the job folder")
    space: dict[Name, Any] = Field(
        default_factory=dict, description="pin (a value) or narrow (a list, or {low, high}) knobs; checked by the search "
        "space; tp also pins or narrows prefill_tp and decode_tp (P/D instances) unless they are given"
    )
    # Off unless listed: acceptance depends on the task (n-gram needs repetition), and a guessed
    # rate would put speculative configurations on the front that real traffic may not reward.
    speculation: list[SpeculationOption] = Field(default_factory=list)
    checkpoints: Checkpoints = Field(default_factory=Checkpoints)
    max_model_len: int | None = Field(default=None, ge=16, le=MAX_TOKENS, description="default: from the traffic's lengths")
    fidelity: Fidelity = Field(default_factory=Fidelity)

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpu_list(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not all(isinstance(name, str) for name in value):
                raise ValueError("expected GPU names")
            return {name: {} for name in value}
        if value is not None and not isinstance(value, dict):
            raise ValueError("expected a list of GPU names, or a mapping of GPU name to {price_per_gpu_hour: ...}")
        return {name: ({} if choice is None else choice) for name, choice in value.items()} if value else value

    @model_validator(mode="after")
    def _check(self) -> Workload:
        if any(a.accuracy_score is not None for a in self.alternatives) and self.accuracy.model_score is None:
            raise ValueError("alternatives give accuracy_score: set accuracy.model_score, the main model's score")
        labels = [option.label for option in self.speculation]
        if len(set(labels)) != len(labels):
            raise ValueError("speculation lists the same method and draft model twice")
        if self.gpus is not None and not self.gpus:
            raise ValueError("gpus is empty; leave it out to search the whole catalog")
        if self.traffic.single_output_token and ("tpot" in self.slo.targets() or self.objective.latency == "tpot"):
            raise ValueError("every request asks for one output token, so no request has a time per output token: "
                             "drop slo.p99_tpot_s and do not use objective.latency tpot")
        return self

    def warnings(self) -> list[str]:
        """What the commands print before they run, one line each (and the report repeats): targets
        that read as another unit (:meth:`~servopt.costmodels.serving.slo.SLO.unit_warnings`)."""
        out = self.slo.unit_warnings("slo")
        for i, c in enumerate(self.traffic.classes or []):
            out += c.slo.unit_warnings(f"traffic.classes.{i}.slo")
        return out

    @property
    def gpu_prices(self) -> dict[str, float | None]:
        """Candidate GPU name -> price override (None: the catalog's), or {} for the whole catalog."""
        if self.gpus is None:
            return {}
        return {name: choice.price_per_gpu_hour for name, choice in self.gpus.items()}


def parse_workload(data: dict, source: str) -> Workload:
    """Validate a workload mapping; errors name each bad key."""
    return validate_spec(Workload, data, source)


def load_workload(path: str | Path) -> Workload:
    """Read and validate a workload YAML file. A relative trace path in it is relative to the file's
    folder (made absolute here, so that a job reopened from elsewhere reads the same file); there is no
    second place it is looked for."""
    workload = parse_workload(read_yaml_mapping(path, "workload file"), f"workload file '{shown(path)}'")
    arrival = workload.traffic.arrival
    if getattr(arrival, "path", None) is None or Path(arrival.path).is_absolute():
        return workload
    beside = os.path.join(os.path.abspath(Path(path).parent), arrival.path)
    traffic = workload.traffic.model_copy(update={"arrival": arrival.model_copy(update={"path": beside})})
    return workload.model_copy(update={"traffic": traffic})

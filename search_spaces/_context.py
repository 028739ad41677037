"""What the knobs and constraints need to know about a job: its models, GPUs, limits and budget.

The optimizer builds one :class:`SpaceContext` from a workload file; the search space reads it and
never parses files itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..costmodels.architectures import ModelSpec
from ..costmodels.deployment import Deployment
from ..costmodels.hardware import GPUSpec
from ..costmodels.profile import PerformanceProfile
from ..costmodels.quantization import MODEL_DTYPE_SCHEME, ONLINE_SCHEMES, AccuracyTable
from ..costmodels.serving.compiled import CompiledDeployment, CompileCache, compile_deployment
from ..costmodels.weights import WeightsOption


@dataclass(frozen=True)
class ModelChoice:
    """One model the search may serve.

    ``serve_id`` is what ``vllm serve`` loads for its own weights; ``weights`` maps each scheme the
    model can be served in (on the fly, or through a pre-quantized checkpoint) to how; a model that
    is itself a pre-quantized checkpoint has one entry. ``accuracy_drop_pct`` is its quality cost
    against the main model (0 for the main model).
    """

    key: str
    spec: ModelSpec
    serve_id: str
    weights: dict[str, WeightsOption] = field(default_factory=dict)
    accuracy_drop_pct: float = 0.0

    def option(self, scheme: str) -> WeightsOption | None:
        return self.weights.get(scheme)

    def spec_for(self, scheme: str) -> ModelSpec:
        """The architecture with the format of the checkpoint served for ``scheme``."""
        option = self.weights.get(scheme)
        return option.spec if option else self.spec


@dataclass(frozen=True)
class SpeculationChoice:
    """A speculative decoding method the search may use (``draft_model`` for draft-model methods)."""

    label: str
    method: str
    draft_model: str | None = None
    acceptance_rate: float | None = None


@dataclass(frozen=True, eq=False)
class SpaceContext:
    """Everything a knob or constraint reads: the job's models, GPUs (with their profiles), limits
    and accuracy budget; compiled deployments share one cache of step models and memory plans."""

    models: dict[str, ModelChoice]
    gpus: dict[str, GPUSpec]
    accuracy: AccuracyTable
    max_drop_pct: float
    max_model_len: dict[str, int]
    speculation: dict[str, SpeculationChoice] = field(default_factory=dict)
    gpus_per_node: int | None = None
    max_gpus: int = 64
    profiles: dict[str, PerformanceProfile] = field(default_factory=dict)
    priority_classes: bool = False  # the traffic's tenant classes have different priorities
    cache: CompileCache = field(default_factory=CompileCache, repr=False)

    def node_size(self, gpu: str) -> int:
        return self.gpus_per_node or self.gpus[gpu].gpus_per_node

    def accuracy_drop_pct(self, model: str, quantization: str, kv_cache_dtype: str) -> float:
        """The model's drop plus its weights' (the checkpoint card's recovery when published, else
        the per-scheme table) plus an fp8 KV cache's, unless the checkpoint calibrated it."""
        choice = self.models[model]
        option = choice.option(quantization)
        spec = choice.spec_for(quantization)
        # A checkpoint that ships FP8 KV scales was evaluated with them: its fp8 cache is no extra cost.
        kv = "auto" if spec.kv_cache_dtype("auto") == spec.kv_cache_dtype(kv_cache_dtype) else kv_cache_dtype
        if option is not None and option.accuracy_drop_pct is not None and quantization not in self.accuracy.overrides:
            weights = option.accuracy_drop_pct + self.accuracy.drop_pct("bf16", spec.num_params, kv)
        else:
            weights = self.accuracy.drop_pct(quantization, spec.num_params, kv)
        return choice.accuracy_drop_pct + weights

    def profile(self, gpu: str) -> PerformanceProfile:
        """The GPU's calibration profile (the datasheet defaults when the job gave none)."""
        found = self.profiles.get(gpu)
        return found if found is not None else PerformanceProfile.spec_default(self.gpus[gpu])

    def compile(self, model: str, deployment: Deployment) -> CompiledDeployment:
        """The deployment of ``model`` compiled once for the constraints, capacity, estimate and
        simulation (:mod:`~servopt.costmodels.serving.compiled`), with the weights its scheme is
        served through, sharing step models and memory plans with the job's other trials."""
        choice, scheme = self.models[model], deployment.quantization
        # A scheme the model cannot be served in (the quantization_on_gpu constraint says so) is
        # priced on the model's own architecture.
        weights = choice.option(scheme) or WeightsOption(scheme, choice.serve_id, choice.spec, None,
                                                         "no checkpoint known for this scheme")
        return compile_deployment(choice.spec, deployment, self.gpus[deployment.gpu], self.profile(deployment.gpu),
                                  self.cache, weights=weights, gpus_per_node=self.node_size(deployment.gpu))


def weight_options(spec: ModelSpec, serve_id: str, quantization: str | None,
                   checkpoints: dict[str, tuple[str, ModelSpec, str, float | None]] | None = None) -> dict[str, WeightsOption]:
    """The schemes a model can be served in, and how.

    A pre-quantized checkpoint (``quantization`` set) is served as it is. Otherwise: the model's
    own 16-bit weights, the schemes vLLM applies at start-up (fp8), and ``checkpoints`` (scheme ->
    (id, its spec, why, published drop)): the workload's and the catalog's pre-quantized ones.
    """
    if quantization is not None:
        return {quantization: replace(WeightsOption.as_is(spec, quantization, serve_id), source="the checkpoint's own weights")}
    own = MODEL_DTYPE_SCHEME[spec.dtype]
    options = {own: WeightsOption.as_is(spec, own, serve_id)}
    for scheme in sorted(ONLINE_SCHEMES):
        options[scheme] = WeightsOption.as_is(spec, scheme, serve_id)
    for scheme, (checkpoint_id, checkpoint_spec, why, drop) in (checkpoints or {}).items():
        options[scheme] = WeightsOption(scheme, checkpoint_id, checkpoint_spec, checkpoint_spec.checkpoint.method,
                                        why, drop)
    return options


def example_context(model: str = "llama-3.1-8b", gpus: tuple[str, ...] = ("h100", "a100-80gb")) -> SpaceContext:
    """A small context for examples and tests: one model (fp8 on the fly, plus an int8 checkpoint),
    catalog GPUs, ngram speculation."""
    from ..costmodels.architectures import resolve_model
    from ..costmodels.hardware import get_gpu
    from ..costmodels.quantization import builtin_accuracy_table

    resolved = resolve_model(model)
    int8 = resolve_model("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8")
    checkpoints = {"int8": (int8.requested, int8.spec, "example checkpoint", None)}
    options = weight_options(resolved.spec, resolved.spec.name, resolved.quantization, checkpoints)
    return SpaceContext(
        models={model: ModelChoice(model, resolved.spec, resolved.spec.name, options)},
        gpus={name: get_gpu(name) for name in gpus},
        accuracy=builtin_accuracy_table(),
        max_drop_pct=3.0,
        max_model_len={model: 4096},
        speculation={"ngram": SpeculationChoice("ngram", "ngram")},
    )

"""Speculative decoding: how many tokens a verify step emits, what drafting costs, what it holds in memory.

A verify step runs the target over ``1 + g`` query tokens per sequence (``g`` =
``num_speculative_tokens``). With a per-token acceptance rate ``a`` (drafted token ``j`` is kept only if
tokens ``1..j-1`` were), the step emits ``1 + accepted`` tokens, where ``accepted`` is a geometric
count truncated at ``g``: its mean is ``(1 - a^(g+1)) / (1 - a)`` (Leviathan, Kalman & Matias, ICML 2023,
arXiv 2211.17192, section 3.1).

The drafter's GPU time comes from a :class:`~servopt.costmodels.roofline.StepCostModel` of what it runs
for each of the ``g`` drafted tokens:

============  =====================================================================  ==============
method        drafter per drafted token                                              default ``a``
============  =====================================================================  ==============
ngram         prompt lookup on the CPU (vLLM's n-gram proposer): no GPU work           0.5
draft_model   one decode step of the small model (``draft_model``, at ``draft_tp``)    0.6
eagle         one decoder layer of the target's width + the target's LM head           0.8
eagle3        one decoder layer + a 32k-token draft LM head                            0.85
mtp           one MTP module layer (a target decoder layer) + the shared LM head       0.85
============  =====================================================================  ==============

Sources of the default acceptance rates (``METHODS[...].source``; override them with
``speculative.acceptance_rate`` because acceptance depends strongly on the task):

- ngram: n-gram lookup reaches up to 2.8x on CNN/DailyMail summarization with Llama-3-70B at low QPS
  (vLLM blog, Oct 2024), which at k = 4-5 implies a ~ 0.7; it only accepts where output copies the
  prompt, so open chat accepts far less. 0.5 sits between the two.
- draft_model: Llama-3.2-1B drafting for Llama-3.1-70B in vLLM accepts 70-80% on factual Q&A and
  40-50% on creative writing (secondary report); Leviathan et al. measure a per task. 0.6 is the middle.
- eagle: EAGLE's draft accuracy is about 0.8 on MT-bench with LLaMA2-Chat 70B, against about 0.6 for
  Medusa (Li et al., ICML 2024, arXiv 2401.15077).
- eagle3: EAGLE-3 reaches mean accepted lengths of about 6 tokens at draft depth 8 (arXiv 2503.01840),
  which a chain draft matches at a ~ 0.85.
- mtp: DeepSeek-V3's second-token acceptance is 85-90% (arXiv 2412.19437, section 5.4.3).

A method is offered only where it exists: ``mtp`` for models whose config ships multi-token-prediction
layers (``num_nextn_predict_layers``: DeepSeek-V3, GLM-4.5 and later), ``eagle`` and ``eagle3`` only
with a published head trained for the target (``draft_model`` naming one of
``data/speculators.yaml``, each with its source); :func:`speculation_problem` says why not otherwise.

Example:
    >>> round(expected_tokens_per_verify(0.8, 4), 3)
    3.362
    >>> import numpy as np
    >>> draws = sample_tokens_per_verify(np.random.default_rng(0), 0.8, 4, 200_000)
    >>> bool(abs(draws.mean() - 3.362) < 0.01), int(draws.min()), int(draws.max())
    (True, 1, 5)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import ClassVar

import numpy as np

from .architectures import ModelSpec, resolve_model
from .deployment import SpeculativeConfig
from .errors import InputError
from .hardware import GPUSpec
from .memory import kv_bytes_per_token_per_layer_per_gpu, weight_bytes
from .profile import PerformanceProfile
from .quantization import MODEL_DTYPE_BYTES, MODEL_DTYPE_SCHEME
from .roofline import StepCostModel
from .userfiles import parse_shipped_yaml

# EAGLE-3 checkpoints for Llama 3.x draft over a reduced vocabulary (draft_vocab_size in their configs).
EAGLE3_DRAFT_VOCAB = 32000


def expected_tokens_per_verify(acceptance_rate: float, num_speculative_tokens: int) -> float:
    """Mean tokens one verify step emits: ``(1 - a^(g+1)) / (1 - a)``."""
    a, g = acceptance_rate, num_speculative_tokens
    return (1 - a ** (g + 1)) / (1 - a)


def sample_tokens_per_verify(rng: np.random.Generator, acceptance_rate: float, num_speculative_tokens: int,
                             size: int) -> np.ndarray:
    """Tokens emitted by ``size`` verify steps: 1 + a geometric number of accepted drafts, at most g."""
    accepted = rng.geometric(1.0 - acceptance_rate, size) - 1
    return 1 + np.minimum(accepted, num_speculative_tokens)


@dataclass(frozen=True)
class DraftMemory:
    """What a drafter holds on each GPU of the target: its weights and its KV per token of context."""

    weights_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float


@dataclass(frozen=True)
class DraftHead:
    """What a method drafts with: a cost model run once per drafted token, and its memory."""

    cost: StepCostModel | None
    weights_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float


@dataclass(frozen=True)
class _Drafter:
    """The model a drafter runs, the weight scheme it runs in, its TP, and its weight bytes per GPU."""

    spec: ModelSpec
    scheme: str
    tp: int
    weights_bytes_per_gpu: float


@dataclass(frozen=True)
class PublishedHead:
    """An EAGLE or EAGLE-3 head published for one target model (``data/speculators.yaml``)."""

    id: str
    method: str
    target: str
    source: str
    max_speculative_tokens: int | None = None


@lru_cache(maxsize=1)
def published_heads() -> tuple[PublishedHead, ...]:
    """The catalog of published draft heads."""
    text = resources.files(__package__).joinpath("data/speculators.yaml").read_text()
    return tuple(PublishedHead(**entry) for entry in parse_shipped_yaml(text)["heads"])


class SpeculationMethod:
    """One speculative-decoding method: its default acceptance and its drafter."""

    name: ClassVar[str]
    default_acceptance: ClassVar[float]
    source: ClassVar[str]

    def problem(self, draft_model: str | None, target: ModelSpec, num_speculative_tokens: int) -> str | None:
        """Why this method cannot serve ``target`` (None when it can)."""
        return None

    def drafter(self, config: SpeculativeConfig, target: ModelSpec, tp: int) -> _Drafter | None:
        """The model that drafts, or None when drafting needs no GPU."""
        raise NotImplementedError

    def draft_memory(self, config: SpeculativeConfig, target: ModelSpec, kv_cache_dtype: str, tp: int) -> DraftMemory:
        drafter = self.drafter(config, target, tp)
        if drafter is None:
            return DraftMemory(0.0, 0.0)
        kv = kv_bytes_per_token_per_layer_per_gpu(drafter.spec, kv_cache_dtype, drafter.tp) * drafter.spec.num_layers
        return DraftMemory(drafter.weights_bytes_per_gpu, kv)

    def draft_head(self, config: SpeculativeConfig, target: ModelSpec, gpu: GPUSpec, profile: PerformanceProfile,
                   quantization: str, kv_cache_dtype: str, tp: int) -> DraftHead:
        drafter = self.drafter(config, target, tp)
        memory = self.draft_memory(config, target, kv_cache_dtype, tp)
        cost = None if drafter is None else StepCostModel(drafter.spec, gpu, profile, drafter.scheme, kv_cache_dtype,
                                                          drafter.tp, 1)
        return DraftHead(cost, memory.weights_bytes_per_gpu, memory.kv_bytes_per_token_per_gpu)


class NgramMethod(SpeculationMethod):
    """Prompt lookup: the drafter is a CPU n-gram match over the request's own tokens."""

    name = "ngram"
    default_acceptance = 0.5
    source = "vLLM blog (Oct 2024): n-gram up to 2.8x on summarization, implying a~0.7; chat lower"

    def drafter(self, config, target, tp) -> _Drafter | None:
        return None


class DraftModelMethod(SpeculationMethod):
    """A small model of the same vocabulary decodes ``g`` tokens ahead."""

    name = "draft_model"
    default_acceptance = 0.6
    source = "Llama-3.2-1B -> Llama-3.1-70B in vLLM: 70-80% factual, 40-50% creative (secondary); midpoint"

    def drafter(self, config, target, tp) -> _Drafter:
        resolved = resolve_model(config.draft_model)
        draft = resolved.spec
        draft_tp = config.draft_tp or tp
        if draft_tp not in (1, tp):
            raise InputError(f"speculative.draft_tp must be 1 or the target's tp ({tp}), as vLLM requires; got {draft_tp}")
        if draft.vocab_size != target.vocab_size:
            raise InputError(
                f"speculative.draft_model {draft.name} has a {draft.vocab_size}-token vocabulary but "
                f"{target.name} has {target.vocab_size}; a draft model must share the target's vocabulary"
            )
        scheme = resolved.quantization or MODEL_DTYPE_SCHEME[draft.dtype]
        return _Drafter(draft, scheme, draft_tp, weight_bytes(draft, scheme, draft_tp, 1).per_gpu_bytes)


class _OneLayerHead(SpeculationMethod):
    """Drafters that run one decoder layer of the target's width per drafted token."""

    def problem(self, draft_model: str | None, target: ModelSpec, num_speculative_tokens: int) -> str | None:
        """EAGLE heads are trained for one target: ``draft_model`` must name a published one."""
        heads = [h for h in published_heads() if h.method == self.name and resolve_model(h.target).spec.name == target.name]
        known = ", ".join(h.id for h in heads) or "none is published for it"
        head = next((h for h in heads if draft_model and h.id.lower() == draft_model.strip().lower()), None)
        if head is None:
            given = f"'{draft_model}' is not" if draft_model else "no draft_model names"
            return (f"method {self.name} drafts with a head trained for the target, and {given} a published "
                    f"{self.name} head for {target.name} (known: {known}); set draft_model to one, or use ngram "
                    "or draft_model")
        if head.max_speculative_tokens and num_speculative_tokens > head.max_speculative_tokens:
            return (f"{head.id} drafts at most {head.max_speculative_tokens} token(s) (its model card); lower "
                    "num_speculative_tokens")
        return None

    # Input projection that fuses target hidden states into the head: (inputs x hidden) x hidden.
    fused_inputs: ClassVar[int]
    draft_vocab: ClassVar[int | None] = None
    keeps_moe: ClassVar[bool] = False

    def head_spec(self, target: ModelSpec) -> ModelSpec:
        update: dict = {"num_layers": 1, "sliding_window": None, "num_sliding_layers": 0}
        if self.draft_vocab:
            update["vocab_size"] = self.draft_vocab
        if target.moe is not None:
            update["moe"] = target.moe.model_copy(update={"num_dense_layers": 0}) if self.keeps_moe else None
        return target.model_copy(update=update)

    def drafter(self, config, target, tp) -> _Drafter:
        head = self.head_spec(target)
        h = target.hidden_size
        mlp = head.moe_layer_params if head.moe is not None else head.dense_mlp_params
        params = head.attention_params_per_layer + mlp + self.fused_inputs * h * h
        if self.draft_vocab:
            params += self.draft_vocab * h
        # Heads ship unquantized; they run in the model dtype whatever the target's weight scheme.
        return _Drafter(head, MODEL_DTYPE_SCHEME[target.dtype], tp, params * MODEL_DTYPE_BYTES[target.dtype] / tp)


class EagleMethod(_OneLayerHead):
    name = "eagle"
    default_acceptance = 0.8
    source = "EAGLE (arXiv 2401.15077): draft accuracy ~0.8 on MT-bench, LLaMA2-Chat 70B"
    fused_inputs = 2  # [token embedding, target feature] -> hidden


class Eagle3Method(_OneLayerHead):
    name = "eagle3"
    default_acceptance = 0.85
    source = "EAGLE-3 (arXiv 2503.01840): ~6 accepted tokens at depth 8, a chain-equivalent a~0.85"
    fused_inputs = 3  # low, middle and high target features -> hidden
    draft_vocab = EAGLE3_DRAFT_VOCAB


class MTPMethod(_OneLayerHead):
    name = "mtp"
    default_acceptance = 0.85
    source = "DeepSeek-V3 (arXiv 2412.19437 s5.4.3): second-token acceptance 85-90%"
    fused_inputs = 2  # eh_proj over [embedding, hidden]
    keeps_moe = True

    def problem(self, draft_model: str | None, target: ModelSpec, num_speculative_tokens: int) -> str | None:
        if target.num_mtp_layers:
            return None
        return (f"method mtp drafts with the model's own multi-token-prediction layers and {target.name} has none "
                "(its config has no num_nextn_predict_layers); use eagle or eagle3 with a published head, ngram "
                "or draft_model")


METHODS: dict[str, SpeculationMethod] = {
    m.name: m for m in (NgramMethod(), DraftModelMethod(), EagleMethod(), Eagle3Method(), MTPMethod())
}


@dataclass(frozen=True)
class Speculation:
    """A deployment's speculative decoding, resolved: acceptance, tokens per verify, drafter."""

    method: SpeculationMethod
    num_speculative_tokens: int
    acceptance_rate: float
    head: DraftHead

    @property
    def query_tokens_per_seq(self) -> int:
        """Tokens each sequence puts through the target in one verify step."""
        return 1 + self.num_speculative_tokens

    @property
    def tokens_per_verify(self) -> float:
        return expected_tokens_per_verify(self.acceptance_rate, self.num_speculative_tokens)

    def sample_tokens(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return sample_tokens_per_verify(rng, self.acceptance_rate, self.num_speculative_tokens, size)

    def steps_to_emit(self, rng: np.random.Generator, tokens: int) -> np.ndarray:
        """Cumulative tokens after each verify step until ``tokens`` are out (last entry >= tokens)."""
        draws = self.sample_tokens(rng, int(tokens / self.tokens_per_verify * 1.5) + 8)
        cumulative = np.cumsum(draws)
        while cumulative[-1] < tokens:
            more = np.cumsum(self.sample_tokens(rng, len(draws))) + cumulative[-1]
            cumulative = np.concatenate([cumulative, more])
        return cumulative[: int(np.searchsorted(cumulative, tokens)) + 1]


def speculation_problem(method: str, draft_model: str | None, target: ModelSpec,
                        num_speculative_tokens: int = 1) -> str | None:
    """Why ``method`` (with ``draft_model``) cannot speculate for ``target``, or None.

    Example:
        >>> from servopt.costmodels.architectures import get_model
        >>> speculation_problem("mtp", None, get_model("deepseek-v3")) is None
        True
        >>> speculation_problem("mtp", None, get_model("llama-3.1-8b")).split(" and ")[1][:36]
        'meta-llama/Llama-3.1-8B has none (it'
        >>> speculation_problem("eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", get_model("llama-3.1-8b")) is None
        True
    """
    return METHODS[method].problem(draft_model, target, num_speculative_tokens)


def build_speculation(config: SpeculativeConfig, target: ModelSpec, gpu: GPUSpec, profile: PerformanceProfile,
                      quantization: str, kv_cache_dtype: str, tp: int, pp: int) -> Speculation:
    """Resolve a :class:`SpeculativeConfig` for one target deployment."""
    if pp > 1:
        raise InputError("speculative decoding with pp > 1 is not supported by vLLM; use tp only")
    problem = speculation_problem(config.method, config.draft_model, target, config.num_speculative_tokens)
    if problem:
        raise InputError(f"speculative: {problem}")
    method = METHODS[config.method]
    head = method.draft_head(config, target, gpu, profile, quantization, kv_cache_dtype, tp)
    acceptance = config.acceptance_rate if config.acceptance_rate is not None else method.default_acceptance
    return Speculation(method, config.num_speculative_tokens, acceptance, head)


def draft_memory(config: SpeculativeConfig, target: ModelSpec, kv_cache_dtype: str, tp: int) -> DraftMemory:
    """Memory a speculative configuration's drafter takes on each GPU of the target (for memory checks)."""
    return METHODS[config.method].draft_memory(config, target, kv_cache_dtype, tp)

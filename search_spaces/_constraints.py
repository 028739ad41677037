"""Constraints checked before a configuration is simulated: one small class per rule.

Each returns a :class:`Violation` (how far off, relative, and why) or None. Their names are the
keys of the trial constraints the optimizer hands Optuna, so every trial reports all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..costmodels.deployment import Deployment
from ..costmodels.errors import InputError
from ..costmodels.hardware import GIB
from ..costmodels.quantization import support_problem
from ..costmodels.speculation import speculation_problem
from ._context import SpaceContext


@dataclass(frozen=True)
class Violation:
    """A broken constraint: ``amount`` > 0 grows with how far the configuration is off."""

    constraint: str
    amount: float
    reason: str


@dataclass(frozen=True)
class Instance:
    """One kind of vLLM instance in a deployment (the aggregated one, or prefill / decode)."""

    role: str
    tp: int
    max_num_seqs: int
    max_num_batched_tokens: int
    dp: int = 1  # data-parallel ranks, each with these limits


def instances(deployment: Deployment) -> list[Instance]:
    d, dis = deployment, deployment.disaggregation
    if dis is None:
        return [Instance("aggregated", d.tp, d.max_num_seqs, d.max_num_batched_tokens, d.data_parallel_size)]
    return [
        Instance("prefill", dis.prefill_tp, dis.prefill_max_num_seqs or d.max_num_seqs,
                 dis.prefill_max_num_batched_tokens or d.max_num_batched_tokens),
        Instance("decode", dis.decode_tp, dis.decode_max_num_seqs or d.max_num_seqs,
                 dis.decode_max_num_batched_tokens or d.max_num_batched_tokens),
    ]


def speculation_label(deployment: Deployment, ctx: SpaceContext) -> str:
    spec = deployment.speculative
    if spec is None:
        return "off"
    for label, choice in ctx.speculation.items():
        if choice.method == spec.method and choice.draft_model == spec.draft_model:
            return label
    return "off"


class Constraint:
    """Base class: a rule a configuration must pass before it is worth simulating."""

    name: ClassVar[str]
    needs_replicas: ClassVar[bool] = False

    def check(self, deployment: Deployment, model: str, ctx: SpaceContext) -> Violation | None:
        raise NotImplementedError


class TensorParallelDividesHeads(Constraint):
    name = "tp_divides_heads"

    def check(self, deployment: Deployment, model: str, ctx: SpaceContext) -> Violation | None:
        heads = ctx.models[model].spec.num_attention_heads
        for inst in instances(deployment):
            if heads % inst.tp:
                return Violation(self.name, 1.0, f"{inst.role} tp={inst.tp} does not divide the {heads} attention heads")
        return None


class FitsNode(Constraint):
    name = "fits_node"

    def check(self, deployment: Deployment, model: str, ctx: SpaceContext) -> Violation | None:
        node = ctx.node_size(deployment.gpu)
        for inst in instances(deployment):
            if inst.tp > node:
                return Violation(self.name, inst.tp / node - 1,
                                 f"{inst.role} tp={inst.tp} exceeds the {node} GPUs of a {deployment.gpu} node")
        if deployment.pp > 1 and any(inst.tp != node for inst in instances(deployment)):
            return Violation(self.name, 1.0, f"pp={deployment.pp} spans nodes: fill each node with tp={node} first")
        return None


class QuantizationOnGPU(Constraint):
    name = "quantization_on_gpu"

    def check(self, deployment: Deployment, model: str, ctx: SpaceContext) -> Violation | None:
        problem = support_problem(deployment.quantization, ctx.gpus[deployment.gpu])
        if problem:
            return Violation(self.name, 1.0, problem)
        choice = ctx.models[model]
        if deployment.quantization not in choice.weights:
            servable = ", ".join(choice.weights)
            return Violation(self.name, 1.0, f"{choice.serve_id} cannot be served as {deployment.quantization}: vLLM "
                             f"does not quantize to it at start-up and no checkpoint is known (servable: {servable}; "
                             f"name one under checkpoints.{deployment.quantization})")
        return None


class BatchLimits(Constraint):
    """vLLM's scheduler rules: the token budget covers every sequence (and its drafts), and a
    whole prompt when prefill is not chunked."""

    name = "batch_limits"

    def check(self, deployment: Deployment, model: str, ctx: SpaceContext) -> Violation | None:
        drafts = deployment.speculative.num_speculative_tokens if deployment.speculative else 0
        for inst in instances(deployment):
            need = inst.max_num_seqs * (1 + drafts)
            if inst.max_num_batched_tokens < need:
                what = f"max_num_seqs ({inst.max_num_seqs})" + (f" x (1 + {drafts} drafts)" if drafts else "")
                return Violation(self.name, need / inst.max_num_batched_tokens - 1,
                                 f"max_num_batched_tokens ({inst.max_num_batched_tokens}) < {what}")
            if not deployment.enable_chunked_prefill and inst.max_num_batched_tokens < deployment.max_model_len:
                return Violation(
                    self.name, deployment.max_model_len / inst.max_num_batched_tokens - 1,
                    f"without chunked prefill max_num_batched_tokens ({inst.max_num_batched_tokens}) must cover "
                    f"max_model_len ({deployment.max_model_len})",
                )
        return None


class MoEParallelism(Constraint):
    """Data-parallel ranks and expert parallelism are searched for MoE models: a dense model's DP ranks
    are replicas (which the search derives), and one GPU per MoE group makes EP a no-op."""

    name = "moe_parallelism"

    def check(self, deployment: Deployment, model: str, ctx: SpaceContext) -> Violation | None:
        dp, ep = deployment.data_parallel_size, deployment.enable_expert_parallel
        if ctx.models[model].spec.moe is None and (dp > 1 or ep):
            return Violation(self.name, 1.0, f"data_parallel_size {dp} / enable_expert_parallel {ep} on dense model "
                             f"{model}: its data-parallel ranks would be replicas")
        if ep and dp * deployment.tp == 1:
            return Violation(self.name, 1.0, "enable_expert_parallel with one GPU per instance changes nothing")
        if dp > 1 and deployment.pp > 1:
            return Violation(self.name, 1.0, f"data_parallel_size {dp} with pp {deployment.pp} is not modelled")
        return None


class SpeculationSupported(Constraint):
    """MTP only for models with MTP layers, EAGLE heads only for the model they were trained on."""

    name = "speculation"

    def check(self, deployment: Deployment, model: str, ctx: SpaceContext) -> Violation | None:
        spec = deployment.speculative
        if spec is None:
            return None
        problem = speculation_problem(spec.method, spec.draft_model, ctx.models[model].spec, spec.num_speculative_tokens)
        return Violation(self.name, 1.0, problem) if problem else None


class AccuracyBudget(Constraint):
    name = "accuracy"

    def check(self, deployment: Deployment, model: str, ctx: SpaceContext) -> Violation | None:
        drop = ctx.accuracy_drop_pct(model, deployment.quantization, deployment.kv_cache_dtype)
        if drop > ctx.max_drop_pct:
            return Violation(self.name, (drop - ctx.max_drop_pct) / max(ctx.max_drop_pct, 0.1),
                             f"expected accuracy drop {drop:.1f}% exceeds the {ctx.max_drop_pct:g}% budget")
        return None


class FitsMemory(Constraint):
    name = "memory"

    def check(self, deployment: Deployment, model: str, ctx: SpaceContext) -> Violation | None:
        for inst in instances(deployment):
            try:
                plan = ctx.memory_plan(
                    model, deployment.gpu, deployment.quantization, deployment.kv_cache_dtype, inst.tp,
                    deployment.pp, inst.max_num_seqs, inst.max_num_batched_tokens,
                    deployment.gpu_memory_utilization, speculation_label(deployment, ctx), inst.dp,
                )
            except InputError as err:
                return Violation(self.name, 1.0, str(err))
            if not plan.fits:
                budget = plan.budget_bytes_per_gpu
                shortfall = plan.weights_bytes_per_gpu + plan.activation_peak_bytes_per_gpu - budget
                amount = max(shortfall / budget, 0.0) + 0.05
                return Violation(self.name, amount, f"{inst.role} on {plan.num_gpus} x {deployment.gpu}: {plan.problems[0]}")
        return None


class FleetSize(Constraint):
    name = "max_gpus"
    needs_replicas = True

    def check(self, deployment: Deployment, model: str, ctx: SpaceContext) -> Violation | None:
        if deployment.num_gpus > ctx.max_gpus:
            return Violation(self.name, deployment.num_gpus / ctx.max_gpus - 1,
                             f"{deployment.replicas} replicas need {deployment.num_gpus} GPUs, over the limit of {ctx.max_gpus}")
        return None


CONSTRAINTS: tuple[Constraint, ...] = (
    TensorParallelDividesHeads(), FitsNode(), QuantizationOnGPU(), BatchLimits(), MoEParallelism(), SpeculationSupported(),
    AccuracyBudget(), FitsMemory(), FleetSize(),
)


def memory_headroom_gib(deployment: Deployment, model: str, ctx: SpaceContext) -> float:
    """The smallest KV-cache pool left over across the deployment's instances, in GiB per GPU."""
    pools = []
    for inst in instances(deployment):
        plan = ctx.memory_plan(model, deployment.gpu, deployment.quantization, deployment.kv_cache_dtype, inst.tp,
                               deployment.pp, inst.max_num_seqs, inst.max_num_batched_tokens,
                               deployment.gpu_memory_utilization, speculation_label(deployment, ctx), inst.dp)
        pools.append(plan.kv_cache_bytes_per_gpu / GIB)
    return min(pools)

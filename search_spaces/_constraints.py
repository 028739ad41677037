"""Constraints checked before a configuration is simulated: one small class per rule.

Each reads the candidate's compiled deployment (:class:`~servopt.costmodels.serving.compiled.CompiledDeployment`:
its roles with their TP, limits and memory plans) and returns a :class:`Violation` (how far off,
relative, and why) or None. Their names are the keys of the trial constraints the optimizer hands
Optuna, so every trial reports all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..costmodels.quantization import support_problem
from ..costmodels.serving.compiled import CompiledDeployment, role_layout
from ..costmodels.speculation import speculation_problem
from ._context import SpaceContext


@dataclass(frozen=True)
class Violation:
    """A broken constraint: ``amount`` > 0 grows with how far the configuration is off."""

    constraint: str
    amount: float
    reason: str


class Constraint:
    """Base class: a rule a configuration must pass before it is worth simulating."""

    name: ClassVar[str]
    needs_replicas: ClassVar[bool] = False

    def check(self, compiled: CompiledDeployment, model: str, ctx: SpaceContext) -> Violation | None:
        raise NotImplementedError


class TensorParallelDividesHeads(Constraint):
    name = "tp_divides_heads"

    def check(self, compiled: CompiledDeployment, model: str, ctx: SpaceContext) -> Violation | None:
        heads = ctx.models[model].spec.num_attention_heads
        for role, tp in _role_tps(compiled):
            if heads % tp:
                return Violation(self.name, 1.0, f"{role} tp={tp} does not divide the {heads} attention heads")
        return None


class FitsNode(Constraint):
    name = "fits_node"

    def check(self, compiled: CompiledDeployment, model: str, ctx: SpaceContext) -> Violation | None:
        deployment = compiled.deployment
        node = ctx.node_size(deployment.gpu)
        for role, tp in _role_tps(compiled):
            if tp > node:
                return Violation(self.name, tp / node - 1, f"{role} tp={tp} exceeds the {node} GPUs of a {deployment.gpu} node")
        if deployment.pp > 1 and any(tp != node for _, tp in _role_tps(compiled)):
            return Violation(self.name, 1.0, f"pp={deployment.pp} spans nodes: fill each node with tp={node} first")
        return None


class QuantizationOnGPU(Constraint):
    name = "quantization_on_gpu"

    def check(self, compiled: CompiledDeployment, model: str, ctx: SpaceContext) -> Violation | None:
        deployment = compiled.deployment
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

    def check(self, compiled: CompiledDeployment, model: str, ctx: SpaceContext) -> Violation | None:
        problem = compiled.batch_problem()
        return Violation(self.name, *problem) if problem else None


class MoEParallelism(Constraint):
    """Data-parallel ranks and expert parallelism are searched for MoE models: a dense model's DP ranks
    are replicas (which the search derives), and one GPU per MoE group makes EP a no-op."""

    name = "moe_parallelism"

    def check(self, compiled: CompiledDeployment, model: str, ctx: SpaceContext) -> Violation | None:
        deployment = compiled.deployment
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

    def check(self, compiled: CompiledDeployment, model: str, ctx: SpaceContext) -> Violation | None:
        spec = compiled.deployment.speculative
        if spec is None:
            return None
        problem = speculation_problem(spec.method, spec.draft_model, ctx.models[model].spec, spec.num_speculative_tokens)
        return Violation(self.name, 1.0, problem) if problem else None


class AccuracyBudget(Constraint):
    name = "accuracy"

    def check(self, compiled: CompiledDeployment, model: str, ctx: SpaceContext) -> Violation | None:
        deployment = compiled.deployment
        drop = ctx.accuracy_drop_pct(model, deployment.quantization, deployment.kv_cache_dtype)
        if drop > ctx.max_drop_pct:
            return Violation(self.name, (drop - ctx.max_drop_pct) / max(ctx.max_drop_pct, 0.1),
                             f"expected accuracy drop {drop:.1f}% exceeds the {ctx.max_drop_pct:g}% budget")
        return None


class FitsMemory(Constraint):
    name = "memory"

    def check(self, compiled: CompiledDeployment, model: str, ctx: SpaceContext) -> Violation | None:
        problem = compiled.memory_problem()
        return Violation(self.name, *problem) if problem else None


class FleetSize(Constraint):
    name = "max_gpus"
    needs_replicas = True

    def check(self, compiled: CompiledDeployment, model: str, ctx: SpaceContext) -> Violation | None:
        deployment = compiled.deployment
        if deployment.num_gpus > ctx.max_gpus:
            return Violation(self.name, deployment.num_gpus / ctx.max_gpus - 1,
                             f"{deployment.replicas} replicas need {deployment.num_gpus} GPUs, over the limit of {ctx.max_gpus}")
        return None


CONSTRAINTS: tuple[Constraint, ...] = (
    TensorParallelDividesHeads(), FitsNode(), QuantizationOnGPU(), BatchLimits(), MoEParallelism(), SpeculationSupported(),
    AccuracyBudget(), FitsMemory(), FleetSize(),
)


def _role_tps(compiled: CompiledDeployment) -> list[tuple[str, int]]:
    """(role, TP) of every role, read from the deployment (so also when it could not be compiled)."""
    return [(role, tp) for role, _, tp in role_layout(compiled.deployment)]

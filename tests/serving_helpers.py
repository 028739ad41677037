"""Shared fixtures of the serving tests: one GPU, one profile, traffic and deployment builders."""

from __future__ import annotations

from functools import lru_cache

from servopt.costmodels.architectures import get_model
from servopt.costmodels.deployment import Deployment
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.profile import PerformanceProfile
from servopt.costmodels.serving import Traffic, simulate

GPU = get_gpu("h100")
PROFILE = PerformanceProfile.spec_default(GPU)
LLAMA_8B = get_model("llama-3.1-8b")


def traffic(arrival: dict, input_tokens: int | dict = 1024, output_tokens: int | dict = 128, **extra) -> Traffic:
    def length(v):
        return {"kind": "fixed", "value": v} if isinstance(v, int) else v

    return Traffic.model_validate({"arrival": arrival, "input_tokens": length(input_tokens),
                                   "output_tokens": length(output_tokens), **extra})


def deployment(**fields) -> Deployment:
    return Deployment.model_validate({"gpu": "h100", "max_model_len": 16384, **fields})


def run(dep: Deployment, tr: Traffic, n: int = 1500, seed: int = 0, model=LLAMA_8B, **kw):
    return simulate(model, dep, tr, GPU, PROFILE, num_requests=n, seed=seed, **kw)


@lru_cache(maxsize=None)
def poisson(rate: float, input_tokens: int = 1024, output_tokens: int = 128) -> Traffic:
    return traffic({"kind": "poisson", "rate_per_s": rate}, input_tokens, output_tokens)

"""The weights a deployment serves: which checkpoint ``vllm serve`` loads, and how.

A model can be served in several weight schemes: its own 16-bit weights, a scheme vLLM quantizes to
at start-up (``--quantization fp8``), or a pre-quantized checkpoint of it (AWQ, GPTQ, compressed-
tensors, ModelOpt, ...). A :class:`WeightsOption` is one of those ways; the deployment compiler
(:func:`~servopt.costmodels.serving.compiled.compile_deployment`) takes one and settles from it the
architecture it prices (the checkpoint's format: exact bytes per weight), the scheme, and what
``--kv-cache-dtype auto`` means (a checkpoint that ships FP8 KV scales stores an fp8 cache).

Example:
    >>> from servopt.costmodels.architectures import get_model
    >>> own = WeightsOption.as_is(get_model("llama-3.1-8b"))
    >>> own.scheme, own.vllm_quantization, own.kv_cache_auto
    ('bf16', None, 'auto')
    >>> WeightsOption.as_is(get_model("llama-3.1-8b"), "fp8").vllm_quantization
    'fp8'
"""

from __future__ import annotations

from dataclasses import dataclass

from .architectures import ModelSpec
from .quantization import MODEL_DTYPE_SCHEME, get_scheme


def own_scheme(spec: ModelSpec) -> str:
    """The scheme a model is served in when nothing else is asked: the format its checkpoint ships
    in, else its dtype's (the one default every cost model uses).

    >>> from servopt.costmodels.architectures import get_model
    >>> own_scheme(get_model("llama-3.1-8b"))
    'bf16'
    """
    return spec.native_quantization or MODEL_DTYPE_SCHEME[spec.dtype]


@dataclass(frozen=True)
class WeightsOption:
    """One way to serve a model's weights in a scheme: what ``vllm serve`` loads and how.

    ``serve_id`` is the checkpoint to load (the model itself, or a pre-quantized checkpoint of it);
    ``spec`` carries that checkpoint's format (exact bytes per weight, what ``kv_cache_dtype auto``
    means); ``vllm_quantization`` is the ``--quantization`` value (None for 16-bit weights);
    ``accuracy_drop_pct`` is the drop its card publishes (None: the shipped per-scheme table);
    ``source`` says why it can be served (on the fly, catalog checkpoint, the workload's checkpoint).
    """

    scheme: str
    serve_id: str
    spec: ModelSpec
    vllm_quantization: str | None
    source: str
    accuracy_drop_pct: float | None = None

    @classmethod
    def as_is(cls, spec: ModelSpec, scheme: str | None = None, serve_id: str | None = None) -> WeightsOption:
        """The model served in ``scheme`` (default: the checkpoint's own format, else its dtype):
        through the checkpoint's own method when it ships in that scheme, else quantized by vLLM at
        start-up (or, for its 16-bit dtype, no ``--quantization`` at all)."""
        scheme = scheme or own_scheme(spec)
        fmt = spec.checkpoint
        if fmt is not None and fmt.scheme == scheme:
            method, source = fmt.method, "the checkpoint itself"
        elif scheme == MODEL_DTYPE_SCHEME[spec.dtype]:
            method, source = None, "the model's own weights"
        else:
            method, source = get_scheme(scheme).vllm_quantization, f"quantized by vLLM at start-up (--quantization {scheme})"
        return cls(scheme, serve_id or spec.name, spec, method, source)

    @property
    def kv_cache_auto(self) -> str:
        """What ``--kv-cache-dtype auto`` stores for this checkpoint: 'auto' (the model dtype) or 'fp8'."""
        return self.spec.kv_cache_dtype("auto")

    def describe(self) -> dict:
        """Plain data for trial records and exports (``config_source``: which config the weights'
        architecture was read from, as resolution reported it)."""
        fmt = self.spec.checkpoint
        return {"scheme": self.scheme, "serve_id": self.serve_id, "vllm_quantization": self.vllm_quantization,
                "kv_cache_auto": self.kv_cache_auto, "source": self.source,
                "format": fmt.describe() if fmt else None, "kernels": fmt.kernels if fmt else None,
                "config_source": self.spec.config_source, "max_context": self.spec.max_context}

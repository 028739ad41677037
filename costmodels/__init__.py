"""Cost models: what a deployment costs in memory and time.

The public face; each concept lives in its own module:

- :mod:`.hardware`: GPU catalog (peaks, memory, links, prices)
- :mod:`.architectures`: model specs, Hugging Face config reader, presets
- :mod:`.quantization`: weight/KV schemes, math dtypes, accuracy penalties
- :mod:`.memory`: weights, KV bytes, vLLM's KV capacity
- :mod:`.profile`: the efficiencies a calibration profile supplies
- :mod:`.roofline`: step time of a batch
- :mod:`.deployment`: the deployment spec
- :mod:`.engines`: each serving engine's rules (vLLM's release defaults, step rule, KV pool, flags), by name
- :mod:`.objectives`: the costs and P99 latencies a search trades off, by name
- :mod:`.speculation`: speculative decoding (acceptance, drafter cost and memory)
- :mod:`.serving`: traffic and the serving simulator

Example:
    >>> from servopt.costmodels import get_gpu, get_model, plan_memory
    >>> plan_memory(get_model("llama-3.1-8b"), get_gpu("l4"), max_model_len=4096).fits
    True
"""

from typing import TYPE_CHECKING

from .faces import lazy_face

# Each name and the module that defines it, imported when the name is first used (faces.py).
_EXPORTS = {
    "ModelSpec": ".architectures", "get_model": ".architectures", "resolve_model": ".architectures",
    "Deployment": ".deployment", "InputError": ".errors", "GPUSpec": ".hardware", "get_gpu": ".hardware",
    "load_catalog": ".hardware", "MemoryPlan": ".memory", "plan_memory": ".memory",
    "PerformanceProfile": ".profile", "Batch": ".roofline", "StepCostModel": ".roofline",
}
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from .architectures import ModelSpec, get_model, resolve_model
    from .deployment import Deployment
    from .errors import InputError
    from .hardware import GPUSpec, get_gpu, load_catalog
    from .memory import MemoryPlan, plan_memory
    from .profile import PerformanceProfile
    from .roofline import Batch, StepCostModel

"""Results of an optimize job: tables, the Pareto report, and vLLM launch commands.

Everything here reads the typed records an optimize job collects (``Job.collect()``: trial records
whose deployment is a compiled :class:`~servopt.costmodels.serving.compiled.DeploymentRecord`) or
the files it wrote (front.json: :class:`FrontPoint`), never the optimizer itself.

Example:
    >>> from servopt.costmodels.deployment import SpeculativeConfig
    >>> from servopt.results import speculative_config
    >>> speculative_config(SpeculativeConfig(method="ngram", num_speculative_tokens=3))
    {'method': 'ngram', 'num_speculative_tokens': 3, 'prompt_lookup_max': 4}
"""

from ..costmodels.engines.vllm import speculative_config
from ._export import (
    VLLM_VERSION, check_commands_with_vllm, check_with_vllm, find_vllm_python, launch_plan, node_scripts, render_readme,
    render_shell, serve_commands, with_configs,
)
from ._export_kubernetes import (
    KUBERNETES_VERSION, SHM_SIZE, KubernetesOptions, check_manifests, kubernetes_manifests, render_kubernetes,
    render_kubernetes_readme, safe_name, serve_argvs,
)
from ._export_sglang import check_with_sglang, render_sglang, sglang_plan
from ._format import Exported, ExportFormat, ExportRequest, ParserMissing
from ._formats import EXPORT_FORMATS, get_format
from ._record import LATENCY_TIE, FrontPoint, Recheck, Summary, TrialRecord, TrialResult, latency_tied, summary_p99
from ._report import explain_empty, export_command, render_html, render_markdown, servopt_command, write_results
from ._tables import pareto_frame, trials_frame, why

__all__ = [
    "EXPORT_FORMATS", "Exported", "ExportFormat", "ExportRequest", "get_format", "ParserMissing",
    "KUBERNETES_VERSION", "LATENCY_TIE", "latency_tied", "SHM_SIZE", "VLLM_VERSION", "check_commands_with_vllm", "check_manifests",
    "check_with_sglang", "check_with_vllm", "explain_empty", "export_command", "servopt_command", "find_vllm_python", "FrontPoint", "kubernetes_manifests",
    "KubernetesOptions", "launch_plan", "node_scripts", "pareto_frame", "Recheck", "render_html", "render_kubernetes",
    "render_kubernetes_readme", "render_markdown", "render_readme", "render_sglang", "render_shell", "safe_name",
    "serve_argvs", "serve_commands", "sglang_plan", "speculative_config", "Summary", "summary_p99", "TrialRecord",
    "TrialResult", "trials_frame", "why", "with_configs", "write_results",
]

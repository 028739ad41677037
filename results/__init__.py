"""Results of an optimize job: tables, the Pareto report, and vLLM launch commands.

Everything here reads the plain data an optimize job collects (``Job.collect()``) or the files it
wrote, never the optimizer itself.

Example:
    >>> from servopt.results import speculative_config
    >>> speculative_config({"method": "ngram", "num_speculative_tokens": 3})
    {'method': 'ngram', 'num_speculative_tokens': 3, 'prompt_lookup_max': 4}
"""

from ._export import (
    VLLM_VERSION, check_commands_with_vllm, check_with_vllm, find_vllm_python, launch_plan, node_scripts, render_readme, render_shell, serve_commands,
    speculative_config, with_configs,
)
from ._export_kubernetes import KubernetesOptions, check_manifests, kubernetes_manifests, render_kubernetes
from ._report import explain_empty, render_html, render_markdown, write_results
from ._tables import pareto_frame, trials_frame, why

__all__ = [
    "KubernetesOptions", "check_manifests", "kubernetes_manifests", "render_kubernetes",
    "VLLM_VERSION", "check_commands_with_vllm", "check_with_vllm", "explain_empty", "find_vllm_python", "launch_plan", "node_scripts", "pareto_frame", "render_html",
    "render_markdown", "render_readme", "render_shell", "serve_commands", "speculative_config", "trials_frame", "why", "with_configs",
    "write_results",
]

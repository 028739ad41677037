"""Serving simulation: the latency distribution of a deployment under a traffic.

Public face:

- :func:`simulate` runs the discrete-event simulation (vLLM V1 step rule, paged KV, chunked prefill,
  preemption, speculative decoding, replicas behind a router, P/D disaggregation, pipeline lanes);
- :func:`estimate` gives the same summary from queueing approximations, for screening candidates;
- :func:`compile_deployment` resolves a deployment once (roles, limits, memory plans, step models);
  :func:`simulate_compiled` and :func:`estimate_compiled` take that compiled deployment;
- :class:`Traffic` and :class:`SLO` describe the workload; :class:`SimulationResult` and
  :class:`ServingSummary` the answer.

Modules (entities, scheduler and execution-time predictor kept apart, as in Vidur):
:mod:`.traffic` (arrival and length distributions, tenant classes, sessions, traces), :mod:`.datasets`
(length presets of public sets), :mod:`.requests` (drawn requests and their progress),
:mod:`.scheduler` (vLLM V1 step rule, KV blocks, preemption), :mod:`.request_queue` (fcfs and
priority waiting queues), :mod:`.prefix_cache` (conversations' cached blocks), :mod:`.predictor` (step
times from the roofline model and the drafter), :mod:`.engine` (one engine's clock and closed-form
decode runs; pipeline stages), :mod:`.router` and :mod:`.cluster` (replicas, P/D hand-offs,
closed-loop clients, conversations' next turns), :mod:`.metrics` (distributions, confidence intervals, saturation, per-class
figures), :mod:`.simulator` (``simulate``), :mod:`.analytic` (``estimate``), :mod:`.queueing` (G/G/c
waits, for the estimate), :mod:`.priority` (each class's share of those waits under fcfs and
priority) and :mod:`.activity` (what the engines did in a simulated run: busy and host-wait time,
prefill-carrying steps in the ITL tail, KV peak; read by ``servopt diagnose``).

Example:
    >>> from servopt.costmodels.serving import simulate, estimate, SimulationResult, Traffic, SLO
    >>> SLO(p99_ttft_s=1.0).targets()
    {'ttft': 1.0}
"""

from typing import TYPE_CHECKING

from ..faces import lazy_face

# Each name and the module that defines it, imported when the name is first used (costmodels/faces.py).
_EXPORTS = {
    "estimate": ".analytic", "estimate_compiled": ".analytic", "CompiledDeployment": ".compiled",
    "compile_deployment": ".compiled", "LatencyStats": ".metrics", "ServingSummary": ".metrics",
    "SimulationResult": ".simulator", "simulate": ".simulator", "simulate_compiled": ".simulator",
    "SLO": ".slo", "Traffic": ".traffic", "read_trace": ".traffic",
}
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
__all__ = ["simulate", "estimate", "simulate_compiled", "estimate_compiled", "compile_deployment", "CompiledDeployment",
           "SimulationResult", "ServingSummary", "LatencyStats", "SLO", "Traffic", "read_trace"]

if TYPE_CHECKING:
    from .analytic import estimate, estimate_compiled
    from .compiled import CompiledDeployment, compile_deployment
    from .metrics import LatencyStats, ServingSummary
    from .simulator import SimulationResult, simulate, simulate_compiled
    from .slo import SLO
    from .traffic import Traffic, read_trace

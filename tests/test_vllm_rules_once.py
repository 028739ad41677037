"""Each vLLM rule is written once (costmodels/engines/vllm.py), and the roles' names once (compiled.py).

The literals of vLLM's defaults (0.92 of --gpu-memory-utilization, the 8192 / 2048 token budgets)
and the role names (replica, prefill, decode) appear in no other module of the packages; a module
where the same literal means something else is listed here with what it means.
"""

import ast
from pathlib import Path

import numpy as np
import pytest

from servopt.costmodels import Deployment, PerformanceProfile, get_gpu, get_model
from servopt.costmodels.roofline import StepCostModel
from servopt.costmodels.engines.vllm import (
    allreduce_implementation, allreduce_limits, batch_limits_problem, min_batched_tokens, parse_vllm_version,
)

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("costmodels", "calibration", "search_spaces", "optimizer", "results")
HOMES = {"costmodels/engines/vllm.py", "costmodels/serving/compiled.py"}
NUMBERS = {0.92, 8192, 2048}
ROLE_NAMES = {"replica", "prefill", "decode"}
# Where the same literal is something else.
OTHER_MEANINGS = {
    ("results/_export.py", 8192): "the vLLM Router's TCP port",
    ("calibration/microbench.py", 8192): "GEMM and prefill shapes of the microbenchmarks (Llama-3.1-70B's hidden size)",
    ("calibration/microbench.py", 2048): "a prefill length of the microbenchmarks",
    ("calibration/silicon.py", 8192): "the --max-num-batched-tokens InferenceMAX's 70B FP8 scripts set explicitly",
    ("costmodels/profile.py", "prefill"): "the attention phase an efficiency belongs to",
    ("calibration/fit.py", "prefill"): "the attention phase a fit belongs to",
    ("calibration/fit.py", "decode"): "the attention phase a fit belongs to",
    ("calibration/validate.py", "prefill"): "the attention phase of a kernel row",
    ("calibration/validate.py", "decode"): "the attention phase of a kernel row",
}


def literals(path: Path) -> list[tuple[int, object]]:
    """(line, value) of the numbers and strings a module writes as values (not docstrings, nor the
    keys of dictionaries and subscripts, which name fields)."""
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))
        if isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
        if isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and id(n) not in skip and not isinstance(n.value, bool)]


def test_vllm_defaults_and_role_names_are_written_once():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if name in HOMES:
                continue
            for line, value in literals(path):
                wanted = value in ROLE_NAMES if isinstance(value, str) else (
                    isinstance(value, int | float) and value in NUMBERS)
                if wanted and (name, value) not in OTHER_MEANINGS:
                    found.append(f"{name}:{line}: {value!r}")
    assert not found, "vLLM defaults or role names written outside engines/vllm.py / compiled.py: " + "; ".join(found)


def test_the_literal_finder_sees_values_not_keys():
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.py"
        path.write_text('"""replica"""\nx = {"replica": 1}\ny = x["decode"]\nz = ("prefill", 8192, True)\n')
        assert [v for _, v in literals(path)] == [1, "prefill", 8192]


def test_token_budget_rule():
    # max_num_seqs x (1 + drafts), and a whole max_model_len prompt without chunked prefill.
    assert min_batched_tokens(128, drafts=2) == 384
    assert min_batched_tokens(128, chunked_prefill=False, max_model_len=4096) == 4096
    assert batch_limits_problem(128, 384, drafts=2) is None
    amount, reason = batch_limits_problem(128, 192, drafts=2)
    assert amount == pytest.approx(1.0) and "x (1 + 2 drafts)" in reason
    amount, reason = batch_limits_problem(16, 2048, chunked_prefill=False, max_model_len=8192)
    assert amount == pytest.approx(3.0) and "must cover max_model_len (8192)" in reason
    with pytest.raises(ValueError, match=r"max_num_batched_tokens \(64\) < max_num_seqs \(128\)"):
        Deployment(gpu="h100", max_num_seqs=128, max_num_batched_tokens=64)


def test_step_model_times_each_allreduce_by_the_implementation_vllm_picks():
    h100 = get_gpu("h100")
    v = parse_vllm_version("0.33.0")
    custom_max, symm_max = allreduce_limits(8, h100, v)
    sizes = np.array([custom_max / 2, custom_max / 2, symm_max / 2, symm_max * 2])
    kinds = allreduce_implementation(sizes, 8, h100, v, captured=np.array([True, False, False, False]))
    assert list(kinds) == ["custom_graph", "custom_eager", "symm_mem", "nccl"]
    assert allreduce_implementation(float(sizes[0]), 8, h100, v, captured=True) == "custom_graph"
    # The step model's TP communication is the profile's time of that implementation, twice per layer.
    model = get_model("llama-3.1-8b")
    profile = PerformanceProfile.spec_default(h100)
    cost = StepCostModel(model, h100, profile, tp=8)
    tokens = np.array([1.0, 4096.0])
    message = tokens * model.hidden_size * 2.0
    kinds = allreduce_implementation(message, 8, h100, v, captured=tokens <= 512)
    want = [2 * model.num_layers * float(profile.allreduce_time_s(h100, np.array([m]), 8, k)[0])
            for m, k in zip(message, kinds)]
    assert cost._communication(tokens).time_s == pytest.approx(want)

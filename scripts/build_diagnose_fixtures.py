"""Write the ``servopt diagnose`` test fixtures in tests/data/diagnose from ../shared (tests run without it).

Each fixture is a ``vllm bench serve`` result as the tool saves it without ``--save-detailed`` (the
settings, totals and statistics; no per-request arrays) and the deployment that served it, as
calibration/corpus.py reads it from the measured table:

- ``surajssd_70b_tp8_qps01``: the run JSON of github.com/surajssd/llm-k8s@58b61c5 (Llama-3.3-70B-Instruct,
  TP8 on A100-SXM4-40GB, vLLM 0.8.3, ShareGPT at 1 req/s), its per-request arrays dropped;
- ``dennislee22_qwen2_7b_n1``, ``dennislee22_qwen2_7b_n1000``: rows of vllm_bench_a100_dennislee22.csv
  (github.com/dennislee22/vLLM-benchmarking@b474d1e, "Test 4": Qwen2-7B-Instruct on one A100 with a
  5.01 GiB KV cache, vLLM 0.10.1.1, random 1024/1024 bursts of 1 and 1000 prompts), through
  :func:`~servopt.calibration.vllm_bench.result_from_table_row`.

    python scripts/build_diagnose_fixtures.py [--shared PATH] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import yaml

from servopt.calibration.corpus import bench_runs
from servopt.calibration.vllm_bench import result_from_table_row

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "measured" / "e2e"
OUT = ROOT / "tests" / "data" / "diagnose"
PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "generated_texts", "errors")
SURAJSSD = "01_tp8_pp1__serving_meta-llama-Llama-3.3-70B-Instruct_tp8_pp1_sharegpt_qps_01.json"
DENNISLEE_ROWS = {"dennislee22_qwen2_7b_n1": 35, "dennislee22_qwen2_7b_n1000": 44}


def _deployment(runs, table: str, index: int) -> dict:
    run = next(r for r in runs if r.run_id == f"{table}:{index}")
    return run.deployment.model_dump(mode="json", exclude_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=SHARED)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    runs = bench_runs([args.shared])
    args.out.mkdir(parents=True, exist_ok=True)
    fixtures = {}
    detailed = json.loads((args.shared / "vllm_bench_runs" / SURAJSSD).read_text())
    p99 = pd.read_csv(args.shared / "vllm_bench_p99_dev.csv")
    row = next(i for i, ref in enumerate(p99["source_url_or_ref"]) if "qps_01.json" in ref and "01_tp8_pp1" in ref)
    fixtures["surajssd_70b_tp8_qps01"] = ({k: v for k, v in detailed.items() if k not in PER_REQUEST},
                                          _deployment(runs, "vllm_bench_p99_dev.csv", row))
    table = pd.read_csv(args.shared / "vllm_bench_a100_dennislee22.csv")
    for name, index in DENNISLEE_ROWS.items():
        record = table.iloc[index].to_dict()
        result = {**result_from_table_row(record), "_source": record["source_url_or_ref"]}
        fixtures[name] = (result, _deployment(runs, "vllm_bench_a100_dennislee22.csv", index))
    for name, (result, deployment) in fixtures.items():
        (args.out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / f"{name}.deployment.yaml").write_text(yaml.safe_dump(deployment, sort_keys=False))
        print(f"{name}: {result['num_prompts']} prompts at {result['request_rate']} req/s -> {args.out / name}.json")


if __name__ == "__main__":
    main()

"""Build the length presets of ``{kind: dataset, name: ...}`` (costmodels/data/datasets/).

Each preset is the joint (prompt tokens, output tokens) of every request of a public source, as a
gzipped CSV ``input_tokens,output_tokens``, plus its entry in ``datasets.yaml`` (source, license,
tokenizer, how it was derived, summary figures). Sources (give the ones you have; presets whose
source is not given are kept as they are):

- ``sharegpt``: what ``vllm bench serve --dataset-name sharegpt --seed 0`` sends. vLLM's sampler
  (vllm/benchmarks/datasets.py, ``ShareGPTDataset``) reads ShareGPT_V3_unfiltered_cleaned_split.json,
  keeps conversations with at least two turns, shuffles them with ``random.seed(seed)``, and takes,
  in that order, the first turn as the prompt and the second as the completion, tokenized with the
  served model's tokenizer; a pair is skipped when the prompt or the completion has fewer than 4
  tokens, the prompt more than 1024, or both together more than 2048 (``is_valid_sequence``); the
  completion's length is the request's ``max_tokens``. The dataset file cannot be downloaded here,
  so the pairs come from the per-request ``input_lens``/``output_lens`` of 16 real runs of
  that command (../shared/data/measured/e2e/vllm_bench_runs/, github surajssd/llm-k8s: Llama-3.3-70B,
  Llama-3 tokenizer, 200 prompts, seed 0; the same 200 prompts, in the same order, in every run,
  and the first 200 that the default ``--num-prompts 1000`` sends). The prompt length is exact;
  the output is the most tokens any run generated for the request: the request's ``max_tokens``
  wherever the model reached it (every run agrees on 94% of the requests), less where Llama-3.3
  stopped earlier in every run.
- ``azure-conv-2023`` and ``azure-code-2023``: ContextTokens and GeneratedTokens of the Azure LLM
  inference traces of 2023 (github Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_conv.csv
  and _code.csv; CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024); the production tokenizer.
- ``arxiv-summarization``: Vidur's token statistics of the arXiv summarization set, Llama-2
  tokenizer, filtered to 4K tokens (github microsoft/vidur,
  data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv; MIT).

Not available to this script (their files could not be fetched where it was written): LMSYS-Chat-1M
(gated on Hugging Face; Vidur's config names its statistics file but the repository does not ship
it) and the Azure 2024 week-long traces (blob storage only).

    python scripts/build_length_datasets.py [--sharegpt-runs DIR] [--azure DIR] [--vidur DIR]

``--azure`` is a checkout's ``data/`` folder of Azure/AzurePublicDataset, ``--vidur`` the
``data/processed_traces/`` folder of microsoft/vidur.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "costmodels" / "data" / "datasets"
DEFAULT_RUNS = ROOT.parent / "shared" / "data" / "measured" / "e2e" / "vllm_bench_runs"

SHAREGPT = {
    "description": "vllm bench serve --dataset-name sharegpt --seed 0: the first 200 requests it sends",
    "source": "per-request input_lens/output_lens of 16 vllm bench serve ShareGPT runs (github surajssd/llm-k8s, "
              "results_serving_meta-llama-Llama-3.3-70B-Instruct; vLLM 0.8.3), from ../shared/data/measured/e2e/"
              "vllm_bench_runs/; the ShareGPT conversations are anon8231489123/ShareGPT_Vicuna_unfiltered "
              "(ShareGPT_V3_unfiltered_cleaned_split.json, Apache-2.0)",
    "license": "measured figures with attribution; ShareGPT data Apache-2.0",
    "tokenizer": "Llama-3 (meta-llama/Llama-3.3-70B-Instruct)",
    "derivation": "vLLM's sampler keeps first-turn prompts of 4-1024 tokens whose completion has at least 4 tokens "
                  "and whose sum is at most 2048, in the order of random.seed(0) shuffling; prompt tokens exact; "
                  "output tokens: the most any of the 16 runs generated (the completion's length, max_tokens, "
                  "where the model reached it: every run agrees on 94% of requests)",
}
AZURE = {
    "conv": "the conversation service", "code": "the coding service",
}
ARXIV = {
    "description": "summarization of arXiv papers (Vidur's Arxiv-Summarization-4K)",
    "source": "github microsoft/vidur, data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv "
              "(Agrawal et al., Vidur, MLSys 2024), from the ccdv/arxiv-summarization set",
    "license": "MIT (Vidur)",
    "tokenizer": "Llama-2",
    "derivation": "num_prefill_tokens and num_decode_tokens of every row, as Vidur filtered them (requests within 4K tokens)",
}


def sharegpt_pairs(runs: Path) -> tuple[np.ndarray, np.ndarray]:
    files = sorted(p for p in runs.glob("*sharegpt*.json") if "Llama-3" in p.name)
    if not files:
        raise SystemExit(f"no Llama-3 ShareGPT runs in {runs}")
    results = [json.loads(p.read_text()) for p in files]
    inputs = np.asarray(results[0]["input_lens"], dtype=np.int64)
    for path, r in zip(files, results):
        if not np.array_equal(np.asarray(r["input_lens"]), inputs):
            raise SystemExit(f"{path.name} sent other prompts than {files[0].name}; not the same seeded sample")
    outputs = np.max([np.asarray(r["output_lens"], dtype=np.int64) for r in results], axis=0)
    return inputs, np.maximum(outputs, 1)


def azure_pairs(folder: Path, which: str) -> tuple[np.ndarray, np.ndarray]:
    table = pd.read_csv(folder / f"AzureLLMInferenceTrace_{which}.csv")
    inputs = table["ContextTokens"].to_numpy(np.int64)
    outputs = table["GeneratedTokens"].to_numpy(np.int64)
    keep = (inputs >= 1) & (outputs >= 1)
    return inputs[keep], outputs[keep]


def vidur_pairs(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    table = pd.read_csv(folder / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv")
    inputs = table["num_prefill_tokens"].to_numpy(np.int64)
    outputs = table["num_decode_tokens"].to_numpy(np.int64)
    keep = (inputs >= 1) & (outputs >= 1)
    return inputs[keep], outputs[keep]


def summary(inputs: np.ndarray, outputs: np.ndarray) -> dict:
    def figures(x: np.ndarray) -> dict:
        return {"mean": round(float(x.mean()), 1), "p50": round(float(np.percentile(x, 50)), 1),
                "p99": round(float(np.percentile(x, 99)), 1), "max": int(x.max())}

    return {"requests": int(len(inputs)), "input_tokens": figures(inputs), "output_tokens": figures(outputs)}


def write(name: str, inputs: np.ndarray, outputs: np.ndarray, meta: dict, catalog: dict) -> None:
    path = OUT / f"{name}.csv.gz"
    pd.DataFrame({"input_tokens": inputs, "output_tokens": outputs}).to_csv(
        path, index=False, compression={"method": "gzip", "mtime": 0})
    catalog[name] = {**meta, "file": path.name, **summary(inputs, outputs)}
    print(f"{name}: {len(inputs)} requests, mean {inputs.mean():.0f} prompt / {outputs.mean():.0f} output tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sharegpt-runs", type=Path, default=DEFAULT_RUNS)
    parser.add_argument("--azure", type=Path, help="Azure/AzurePublicDataset's data/ folder")
    parser.add_argument("--vidur", type=Path, help="microsoft/vidur's data/processed_traces/ folder")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    catalog_path = OUT / "datasets.yaml"
    catalog = yaml.safe_load(catalog_path.read_text()) if catalog_path.exists() else {}
    if args.sharegpt_runs.is_dir():
        write("sharegpt", *sharegpt_pairs(args.sharegpt_runs), SHAREGPT, catalog)
    if args.azure:
        for which, service in AZURE.items():
            meta = {"description": f"Azure LLM inference trace 2023, {service}",
                    "source": f"github Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_{which}.csv (Patel et al., "
                              "Splitwise, ISCA 2024)",
                    "license": "CC-BY 4.0 (attribution: Azure Public Dataset, Microsoft)",
                    "tokenizer": "the production service's (GPT-family)",
                    "derivation": "ContextTokens and GeneratedTokens of every row with at least one of each"}
            write(f"azure-{which}-2023", *azure_pairs(args.azure, which), meta, catalog)
    if args.vidur:
        write("arxiv-summarization", *vidur_pairs(args.vidur), ARXIV, catalog)
    catalog_path.write_text("# Written by scripts/build_length_datasets.py; see that script for each source.\n"
                            + yaml.safe_dump(dict(sorted(catalog.items())), sort_keys=False, width=120))


if __name__ == "__main__":
    main()

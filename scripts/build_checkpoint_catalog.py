"""Build costmodels/data/checkpoints.yaml: public pre-quantized checkpoints per base model.

Inputs:
- scripts/data/checkpoint_sources.yaml: each checkpoint's id, the model ids it was quantized
  from, its format (servopt's CheckpointFormat fields) and where that format was read;
- the model catalog (costmodels/data/models, built by scripts/build_model_catalog.py from public
  repository@commit copies): a checkpoint it ships has its format read from that config's own
  quantization metadata, by the reader the cost model uses, and the build fails unless that config
  has its base's architecture (layers, widths, heads, context, RoPE scaling, vocabulary) or when
  a hand-written format disagrees with it;
- ../shared/data/reference/quant_accuracy.csv: the accuracy recovery model cards publish.

Method: a checkpoint's accuracy is the WORST recovery its card reports over the benchmarks in the
table (OpenLLM v1, v2, Arena-Hard, MMLU), matched by the card's checkpoint name in the table's
source column (Neural Magic's cards moved to RedHatAI/, so the org is not compared). Cards not in
the table leave the recovery empty, and the search falls back to the per-scheme table
(data/quant_accuracy.yaml). Each format is validated with the same CheckpointFormat the cost model
reads, so a typo fails here rather than at run time.

    python scripts/build_checkpoint_catalog.py [--sources PATH] [--table PATH] [--out PATH]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd
import yaml

from servopt.costmodels.architectures import ModelSpec, preset_models, resolve_model
from servopt.costmodels.checkpoints import CheckpointFormat

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCES = ROOT / "scripts" / "data" / "checkpoint_sources.yaml"
DEFAULT_TABLE = ROOT.parent / "shared" / "data" / "reference" / "quant_accuracy.csv"
DEFAULT_OUT = ROOT / "costmodels" / "data" / "checkpoints.yaml"


def recovery(table: pd.DataFrame, checkpoint_id: str) -> dict | None:
    """The worst recovery the checkpoint's card reports, with its metric and source; or None."""
    name = checkpoint_id.split("/", 1)[1]
    rows = table[table.source.str.contains(rf"/{re.escape(name)}(?:\s|$)", regex=True)]
    rows = rows[rows.delta_or_recovery.astype(str).str.match(r"^\d+(\.\d+)?%")]
    if not len(rows):
        return None
    values = rows.delta_or_recovery.str.extract(r"^(\d+(?:\.\d+)?)%")[0].astype(float)
    worst = rows.loc[values.idxmin()]
    return {"recovery_pct": float(values.min()),
            "metric": f"worst of {len(rows)} recoveries on the card: {worst.metric}",
            "source": str(worst.source)}


# What a checkpoint must share with its base to be its base's checkpoint.
ARCHITECTURE = ("family", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim",
                "intermediate_size", "vocab_size", "max_context", "rope_type", "moe", "mla", "sliding_window")


def architecture(spec: ModelSpec) -> dict:
    return {key: getattr(spec, key) for key in ARCHITECTURE}


def shipped_format(item: dict) -> tuple[dict, str] | None:
    """The format of a checkpoint whose config the model catalog ships, read from that config."""
    spec = preset_models().get(item["id"])
    if spec is None:
        return None
    if spec.checkpoint is None:
        raise SystemExit(f"{item['id']}: its shipped config has no quantization metadata")
    bases = [item["base"]] if isinstance(item["base"], str) else item["base"]
    base = resolve_model(bases[0]).spec
    if architecture(base) != architecture(spec):
        diff = {k: (v, architecture(spec)[k]) for k, v in architecture(base).items() if architecture(spec)[k] != v}
        raise SystemExit(f"{item['id']}: its config differs from its base {bases[0]}'s in {diff}")
    fmt = spec.checkpoint.model_dump(exclude={"source"}, exclude_defaults=True)
    if fmt.get("block_size"):
        fmt["block_size"] = list(fmt["block_size"])
    if "format" in item and CheckpointFormat(**item["format"]) != spec.checkpoint.model_copy(update={"source": ""}):
        raise SystemExit(f"{item['id']}: the format written ({item['format']}) is not its config's ({fmt})")
    where = spec.config_source.removeprefix(f"shipped catalog entry {spec.name} (").removesuffix(")")
    return fmt, f"config: {where}"


def build(sources: list[dict], table: pd.DataFrame | None) -> list[dict]:
    out = []
    seen = set()
    for item in sources:
        for name in [item["id"], *item.get("aliases", [])]:
            if name.lower() in seen:
                raise SystemExit(f"{name} is listed twice")
            seen.add(name.lower())
        shipped = shipped_format(item)
        if shipped is None and not item["format_source"].startswith("card:"):
            raise SystemExit(f"{item['id']}: a format not read from a shipped config is the card's ('card: ...'); "
                             "add the config to scripts/data/model_sources.yaml to read it from there")
        fmt, where = shipped or (item["format"], item["format_source"])
        CheckpointFormat(**fmt)  # validates the fields
        entry = {"id": item["id"], "base": item["base"], "format": fmt, "format_source": where}
        if item.get("aliases"):
            entry["aliases"] = item["aliases"]
        found = recovery(table, item["id"]) if table is not None else None
        if found:
            entry["accuracy"] = found
        out.append(entry)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=Path, default=DEFAULT_SOURCES)
    parser.add_argument("--table", type=Path, default=DEFAULT_TABLE)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    sources = yaml.safe_load(args.sources.read_text())["checkpoints"]
    table = None
    if args.table.exists():
        table = pd.read_csv(args.table)
        # The reference table writes "same" for "the source of the row above".
        table["source"] = table.source.where(~table.source.str.startswith("same"), None).ffill()
    else:
        print(f"note: {args.table} not found; no accuracy recoveries joined")
    entries = build(sources, table)
    header = ("# Generated by scripts/build_checkpoint_catalog.py from scripts/data/checkpoint_sources.yaml and\n"
              "# shared/data/reference/quant_accuracy.csv. See the script for the method; do not edit by hand.\n")
    args.out.write_text(header + yaml.safe_dump({"checkpoints": entries}, sort_keys=False, width=120))
    with_accuracy = sum(1 for e in entries if "accuracy" in e)
    print(f"wrote {args.out}: {len(entries)} checkpoints, {with_accuracy} with a published recovery")


if __name__ == "__main__":
    main()

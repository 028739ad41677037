"""Check ``vllm serve`` command lines with vLLM's own parser; runs in the Python that has vLLM.

servopt keeps vLLM (and torch) out of its own environment: ``servopt export --check`` runs this
file with the interpreter of a separate virtual environment, handing it JSON on stdin
(``[{"label": ..., "argv": ["vllm", "serve", MODEL, ...], "config": {...}}, ...]``) and reading back
JSON (the vLLM version and one message per rejected command). It imports nothing from servopt.

What is checked, in the order vLLM itself goes: the ``vllm serve`` sub-command parser (every flag
and value, as ``vllm serve`` builds it), the serve-argument checks vLLM runs before loading a
model, ``AsyncEngineArgs.from_cli_args``, the quantization method against vLLM's registry, and the
``--kv-transfer-config`` JSON against ``KVTransferConfig``.

Where servopt hands over the model's ``config.json`` (``config``, with ``hf_quant_config`` for
ModelOpt exports), vLLM's own code reads it as it would at start-up: ``get_config`` (with the
command's ``--hf-overrides``) and its architecture convertor, then ``_get_and_verify_max_len`` on
the command's ``--max-model-len`` (vllm/config/model.py@v0.33.0 lines 2545-2685) and, when the
config carries quantization metadata (``quantization_from``: the checkpoint's own, or what its card
says its quantizer wrote), ``ModelConfig._verify_quantization`` twice (lines 1383-1462): without
``--quantization``, for the method vLLM picks, which must be the command's, and with it, which vLLM
must accept. A 16-bit model must not be given one (online fp8 aside: vLLM then quantizes it). The method
probes run as on a CUDA machine (vLLM's CPU build declines AWQ's override; servopt's exports
target GPUs).
"""

from __future__ import annotations

import json
import os
import shutil
import sys


def _serve_parser():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    root = FlexibleArgumentParser(prog="vllm")
    subparsers = root.add_subparsers(dest="subparser")
    ServeSubcommand().subparser_init(subparsers)
    return root


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def _picked(hf_config, arch, quantization: str | None) -> str | None:
    """What ``ModelConfig._verify_quantization`` settles on for this config and ``--quantization``
    (raises vLLM's ValueError when it refuses the value)."""
    from types import SimpleNamespace
    from unittest import mock

    from vllm.config.model import ModelConfig
    from vllm.platforms import current_platform

    stub = SimpleNamespace(quantization=quantization, model_arch_config=arch, hf_config=hf_config,
                           allow_deprecated_quantization=False)
    with mock.patch.object(current_platform, "is_cpu", return_value=False), \
            mock.patch.object(current_platform, "verify_quantization", return_value=None):
        ModelConfig._verify_quantization(stub)
    return stub.quantization


def config_problems(label: str, argv: list[str], entry: dict) -> list[str]:
    """The command's --max-model-len and --quantization against vLLM's reading of the model's config."""
    import tempfile

    from vllm.config.model import _get_and_verify_max_len
    from vllm.transformers_utils.config import get_config
    from vllm.transformers_utils.model_arch_config_convertor import (
        MODEL_ARCH_CONFIG_CONVERTORS,
        ModelArchConfigConvertorBase,
    )

    problems = []
    overrides = json.loads(_flag(argv, "--hf-overrides") or "{}")
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "config.json"), "w") as out:
            json.dump(entry["config"], out)
        if entry.get("hf_quant_config"):
            with open(os.path.join(folder, "hf_quant_config.json"), "w") as out:
                json.dump(entry["hf_quant_config"], out)
        hf_config = get_config(folder, trust_remote_code=False, hf_overrides_kw=overrides)
        convertor = MODEL_ARCH_CONFIG_CONVERTORS.get(hf_config.model_type, ModelArchConfigConvertorBase)
        arch = convertor(hf_config, hf_config.get_text_config()).convert()
    max_len = _flag(argv, "--max-model-len")
    try:
        derived = _get_and_verify_max_len(hf_config, arch, None, None, False, None)
        if max_len is not None:
            _get_and_verify_max_len(hf_config, arch, None, int(max_len), False, None)
    except ValueError as err:
        problems.append(f"{label}: --max-model-len {max_len}: {str(err).split(' To allow')[0]}")
    else:
        entry["derived_max_model_len"] = derived
    given = _flag(argv, "--quantization")
    if entry.get("quantization_from"):
        picked = _picked(hf_config, arch, None)
        if picked != given:
            where = "config" if entry["quantization_from"] == "config" else "metadata as its card states it"
            problems.append(f"{label}: --quantization {given}, but vLLM picks {picked} for this checkpoint's {where}")
        elif given is not None:
            try:
                _picked(hf_config, arch, given)
            except ValueError as err:
                problems.append(f"{label}: --quantization {given}: {err}")
    return problems


def check(commands: list[dict]) -> list[str]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import validate_parsed_serve_args
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

    problems = []
    for command in commands:
        label, argv = command["label"], command["argv"]
        if argv[:2] != ["vllm", "serve"]:
            problems.append(f"{label}: not a vllm serve command: {argv[:3]}")
            continue
        try:
            namespace = _serve_parser().parse_args(argv[1:])
            if getattr(namespace, "model_tag", None):
                namespace.model = namespace.model_tag
            validate_parsed_serve_args(namespace)
            AsyncEngineArgs.from_cli_args(namespace)
        except SystemExit:
            problems.append(f"{label}: vLLM's parser rejected: {' '.join(argv)}")
            continue
        except (TypeError, ValueError) as err:
            problems.append(f"{label}: {err}")
            continue
        if namespace.quantization and namespace.quantization not in QUANTIZATION_METHODS:
            problems.append(f"{label}: --quantization {namespace.quantization} is not one of vLLM's methods")
        if getattr(namespace, "kv_transfer_config", None) is not None:
            from vllm.config import KVTransferConfig

            config = namespace.kv_transfer_config
            try:
                KVTransferConfig(**(config if isinstance(config, dict) else vars(config)))
            except (TypeError, ValueError) as err:
                problems.append(f"{label}: --kv-transfer-config: {err}")
        if command.get("config"):
            problems += config_problems(label, argv, command)
    return problems


def main() -> None:
    if not shutil.which("nvidia-smi"):
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # vLLM imports only as a CPU build without a GPU
    # Checking flags needs no weights: with HF_HUB_OFFLINE set, EngineArgs.__post_init__ looks the model
    # up in the local Hugging Face cache (vllm/engine/arg_utils.py@v0.33.0, get_model_path) and fails
    # for any model this machine never downloaded.
    os.environ.pop("HF_HUB_OFFLINE", None)
    commands = json.load(sys.stdin)
    import vllm

    problems = check(commands)
    checked = [{"label": c["label"], "derived_max_model_len": c.get("derived_max_model_len"),
                "quantization_from": c.get("quantization_from")} for c in commands if c.get("config")]
    print(json.dumps({"vllm_version": vllm.__version__, "problems": problems, "configs_checked": checked}))


if __name__ == "__main__":
    main()

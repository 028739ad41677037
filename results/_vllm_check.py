"""Check ``vllm serve`` command lines with vLLM's own parser; runs in the Python that has vLLM.

servopt keeps vLLM (and torch) out of its own environment: ``servopt export --check`` runs this
file with the interpreter of a separate virtual environment, handing it JSON on stdin
(``[{"label": ..., "argv": ["vllm", "serve", MODEL, ...]}, ...]``) and reading back JSON (the
vLLM version and one message per rejected command). It imports nothing from servopt.

What is checked, in the order vLLM itself goes: the ``vllm serve`` sub-command parser (every flag
and value, as ``vllm serve`` builds it), the serve-argument checks vLLM runs before loading a
model, ``AsyncEngineArgs.from_cli_args``, the quantization method against vLLM's registry, and the
``--kv-transfer-config`` JSON against ``KVTransferConfig``.
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

    print(json.dumps({"vllm_version": vllm.__version__, "problems": check(commands)}))


if __name__ == "__main__":
    main()

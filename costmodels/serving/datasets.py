"""Length presets: the joint (prompt, output) token counts of public request sets.

``{kind: dataset, name: sharegpt}`` under ``input_tokens`` or ``output_tokens`` draws from one of
these tables (:class:`~servopt.costmodels.serving.traffic.DatasetLength`); when both name the same
set, each request's pair is drawn together, keeping their correlation. The tables and their
``datasets.yaml`` (source, license, tokenizer, how each was derived) are written by
``scripts/build_length_datasets.py``:

- ``sharegpt``: what ``vllm bench serve --dataset-name sharegpt --seed 0`` sends (Llama-3 tokenizer);
- ``azure-conv-2023``, ``azure-code-2023``: the Azure LLM inference traces of 2023 (CC-BY 4.0);
- ``arxiv-summarization``: Vidur's arXiv summarization statistics (Llama-2 tokenizer).

Token counts depend on the tokenizer: a model with another tokenizer sees somewhat different
counts for the same text (DeepSeek-V2.5's reads the same ShareGPT prompts as 11% longer).

Example:
    >>> pairs = dataset("sharegpt")
    >>> len(pairs.input_tokens), int(pairs.input_tokens.min()) >= 4, pairs.meta["tokenizer"].split()[0]
    (200, True, 'Llama-3')
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import InputError, unknown_name_error
from ..userfiles import parse_shipped_yaml


DATA = Path(__file__).resolve().parents[1] / "data" / "datasets"


@dataclass(frozen=True)
class LengthTable:
    """Every request of a set: its prompt and output tokens, and where the numbers come from."""

    name: str
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    meta: dict


@lru_cache(maxsize=1)
def catalog() -> dict[str, dict]:
    """Name -> metadata of every shipped set."""
    return parse_shipped_yaml((DATA / "datasets.yaml").read_text())


@lru_cache(maxsize=None)
def dataset(name: str) -> LengthTable:
    """The shipped table ``name`` (InputError naming the known ones otherwise)."""
    import pandas as pd  # on first use: pandas costs half a second of start-up

    meta = catalog().get(name)
    if meta is None:
        raise unknown_name_error("dataset", name, catalog())
    table = pd.read_csv(DATA / meta["file"], dtype={"input_tokens": np.int64, "output_tokens": np.int64})
    inputs, outputs = table["input_tokens"].to_numpy(), table["output_tokens"].to_numpy()
    if not len(inputs) or inputs.min() < 1 or outputs.min() < 1:
        raise InputError(f"dataset {name}: its table {meta['file']} is damaged; rebuild it with "
                         "scripts/build_length_datasets.py")
    return LengthTable(name, inputs, outputs, meta)

"""Where a model's ``config.json`` comes from: a local path, the Hugging Face cache, or the Hub.

:func:`check_model_id` is the one gate every model name a user writes goes through: no control
characters, nothing that begins with ``-`` (a launch command would read it as an option), and either
an existing local path (returned absolute: the exported scripts run in folders of their own) or the
Hugging Face id grammar
``[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?`` on the whole id (with the Hub's own
rules: no ``--`` or ``..``, no ``-`` or ``.`` at either end of a part, 96 characters per part).

:func:`fetch_config` finds the configuration of an id without guessing: a local folder or file, the
local Hugging Face cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``,
read with ``huggingface_hub`` when it is installed and by the cache's documented layout when it is
not), then, when ``huggingface_hub`` is installed and ``HF_HUB_OFFLINE`` is not set, the Hub
(which fills the same cache). The Hub is first probed with one TCP connection
(:data:`HUB_PROBE_TIMEOUT_S`, name resolution included), so that a machine without network fails
at once with one line rather than waiting out ``huggingface_hub``'s retries (five, with backoff:
about half a minute, minutes where name resolution hangs). It reads ModelOpt's ``hf_quant_config.json`` beside ``config.json``
when there is one. The shipped catalog of configs is :func:`servopt.costmodels.architectures.preset_models`.

Example:
    >>> check_model_id("meta-llama/Llama-3.1-8B-Instruct", "model")
    'meta-llama/Llama-3.1-8B-Instruct'
    >>> try:
    ...     check_model_id("x$(touch f)/Llama-3.1-8B-Instruct", "model")
    ... except InputError as err:
    ...     print(str(err).split(" (")[0])
    model: 'x$(touch f)/Llama-3.1-8B-Instruct' is not a Hugging Face id
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import unicodedata
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError, label, quote
from .userfiles import read_json_object

_HF_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
HF_ID_PATTERN = re.compile(rf"{_HF_PART}(?:/{_HF_PART})?")
_MAX_PART = 96
QUANT_CONFIG_FILE = "hf_quant_config.json"
# How long the Hub (or the HTTPS proxy) may take to accept one connection before servopt gives up.
HUB_PROBE_TIMEOUT_S = 3.0


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in text)


def check_model_id(text: Any, field: str) -> str:
    """Return ``text`` if it is a usable model name; raise :class:`InputError` naming ``field``."""
    if not isinstance(text, str):
        raise InputError(f"{field}: expected a model id or path, got {type(text).__name__}")
    if not text.strip():
        raise InputError(f"{field}: empty; give a Hugging Face id (org/name) or a config.json path")
    if _has_control(text):
        raise InputError(f"{field}: {text!r} contains control characters (newline, tab, escape...); "
                         "give a Hugging Face id (org/name) or a config.json path")
    if text.startswith("-"):
        raise InputError(f"{field}: {quote(text)} begins with '-', which vLLM and SGLang would read as an option; "
                         f"name a local folder as ./{label(text)} or by its absolute path")
    try:
        # A local path first, as the model is resolved (a folder 'models/llama' is also shaped like a
        # Hub id); absolute: the launch scripts run in folders of their own.
        if Path(text).exists():
            return os.path.abspath(text)
    except OSError:  # a name longer than the file system allows: neither an id nor a path
        pass
    if HF_ID_PATTERN.fullmatch(text) and _hub_rules_hold(text):
        return text
    raise InputError(
        f"{field}: {text!r} is not a Hugging Face id (letters, digits, '-', '_', '.' in 'org/name', no '--' or '..') "
        "nor an existing local path")


def _hub_rules_hold(text: str) -> bool:
    return all(len(part) <= _MAX_PART and not part.endswith(("-", ".")) for part in text.split("/")) \
        and "--" not in text and ".." not in text


@dataclass(frozen=True)
class FetchedConfig:
    """A model's configuration files and where they were read."""

    config: dict
    hf_quant_config: dict | None
    origin: str


def _read(path: Path, what: str) -> dict:
    return read_json_object(path, what)


def _from_folder(folder: Path, origin: str) -> FetchedConfig:
    quant = folder / QUANT_CONFIG_FILE
    return FetchedConfig(_read(folder / "config.json", "model config"),
                         _read(quant, "ModelOpt quantization config") if quant.is_file() else None, origin)


def read_local(path: str | Path) -> FetchedConfig:
    """A local ``config.json`` (or a folder holding one), with its ``hf_quant_config.json``."""
    path = Path(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InputError(f"model: folder '{path}' has no config.json")
        return _from_folder(path, f"local folder {path}")
    quant = path.parent / QUANT_CONFIG_FILE
    return FetchedConfig(_read(path, "model config"),
                         _read(quant, "ModelOpt quantization config") if quant.is_file() else None,
                         f"local file {path}")


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, as huggingface_hub resolves it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def _cached_snapshot(repo_id: str, cache: Path) -> Path | None:
    """The snapshot folder of ``repo_id`` in the cache: the one ``refs/main`` names, else the newest."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.is_file():
        named = snapshots / ref.read_text().strip()
        if (named / "config.json").is_file():
            return named
    found = [s for s in snapshots.iterdir() if (s / "config.json").is_file()]
    return max(found, key=lambda s: s.stat().st_mtime) if found else None


def from_cache(repo_id: str) -> FetchedConfig | None:
    """The cached configuration of a Hub id (its origin names the revision), or None when it was
    never downloaded."""
    cache = hub_cache_dir()
    snapshot = _cached_snapshot(repo_id, cache)
    if snapshot is None:
        return None
    return _from_folder(snapshot, f"Hugging Face cache {cache} ({repo_id}, revision {snapshot.name})")


def hub_status() -> str | None:
    """Why the Hub cannot be asked (None when it can)."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        return "huggingface_hub is not installed (pip install 'servopt[hub]')"
    return None


def _probe_target() -> tuple[str, int]:
    """The host and port a Hub request connects to first: the HTTPS proxy when one is set."""
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    url = urllib.parse.urlsplit(proxy or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)


def hub_unreachable(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """Why the Hub cannot be reached now (None when a connection opens within ``timeout_s``).

    Name resolution has no timeout of its own, so the probe runs in a daemon thread that is left
    behind if it does not finish in time.
    """
    host, port = _probe_target()
    outcome: list[str] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            outcome.append("")
        except OSError as err:
            outcome.append(getattr(err, "strerror", None) or type(err).__name__)

    thread = threading.Thread(target=probe, name="servopt-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        return f"{host}:{port} did not answer within {timeout_s:g} s"
    return f"{host}:{port}: {outcome[0]}" if outcome[0] else None


def from_hub(repo_id: str) -> FetchedConfig:
    """Download ``config.json`` (and ``hf_quant_config.json`` when present) into the cache.

    Raises :class:`InputError` with the Hub's reason (unknown repo, gated repo, no network); an
    unreachable Hub is found by :func:`hub_unreachable` before ``huggingface_hub`` retries.
    """
    reason = hub_status()
    if reason:
        raise InputError(f"model '{repo_id}': the Hugging Face Hub cannot be asked: {reason}")
    unreachable = hub_unreachable()
    if unreachable:
        raise InputError(f"model '{repo_id}': the Hugging Face Hub cannot be reached ({unreachable})")
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)  # its retry warnings would break the one-line error
    try:
        path = Path(hf_hub_download(repo_id, "config.json", cache_dir=hub_cache_dir(), etag_timeout=HUB_PROBE_TIMEOUT_S))
    except LocalEntryNotFoundError:  # the connection failed after the probe (a subclass of the next)
        raise InputError(f"model '{repo_id}': the Hugging Face Hub could not be reached") from None
    except GatedRepoError:
        raise InputError(f"model '{repo_id}' is gated on the Hugging Face Hub: accept its license and log in "
                         "(huggingface-cli login), or pass a local config.json") from None
    except RepositoryNotFoundError:
        raise InputError(f"model '{repo_id}' does not exist on the Hugging Face Hub (or is private)") from None
    except EntryNotFoundError:
        raise InputError(f"model '{repo_id}' on the Hugging Face Hub has no config.json") from None
    except Exception as err:  # noqa: BLE001 - connection errors come in many types
        raise InputError(f"model '{repo_id}': the Hugging Face Hub could not be reached "
                         f"({type(err).__name__})") from None
    try:
        quant_path = hf_hub_download(repo_id, QUANT_CONFIG_FILE, cache_dir=hub_cache_dir(),
                                     etag_timeout=HUB_PROBE_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - most repos have none
        quant_path = None
    finally:
        hub_logger.setLevel(level)
    quant = _read(Path(quant_path), "ModelOpt quantization config") if quant_path else None
    revision = path.parent.name  # the snapshot folder is named by the commit
    return FetchedConfig(_read(path, "model config"), quant, f"Hugging Face Hub ({repo_id}, revision {revision})")

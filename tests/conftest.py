import os
from pathlib import Path

import pytest

# The suite never reaches the network: with huggingface_hub installed, a model the cache lacks
# would otherwise be downloaded (and, without a network, retried with backoff for minutes).
os.environ["HF_HUB_OFFLINE"] = "1"

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def postgres_url():
    """A throwaway PostgreSQL server's URL (with a password); skips where none can be started."""
    from _postgres import postgres_server, unavailable

    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with postgres_server() as url:
        yield url

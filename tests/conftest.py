from pathlib import Path

import pytest

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

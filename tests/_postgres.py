"""A throwaway PostgreSQL server for the tests: Debian's binaries, a temporary data folder, a free
port on 127.0.0.1, and a password (so the tests can check that it is never printed or saved).

PostgreSQL refuses to run as root; as root the server runs as the ``postgres`` user that Debian's
package creates. ``.ci/run`` installs the package; without it the tests that need a server skip.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

USER = "servopt"
PASSWORD = "pg-Secret-7f3a"  # what the tests look for in every output and file
START_TIMEOUT_S = 60


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def unavailable() -> str | None:
    """Why no server can be started here, or None."""
    if _binary("initdb") is None or _binary("pg_ctl") is None:
        return "PostgreSQL is not installed (apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root without runuser"
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "psycopg2 is not installed (pip install psycopg2-binary)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server; yield its SQLAlchemy URL (psycopg2, with the password); stop and delete it."""
    as_root = os.geteuid() == 0
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    # Under /tmp itself: pytest's own temporary folders are private to root.
    base = Path(tempfile.mkdtemp(prefix="servopt-pg-"))
    data, log = base / "data", base / "server.log"
    pwfile = base / "pwfile"
    pwfile.write_text(PASSWORD + "\n")
    if as_root:
        shutil.chown(base, "postgres")
        shutil.chown(pwfile, "postgres")
    base.chmod(0o700)
    port = free_port()
    pg_ctl = _binary("pg_ctl")
    try:
        subprocess.run([*prefix, _binary("initdb"), "-D", str(data), "-U", USER, f"--pwfile={pwfile}",
                        "--auth=scram-sha-256", "--encoding=UTF8", "--no-sync"],
                       check=True, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-l", str(log), "-w", "-t", str(START_TIMEOUT_S),
                        "-o", f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                       check=True, capture_output=True, text=True, timeout=START_TIMEOUT_S + 10)
        yield f"postgresql+psycopg2://{USER}:{PASSWORD}@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"],
                           capture_output=True, timeout=START_TIMEOUT_S)
        shutil.rmtree(base, ignore_errors=True)

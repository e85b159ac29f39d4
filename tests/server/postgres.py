"""A throwaway PostgreSQL for the tests: ``initdb`` + ``pg_ctl`` on a temporary directory, loopback only.

Never relies on a running service. As root (CI containers), the cluster runs as the ``postgres`` user (or
``nobody``), since PostgreSQL refuses to run as root. Needs PostgreSQL's server binaries: on Debian/Ubuntu
``apt-get install -y postgresql`` (they land in /usr/lib/postgresql/<version>/bin, which is searched).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy


def _binary(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        pytest.fail(
            f"PostgreSQL's `{name}` is not installed; install it (Debian/Ubuntu: apt-get install -y "
            "postgresql) to run the replica tests"
        )
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _runner() -> tuple[list[str], int | None, int | None]:
    if os.geteuid() != 0:
        return [], None, None
    for user in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            continue
        return ["runuser", "-u", user, "--"], entry.pw_uid, entry.pw_gid
    pytest.fail("running as root with neither a `postgres` nor a `nobody` user to run PostgreSQL as")


@contextmanager
def running_postgres() -> Iterator[str]:
    """Start a PostgreSQL cluster; yields its SQLAlchemy URL; stops and deletes it afterwards."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    prefix, uid, gid = _runner()
    base = Path(tempfile.mkdtemp(prefix="evalsi-pg-"))
    base.chmod(0o755)
    data = base / "data"
    data.mkdir()
    if uid is not None and gid is not None:
        os.chown(data, uid, gid)
    port = _free_port()
    log = data / "server.log"

    def run(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120, cwd=str(base))

    run(initdb, "-D", str(data), "-U", "evalsi", "--auth=trust", "-E", "UTF8")
    options = f"-h 127.0.0.1 -p {port} -k {data} -c fsync=off -c max_connections=100"
    run(pg_ctl, "-D", str(data), "-o", options, "-l", str(log), "-w", "-t", "60", "start")
    try:
        yield f"postgresql+psycopg://evalsi@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, pg_ctl, "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop"],
            capture_output=True,
            timeout=120,
            cwd=str(base),
        )
        shutil.rmtree(base, ignore_errors=True)


def fresh_database(url: str, name: str) -> str:
    """Create an empty database ``name`` in the cluster at ``url`` (dropping an old one); returns its URL."""
    engine = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}"'))
            connection.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return url.rsplit("/", 1)[0] + "/" + name

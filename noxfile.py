"""Separate environments for the integrations that bring heavy dependencies (torch, trainers).

`nox -s integrations` runs every integration session; the core suite (scripts/test --core) needs none of them.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True

INTEGRATIONS: list[str] = []


@nox.session(name="integrations", python=False)
def integrations(session: nox.Session) -> None:
    """Run every integration session in turn."""
    for name in INTEGRATIONS:
        session.notify(name)
    if not INTEGRATIONS:
        session.log("no integration sessions are defined yet")

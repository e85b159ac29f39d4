"""Shared test configuration: no test inherits evalsi's environment variables from the developer's shell."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests never inherit a reward spec or server from the developer's shell."""
    for name in ("EVALSI_REWARD_SPEC", "EVALSI_SERVER", "EVALSI_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    yield

"""Shared test configuration: no test inherits evalsi's environment variables from the developer's shell, and
property tests have no deadline."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import settings

# Property tests check what holds, never how fast: on a busy shared machine an example can take far longer than
# hypothesis's default 200 ms deadline, which would fail a correct test.
settings.register_profile("evalsi", deadline=None)
settings.load_profile("evalsi")

# Caches evalsi keeps between runs (math-equiv's parser decisions) go to a folder of this test session, never the
# user's own: a test sees no state left by an earlier run.
os.environ.setdefault("EVALSI_CACHE_DIR", tempfile.mkdtemp(prefix="evalsi-test-cache-"))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests never inherit a reward spec or server from the developer's shell."""
    for name in ("EVALSI_REWARD_SPEC", "EVALSI_SERVER", "EVALSI_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    yield

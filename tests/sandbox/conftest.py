"""Sandbox tests run real sandboxes: bubblewrap must be installed (CI installs it); nothing here is skipped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evalsi.evaluators import close_all
from evalsi.sandbox import close_shared_pools


@pytest.fixture(autouse=True, scope="module")
def _fresh_pools() -> Iterator[None]:
    """Each test module starts and stops its own sandboxes, so no module sees another's leftovers."""
    yield
    close_shared_pools()
    close_all()

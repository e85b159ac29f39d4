"""Names a package imports on first use: listed, importable, named by the package, and absent until asked for."""

from __future__ import annotations

import subprocess
import sys

import pytest

import evalsi.rewards
from evalsi._util.public import lazy_names

PROBE = """
import sys
import evalsi.rewards, evalsi.runs, evalsi.specs
before = [m for m in ("httpx", "evalsi.specs._task") if m in sys.modules]
listed = all(n in dir(p) for p, n in ((evalsi.rewards, "RemoteReward"), (evalsi.runs, "RunsClient"),
                                      (evalsi.specs, "TaskSpec")))
from evalsi.runs import RunsClient
from evalsi.specs import TaskSpec
print(before, listed, RunsClient.__module__, TaskSpec.__module__, "httpx" in sys.modules)
"""


def test_lazy_names_load_on_first_use_and_are_named_by_their_package() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.split() == ["[]", "True", "evalsi.runs", "evalsi.specs", "True"]


def test_an_unknown_name_is_an_attribute_error() -> None:
    load = lazy_names("evalsi.rewards", {"RemoteReward": "evalsi.rewards._remote"})
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        load("Nothing")
    with pytest.raises(AttributeError):
        evalsi.rewards.Nothing  # noqa: B018

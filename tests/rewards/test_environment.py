"""Environment variables read on every per-sample call: decoded again only when they change, seen at once."""

from __future__ import annotations

import os

import pytest

from evalsi.rewards._environment import EnvironmentValues


def test_values_are_those_of_os_environ_and_follow_every_change(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSI_TEST_FIRST", "one")
    monkeypatch.delenv("EVALSI_TEST_SECOND", raising=False)
    values = EnvironmentValues("EVALSI_TEST_FIRST", "EVALSI_TEST_SECOND")
    assert values.read() == ("one", None)
    assert values.read() == ("one", None)
    monkeypatch.setenv("EVALSI_TEST_SECOND", "two")
    assert values.read() == ("one", "two")
    os.environ["EVALSI_TEST_FIRST"] = "uno"
    assert values.read() == ("uno", "two")
    monkeypatch.setenv("EVALSI_TEST_FIRST", "uno")  # set again to an equal value: read the same
    assert values.read() == ("uno", "two")
    monkeypatch.delenv("EVALSI_TEST_FIRST")
    assert values.read() == (None, "two")
    monkeypatch.setenv("EVALSI_TEST_FIRST", "")
    assert values.read() == ("", "two")
    assert values.read() == tuple(os.environ.get(name) for name in ("EVALSI_TEST_FIRST", "EVALSI_TEST_SECOND"))


def test_an_environ_without_its_raw_mapping_is_read_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    values = EnvironmentValues("EVALSI_TEST_FIRST")
    monkeypatch.setattr(os, "environ", {"EVALSI_TEST_FIRST": "plain"})
    assert values.read() == ("plain",)

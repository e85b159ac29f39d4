"""The run's progress bar: redrawn on a terminal, written once at the end to a file or a pipe."""

from __future__ import annotations

import threading

import pytest

from evalsi.runs._progress import RunProgress


def refreshing() -> bool:
    return any(type(thread).__name__ == "_RefreshThread" for thread in threading.enumerate())


def test_to_a_pipe_the_bar_is_written_once_at_the_end(capsys: pytest.CaptureFixture[str]) -> None:
    with RunProgress("bench", 3, 0, enabled=True) as bar:
        assert not refreshing()  # nothing would show its redraws
        bar.advance(2)
        bar.advance(0, failed=1)
    err = capsys.readouterr().err
    assert err.count("bench") == 1
    assert "3/3" in err and "1 failed" in err


def test_on_a_terminal_the_bar_is_redrawn_as_it_goes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # Rich treats the output as a terminal
    with RunProgress("bench", 3, 0, enabled=True) as bar:
        assert refreshing()
        bar.advance(3)
    assert "3/3" in capsys.readouterr().err

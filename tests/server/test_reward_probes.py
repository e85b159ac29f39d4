"""Probes on a spec's first use, against a real server: ``refuse`` refuses a hackable spec on every protocol,
``warn`` scores the call and probes the spec once per project, and the default probes nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from evalsi.errors import SpecError
from evalsi.server._config import load_config
from evalsi.server.rewards._config import RewardsConfig
from tests.server.harness import ServerProcess, call_grpc, make_token, metric, post_http, write_config

WAIT = 120.0
HACKABLE = {"components": [{"ref": "contains"}]}
SOUND = {"components": [{"ref": "exact-match"}]}
ROLLOUTS = [
    {"prompt": "How many legs has a spider?", "answer": "8", "completion": "8"},
    {"prompt": "How many sides has a hexagon?", "answer": "6", "completion": "It has 6."},
]


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"never reached: {what}"
        time.sleep(0.1)


def _metrics(server: ServerProcess, token: str) -> str:
    return httpx.get(server.http + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30).text


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_probing_is_off_unless_the_operator_turns_it_on(tmp_path: Path) -> None:
    assert RewardsConfig().probe_on_first_use == "off"
    path = write_config(tmp_path, {"rewards": {"probe_on_first_use": False, "probe_timeout": "2m"}})
    assert "probe_on_first_use: false" in path.read_text()  # as YAML reads an unquoted `off`
    rewards = load_config(path).spec.rewards
    assert (rewards.probe_on_first_use, rewards.probe_timeout) == ("off", 120.0)
    with pytest.raises(SpecError, match=r"probe_on_first_use.*'off', 'warn' or 'refuse'"):
        load_config(write_config(tmp_path, {"rewards": {"probe_on_first_use": "block"}}, "bad.yaml"))


def test_refuse_mode_refuses_a_hackable_spec_on_every_call_and_scores_a_sound_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(tmp_path, {"database": {"url": url}, "rewards": {"probe_on_first_use": "refuse"}})
    token = make_token(url, "team", ["evaluations.run", "metrics.read"])
    with ServerProcess(config) as server:
        refused = post_http(server, token, HACKABLE, ROLLOUTS, timeout=WAIT)
        again = post_http(server, token, HACKABLE, ROLLOUTS[:1], timeout=WAIT)
        status, details = call_grpc(server, token, HACKABLE, ROLLOUTS)
        sound = post_http(server, token, SOUND, ROLLOUTS, timeout=WAIT)
        text = _metrics(server, token)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["code"] == "reward_spec_hackable" and error["status"] == "failed_precondition"
    assert any("'reference-padded'" in finding for finding in error["findings"]), error
    assert again.status_code == 422 and again.json()["error"]["code"] == "reward_spec_hackable"
    assert status == "failed_precondition" and "hackable" in details
    assert sound.status_code == 200, sound.text
    assert [item["total"] for item in sound.json()["results"]] == [1.0, 0.0]
    assert metric(text, "evalsi_reward_probe_runs_total", project="team", verdict="hackable") == 1  # once
    assert metric(text, "evalsi_reward_probe_runs_total", project="team", verdict="clean") == 1
    assert metric(text, "evalsi_reward_probe_refused_calls_total", project="team") == 3
    assert metric(text, "evalsi_reward_probe_findings_total", evaluator="contains", probe="reference-padded") == 1


def test_warn_mode_scores_the_call_and_probes_a_spec_once_per_project(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(
        tmp_path, {"database": {"url": url}, "rewards": {"probe_on_first_use": "warn", "shared_cache": False}}
    )
    team = make_token(url, "team", ["evaluations.run", "metrics.read"])
    other = make_token(url, "other", ["evaluations.run"])
    log = tmp_path / "scored.log"
    spec = {"components": [{"ref": "contains"}, {"ref": "test-server-count", "params": {"log": str(log)}}]}
    with ServerProcess(config) as server:
        first = post_http(server, team, spec, ROLLOUTS, timeout=WAIT)
        assert first.status_code == 200, first.text
        assert len(first.json()["results"]) == len(ROLLOUTS)  # scored as usual, not held for the probes

        def probed(project: str) -> bool:
            text = _metrics(server, team)
            return metric(text, "evalsi_reward_probe_runs_total", project=project, verdict="hackable") == 1

        _until(lambda: probed("team"), "the spec probed for team")
        before = len(_lines(log))
        assert before > len(ROLLOUTS)  # the probe rollouts went through the spec's components too
        assert log.stat().st_size < 256 << 10  # a server floods with 64 KiB of LaTeX, not the command's 1 MB
        later = [{**ROLLOUTS[0], "completion": "eight"}, {**ROLLOUTS[1], "completion": "six"}]
        assert post_http(server, team, spec, later, timeout=WAIT).status_code == 200
        assert _lines(log)[before:] == ["eight", "six"]  # the same spec is not probed again for the project
        assert post_http(server, other, spec, later, timeout=WAIT).status_code == 200
        _until(lambda: probed("other"), "the spec probed for another project")
        text = _metrics(server, team)
    assert metric(text, "evalsi_reward_probe_runs_total", project="team", verdict="hackable") == 1
    assert metric(text, "evalsi_reward_probe_refused_calls_total", project="team") == 0
    assert any("failed its first-use probes, scored anyway" in line for line in server.stderr_lines)

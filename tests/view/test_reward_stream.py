"""The training reward beside the held-out evaluations on a learning curve's page, read from the trainer's logs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
from starlette.testclient import TestClient

from evalsi.view import create_app
from evalsi.view._charts import MAX_LINE_POINTS
from tests.view.conftest import ids
from tests.view.make import simple_run


def training(root: Path, out: Path, steps: dict[int | None, int]) -> None:
    """A training run ``grpo-1`` whose checkpoints are in ``out``, evaluated at these steps (None: the base)."""
    curve = root / "logs" / "grpo-1" / "gsm"
    curve.mkdir(parents=True)
    for step, correct in steps.items():
        label = "base" if step is None else str(step)
        location = "base-model" if step is None else str(out / f"checkpoint-{step}")
        section = {"trainingRun": "grpo-1", "step": step, "label": label, "location": location}
        simple_run(
            curve / ("base.json" if step is None else f"step-{step}.json"),
            f"grpo-1@{label}",
            [True] * correct + [False] * (20 - correct),
            checkpoint=section,
        )


def history(steps: range) -> list[dict[str, Any]]:
    """A GRPO log whose reward climbs (the policy found a way to please it) while the evaluations fall."""
    return [
        {
            "step": s,
            "reward": s / 300,
            "rewards/gsm/mean": s / 300,
            "rewards/gsm/format/mean": 1.0,
            "rewards/gsm/format/std": 0.0,
            "loss": 0.1,
        }
        for s in steps
    ]


def write_state(checkpoint: Path, log: Any) -> None:
    checkpoint.mkdir(parents=True, exist_ok=True)
    (checkpoint / "trainer_state.json").write_bytes(orjson.dumps({"global_step": 300, "log_history": log}))


def curve_id(client: TestClient) -> str:
    return next(iter(ids(client.get("/").text, "curves").values()))


def test_the_training_reward_is_drawn_beside_the_evaluations_on_the_same_steps(tmp_path: Path) -> None:
    out = tmp_path / "out"
    training(tmp_path, out, {None: 15, 100: 12, 300: 6})
    write_state(out / "checkpoint-100", history(range(10, 101, 10)))
    write_state(out / "checkpoint-300", history(range(10, 301, 10)))
    client = TestClient(create_app([tmp_path]))
    cid = curve_id(client)
    html = client.get(f"/curves/{cid}").text
    boxes = dict(re.findall(r'<figure class="chart-box reward-box" data-series="([^"]+)" data-steps="([^"]+)"', html))
    assert list(boxes) == ["reward", "gsm", "gsm/format"]
    assert boxes["reward"].split() == [str(s) for s in range(10, 301, 10)]
    # Every chart on the page, the evaluations' and the reward's, spans the same steps.
    spans = set(re.findall(r'class="chart line-chart"[^>]*data-x-min="([^"]+)" data-x-max="([^"]+)"', html))
    assert spans == {("0", "300")}
    assert html.count('class="chart line-chart"') == 2 + 3  # acc and pass@1/acc; reward and two components
    assert str(out / "checkpoint-300" / "trainer_state.json") in html and 'class="note' not in html
    data = client.get(f"/api/curves/{cid}").json()["rewardStream"]
    assert data["source"] == str(out / "checkpoint-300" / "trainer_state.json")
    assert data["series"]["gsm/format"][-1] == [300, 1.0] and data["notes"] == []


def test_the_eval_axis_reaches_the_last_logged_step(tmp_path: Path) -> None:
    out = tmp_path / "out"
    training(tmp_path, out, {None: 15, 100: 12})
    write_state(out / "checkpoint-100", history(range(10, 451, 10)))  # training ran on past the last evaluation
    client = TestClient(create_app([tmp_path]))
    html = client.get(f"/curves/{curve_id(client)}").text
    assert set(re.findall(r'data-x-min="([^"]+)" data-x-max="([^"]+)"', html)) == {("0", "500")}


def test_missing_or_malformed_logs_give_a_note_and_the_curve_still_shows(tmp_path: Path) -> None:
    out = tmp_path / "out"
    training(tmp_path, out, {None: 15, 100: 12})
    client = TestClient(create_app([tmp_path]))
    cid = curve_id(client)
    page = client.get(f"/curves/{cid}")
    assert page.status_code == 200 and "reward-box" not in page.text
    assert "no checkpoint folder of this training run is on this machine" in page.text
    (out / "checkpoint-100").mkdir(parents=True)
    (out / "checkpoint-100" / "trainer_state.json").write_text('{"log_history": [{"step": 1, "reward": ')
    page = client.get(f"/curves/{cid}")
    assert page.status_code == 200 and 'class="chart line-chart"' in page.text and "reward-box" not in page.text
    notes = re.findall(r'<p class="note reward-note">([^<]+)</p>', page.text)
    assert any("trainer_state.json: not JSON" in n for n in notes), notes
    assert any("no training reward logged in" in n for n in notes), notes
    # fixed on disk: the next page reads it again
    write_state(out / "checkpoint-100", history(range(10, 101, 10)))
    assert 'data-series="reward"' in client.get(f"/curves/{cid}").text


def test_trainer_logs_outside_the_given_folders_are_not_read(tmp_path: Path) -> None:
    out = tmp_path / "elsewhere" / "out"
    training(tmp_path / "results", out, {None: 15, 100: 12})
    write_state(out / "checkpoint-100", history(range(10, 101, 10)))
    client = TestClient(create_app([tmp_path / "results"]))
    cid = curve_id(client)
    html = client.get(f"/curves/{cid}").text
    assert "reward-box" not in html and f"the trainer&#39;s logs in {out} lie outside the folders given" in html
    both = TestClient(create_app([tmp_path / "results", out]))
    assert 'data-series="reward"' in both.get(f"/curves/{cid}").text


def monitored(steps: range, fired_from: int) -> list[dict[str, Any]]:
    """``history`` with the monitors evalsi's TRL reward functions log: length drift fires from ``fired_from``."""
    log = history(steps)
    for entry in log:
        s = entry["step"]
        entry.update(
            {
                "monitor/length_drift": 1.0 + s / 200,
                "monitor/length_drift/fired": 1.0 if s >= fired_from else 0.0,
                "monitor/truncation_rate": 0.1 + s / 1000,
                "monitor/truncation_rate/fired": 0.0,
                "monitor/sandbox/timeout": 0.05,
            }
        )
    return log


def monitor_boxes(html: str) -> dict[str, str]:
    return dict(re.findall(r'<figure class="chart-box monitor-box" data-signal="([^"]+)" data-fired="([^"]*)"', html))


def test_the_monitors_are_drawn_under_the_training_reward_with_their_thresholds_and_fired_steps(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    training(tmp_path, out, {None: 15, 100: 12, 300: 6})
    write_state(out / "checkpoint-300", monitored(range(10, 301, 10), fired_from=160))
    client = TestClient(create_app([tmp_path]))
    cid = curve_id(client)
    html = client.get(f"/curves/{cid}").text
    assert html.index('id="training-reward"') < html.index('id="monitors"') < html.index('id="monitor-charts"')
    # the documented signals first, in their order, then the verdict rates
    boxes = monitor_boxes(html)
    assert list(boxes) == ["length_drift", "truncation_rate", "sandbox/timeout"]
    assert boxes["length_drift"].split() == [str(s) for s in range(160, 301, 10)] and boxes["truncation_rate"] == ""
    charts = dict(re.findall(r'data-signal="([^"]+)"[^>]*>.*?(<svg.*?</svg>)', html, re.S))
    # length drift fires at 1.5 (Thresholds.length_ratio): the line is drawn there
    assert re.search(r'class="threshold"[^>]*data-threshold="1.5"', charts["length_drift"])
    assert "threshold ≥ 1.5 (length_ratio)" in charts["length_drift"]
    fired = re.findall(r'<circle class="fired"[^>]*data-step="(\d+)"', charts["length_drift"])
    assert fired == [str(s) for s in range(160, 301, 10)]
    # a rise over the run's start is drawn from the first logged value; it never fired
    assert re.search(r'class="threshold"[^>]*data-threshold="0.31"', charts["truncation_rate"])
    assert 'class="fired"' not in charts["truncation_rate"]
    # a verdict's rate has no threshold of its own
    assert 'class="threshold"' not in charts["sandbox/timeout"]
    # every chart, the evaluations', the reward's and the monitors', spans the same steps
    spans = set(re.findall(r'class="chart line-chart"[^>]*data-x-min="([^"]+)" data-x-max="([^"]+)"', html))
    assert spans == {("0", "300")}
    # the table of fired signals: the first step, the value there and the rule
    table = html[html.index('id="monitors-fired"') : html.index("</table>", html.index('id="monitors-fired"'))]
    rows = re.findall(
        r'<tr data-signal="([^"]+)"><td[^>]*>[^<]+</td><td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td>', table
    )
    assert rows == [("length_drift", "160", "1.800", "≥ 1.5 (length_ratio)")]
    data = client.get(f"/api/curves/{cid}").json()["rewardStream"]["monitors"]
    assert list(data) == ["length_drift", "truncation_rate", "sandbox/timeout"]
    assert data["length_drift"]["fired"] == list(range(160, 301, 10))
    assert data["length_drift"]["points"][0] == [10, 1.05]
    assert data["length_drift"]["threshold"] == 1.5 and data["length_drift"]["thresholdField"] == "length_ratio"
    assert data["truncation_rate"]["thresholdLevel"] == 0.11 + 0.2 and data["truncation_rate"]["fired"] == []
    assert data["sandbox/timeout"]["threshold"] is None and data["sandbox/timeout"]["thresholdLevel"] is None


def test_a_logged_threshold_is_drawn_where_the_trainer_said_the_monitor_fires(tmp_path: Path) -> None:
    out = tmp_path / "out"
    training(tmp_path, out, {None: 15, 100: 12})
    log = monitored(range(10, 101, 10), fired_from=1000)
    for entry in log:  # the baseline the monitor measured (0.05) plus the rise, not the first logged value's
        entry["monitor/truncation_rate/threshold"] = 0.25
    write_state(out / "checkpoint-100", log)
    client = TestClient(create_app([tmp_path]))
    cid = curve_id(client)
    html = client.get(f"/curves/{cid}").text
    charts = dict(re.findall(r'data-signal="([^"]+)"[^>]*>.*?(<svg.*?</svg>)', html, re.S))
    assert re.search(r'class="threshold"[^>]*data-threshold="0.25"', charts["truncation_rate"])
    assert "threshold 0.25 (logged)" in charts["truncation_rate"]
    # a signal without a logged threshold keeps the documented one
    assert re.search(r'class="threshold"[^>]*data-threshold="1.5"', charts["length_drift"])
    data = client.get(f"/api/curves/{cid}").json()["rewardStream"]["monitors"]
    assert data["truncation_rate"]["thresholdLevel"] == 0.25
    assert data["truncation_rate"]["thresholds"][0] == [10, 0.25]
    assert "truncation_rate/threshold" not in data


def test_no_monitor_logged_means_no_monitors_section(tmp_path: Path) -> None:
    out = tmp_path / "out"
    training(tmp_path, out, {None: 15, 100: 12})
    write_state(out / "checkpoint-100", history(range(10, 101, 10)))
    client = TestClient(create_app([tmp_path]))
    cid = curve_id(client)
    html = client.get(f"/curves/{cid}").text
    assert 'data-series="reward"' in html
    assert 'id="monitors"' not in html and "monitor-box" not in html and 'class="threshold"' not in html
    assert client.get(f"/api/curves/{cid}").json()["rewardStream"]["monitors"] == {}


def test_monitors_that_never_fired_have_charts_but_no_table(tmp_path: Path) -> None:
    out = tmp_path / "out"
    training(tmp_path, out, {None: 15, 100: 12})
    write_state(out / "checkpoint-100", monitored(range(10, 101, 10), fired_from=1000))
    client = TestClient(create_app([tmp_path]))
    html = client.get(f"/curves/{curve_id(client)}").text
    assert list(monitor_boxes(html)) == ["length_drift", "truncation_rate", "sandbox/timeout"]
    assert 'id="monitors-fired"' not in html and 'class="fired"' not in html


def test_a_long_log_s_fired_steps_are_thinned_like_its_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    training(tmp_path, out, {None: 15, 3000: 12})
    write_state(out / "checkpoint-3000", monitored(range(1, 3001), fired_from=1))
    client = TestClient(create_app([tmp_path]))
    html = client.get(f"/curves/{curve_id(client)}").text
    steps = [int(s) for s in re.findall(r'<circle class="fired"[^>]*data-step="(\d+)"', html)]
    assert len(steps) == MAX_LINE_POINTS and steps[0] == 1 and steps[-1] == 3000
    assert monitor_boxes(html)["length_drift"].split()[-1] == "3000"  # the figure still lists every fired step

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from evalsi.runs import compare_runs, load_results
from evalsi.runs._compare import comparison_to_dict
from evalsi.runs._results import journal_path
from evalsi.view import create_app
from tests.view.conftest import ids
from tests.view.make import HOSTILE, record, simple_run, write_run


def run_id(client: TestClient, name: str) -> str:
    return ids(client.get("/").text, "runs")[name]


def test_list_shows_runs_curves_and_reward_files(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    runs = ids(page.text, "runs")
    assert {"run-a", "run-b", "hostile", "grpo-1 base", "grpo-1 100", "grpo-1 200"} <= set(runs)
    assert list(ids(page.text, "curves")) == [str(Path("logs") / "grpo-1" / "forgetting")]
    assert "scores.jsonl" in ids(page.text, "rewards")
    listing = client.get("/api/sources").json()
    run_b = next(r for r in listing["runs"] if r["name"] == "run-b")
    assert run_b["status"] == "complete"
    assert run_b["metrics"]["acc"] == pytest.approx(10 / 12)
    assert run_b["target"] == "model-run-b @ http://127.0.0.1:8000/v1"
    assert run_b["gates"] == [True]


def test_run_page_shows_metrics_interval_pass_k_gates_and_counts(client: TestClient, results_dir: Path) -> None:
    rid = run_id(client, "run-a")
    html = client.get(f"/runs/{rid}").text
    summary = orjson.loads((results_dir / "a.results.json").read_bytes())["summary"]
    acc = summary["metrics"]["acc"]
    assert f"{acc['mean']:.4f}" in html and f"[{acc['ci_low']:.4f}, {acc['ci_high']:.4f}]" in html
    assert "pass@1/acc" in html
    metrics = html[html.index('id="metrics"') : html.index('id="counts"')]
    assert "passed" in metrics  # the gate min 0.5 holds at 0.5
    counts = client.get(f"/api/runs/{rid}").json()["summary"]["counts"]
    assert counts == {"acc": {"ok": 24}}


def test_record_table_sorts_filters_searches_and_pages(client: TestClient) -> None:
    rid = run_id(client, "run-a")
    rows = client.get(f"/api/runs/{rid}/records", params={"sort": "acc", "size": 25}).json()["rows"]
    assert [r["values"]["acc"] for r in rows] == [0.0] * 6 + [1.0] * 6
    failing = client.get(f"/api/runs/{rid}/records", params={"metric": "acc", "op": "lt", "value": "1"}).json()
    assert failing["matching"] == 6 and all(r["values"]["acc"] == 0.0 for r in failing["rows"])
    found = client.get(f"/api/runs/{rid}/records", params={"q": "PROBLEM NUMBER 7:"}).json()
    assert [r["index"] for r in found["rows"]] == [7]
    errors = client.get(f"/api/runs/{run_id(client, 'hostile')}/records", params={"status": "error"}).json()
    assert [r["index"] for r in errors["rows"]] == [1]
    page2 = client.get(f"/api/runs/{rid}/records", params={"size": 25, "page": 2}).json()
    assert page2["page"] == 1 and page2["pages"] == 1  # a page past the end shows the last one
    html = client.get(f"/runs/{rid}", params={"metric": "acc", "op": "ge", "value": "1"}).text
    assert "6 of 12 records" in html


def test_bad_table_query_names_the_parameter(client: TestClient) -> None:
    rid = run_id(client, "run-a")
    answer = client.get(f"/api/runs/{rid}/records", params={"sort": "nope"})
    assert answer.status_code == 400 and "sort: unknown column 'nope'" in answer.json()["error"]
    answer = client.get(f"/runs/{rid}", params={"value": "abc", "metric": "acc"})
    assert answer.status_code == 400 and "value: &#39;abc&#39; is not a number" in answer.text


def test_record_page_shows_prompt_samples_scores_tokens_and_latency(client: TestClient) -> None:
    rid = run_id(client, "run-a")
    html = client.get(f"/runs/{rid}/records/3").text
    assert "problem number 3: what is 3+1?" in html
    assert "answer 0 for problem 3" in html and "answer 1 for problem 3" in html
    assert "answer 1 of record 3" in html  # a score's reason
    assert "13 tokens" in html and "0.040 s" in html
    assert client.get(f"/runs/{rid}/records/12").status_code == 404


def test_hostile_completion_is_escaped_and_scripts_are_forbidden(client: TestClient) -> None:
    rid = run_id(client, "hostile")
    answer = client.get(f"/runs/{rid}/records/0")
    assert HOSTILE not in answer.text and "<script>document" not in answer.text
    assert "&lt;script&gt;document.title=&#34;pwned&#34;&lt;/script&gt;" in answer.text
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert "<script>document" not in client.get(f"/runs/{rid}", params={"q": "script"}).text


@pytest.mark.parametrize(
    "path",
    [
        "/runs/../../../etc/passwd",
        "/runs/..%2F..%2Fetc%2Fpasswd",
        "/static/../_app.py",
        "/static/..%2f_app.py",
        "/static/%2e%2e/_app.py",
        "/static/../../../../etc/passwd",
        "/runs/%2Fetc%2Fpasswd",
        "/rewards/..%2fscores.jsonl",
    ],
)
def test_paths_outside_the_roots_are_not_readable(client: TestClient, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 404
    assert "root:" not in answer.text and "def create_app" not in answer.text


def test_a_link_out_of_the_root_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    write_run(outside / "secret.results.json", "secret", [record(0, [True])])
    root = tmp_path / "root"
    root.mkdir()
    (root / "link.results.json").symlink_to(outside / "secret.results.json")
    (root / "dir").symlink_to(outside, target_is_directory=True)
    client = TestClient(create_app([root]))
    assert client.get("/api/sources").json()["runs"] == []
    from evalsi.view._catalog import source_id

    secret = source_id((outside / "secret.results.json").resolve(), "run")
    assert client.get(f"/runs/{secret}").status_code == 404
    assert client.get(f"/api/runs/{secret}/records/0").status_code == 404


def test_a_run_id_does_not_open_a_reward_file_or_curve(client: TestClient) -> None:
    reward = ids(client.get("/").text, "rewards")["scores.jsonl"]
    assert client.get(f"/runs/{reward}").status_code == 404
    assert client.get(f"/curves/{reward}").status_code == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_read_only(client: TestClient, method: str) -> None:
    rid = run_id(client, "run-a")
    assert client.request(method, f"/runs/{rid}").status_code == 405
    assert client.request(method, "/api/sources").status_code == 405


def test_compare_matches_evalsi_compare(client: TestClient, results_dir: Path) -> None:
    a, b = run_id(client, "run-a"), run_id(client, "run-b")
    expected = [
        comparison_to_dict(c)
        for c in compare_runs(
            load_results(results_dir / "a.results.json"), load_results(results_dir / "b.results.json")
        )
    ]
    assert client.get("/api/compare", params={"a": a, "b": b}).json() == orjson.loads(orjson.dumps(expected))
    html = client.get("/compare", params={"a": a, "b": b}).text
    acc = expected[0]
    assert f"{acc['difference']['mean']:+.4f}" in html
    assert f"{acc['mcnemar']['pValue']:.4f}" in html
    assert "acc: flipped records (4)" in html and "pass@1/acc: flipped records (4)" in html
    assert html.count('class="flip improved"') == 8 and 'class="flip regressed"' not in html


def test_reward_file_distributions_counts_and_bar_rollouts(client: TestClient) -> None:
    rid = ids(client.get("/").text, "rewards")["scores.jsonl"]
    data = client.get(f"/api/rewards/{rid}").json()
    assert data["statuses"] == {"ok": 8, "gated": 2}
    assert data["componentStatuses"]["length"] == {"ok": 8, "skipped": 1, "error": 1}
    assert sum(data["histograms"]["total"]["counts"]) == 10
    assert sum(data["histograms"]["length"]["counts"]) == 8  # skipped and errored have no value
    top = client.get(f"/api/rewards/{rid}/bins", params={"series": "total", "bin": 19}).json()
    assert [r["index"] for r in top["rollouts"]] == [9]
    html = client.get(f"/rewards/{rid}").text
    assert html.count('class="bar-link"') >= 3 and "<svg" in html
    listed = client.get(f"/rewards/{rid}/bins", params={"series": "correct", "bin": 19}).text
    assert "reason 8" in listed and "reason 1" not in listed
    assert client.get(f"/api/rewards/{rid}/bins", params={"series": "nope", "bin": 0}).status_code == 400


def test_curve_marks_the_regression_and_links_steps_to_runs(client: TestClient) -> None:
    page = client.get("/").text
    cid = next(iter(ids(page, "curves").values()))
    data = client.get(f"/api/curves/{cid}").json()
    assert [p["step"] for p in data["points"]] == ["base", 100, 200]
    assert data["name"] == "grpo-1 / forgetting" and {p["status"] for p in data["points"]} == {"complete"}
    by_step = {p["step"]: p for p in data["points"]}
    assert by_step[200]["versusBase"]["acc"]["regressed"] is True
    assert by_step[100]["versusBase"]["acc"]["regressed"] is False
    html = client.get(f"/curves/{cid}").text
    # one chart per metric (acc and pass@1/acc): only step 200 is marked on each
    assert html.count('class="point series-0 regressed"') == 2
    assert html.count('data-step="200"><circle class="point series-0 regressed"') == 2
    # Steps sit on a numeric axis (the base at 0 is the dashed line): 200 is twice as far from 0 as 100.
    x = {
        int(m[1]): float(m[0])
        for m in re.findall(r'<circle class="point[^"]*" cx="([0-9.]+)" cy="[0-9.]+" r="5" data-step="(\d+)"', html)
    }
    origin = float(
        re.findall(r'x1="([0-9.]+)" y1="[0-9.]+" x2="[0-9.]+" y2="[0-9.]+"/><text class="tick x-tick"[^>]*>0<', html)[0]
    )
    assert x[200] - origin == pytest.approx(2 * (x[100] - origin), abs=0.2)
    assert 'class="base series-0"' in html and ">grpo-1 base 0.750<" in html
    runs = ids(page, "runs")
    assert f'href="/runs/{runs["grpo-1 200"]}" class="step-link"' in html
    assert "grpo-1 / forgetting" in html
    assert client.get(f"/curves/{cid}", params={"drop": "0.5"}).text.count("regressed") == 0


def test_a_run_in_progress_is_summarised_from_its_journal_and_its_stamp_moves(tmp_path: Path) -> None:
    path = write_run(tmp_path / "live.results.json", "live", [record(0, [True])], status="partial", summary=False)
    with journal_path(path).open("wb") as journal:
        journal.write(orjson.dumps({"fingerprints": {}}) + b"\n")
        journal.write(orjson.dumps(record(1, [False]).to_json()) + b"\n")
    client = TestClient(create_app([tmp_path]))
    rid = run_id(client, "live")
    first = client.get(f"/api/runs/{rid}").json()
    assert first["status"] == "running" and first["records"] == 2
    assert first["summary"]["metrics"]["acc"]["mean"] == pytest.approx(0.5)
    assert 'data-stamp-url="/api/runs/' in client.get(f"/runs/{rid}").text
    with journal_path(path).open("ab") as journal:
        journal.write(orjson.dumps(record(2, [True]).to_json()) + b"\n")
    assert client.get(f"/api/runs/{rid}/stamp").json()["stamp"] != first["stamp"]
    fragment = client.get(f"/runs/{rid}", params={"fragment": "live"}).text
    assert "3 of 3 records" in fragment and "<html" not in fragment


def test_mounted_under_ui_links_carry_the_prefix(results_dir: Path) -> None:
    outer = Starlette(routes=[Mount("/ui", app=create_app([results_dir]))])
    client = TestClient(outer)
    page = client.get("/ui/").text
    assert 'href="/ui/static/view.css"' in page
    rid = re.search(r'href="/ui/runs/([0-9a-f]{12})"', page)
    assert rid is not None
    assert client.get(f"/ui/runs/{rid.group(1)}").status_code == 200
    assert client.get("/ui/static/view.js").status_code == 200


def test_allowed_hosts_reject_other_host_headers(results_dir: Path) -> None:
    app = create_app([results_dir], allowed_hosts=["127.0.0.1", "localhost"])
    client = TestClient(app, base_url="http://evil.example")
    assert client.get("/").status_code == 400


def test_a_section_after_the_records_is_read_and_records_split_right(client: TestClient, results_dir: Path) -> None:
    rid = run_id(client, "grpo-1 200")
    run = client.get(f"/api/runs/{rid}").json()
    assert run["header"]["checkpoint"]["step"] == 200 and run["records"] == 40
    last = client.get(f"/api/runs/{rid}/records/39").json()
    whole = orjson.loads((results_dir / "logs" / "grpo-1" / "forgetting" / "step-200.json").read_bytes())
    assert last == whole["records"][39]


def test_a_results_file_not_indented_is_read_whole(tmp_path: Path) -> None:
    path = write_run(tmp_path / "flat.results.json", "flat", [record(i, [i % 2 == 0]) for i in range(3)])
    path.write_bytes(orjson.dumps(orjson.loads(path.read_bytes())))  # one line: records cannot be split
    client = TestClient(create_app([tmp_path]))
    rid = run_id(client, "flat")
    assert client.get(f"/api/runs/{rid}/records/2").json()["prompt"] == "problem number 2: what is 2+1?"
    assert client.get(f"/api/runs/{rid}/records", params={"sort": "acc"}).json()["rows"][0]["index"] == 1


def test_a_curve_follows_a_watcher_adding_steps(client: TestClient, results_dir: Path) -> None:
    cid = next(iter(ids(client.get("/").text, "curves").values()))
    before = client.get(f"/api/curves/{cid}/stamp").json()["stamp"]
    assert f'data-stamp="{before}"' in client.get(f"/curves/{cid}").text
    folder = results_dir / "logs" / "grpo-1" / "forgetting"
    simple_run(
        folder / "step-300.json",
        "grpo-1 300",
        [True] * 29 + [False] * 11,
        checkpoint={"trainingRun": "grpo-1", "step": 300, "label": "300"},
    )
    assert client.get(f"/api/curves/{cid}/stamp").json()["stamp"] != before
    fragment = client.get(f"/curves/{cid}", params={"fragment": "live"}).text
    assert 'data-step="300"' in fragment and "<html" not in fragment


def test_a_broken_results_file_is_listed_with_its_error_and_its_page_says_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "broken.results.json").write_bytes(b'{\n  "version": 1,\n  "kind": "RunResults",\n  "name": "x", ')
    client = TestClient(create_app([tmp_path]))
    [item] = client.get("/api/sources").json()["runs"]
    assert "not a readable results file" in item["error"]
    answer = client.get(f"/runs/{item['id']}")
    assert answer.status_code == 422 and "not a readable results file" in answer.text


def test_steps_are_listed_in_numeric_order_and_targets_in_words(tmp_path: Path) -> None:
    for step in (120, 30, 150, 34):
        simple_run(tmp_path / f"step-{step}.json", f"gsm-tiny@step-{step}", [True, False])
    endpoint = tmp_path / "step-30.json"  # an endpoint spec leaves `callable` unset: it is no description
    data = orjson.loads(endpoint.read_bytes())
    data["spec"]["target"] = {"callable": None, "model": "tiny", "baseUrl": "http://127.0.0.1:9/v1"}
    del data["target"]
    endpoint.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    odd = tmp_path / "step-34.json"  # a target of no known shape: compact JSON, cut short
    data = orjson.loads(odd.read_bytes())
    data["target"] = {"kind": "evaluation-test", "cases": ["x" * 50 for _ in range(10)]}
    odd.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    client = TestClient(create_app([tmp_path]))
    runs = client.get("/api/sources").json()["runs"]
    assert [r["name"] for r in runs] == [f"gsm-tiny@step-{s}" for s in (30, 34, 120, 150)]
    assert runs[0]["target"] == "tiny @ http://127.0.0.1:9/v1"
    assert runs[1]["target"].startswith('{"kind":"evaluation-test"') and len(runs[1]["target"]) == 120
    assert runs[1]["target"].endswith("…")


def training_run(root: Path, name: str, steps: dict[int | None, int], records: int = 40) -> None:
    """A training run's evaluations of the spec ``forgetting``: per step (None: the base) the records right."""
    curve = root / "logs" / name / "forgetting"
    curve.mkdir(parents=True)
    for step, correct in steps.items():
        label = "base" if step is None else str(step)
        section = {"trainingRun": name, "step": step, "label": label}
        simple_run(
            curve / ("base.json" if step is None else f"step-{step}.json"),
            f"gsm-tiny@{label}" if step is not None else f"{name} base",
            [True] * correct + [False] * (records - correct),
            checkpoint=section,
        )


def test_the_home_page_groups_runs_by_training_run_and_overlays_their_curves(tmp_path: Path) -> None:
    training_run(tmp_path, "grpo-1", {None: 30, 120: 31, 30: 32, 150: 12, 34: 30})
    training_run(tmp_path, "grpo-2", {None: 30, 30: 36, 60: 38})
    simple_run(tmp_path / "adhoc.results.json", "adhoc", [True, False])
    client = TestClient(create_app([tmp_path]))
    page = client.get("/").text
    sections = re.findall(r'<section class="training" data-training-run="([^"]+)">(.*?)</section>', page, re.S)
    assert [name for name, _ in sections] == ["grpo-1", "grpo-2"]
    steps = re.findall(r'<tr data-step="([^"]+)">', sections[0][1])
    assert steps == ["base", "30", "34", "120", "150"]  # numeric order, not 120, 150, 30, 34
    # One chart for the spec, a line per training run, each with its base; steps spaced by their number.
    charts = re.findall(r'<figure class="chart-box" data-spec="forgetting">(.*?)</figure>', page, re.S)
    assert len(charts) == 1
    chart = charts[0]
    assert 'class="line series-0"' in chart and 'class="line series-1"' in chart
    assert chart.count('class="base series-') == 2 and "grpo-1</li>" in chart and "grpo-2</li>" in chart
    x = {
        int(m[1]): float(m[0])
        for m in re.findall(
            r'<circle class="point series-0[^"]*" cx="([0-9.]+)" cy="[0-9.]+" r="5" data-step="(\d+)"', chart
        )
    }
    assert x[34] - x[30] == pytest.approx((x[120] - x[30]) * 4 / 90, abs=0.2)
    assert 'class="point series-0 regressed"' in chart  # step 150 dropped well below the base
    y_ticks = re.findall(r'class="tick y-tick"[^>]*>([^<]+)<', chart)
    assert len(y_ticks) >= 3 and all(len(t) <= 4 for t in y_ticks)  # round ticks, not the min and max
    # Runs outside any training run are listed apart; a training run's steps are not repeated there.
    others = re.search(r'<table class="grid" id="runs">(.*?)</table>', page, re.S)
    assert others is not None and ">adhoc</a>" in others.group(1) and "gsm-tiny" not in others.group(1)
    # The metric picker shows another metric on the same charts.
    picked = client.get("/", params={"metric": "pass@1/acc"}).text
    assert '<option value="pass@1/acc" selected>' in picked and "forgetting · pass@1/acc" in picked

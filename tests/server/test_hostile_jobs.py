"""A hostile tenant's evaluation jobs against a real server: outputs that would swamp it, rows aimed at the network.

Two server processes serve the module. ``swamp`` runs the default job limits (only batches are smaller): its
evaluator forges its answer, writing megabytes of reason per row straight to the answer channel, and the server's
own memory (``VmHWM`` of its process) and the stored output must stay small. ``tight`` sets small output limits
and names generation targets served by the scripted OpenAI-compatible server on loopback, which records what it
actually received: the rows' messages, a job's stop sequences, and how many requests a job and a project got.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers.openai_server import OpenAIServer
from tests.server.evaluation import TERMINAL, get, jsonl, post, upload, wait_built, wait_state
from tests.server.harness import ServerProcess, make_token, post_http, write_config

pytestmark = [pytest.mark.timeout(600), pytest.mark.sandbox]

ALL = ["evaluations.run", "resource.runs_code", "evaluators.write"]
HUGE_REASON = 1_500_000
"""Bytes of reason the forging evaluator writes per row: 8 rows a batch stay within the default 16 MiB answer."""
SWAMP_ROWS = 160
"""Rows of the swamping job: 240 MB of reasons, had the server kept them."""
MEMORY_BOUND = 150 << 20
"""How much the server's peak resident memory may grow while it runs the swamping job."""

FORGED = f"""
import json, os, struct

from evalsi.testing import EvaluationRow, evaluation_test


@evaluation_test(mode="all")
def test_forged(rows: list[EvaluationRow]) -> list[EvaluationRow]:
    reason = "x" * {HUGE_REASON}
    answer = {{"ok": True, "results": [{{"score": 1.0, "reason": reason, "metrics": {{}}}} for _ in rows]}}
    frame = json.dumps(answer).encode()
    os.write(3, struct.pack(">I", len(frame)) + frame)  # past the runner, straight onto the worker's channel
    os._exit(0)
"""
CHATTY = """
from evalsi.testing import EvaluationRow, evaluation_test


@evaluation_test()
def test_chatty(row: EvaluationRow) -> EvaluationRow:
    row.score = 1.0
    row.reason = "y" * 10_000
    row.metrics.update({f"metric-{i}-" + "m" * 200: 1.0 for i in range(100)})
    return row
"""
ANY_REPLY = """
from evalsi.testing import EvaluationRow, evaluation_test


@evaluation_test()
def test_any_reply(row: EvaluationRow) -> EvaluationRow:
    row.score = 1.0 if row.last_text else 0.0
    return row
"""


HOLD = """
import os, select, signal, struct, time


def hold(n, size):
    \"\"\"Fork n children that each allocate and touch size bytes; how many hold it together at the end.\"\"\"
    r, w = os.pipe()
    children = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            try:
                block = bytearray(size)
                for i in range(0, size, 4096):
                    block[i] = 1
                os.write(w, struct.pack("i", os.getpid()))
                time.sleep(60)
            finally:
                os._exit(0)
        children.append(pid)
    holding, ended = set(), set()

    def reap():
        for pid in children:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    ended.add(pid)
            except ChildProcessError:
                ended.add(pid)

    deadline = time.time() + 60
    while len(holding | ended) < n and time.time() < deadline:
        if select.select([r], [], [], 0.05)[0]:
            data = os.read(r, 4 * n)
            holding.update(struct.unpack(f"{len(data) // 4}i", data))
        reap()
    time.sleep(0.5)
    reap()
    held = len(holding - ended)
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return held
"""
CHILDREN, CHILD_MB = 7, 150
"""What the forking programs ask: 7 children of 150 MiB each, 1050 MiB together, in sandboxes of 256 MiB."""
FORKING_TEST = (
    HOLD
    + f"""
from evalsi.testing import EvaluationRow, evaluation_test


@evaluation_test()
def test_forking(row: EvaluationRow) -> EvaluationRow:
    held = hold({CHILDREN}, {CHILD_MB} << 20)
    row.score = 1.0 if held == {CHILDREN} else 0.0
    row.reason = f"held={{held}}"
    return row
"""
)


def row(text: str, reply: str | None = "fine") -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
    if reply is not None:
        messages.append({"role": "assistant", "content": reply})
    return {"messages": messages, "ground_truth": "x"}


def peak_rss(server: ServerProcess) -> int:
    """The server process's peak resident memory (bytes), from ``/proc/<pid>/status``."""
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no VmHWM")


def create(server: ServerProcess, token: str, job_id: str, evaluator: str, source: str, **extra: Any) -> Any:
    job = {"evaluator": evaluator, "inputDataset": source, "outputDataset": f"{job_id}-out", **extra}
    return post(server, token, "evaluationJobs", {"evaluationJob": job, "evaluationJobId": job_id})


def run_job(
    server: ServerProcess, token: str, job_id: str, evaluator: str, rows: list[dict[str, Any]], **extra: Any
) -> Any:
    assert post(server, token, "datasets", {"datasetId": f"{job_id}-in", "jsonl": jsonl(rows)}).is_success
    created = create(server, token, job_id, evaluator, f"{job_id}-in", **extra)
    assert created.status_code == 200, created.text
    return wait_state(server, token, job_id, TERMINAL, timeout=400)


def output(server: ServerProcess, token: str, job_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    dataset = get(server, token, f"datasets/{job_id}-out?rows=true").json()
    return dataset, [orjson.loads(line) for line in dataset["jsonl"].splitlines()]


def start(
    directory: Path, storage: Path, spec: dict[str, Any], tokens: dict[str, str]
) -> tuple[ServerProcess, dict[str, str]]:
    database = f"sqlite:///{directory / 'server.db'}"
    config = write_config(
        directory, {"database": {"url": database}, "evaluators": {"storage_dir": str(storage)}, **spec}
    )
    made = {name: make_token(database, project, ALL) for name, project in tokens.items()}
    return ServerProcess(config), made


def ready(server: ServerProcess, token: str, evaluator: str, source: str) -> None:
    name = f"test_{evaluator}"
    assert upload(server, token, evaluator, {f"{name}.py": source}, f"{name}.py::{name}").status_code == 200
    built = wait_built(server, token, evaluator)
    assert built["state"] == "ACTIVE", get(server, token, f"evaluators/{evaluator}/log").text


# ---- output that would swamp the server ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def swamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    storage = Path(tempfile.mkdtemp(prefix="evalsi-hostile-jobs-"))  # under /tmp: sandbox users must reach it
    server, tokens = start(tmp_path_factory.mktemp("swamp"), storage, {"jobs": {"batch_rows": 8}}, {"t": "team-s"})
    with server:
        ready(server, tokens["t"], "forged", FORGED)
        yield server, tokens["t"]
    shutil.rmtree(storage, ignore_errors=True)


def test_a_job_whose_evaluator_forges_huge_reasons_keeps_the_server_and_the_output_small(
    swamp: tuple[ServerProcess, str],
) -> None:
    server, token = swamp
    before = peak_rss(server)
    job = run_job(server, token, "swamp", "forged", [row(f"q{i}") for i in range(SWAMP_ROWS)])
    grown = peak_rss(server) - before
    assert job["state"] == "COMPLETED", job
    assert grown < MEMORY_BOUND, f"the server's peak memory grew {grown >> 20} MiB"
    dataset, rows = output(server, token, "swamp")
    assert dataset["rowCount"] == SWAMP_ROWS
    assert int(dataset["sizeBytes"]) < SWAMP_ROWS * 5000  # each reason cut at jobs.max_reason_bytes (4096)
    reason = rows[0]["evaluation_result"]["reason"]
    assert len(reason.encode()) <= 4096 and reason.endswith("[cut at jobs.max_reason_bytes=4096 bytes]")


# ---- small limits, and generation targets ----------------------------------------------------------------------


@dataclass
class Tight:
    server: ServerProcess
    upstream: OpenAIServer
    tokens: dict[str, str]


TARGET = {"model": "test-model", "max_tokens": 8, "max_concurrency": 4, "timeout": 60, "retries": 0}
TARGETS = {
    "text": {**TARGET, "max_stop": 2, "max_stop_chars": 8},
    "plain": TARGET,
    "vision": {**TARGET, "image_url_prefixes": ["https://images.example.com/"]},
    "per-job": {**TARGET, "max_requests_per_job": 3},
    "budgeted": {**TARGET, "budget": {"window": "1d", "max_requests": 5}},
    "tokens": {**TARGET, "budget": {"window": "1d", "max_tokens": 20}},
}


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tight]:
    storage = Path(tempfile.mkdtemp(prefix="evalsi-hostile-jobs-"))
    with OpenAIServer(default="two words") as upstream:
        targets = {name: {"base_url": upstream.base_url, **target} for name, target in TARGETS.items()}
        jobs = {"batch_rows": 4, "max_output_bytes": 65536, "max_reason_bytes": 256, "max_batch_output_bytes": 65536,
                "memory_mb": 256, "max_processes": 8}  # fmt: skip
        spec = {"jobs": {**jobs, "workers": 2, "max_active_per_project": 8}, "targets": targets}
        server, tokens = start(tmp_path_factory.mktemp("tight"), storage, spec, {"t": "team-t", "u": "team-u"})
        with server:
            for token in tokens.values():
                sources = (("chatty", CHATTY), ("forged", FORGED), ("any_reply", ANY_REPLY), ("forking", FORKING_TEST))
                for name, source in sources:
                    ready(server, token, name, source)
            yield Tight(server, upstream, tokens)
    shutil.rmtree(storage, ignore_errors=True)


def test_a_jobs_output_past_its_cap_fails_the_job_naming_it_and_stores_nothing(tight: Tight) -> None:
    token = tight.tokens["t"]
    job = run_job(tight.server, token, "too-much", "chatty", [row(f"q{i}") for i in range(400)])
    assert job["state"] == "FAILED", job
    assert "jobs.max_output_bytes=65536" in job["message"] and "nothing was stored" in job["message"]
    assert get(tight.server, token, "datasets/too-much-out").status_code == 404


def test_a_rows_reason_and_metrics_are_cut_to_the_operators_limits(tight: Tight) -> None:
    token = tight.tokens["t"]
    job = run_job(tight.server, token, "chatty", "chatty", [row("q1"), row("q2")])
    assert job["state"] == "COMPLETED", job
    _, rows = output(tight.server, token, "chatty")
    result = rows[0]["evaluation_result"]
    assert len(result["reason"].encode()) <= 256 and result["reason"].endswith(
        "[cut at jobs.max_reason_bytes=256 bytes]"
    )
    assert len(result["metrics"]) == 32 and all(len(name) <= 64 for name in result["metrics"])


def test_a_batch_printing_past_its_cap_is_cut_off_unread_and_its_rows_fail_naming_it(tight: Tight) -> None:
    token = tight.tokens["t"]
    job = run_job(tight.server, token, "forged", "forged", [row("q1"), row("q2")])
    assert job["state"] == "FAILED", job
    assert "jobs.max_batch_output_bytes=65536" in job["message"], job


# ---- what a target receives ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """A row's messages, the target named, and what the endpoint must receive (None: nothing, the row fails)."""

    name: str
    target: str
    messages: list[dict[str, Any]]
    received: list[dict[str, Any]] | None
    error: str = ""


METADATA_URL = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
ALLOWED_IMAGE = "https://images.example.com/cat.png"


def _look(marker: str, url: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": marker}, {"type": "image_url", "image_url": {"url": url}}]


MESSAGES = [
    Sent("an image at the metadata address", "vision", [{"role": "user", "content": _look("m1", METADATA_URL)}],
         None, "not an address the operator allows"),
    Sent("an image on a text-only target", "plain", [{"role": "user", "content": _look("m2", ALLOWED_IMAGE)}],
         None, "is sent text only"),
    Sent("an inline image where only a host is allowed", "vision",
         [{"role": "user", "content": _look("m3", "data:image/png;base64,iVBORw0KGgo=")}], None, "not an address"),
    Sent("a host that only starts like the allowed one", "vision",
         [{"role": "user", "content": _look("m4", "https://images.example.com.evil.test/x.png")}], None,
         "not an address"),
    Sent("a tool message", "plain", [{"role": "tool", "content": "m5", "tool_call_id": "1"},
                                     {"role": "user", "content": "m5"}], None, "messages[0].role"),
    Sent("an audio part", "vision",
         [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "m6"}}]}], None,
         "'input_audio' part"),
    Sent("tool calls, names and unknown fields", "plain",
         [{"role": "system", "content": "be brief", "name": "ops", "x-forward-to": METADATA_URL},
          {"role": "assistant", "content": "earlier", "tool_calls": [{"id": "1", "type": "function",
           "function": {"name": "fetch", "arguments": METADATA_URL}}]},
          {"role": "user", "content": "m7", "image_url": METADATA_URL, "metadata": {"url": METADATA_URL}}],
         [{"role": "system", "content": "be brief"}, {"role": "assistant", "content": "earlier"},
          {"role": "user", "content": "m7"}]),
    Sent("an allowed image", "vision",
         [{"role": "user", "content": [{"type": "text", "text": "m8"},
                                       {"type": "image_url", "image_url": {"url": ALLOWED_IMAGE, "detail": "low",
                                                                           "x-extra": METADATA_URL}}]}],
         [{"role": "user", "content": [{"type": "text", "text": "m8"},
                                       {"type": "image_url", "image_url": {"url": ALLOWED_IMAGE, "detail": "low"}}]}]),
]  # fmt: skip


def received(upstream: OpenAIServer, marker: str) -> list[dict[str, Any]]:
    """The bodies the endpoint received whose messages carry ``marker``."""
    return [body for body in upstream.requests if f'"{marker}"' in orjson.dumps(body.get("messages")).decode()]


@pytest.mark.parametrize("case", MESSAGES, ids=[case.name for case in MESSAGES])
def test_a_target_receives_only_role_and_allowed_content(tight: Tight, case: Sent) -> None:
    token = tight.tokens["t"]
    index = MESSAGES.index(case)
    marker, job_id = f"m{index + 1}", f"sent-{index}"  # each case's user message carries its marker
    job = run_job(tight.server, token, job_id, "any_reply", [{"messages": case.messages}], target=case.target)
    bodies = received(tight.upstream, marker)
    if case.received is None:
        assert bodies == []
        assert job["state"] == "FAILED" and case.error in job["message"], job
    else:
        assert job["state"] == "COMPLETED", job
        (body,) = bodies
        assert body["messages"] == case.received


STOPS = [
    ("text", ["a", "b", "c"], "at most 2 (max_stop)"),
    ("text", ["a-long-stop"], "stop[0]: 11 characters; a stop sequence has at most 8"),
    ("plain", ["1", "2", "3", "4", "5"], "at most 4 (max_stop)"),
    ("plain", ["s" * 65], "at most 64 (max_stop_chars)"),
]


@pytest.mark.parametrize(("target", "stop", "named"), STOPS)
def test_stop_sequences_are_bounded_per_target(tight: Tight, target: str, stop: list[str], named: str) -> None:
    token = tight.tokens["t"]
    assert post(
        tight.server, token, "datasets", {"datasetId": f"stops-{len(stop)}-{target}", "jsonl": jsonl([row("s", None)])}
    ).is_success
    answer = create(tight.server, token, f"stops-{len(stop)}-{target}", "any_reply", f"stops-{len(stop)}-{target}",
                    target=target, completionParams={"stop": stop})  # fmt: skip
    assert answer.status_code == 400, answer.text
    assert named in answer.json()["error"]["message"] and "completionParams.stop" in answer.json()["error"]["message"]


def test_a_job_sends_at_most_its_targets_requests_per_job(tight: Tight) -> None:
    token = tight.tokens["t"]
    rows = [row(f"per-job-{i}", None) for i in range(6)]
    job = run_job(tight.server, token, "per-job", "any_reply", rows, target="per-job")
    assert job["state"] == "COMPLETED", job
    assert sum(len(received(tight.upstream, f"per-job-{i}")) for i in range(6)) == 3
    _, out = output(tight.server, token, "per-job")
    refused = [r["evaluation_error"] for r in out if "evaluation_error" in r]
    assert len(refused) == 3 and all("max_requests_per_job" in e for e in refused)


def test_a_projects_requests_on_a_budgeted_target_stop_at_its_budget_and_another_project_keeps_its_own(
    tight: Tight,
) -> None:
    t, u = tight.tokens["t"], tight.tokens["u"]
    first = run_job(
        tight.server, t, "budget-1", "any_reply", [row(f"b1-{i}", None) for i in range(4)], target="budgeted"
    )
    second = run_job(
        tight.server, t, "budget-2", "any_reply", [row(f"b2-{i}", None) for i in range(4)], target="budgeted"
    )
    other = run_job(
        tight.server, u, "budget-3", "any_reply", [row(f"b3-{i}", None) for i in range(4)], target="budgeted"
    )
    assert [job["state"] for job in (first, second, other)] == ["COMPLETED"] * 3
    sent = {p: sum(len(received(tight.upstream, f"{p}-{i}")) for i in range(4)) for p in ("b1", "b2", "b3")}
    assert sent == {"b1": 4, "b2": 1, "b3": 4}
    _, out = output(tight.server, t, "budget-2")
    refused = [r["evaluation_error"] for r in out if "evaluation_error" in r]
    assert len(refused) == 3 and all("targets.budgeted.budget: max_requests=5 per 86400s" in e for e in refused)


def test_a_projects_tokens_on_a_budgeted_target_are_reserved_then_settled_from_usage(tight: Tight) -> None:
    token = tight.tokens["t"]
    rows = [row(f"tok-{i}", None) for i in range(12)]
    job = run_job(tight.server, token, "tokens", "any_reply", rows, target="tokens")
    assert job["state"] == "COMPLETED", job
    _, out = output(tight.server, token, "tokens")
    used = sum(r["generation"]["completion_tokens"] for r in out if "generation" in r)
    # 8 tokens are reserved per request and 2 used ("two words"): settling lets more rows through than 20 // 8
    assert used <= 20 and int(job["outputStats"]["generated"]) > 20 // 8
    refused = [r["evaluation_error"] for r in out if "evaluation_error" in r]
    assert refused and all("max_tokens=20" in e for e in refused)


# ---- memory of a sandbox as a whole ----------------------------------------------------------------------------


def test_a_jobs_evaluator_forking_children_is_held_to_the_sandboxs_memory_as_a_whole(tight: Tight) -> None:
    token = tight.tokens["t"]
    job = run_job(tight.server, token, "forking", "forking", [row("f1")])
    if job["state"] == "FAILED":  # the batch was killed for memory: its row errored
        assert "memory" in job["message"] or "stopped" in job["message"], job
        return
    _, rows = output(tight.server, token, "forking")
    held = int(rows[0]["evaluation_result"]["reason"].removeprefix("held="))
    # 256 MiB, plus the sandbox's work dir (256 MiB of tmpfs) and runtime (64 MiB): at most 3 children of 150 MiB
    assert held * CHILD_MB <= 256 + 256 + 64, rows[0]


def test_a_code_exec_program_forking_children_is_held_to_the_sandboxs_memory_as_a_whole(tight: Tight) -> None:
    program = HOLD + f"\nprint(f'held={{hold({CHILDREN}, {CHILD_MB} << 20)}}')\n"
    rollout = {"completion": f"```python\n{program}\n```", "tests": [{"input": "", "output": f"held={CHILDREN}"}]}
    params = {"memory_mb": 256, "max_processes": CHILDREN + 1, "timeout": 60}
    spec = {"components": [{"ref": "code-exec-tests", "params": params}]}
    answer = post_http(tight.server, tight.tokens["t"], spec, [rollout], timeout=300)
    assert answer.status_code == 200, answer.text
    [score] = answer.json()["results"][0]["components"].values()
    assert score["value"] == 0.0, score  # not every child could hold its memory at once

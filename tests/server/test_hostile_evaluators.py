"""A hostile tenant's evaluator payloads against a real server process.

Each payload is data: a component and rollouts a tenant with an ``evaluations.run`` token may send. The server
must read no file and fetch no URL through a JSON Schema ``$ref``, must answer catastrophic patterns at once
while ``/healthz`` stays responsive, and must refuse oversized patterns before they cost memory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.listener import Listener
from tests.server.harness import ServerProcess, make_token, post_http, write_config

pytestmark = pytest.mark.timeout(180)

SECRET = "AKIA-hostile-tenant-must-not-see-this"
EVIL = "(a+)+$"
"""Exponential on a backtracking engine: 40 ``a`` and a ``b`` take days."""
EVIL_TEXT = "a" * 40 + "b"


@dataclass(frozen=True)
class Payload:
    """One hostile request: a component, the rollouts, and what a safe server answers."""

    name: str
    component: dict[str, Any]
    completion: str = "{}"
    status: int = 200
    """The HTTP status expected."""
    needle: str = ""
    """Text the answer must hold (the refusal's reason, or the component's reason)."""
    component_status: str | None = None
    """For a 200: the component's status."""
    value: Any = field(default=None)
    """For a 200 with an ``ok`` component: its value."""
    reference: str | None = None
    """The rollout's ``answer``, for components that need one."""


def schema_component(schema: Any) -> dict[str, Any]:
    return {"ref": "json-schema", "name": "c", "params": {"schema": schema}}


def pattern_component(ref: str, pattern: str, **params: Any) -> dict[str, Any]:
    return {"ref": ref, "name": "c", "params": {"pattern": pattern, **params}}


def ref_payloads(secret_uri: str, fetch_url: str) -> list[Payload]:
    """Item: files and URLs read through ``$ref``."""
    outside = "points outside the schema"
    return [
        Payload("ref-file", schema_component({"$ref": secret_uri}), status=400, needle=outside),
        Payload(
            "ref-file-fragment", schema_component({"$ref": secret_uri + "#/description"}), status=400, needle=outside
        ),
        Payload(
            "ref-file-nested",
            schema_component({"properties": {"a": {"$ref": secret_uri}}}),
            completion='{"a": 1}',
            status=400,
            needle=outside,
        ),
        Payload("ref-http", schema_component({"$ref": fetch_url}), status=400, needle=outside),
        Payload("ref-dynamic-http", schema_component({"$dynamicRef": fetch_url}), status=400, needle=outside),
        Payload(
            "ref-http-base-id",
            schema_component({"$id": fetch_url, "$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n"}),
            completion="7",
            component_status="ok",
            value=True,
        ),
        Payload(
            "ref-local-missing",
            schema_component({"$id": fetch_url, "$ref": "#/$defs/nowhere"}),
            completion="7",
            status=422,
            needle="does not resolve within the schema",
        ),
    ]


def pattern_payloads() -> list[Payload]:
    """Item: one regex freezes every tenant."""
    return [
        Payload("regex-evil", pattern_component("regex", EVIL), EVIL_TEXT, component_status="ok", value=False),
        Payload(
            "regex-evil-fullmatch",
            pattern_component("regex", "(x+x+)+y", mode="fullmatch"),
            "x" * 40,
            component_status="ok",
            value=False,
        ),
        Payload(
            "format-check-evil", pattern_component("format-check", EVIL), EVIL_TEXT, component_status="ok", value=False
        ),
        Payload(
            "json-schema-pattern",
            schema_component({"type": "string", "pattern": EVIL}),
            f'"{EVIL_TEXT}"',
            component_status="ok",
            value=False,
        ),
        Payload(
            "json-schema-pattern-properties",
            schema_component({"patternProperties": {EVIL: {"type": "integer"}}, "additionalProperties": False}),
            f'{{"{EVIL_TEXT}": 1}}',
            component_status="ok",
            value=False,
        ),
        Payload(
            "multiple-choice-whitespace",
            {"ref": "multiple-choice", "name": "c"},
            "answer" + " " * 200_000 + "x",
            component_status="ok",
            value=False,
            reference="A",
        ),
        Payload(
            "regex-backreference",
            pattern_component("regex", r"(a+)\1+$"),
            EVIL_TEXT,
            status=400,
            needle="backreference",
        ),
        Payload(
            "regex-lookahead",
            pattern_component("format-check", r"(?=(a+)+$)a*"),
            EVIL_TEXT,
            status=400,
            needle="lookahead",
        ),
    ]


def size_payloads() -> list[Payload]:
    """Item: memory. A pattern past the cap is refused before it is compiled."""
    return [
        Payload(
            "regex-huge", pattern_component("regex", "(?:a|b)" * 140_000), "ab", status=400, needle="at most 4,096"
        ),
        Payload(
            "json-schema-huge-pattern",
            schema_component({"type": "string", "pattern": "x" * 100_000}),
            '"x"',
            status=400,
            needle="at most 4,096",
        ),
        Payload(
            "regex-counted",
            pattern_component("regex", "((a{1000}){1000}){1000}"),
            "a",
            status=400,
            needle="regex engine",
        ),
    ]


@dataclass
class Hostile:
    process: ServerProcess
    token: str
    secret: Path
    listener: Listener


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    directory = tmp_path_factory.mktemp("hostile")
    secret = directory / "credentials.json"
    secret.write_text(f'{{"type": "string", "description": "{SECRET}"}}')
    config = write_config(directory, {"database": {"url": "sqlite:///server.db"}})
    token = make_token(f"sqlite:///{directory / 'server.db'}", "mallory", ["evaluations.run"])
    listener = Listener()
    with ServerProcess(config) as process:
        yield Hostile(process, token, secret, listener)
    listener.close()


def all_payloads() -> list[str]:
    names = [p.name for p in ref_payloads("file:///x", "http://x/")]
    return names + [p.name for p in pattern_payloads() + size_payloads()]


def payload_named(name: str, hostile: Hostile) -> Payload:
    payloads = ref_payloads(hostile.secret.as_uri(), hostile.listener.url) + pattern_payloads() + size_payloads()
    return next(p for p in payloads if p.name == name)


def health_latencies(process: ServerProcess, stop: threading.Event, out: list[float]) -> None:
    """Poll ``/healthz`` at least once and until ``stop``; record each answer's latency (a failure: infinite)."""
    with httpx.Client(timeout=5.0) as client:
        while True:
            started = time.perf_counter()
            try:
                ok = client.get(process.http + "/healthz").status_code == 200
            except httpx.HTTPError:
                ok = False
            out.append(time.perf_counter() - started if ok else float("inf"))
            if stop.wait(0.05):
                return


@pytest.mark.parametrize("name", all_payloads())
def test_a_hostile_payload_is_answered_safely_and_at_once(hostile: Hostile, name: str) -> None:
    payload = payload_named(name, hostile)
    stop, latencies = threading.Event(), list[float]()
    poller = threading.Thread(target=health_latencies, args=(hostile.process, stop, latencies), daemon=True)
    poller.start()
    started = time.perf_counter()
    try:
        response = post_http(
            hostile.process,
            hostile.token,
            {"components": [payload.component]},
            [{"prompt": "p", "completion": payload.completion, "answer": payload.reference}],
            timeout=20,
        )
    finally:
        elapsed = time.perf_counter() - started
        stop.set()
        poller.join(10)
    text = response.text
    assert SECRET not in text, "file content reached the answer"
    assert hostile.listener.connections == 0, "the server fetched a client-chosen URL"
    assert response.status_code == payload.status, text
    assert payload.needle in text, text
    if payload.component_status is not None:
        component = response.json()["results"][0]["components"]["c"]
        assert component["status"] == payload.component_status, component
        if payload.component_status == "ok":
            assert component["value"] == payload.value, component
    assert elapsed < 10.0, f"{name} took {elapsed:.1f} s"
    assert latencies and max(latencies) < 2.0, f"/healthz stalled: {max(latencies):.2f} s"


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_many_large_distinct_patterns_keep_the_server_small(hostile: Hostile) -> None:
    process = hostile.process
    warm = post_http(process, hostile.token, {"components": [pattern_component("regex", "a")]}, [{"completion": "a"}])
    assert warm.status_code == 200, warm.text
    before = rss_bytes(process.process.pid)
    for i in range(12):  # distinct 1 MiB patterns: a compiled backtracking pattern of that size is ~19 MB
        pattern = f"(?:n{i})" + "(?:[a-z]x)" * 100_000
        response = post_http(
            process, hostile.token, {"components": [pattern_component("regex", pattern)]}, [{"completion": "a"}]
        )
        assert response.status_code == 400 and "at most 4,096" in response.text
    for i in range(70):  # distinct patterns within the cap are compiled; the cache drops the oldest by bytes
        pattern = f"(?:n{i})" + "[a-z]" * 800
        response = post_http(
            process, hostile.token, {"components": [pattern_component("regex", pattern)]}, [{"completion": "a" * 900}]
        )
        assert response.status_code == 200, response.text
    growth = rss_bytes(process.process.pid) - before
    print(f"server RSS growth: {growth / 2**20:.1f} MiB")
    assert growth < 100 << 20, f"the server grew by {growth >> 20} MiB"

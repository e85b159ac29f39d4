"""Check a reward-vectors file against the composition rules: ``python -m evalsi.rewards.vectors PATH``.

The file format is described in its own ``about`` field (see ``testdata/reward_vectors.json``). Each vector's
components become ``field-score`` components, and their scores travel inside the rollouts, so a vector goes through
the whole scoring path: records, engine, cache, composition. Another scorer (the server's HTTP API) can be checked
with the same file by passing its own :data:`Scorer` to :func:`check_vectors`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from evalsi.errors import RewardBatchError, SpecError
from evalsi.rewards._reward import from_mapping

TOLERANCE = 1e-9


@dataclass(frozen=True)
class Outcome:
    """What a scorer did with a vector: results, a failed batch, or a rejected spec."""

    results: list[tuple[float | None, str]] | None = None
    raised: tuple[str, int] | None = None
    """(component, rollout index) of a batch failed under onError: raise."""
    spec_error_path: str | None = None


Scorer = Callable[[dict[str, Any], list[dict[str, Any]]], Outcome]
"""Scores a RewardSpec ``spec`` body (components with refs) over rollouts."""


@dataclass
class Report:
    """Outcome of checking a file: how many vectors passed, and a message per failure."""

    passed: int = 0
    failures: list[str] = field(default_factory=list)


def field_name(component: str) -> str:
    """The rollout field that carries a vector component's score."""
    return f"score_{component}"


def spec_body(vector: Mapping[str, Any]) -> dict[str, Any]:
    """The vector's spec fragment with each component bound to ``field-score``."""
    body = dict(vector["spec"])
    components = []
    for component in body.get("components", []):
        if isinstance(component, Mapping):
            name = component.get("name", "")
            component = {"ref": "field-score", "params": {"field": field_name(str(name))}, **component}
        components.append(component)
    body["components"] = components
    return body


def rollouts(vector: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One rollout per scores mapping, the scores under ``score_<component>``."""
    batch = vector.get("batch", [vector.get("scores", {})])
    return [
        {"completion": "", **{field_name(name): {"status": "ok", **score} for name, score in scores.items()}}
        for scores in batch
    ]


def library_scorer(body: dict[str, Any], batch: list[dict[str, Any]]) -> Outcome:
    """Score with the in-process library."""
    try:
        reward = from_mapping(body)
    except SpecError as exc:
        return Outcome(spec_error_path=exc.path)
    try:
        results = reward.score(batch)
    except RewardBatchError as exc:
        return Outcome(raised=(exc.component, exc.index))
    finally:
        reward.close()
    return Outcome(results=[(r.total, r.status) for r in results])


def check_vector(vector: Mapping[str, Any], scorer: Scorer) -> str | None:
    """None when the scorer does what the vector expects, else a message saying what differed."""
    expect = vector["expect"]
    outcome = scorer(spec_body(vector), rollouts(vector))
    if isinstance(expect, Mapping) and "spec_error" in expect:
        want = expect["spec_error"]["path"]
        if outcome.spec_error_path != want:
            return f"expected the spec to be rejected at {want}, got {_describe(outcome)}"
        return None
    if outcome.spec_error_path is not None:
        return f"spec rejected at {outcome.spec_error_path}"
    if isinstance(expect, Mapping) and "raises" in expect:
        want_raise = (expect["raises"]["component"], expect["raises"].get("index", 0))
        if outcome.raised != want_raise:
            return (
                f"expected the batch to fail at rollout {want_raise[1]} on {want_raise[0]!r}, got {_describe(outcome)}"
            )
        return None
    if outcome.raised is not None:
        return f"batch failed at rollout {outcome.raised[1]} on {outcome.raised[0]!r}"
    wanted: Sequence[Mapping[str, Any]] = expect if isinstance(expect, list) else [expect]
    got = outcome.results or []
    if len(got) != len(wanted):
        return f"expected {len(wanted)} results, got {len(got)}"
    for index, (want, (total, status)) in enumerate(zip(wanted, got, strict=True)):
        if status != want["status"] or not _same_total(total, want["total"]):
            return f"rollout {index}: expected total {want['total']} ({want['status']}), got {total} ({status})"
    return None


def _same_total(got: float | None, want: float | None) -> bool:
    if got is None or want is None:
        return got is None and want is None
    return math.isclose(got, want, rel_tol=0, abs_tol=TOLERANCE)


def _describe(outcome: Outcome) -> str:
    if outcome.spec_error_path is not None:
        return f"a spec error at {outcome.spec_error_path}"
    if outcome.raised is not None:
        return f"a failed batch at rollout {outcome.raised[1]} on {outcome.raised[0]!r}"
    return f"results {outcome.results}"


def load_vectors(path: str | Path) -> list[dict[str, Any]]:
    """The vectors of a file, checked for the fields every vector needs."""
    data = orjson.loads(Path(path).read_bytes())
    vectors = data.get("vectors") if isinstance(data, dict) else None
    if not isinstance(vectors, list):
        raise ValueError(f"{path}: expected an object with a 'vectors' list")
    for index, vector in enumerate(vectors):
        for key in ("name", "spec", "expect"):
            if key not in vector:
                raise ValueError(f"{path}: vectors[{index}] has no {key!r}")
    return vectors


def check_vectors(path: str | Path, scorer: Scorer = library_scorer) -> Report:
    """Check every vector in a file with ``scorer``."""
    report = Report()
    for vector in load_vectors(path):
        try:
            problem = check_vector(vector, scorer)
        except Exception as exc:  # a crash is a failure of this vector, reported with the others
            problem = f"crashed: {type(exc).__name__}: {exc}"
        if problem is None:
            report.passed += 1
        else:
            report.failures.append(f"FAIL {vector['name']}: {problem}")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Check the vectors file named on the command line; print failures and ``N passed, M failed`` last."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m evalsi.rewards.vectors PATH", file=sys.stderr)
        return 2
    try:
        report = check_vectors(args[0])
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in report.failures:
        print(line)
    print(f"{report.passed} passed, {len(report.failures)} failed")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())

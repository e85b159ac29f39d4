"""Inside an evaluator's sandbox: import its evaluation test, then check it or score rows with it.

``python -I evalsi_runner.py check FILE::FUNCTION`` prints ``{"ok": true, "mode": ...}``;
``... score FILE::FUNCTION`` reads ``{"rows": [...]}`` on stdin and prints ``{"ok": true, "results": [...]}``, one
result per row in order: ``{"score", "reason", "metrics"}`` or ``{"error"}``, a reason or error cut at the request's
``max_reason_bytes``. While the evaluator's code runs, whatever it prints goes to stderr, so stdout carries only
the answer.

``... serve FILE::FUNCTION`` is the warm worker: the module is imported once, then batches come as frames (a 4-byte
big-endian length and JSON) on fd 3, the channel to the sandbox's fork server, and each gets one frame back, the
answer as above. The first frame it writes is its hello: ``{"ok": true, "mode": ...}``, or why the entry could not
be loaded. Standard library only.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import resource
import socket
import struct
import sys
import traceback
from collections.abc import Callable
from typing import Any

SOURCE = "/evaluator/src"
RUNTIME = os.path.dirname(os.path.abspath(__file__))
DECLARATION = "__evalsi_evaluation_test__"


def load(entry: str) -> tuple[Callable[..., Any], str]:
    """The scoring function named ``FILE::FUNCTION`` (relative to the evaluator's root) and its mode."""
    location, _, name = entry.partition("::")
    path = os.path.normpath(os.path.join(SOURCE, location))
    if not path.startswith(SOURCE + os.sep) or not os.path.isfile(path):
        raise LookupError(f"{location}: no such file in the evaluator")
    module_name = os.path.splitext(os.path.relpath(path, SOURCE))[0].replace(os.sep, ".")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise LookupError(f"{location}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    function = getattr(module, name, None)
    declared = getattr(function, DECLARATION, None)
    if not callable(function) or not isinstance(declared, dict):
        found = sorted(k for k, v in vars(module).items() if isinstance(getattr(v, DECLARATION, None), dict))
        raise LookupError(
            f"{entry}: {location} has no @evaluation_test named {name!r} "
            f"(evaluation tests there: {', '.join(found) or 'none'})"
        )
    return function, str(declared.get("mode", "pointwise"))


def _result(row: Any, row_type: type[Any]) -> dict[str, Any]:
    if not isinstance(row, row_type):
        return {"error": f"the scoring function returned {type(row).__name__}, not the EvaluationRow it scored"}
    result = row.evaluation_result
    if not result.is_score_valid:
        why = result.reason or result.error or "no reason given"
        return {"error": f"the scoring function marked the score invalid: {why}"[:2000]}
    score = row.score
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        return {"error": f"the scoring function left `score` {score!r}: set a number in [0, 1]"}
    if not 0.0 <= float(score) <= 1.0:
        return {"error": f"the scoring function gave the score {score!r}; scores are within [0, 1]"}
    metrics = row.metric_values()
    reason = None if row.reason is None else str(row.reason)
    return {"score": float(score), "reason": reason, "metrics": metrics}


def _failure(exc: BaseException) -> dict[str, Any]:
    traceback.print_exc()
    return {"error": f"the scoring function raised {type(exc).__name__}: {exc}"[:2000]}


def score(function: Callable[..., Any], mode: str, raw_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per row: each alone (pointwise), by ``row_id`` (groupwise), or all together (all)."""
    row_type = importlib.import_module("evalsi.testing").EvaluationRow
    rows = [
        row_type(
            messages=list(raw.get("messages") or []),
            ground_truth=raw.get("ground_truth"),
            row_id=str(raw.get("row_id", index)),
            metadata=dict(raw.get("metadata") or {}),
        )
        for index, raw in enumerate(raw_rows)
    ]
    if mode == "pointwise":
        out: list[dict[str, Any]] = []
        for row in rows:
            try:
                returned = function(row)
            except Exception as exc:
                out.append(_failure(exc))
                continue
            out.append(_result(row if returned is None else returned, row_type))
        return out
    groups: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        groups.setdefault(row.row_id if mode == "groupwise" else "", []).append(index)
    results: list[dict[str, Any]] = [{} for _ in rows]
    for members in groups.values():
        given = [rows[i] for i in members]
        try:
            returned = function(given)
        except Exception as exc:
            failed = _failure(exc)
            for i in members:
                results[i] = failed
            continue
        for i in members:
            kept = returned is None or any(r is rows[i] for r in returned)
            results[i] = _result(rows[i], row_type) if kept else {"error": "the scoring function dropped this row"}
    return results


def cut_reasons(results: list[dict[str, Any]], limit: int) -> None:
    """Cut each reason and error to one byte past ``limit`` (the server then marks it as cut).

    The server cuts them again: this only keeps an honest evaluator's answer small.
    """
    if limit <= 0:
        return
    for result in results:
        for key in ("reason", "error"):
            if isinstance(result.get(key), str) and len(result[key]) > limit // 4:
                data = result[key].encode("utf-8", "replace")
                if len(data) > limit:  # one byte over: the server marks it as cut
                    result[key] = data[: limit + 1].decode("utf-8", "ignore")


def _send(channel: socket.socket, answer: dict[str, Any]) -> None:
    data = json.dumps(answer).encode()
    channel.sendall(struct.pack(">I", len(data)) + data)


def _receive(channel: socket.socket) -> Any:
    """The next frame, or None when the channel closed."""
    head = b""
    while len(head) < 4:
        chunk = channel.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">I", head)
    data = bytearray()
    while len(data) < size:
        chunk = channel.recv(min(size - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return json.loads(data)


def serve(entry: str, channel: socket.socket) -> int:
    """The warm worker: load the entry once, then answer batches on ``channel`` until it closes."""
    try:
        function, mode = load(entry)
    except BaseException as exc:
        traceback.print_exc()
        _send(channel, {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]})
        return 1
    _send(channel, {"ok": True, "mode": mode})
    while True:
        request = _receive(channel)
        if request is None:
            return 0
        results = score(function, mode, list(request["rows"]))
        cut_reasons(results, int(request.get("max_reason_bytes") or 0))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
        _send(channel, {"ok": True, "results": results, "memory": peak})


def main(argv: list[str]) -> int:
    """Run one command; the answer is the last line on stdout, with status 0 when ``ok``."""
    answer = sys.stdout
    sys.stdout = sys.stderr  # the evaluator's prints must not mix with the answer
    sys.path[:0] = [RUNTIME, SOURCE]
    command, entry = argv[1], argv[2]
    if command == "serve":
        return serve(entry, socket.socket(fileno=3))
    try:
        function, mode = load(entry)
    except BaseException as exc:
        traceback.print_exc()
        answer.write(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}) + "\n")
        return 1
    if command == "check":
        answer.write(json.dumps({"ok": True, "mode": mode}) + "\n")
        return 0
    request = json.loads(sys.stdin.read())
    results = score(function, mode, list(request["rows"]))
    cut_reasons(results, int(request.get("max_reason_bytes") or 0))
    answer.write(json.dumps({"ok": True, "results": results}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

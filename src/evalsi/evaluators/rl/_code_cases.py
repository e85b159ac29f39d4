"""Test cases of ``code-exec-tests``, read from a record: what to run, and what each case expects.

Formats (from the record's metadata):

- ``tests``: a list of ``{input, output}`` stdin/stdout pairs (or a JSON string of one, or an APPS object);
- APPS: ``inputs``/``outputs`` (or an ``input_output`` JSON string), call-based when ``fn_name`` is given;
- MBPP: ``test_list`` asserts, with ``test_setup_code`` and ``test_imports``;
- HumanEval: a ``test`` script defining ``check(candidate)``, called with ``entry_point``.

Expected outputs stay on the host: a stdio case sends only its input, a call case only the call, and assert
cases go to the tester process, never to the program's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from evalsi.sandbox import Case

CASE_FIELDS: tuple[str, ...] = (
    "tests", "inputs", "outputs", "input_output", "fn_name", "test_list", "test_setup_code",
    "test_imports", "test", "entry_point",
)  # fmt: skip
"""The metadata keys test cases are read from (they make the cache key, with the completion)."""


class CaseError(ValueError):
    """The record's test cases are malformed; the message names the field and what would be valid."""


@dataclass(frozen=True)
class TestCase:
    """One case: what to run, and what the host expects of it."""

    __test__ = False  # not a pytest class

    case: Case
    check: Literal["stdout", "value", "verdict"]
    expected: Any = None
    label: str = ""


def test_cases(meta: Mapping[str, Any]) -> list[TestCase]:
    """Every test case the metadata defines, in order; empty when it defines none.

    Raises:
        CaseError: A field is present but malformed.

    """
    out: list[TestCase] = []
    if meta.get("tests") is not None:
        out += _from_tests(_json_field(meta, "tests"), meta)
    elif meta.get("inputs") is not None or meta.get("outputs") is not None:
        out += _from_apps({"inputs": meta.get("inputs"), "outputs": meta.get("outputs")}, meta, "inputs/outputs")
    elif meta.get("input_output") is not None:
        out += _from_apps(_json_field(meta, "input_output"), meta, "input_output")
    if meta.get("test_list") is not None:
        out += _from_mbpp(meta)
    if meta.get("test") is not None:
        out += _from_script(meta)
    return out


def _json_field(meta: Mapping[str, Any], name: str) -> Any:
    value = meta[name]
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise CaseError(f"metadata.{name}: a string must hold JSON test cases ({exc})") from None
    return value


def _from_tests(value: Any, meta: Mapping[str, Any]) -> list[TestCase]:
    if isinstance(value, Mapping) and ("inputs" in value or "outputs" in value):
        return _from_apps(value, meta, "tests")
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise CaseError("metadata.tests: must be a list of {input, output} objects")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or "output" not in item:
            raise CaseError(f"metadata.tests[{i}]: must be an object with 'input' and 'output'")
        stdin = _text(item.get("input", ""), f"metadata.tests[{i}].input")
        expected = _text(item["output"], f"metadata.tests[{i}].output")
        out.append(TestCase(Case("stdio", stdin=stdin), "stdout", expected, f"tests[{i}]"))
    return out


def _from_apps(value: Any, meta: Mapping[str, Any], where: str) -> list[TestCase]:
    if not isinstance(value, Mapping):
        raise CaseError(f"metadata.{where}: must be an object with 'inputs' and 'outputs'")
    inputs, outputs = value.get("inputs"), value.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise CaseError(f"metadata.{where}: 'inputs' and 'outputs' must be lists of the same length")
    fn_name = value.get("fn_name") or meta.get("fn_name")
    out = []
    for i, (given, expected) in enumerate(zip(inputs, outputs, strict=True)):
        if fn_name:
            payload = {"kind": "call", "fn": str(fn_name), "args": given}
            out.append(TestCase(Case("call", payload=payload), "value", expected, f"inputs[{i}]"))
        else:
            stdin = _text(given, f"metadata.{where}.inputs[{i}]")
            text = _text(expected, f"metadata.{where}.outputs[{i}]")
            out.append(TestCase(Case("stdio", stdin=stdin), "stdout", text, f"inputs[{i}]"))
    return out


def _from_mbpp(meta: Mapping[str, Any]) -> list[TestCase]:
    tests = meta["test_list"]
    if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
        raise CaseError("metadata.test_list: must be a list of assert statements (strings)")
    imports = meta.get("test_imports") or []
    if not isinstance(imports, list) or not all(isinstance(t, str) for t in imports):
        raise CaseError("metadata.test_imports: must be a list of import statements (strings)")
    setup = meta.get("test_setup_code") or ""
    if not isinstance(setup, str):
        raise CaseError("metadata.test_setup_code: must be a string of Python code")
    prelude = "\n".join([*imports, setup])
    out = []
    for i, test in enumerate(tests):
        payload = {"kind": "asserts", "setup": prelude, "code": test}
        out.append(TestCase(Case("call", payload=payload), "verdict", None, f"test_list[{i}]"))
    return out


def _from_script(meta: Mapping[str, Any]) -> list[TestCase]:
    script = meta["test"]
    if not isinstance(script, str):
        raise CaseError("metadata.test: must be a Python test script (a string)")
    entry = meta.get("entry_point")
    if entry is not None and not isinstance(entry, str):
        raise CaseError("metadata.entry_point: must be the name of the function under test")
    payload = {"kind": "check", "code": script, "entry_point": entry} if entry else {"kind": "asserts", "code": script}
    return [TestCase(Case("call", payload=payload), "verdict", None, "test")]


def _text(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)  # some datasets split stdin into lines
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise CaseError(f"{where}: must be text, got {type(value).__name__}")

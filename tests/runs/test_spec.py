"""RunSpec loading: defaults, --set overrides, and errors that name file, line and field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from evalsi.errors import SpecError
from evalsi.runs import load_run

SPEC = """\
apiVersion: evals.si/v1alpha1
kind: RunSpec
metadata: {name: qa}
spec:
  target:
    baseUrl: http://127.0.0.1:9/v1
    model: base
  sampling: {temperature: 0.6, maxTokens: 256}
  dataset:
    path: qa.jsonl
    fields: {prompt: question}
  evaluators:
    - ref: exact-match
      params: {ignore_case: true}
  passK:
    atK: {metrics: [exact-match], k: [1, 4]}
  gates:
    - {metric: pass@4/exact-match, min: 0.5}
"""


def write(tmp_path: Path, text: str = SPEC) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_loads_with_defaults(tmp_path: Path) -> None:
    run = load_run(write(tmp_path))
    body = run.body
    assert run.spec.name == "qa" and body.samples == 4  # generate max(k) samples when samples is not set
    assert body.num_samples == -1 and body.on_error == "zero" and body.target.api == "chat"
    assert body.sampling.request_fields() == {"temperature": 0.6, "max_tokens": 256}
    assert run.metric_names() == ["exact-match", "pass@1/exact-match", "pass@4/exact-match"]
    assert run.output == Path("qa.results.json") and run.base_dir == tmp_path
    assert run.reward.component_names == ["exact-match"]


def test_every_field_can_be_overridden(tmp_path: Path) -> None:
    run = load_run(
        write(tmp_path),
        overrides=[
            "sampling.temperature=0",
            "sampling.top_p=0.9",
            "target.model=step-100",
            "numSamples=2",
            "evaluators[0].params.ignore_case=false",
            "spec.samples=8",
            "output=out/x.json",
            "metadata.name=qa-100",
            "dataset.fields.reference=gold",
            "passK.atK.k=[1, 4, 8]",
            "target.headers.X-Run=abc",
        ],
    )
    body = run.body
    assert body.sampling.temperature == 0 and body.sampling.top_p == 0.9
    assert body.target.model == "step-100" and body.num_samples == 2 and body.samples == 8
    assert body.evaluators[0].params == {"ignore_case": False}
    assert run.output == Path.cwd() / "out/x.json" and run.spec.name == "qa-100"  # typed here: the working directory
    assert body.dataset.fields.reference == "gold" and body.pass_k.at_k is not None
    assert body.pass_k.at_k.k == [1, 4, 8] and body.target.headers == {"X-Run": "abc"}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sampling.temperature=-1", r"^--set: sampling\.temperature .*: Input should be greater"),
        ("samples=2", r"spec: .*passK asks for k=4 but samples is 2"),
        ("evaluators.3.weight=1", r"--set: evaluators\.3\.weight: '3' is not an index of a list of 1"),
        ("nonsense", r"--set: 'nonsense' is not path\.to\.field=value"),
        ("sampling.bogus=1", r"^--set: sampling\.bogus .*: unknown field"),
        ("sampling.temprature=0.6", r"^--set: .*unknown field; did you mean sampling\.temperature"),
        ("dataset.numSamples=50", r"^--set: dataset\.numSamples .*unknown field; did you mean numSamples\b"),
        ("numSamples=abc", r"^--set: numSamples .*valid integer.*'abc'"),
        ("evaluators[0].params.ignore_cases=true", r"^--set: evaluators\[0\]\.params\.ignore_cases .*ignore_case"),
    ],
)
def test_bad_overrides_are_named(tmp_path: Path, override: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_run(write(tmp_path), overrides=[override])


def test_set_values_are_text_where_the_field_takes_text(tmp_path: Path) -> None:
    run = load_run(
        write(tmp_path),
        overrides=[
            "dataset.promptTemplate={question}",
            "target.model=1.5",
            "dataset.fields.prompt=[q]",
            "samples=4",
            "dataset.systemPrompt=yes",
        ],
    )
    body = run.body
    assert body.dataset.prompt_template == "{question}" and body.target.model == "1.5"
    assert body.dataset.fields.prompt == "[q]" and body.samples == 4 and body.dataset.system_prompt == "yes"


def test_set_values_are_text_where_an_evaluator_param_takes_text(tmp_path: Path) -> None:
    spec = SPEC.replace("exact-match", "contains").replace("{ignore_case: true}", "{text: a}")
    overrides = ["evaluators[0].params.text=42", "evaluators[0].params.ignore_case=yes"]
    run = load_run(write(tmp_path, spec), overrides=overrides)
    params: Any = run.reward.components[0].params
    assert params.text == "42" and params.ignore_case is True  # text where the param takes text, YAML elsewhere
    with pytest.raises(SpecError, match=r"^--set: evaluators\[0\]\.params\.ignore_case .*valid boolean"):
        load_run(write(tmp_path, spec), overrides=["evaluators[0].params.ignore_case=maybe"])


def test_run_help_suggests_overrides_that_work(tmp_path: Path) -> None:
    from evalsi.cli.run import run_command

    examples = re.findall(r"--set (\S+)", run_command.__doc__ or "")
    assert examples
    load_run(write(tmp_path), overrides=examples)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("ref: exact-match", "ref: exact-mach", r"run\.yaml:13: spec\.evaluators\[0\]\.ref: unknown evaluator"),
        ("{ignore_case: true}", "{ignore_cases: true}", r"run\.yaml:14: spec\.evaluators\[0\]\.params\.ignore_cases"),
        (
            "metric: pass@4/exact-match",
            "metric: pass@5/exact-match",
            r"run\.yaml:18: spec\.gates\[0\]\.metric: unknown",
        ),
        ("metrics: [exact-match]", "metrics: [math-eq]", r"run\.yaml:16: spec\.passK\.atK\.metrics\[0\]: 'math-eq'"),
        ("    baseUrl: http://127.0.0.1:9/v1\n", "", r"spec\.target: Value error, a target needs baseUrl and model"),
        ("    path: qa.jsonl\n", "", r"spec\.dataset: Value error, give one of builtin, path"),
    ],
)
def test_spec_errors_name_file_line_and_field(tmp_path: Path, old: str, new: str, message: str) -> None:
    assert old in SPEC
    with pytest.raises(SpecError, match=message):
        load_run(write(tmp_path, SPEC.replace(old, new)))


FIELD = "      params: {ignore_case: true}\n"


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        ({FIELD: FIELD + "      weight: 0.5\n"}, r"run\.yaml:15: spec\.evaluators\[0\]\.weight: .*no total"),
        ({FIELD: FIELD + "      gate: true\n"}, r"spec\.evaluators\[0\]\.gate: .*a run's gates are spec\.gates"),
        ({FIELD: FIELD + "      onError: none\n"}, r"spec\.evaluators\[0\]\.onError: .*spec\.onError"),
        ({"    path: qa.jsonl\n": "    path: qa.jsonl\n    split: train\n"}, r"spec\.dataset: .*split does not"),
        ({"    path: qa.jsonl\n": "    hf: org/qa\n    format: csv\n"}, r"spec\.dataset: .*format does not apply"),
        ({"    path: qa.jsonl\n": "    builtin: math500\n"}, r"spec\.dataset: .*fields does not apply to a built-in"),
        (
            {
                "    model: base\n": "    model: base\n    api: completions\n",
                "  dataset:\n": "  dataset:\n    systemPrompt: hi\n",
            },
            r"run\.yaml:4: spec: .*dataset\.systemPrompt is sent as a chat message",
        ),
        ({"metadata: {name: qa}": "metadata: {name: qa, tags: x}"}, r"run\.yaml:3: metadata\.tags: unknown field"),
        ({"metadata: {name: qa}": "metadata: {name: qa, labels: [a]}"}, r"metadata\.labels: labels must map names"),
    ],
)
def test_fields_that_would_be_accepted_and_never_read_are_refused(
    tmp_path: Path, edits: dict[str, str], message: str
) -> None:
    text = SPEC
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    with pytest.raises(SpecError, match=message):
        load_run(write(tmp_path, text))


def test_training_only_fields_are_accepted_by_a_standalone_run(tmp_path: Path) -> None:
    text = SPEC + "  every: 100\n  separateEvalSamples: true\n"
    run = load_run(write(tmp_path, text))
    assert run.body.every == 100 and run.body.separate_eval_samples
    labelled = load_run(write(tmp_path, SPEC.replace("metadata: {name: qa}", "metadata: {name: qa, labels: {t: m}}")))
    assert labelled.spec.name == "qa"


def test_a_builtin_eval_brings_its_evaluators(tmp_path: Path) -> None:
    text = SPEC.replace("    path: qa.jsonl\n    fields: {prompt: question}\n", "    builtin: gpqa_diamond\n")
    text = text[: text.index("  evaluators:")]
    run = load_run(write(tmp_path, text))
    assert run.reward.component_names == ["multiple-choice"]
    with pytest.raises(SpecError, match="evaluators is required"):
        load_run(write(tmp_path, text.replace("builtin: gpqa_diamond", "path: x.jsonl")))

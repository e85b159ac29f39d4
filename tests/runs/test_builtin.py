"""Built-in evals on small fixture files in their published formats: loaders, prompts, references, scoring."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalsi.errors import DataError
from evalsi.evaluators import ScoreContext, get_evaluator
from evalsi.evaluators.core.multiple_choice import extract_letter
from evalsi.records import Record
from evalsi.runs import BUILTINS, Runner, load_builtin, run_from_mapping
from evalsi.specs import DatasetSpec

FIXTURES = Path(__file__).parent / "fixtures"


def builtin(name: str, path: Path | None = None) -> DatasetSpec:
    return DatasetSpec.model_validate({"builtin": name, **({"path": str(path)} if path else {})})


def test_math500_from_a_local_copy() -> None:
    items = load_builtin(builtin("math500", FIXTURES / "math500"))
    assert [i.id for i in items] == ["test/precalculus/807.json", "test/algebra/2369.json", "test/algebra/2584.json"]
    assert items[1].prompt == (
        "What is the value of $513^2 - 487^2$?\n\n"
        "Please reason step by step, and put your final answer within \\boxed{}."
    )
    assert items[1].reference == "26000"
    assert items[2].metadata["subject"] == "Algebra" and "solution" not in items[2].metadata
    assert BUILTINS["math500"].evaluators == ({"ref": "math-equiv"},)


def test_aime_2024_from_the_hugging_face_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = tmp_path / "hub" / "datasets--HuggingFaceH4--aime_2024" / "snapshots" / "0123abcd" / "data"
    snapshot.mkdir(parents=True)
    rows = [
        {
            "id": 60,
            "problem": "Every morning Aya goes for a 9-kilometer-long walk...",
            "solution": "...",
            "answer": "204",
            "url": "https://artofproblemsolving.com/...",
            "year": "2024",
        },
        {
            "id": 61,
            "problem": "Let $ABC$ be a triangle inscribed in circle $\\omega$.",
            "solution": "...",
            "answer": "113",
            "url": "https://...",
            "year": "2024",
        },
    ]
    pq.write_table(pa.Table.from_pylist(rows), snapshot / "train-00000-of-00001.parquet")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    items = load_builtin(builtin("aime_2024"))
    assert [(i.id, i.reference) for i in items] == [("60", "204"), ("61", "113")]
    prompt = items[0].prompt
    assert isinstance(prompt, str) and prompt.startswith("Every morning Aya") and prompt.endswith("within \\boxed{}.")


def test_aime_2025_joins_both_parts() -> None:
    items = load_builtin(builtin("aime_2025", FIXTURES / "aime_2025"))
    assert [(i.id, i.reference) for i in items] == [
        ("AIME2025-I-1", "70"),
        ("AIME2025-I-2", "588"),
        ("AIME2025-II-1", "468"),
    ]
    assert items[2].metadata["part"] == "AIME2025-II"


def test_gpqa_shuffles_options_deterministically_and_the_reference_is_the_correct_letter() -> None:
    first = load_builtin(builtin("gpqa_diamond", FIXTURES / "gpqa" / "gpqa_diamond.csv"))
    again = load_builtin(builtin("gpqa_diamond", FIXTURES / "gpqa"))
    assert [i.prompt for i in first] == [i.prompt for i in again]
    for item, correct in zip(first, ["10^-4 eV", "11"], strict=True):
        assert isinstance(item.prompt, str) and isinstance(item.reference, str)
        assert f"\n{item.reference}) {correct}\n" in item.prompt + "\n"
        assert item.prompt.startswith("Answer the following multiple choice question.")
    assert first[0].id == "recgI6fVSu1aM4mR1" and first[0].metadata["High-level domain"] == "Physics"
    assert {i.reference for i in first} <= set("ABCD")


def test_missing_data_says_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(DataError, match=r"'math500': test.jsonl \(from HuggingFaceH4/MATH-500\) not found in"):
        load_builtin(builtin("math500"))
    bad = tmp_path / "test.jsonl"
    bad.write_text('{"question": "wrong format"}\n')
    with pytest.raises(DataError, match=r"test\.jsonl:1: no column 'problem' \(math500 format\)"):
        load_builtin(builtin("math500", bad))


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("Reasoning...\nAnswer: C", "C"),
        ("so \\boxed{B}", "B"),
        ("The answer is (D).", "D"),
        ("Answer: **A**", "A"),
        ("Answer: A\nwait, no. Answer: B", "B"),
        ("the answer is a guess", None),
        ("no letter at all", None),
    ],
)
def test_answer_letter_extraction(text: str, letter: str | None) -> None:
    assert extract_letter(text, "ABCD") == letter


def test_multiple_choice_scores() -> None:
    evaluator = get_evaluator("multiple-choice")
    params = evaluator.parse_params({})
    ctx = ScoreContext()
    assert evaluator.score(Record("Answer: B", reference="B"), params, ctx).value is True
    assert evaluator.score(Record("Answer: C", reference="B"), params, ctx).value is False
    assert evaluator.score(Record("I refuse", reference="B"), params, ctx).reason == "no answer letter found"
    assert evaluator.score(Record("Answer: B"), params, ctx).status == "skipped"
    assert evaluator.score(Record("Answer: B", reference="Z"), params, ctx).status == "error"


def test_gpqa_runs_end_to_end_with_its_own_evaluator(tmp_path: Path) -> None:
    items = load_builtin(builtin("gpqa_diamond", FIXTURES / "gpqa"))
    right = {i.prompt: i.reference for i in items[:1]}  # the model knows the first question only

    def model(prompt: str) -> str:
        return f"Let me think.\nAnswer: {right.get(prompt, 'Z')}"

    run = run_from_mapping(
        {
            "target": {"callable": "builtins:print"},
            "dataset": {"builtin": "gpqa_diamond", "path": str(FIXTURES / "gpqa")},
            "output": str(tmp_path / "gpqa.json"),
        }
    )
    assert [m.name for m in run.metrics] == ["multiple-choice"]
    outcome = Runner(run, fn=model).run()
    assert outcome.summary.metrics["multiple-choice"].mean == 0.5
    assert outcome.verdict == "ok"

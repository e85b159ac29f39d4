"""Built-in evals on small fixture files in their published formats: loaders, prompts, references, scoring."""

from __future__ import annotations

import socket
import threading
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


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on: a connect there is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def online(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No offline switch and no proxy set (the hf session sets HF_HUB_OFFLINE), an empty hub cache."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    for name in ("https_proxy", "http_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))


def test_missing_data_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, online: None, closed_port: int
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port}")
    with pytest.raises(
        DataError, match=r"'math500' needs test.jsonl from the Hugging Face dataset HuggingFaceH4/MATH-500"
    ):
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


@pytest.mark.parametrize("via_proxy", [False, True])
def test_an_unreachable_hub_fails_at_once_with_the_download_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, online: None, closed_port: int, via_proxy: bool
) -> None:
    if via_proxy:  # the hub is reached through the proxy the environment names: the proxy is what is probed
        monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{closed_port}")
    else:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port}")
    with pytest.raises(DataError) as caught:
        load_builtin(builtin("math500"))
    message = str(caught.value)
    assert "the hub cannot be reached" in message
    assert (
        f"through the proxy http://127.0.0.1:{closed_port}" in message if via_proxy else f":{closed_port}:" in message
    )
    assert "\n    hf download HuggingFaceH4/MATH-500 --repo-type dataset --local-dir math500\n" in message
    assert "set dataset.path to it" in message
    assert f"fill the Hugging Face cache ({tmp_path / 'empty-cache'})" in message
    assert str(tmp_path / "empty-cache" / "datasets--HuggingFaceH4--MATH-500" / "snapshots") in message


def test_the_offline_switch_is_honoured_without_contacting_the_hub(
    monkeypatch: pytest.MonkeyPatch, online: None
) -> None:
    connections: list[object] = []
    with socket.socket() as hub:
        hub.bind(("127.0.0.1", 0))
        hub.listen()
        hub.settimeout(0.2)

        def accept() -> None:
            while True:
                try:
                    connections.append(hub.accept()[0])
                except TimeoutError:
                    continue
                except OSError:
                    return

        threading.Thread(target=accept, daemon=True).start()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{hub.getsockname()[1]}")
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        with pytest.raises(DataError, match=r"HF_HUB_OFFLINE=1 is set") as caught:
            load_builtin(builtin("aime_2025"))
    assert connections == []
    assert "hf download opencompass/AIME2025 --repo-type dataset --local-dir aime_2025" in str(caught.value)


def test_a_gated_eval_says_to_sign_in(monkeypatch: pytest.MonkeyPatch, online: None, closed_port: int) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port}")
    with pytest.raises(DataError, match=r"accept its terms at https://huggingface.co/datasets/Idavidrein/gpqa"):
        load_builtin(builtin("gpqa_diamond"))

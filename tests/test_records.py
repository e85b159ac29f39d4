"""from_rollout: how a rollout mapping becomes a Record."""

from __future__ import annotations

import pytest

from evalsi.errors import DataError
from evalsi.records import Record, from_rollout


def test_prompt_completion_and_reference_order() -> None:
    record = from_rollout({"prompt": "p", "completion": "c", "solution": "s", "answer": "a", "label": "l"})
    assert (record.prompt, record.completion, record.reference) == ("p", "c", "a")
    assert record.metadata == {"solution": "s", "label": "l"}


@pytest.mark.parametrize("key", ["reference", "ground_truth", "answer", "solution", "label"])
def test_each_reference_field_is_found(key: str) -> None:
    assert from_rollout({"completion": "c", key: 7}).reference == 7


def test_reference_field_overrides_the_default_order() -> None:
    record = from_rollout({"completion": "c", "answer": "a", "gold": "g"}, reference_field="gold")
    assert record.reference == "g"
    assert record.metadata == {"answer": "a"}


def test_named_reference_field_absent_means_no_reference() -> None:
    assert from_rollout({"completion": "c", "answer": "a"}, reference_field="gold").reference is None


def test_input_and_output_aliases() -> None:
    record = from_rollout({"input": "p", "output": "c"})
    assert (record.prompt, record.completion) == ("p", "c")
    both = from_rollout({"prompt": "p", "input": "i", "completion": "c", "output": "o"})
    assert (both.prompt, both.completion) == ("p", "c")
    assert both.metadata == {"input": "i", "output": "o"}


def test_chat_completion_reads_the_last_assistant_message() -> None:
    completion = [
        {"role": "assistant", "content": "first"},
        {"role": "tool", "content": "tool output"},
        {"role": "assistant", "content": [{"type": "text", "text": "final "}, {"type": "text", "text": "answer"}]},
    ]
    record = from_rollout({"prompt": [{"role": "user", "content": "q"}], "completion": completion})
    assert record.completion_text == "final answer"
    assert record.prompt_text == "q"


def test_token_counts() -> None:
    assert from_rollout({"completion": "c", "completion_tokens": 12}).completion_tokens == 12
    assert from_rollout({"completion": "c", "completion_ids": [1, 2, 3]}).completion_tokens == 3
    assert from_rollout({"completion": "c"}).completion_tokens is None
    both = from_rollout({"completion": "c", "completion_tokens": 5, "completion_ids": [1]})
    assert both.completion_tokens == 5
    assert "completion_ids" not in both.metadata


def test_everything_else_goes_to_metadata_and_id_is_kept() -> None:
    record = from_rollout({"id": 17, "completion": "c", "tests": [{"input": "1", "output": "2"}], "data_source": "x"})
    assert record.id == "17"
    assert record.metadata == {"tests": [{"input": "1", "output": "2"}], "data_source": "x"}
    assert record.pairing_key == "17"


def test_content_hash_is_stable_and_content_sensitive() -> None:
    a = from_rollout({"completion": "c", "answer": "1", "extra": {"b": 1, "a": 2}})
    b = from_rollout({"extra": {"a": 2, "b": 1}, "answer": "1", "completion": "c"})
    c = from_rollout({"completion": "c", "answer": "2", "extra": {"b": 1, "a": 2}})
    assert a.content_hash() == b.content_hash() != c.content_hash()
    assert a.pairing_key == a.content_hash()


@pytest.mark.parametrize(
    ("rollout", "message"),
    [
        ({"prompt": "p"}, "rollout 3: has no 'completion'"),
        ({"completion": 5}, "'completion' must be text or a list of chat messages"),
        ({"completion": [{"role": "assistant"}]}, r"completion\[0\] is a chat message without 'content'"),
        ({"completion": "c", "completion_tokens": -1}, "non-negative integer"),
        ({"completion": "c", "completion_ids": "abc"}, "list of token ids"),
    ],
)
def test_bad_rollouts_name_their_index(rollout: dict[str, object], message: str) -> None:
    with pytest.raises(DataError, match=message):
        from_rollout(rollout, index=3)


def test_a_rollout_must_be_a_mapping() -> None:
    with pytest.raises(DataError, match="rollout 0: a rollout must be a mapping"):
        from_rollout(["completion"], index=0)  # type: ignore[arg-type]


def test_records_and_scores_survive_pickling_whole() -> None:
    import pickle

    from evalsi.evaluators import Score

    record = Record(
        completion=[{"role": "assistant", "content": "4"}],
        prompt="2+2?",
        reference={"answer": 4},
        completion_tokens=3,
        id="r-1",
        metadata={"group_id": 7, "tags": ("a", "b")},
    )
    scores = [Score.ok(True, "fine", {"extracted": "4"}), Score.skipped("no reference"), Score.error("down")]
    assert pickle.loads(pickle.dumps(record)) == record
    assert pickle.loads(pickle.dumps(scores)) == scores
    assert pickle.loads(pickle.dumps(record)).metadata["tags"] == ("a", "b")  # types kept, not turned into JSON

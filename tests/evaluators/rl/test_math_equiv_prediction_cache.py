"""The parser's prediction cache on disk: loaded, it gives the same parses without learning them again; a file that is
corrupt, for another grammar or malformed is ignored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("latex2sympy2_extended")

from evalsi.evaluators.rl.math_equiv import _prediction_cache
from evalsi.evaluators.rl.math_equiv._prediction_cache import PredictionCache
from tests.evaluators.rl._parser_dfa import fresh_dfas, trees

TEXTS = [
    "\\frac{x+2}{7}",
    "\\tan^2(y)+1",
    "x^2/4+y^2/3=1",
    "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}",
    "\\sum_{k=0}^{n}x^k",
    "\\frac{x^{n+1}-1}{x-1}",
    "(-\\infty,-3]\\cup[2,\\infty)",
    "\\{1,2\\}",
    "a_n=a_{n-1}+a_{n-2}",
    "10^{\\frac{\\sqrt{13}-5}{6}}",
    "(a+b)^5",
    "\\sqrt[3]{x}^2",
    "\\log_2 8",
    "e^{2\\pi i}",
    "2x+4y-3=0",
    "\\frac{1}{",  # a syntax error
]


def _cache(parser: Any, directory: Path) -> PredictionCache:
    return PredictionCache(parser, ["antlr", "latex2sympy", [1, 2, 3]], directory)


def test_a_loaded_dfa_is_the_saved_one_and_parses_the_same_without_learning_again(parser: Any, tmp_path: Path) -> None:
    cache = _cache(parser, tmp_path)
    assert cache.load() == 0  # no file yet
    learnt = trees(parser, TEXTS)
    states = cache.states()
    assert states > 50
    assert cache.save()
    assert cache.path.parent == tmp_path / "math-equiv"
    assert [p.name for p in cache.path.parent.iterdir()] == [cache.path.name]  # written atomically, nothing left

    fresh_dfas(parser)
    assert cache.states() == 0
    again = _cache(parser, tmp_path)
    assert again.load() == states
    assert _prediction_cache._encode(parser, again.key) == json.loads(cache.path.read_bytes())
    assert trees(parser, TEXTS) == learnt
    assert again.states() == states  # every prediction came from the loaded DFA


def test_a_loaded_dfa_goes_on_learning_new_shapes(parser: Any, tmp_path: Path) -> None:
    cache = _cache(parser, tmp_path)
    trees(parser, TEXTS[:3])
    cache.save()
    fresh_dfas(parser)
    expected = trees(parser, TEXTS)

    fresh_dfas(parser)
    assert _cache(parser, tmp_path).load() > 0
    assert trees(parser, TEXTS) == expected


def _saved(parser: Any, tmp_path: Path) -> PredictionCache:
    cache = _cache(parser, tmp_path)
    trees(parser, TEXTS[:2])
    assert cache.save()
    fresh_dfas(parser)
    return cache


def _damaged_state_number(data: dict[str, Any]) -> None:
    data["decisions"][-1]["states"][0][9][0] = 10**9  # an ATN state the grammar does not have


def _negative_context(data: dict[str, Any]) -> None:
    data["decisions"][-1]["states"][0][9][2] = -1  # would index the context table from its end


def _fractional_alternative(data: dict[str, Any]) -> None:
    data["decisions"][-1]["states"][0][9][1] = 1.5


def _damaged_edge(data: dict[str, Any]) -> None:
    data["decisions"][-1]["edges"][:3] = [0, 10**6, 0]  # a token type the grammar does not have


def _damaged_context(data: dict[str, Any]) -> None:
    data["contexts"].append([5, len(data["contexts"]) + 7])  # a parent that comes later


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: b"not json",
        lambda data: json.dumps(data).encode()[:-40],  # truncated
        lambda data: json.dumps({**data, "key": "0" * 64}).encode(),  # another grammar's
        lambda data: json.dumps(_damaged(data, _damaged_state_number)).encode(),
        lambda data: json.dumps(_damaged(data, _negative_context)).encode(),
        lambda data: json.dumps(_damaged(data, _fractional_alternative)).encode(),
        lambda data: json.dumps(_damaged(data, _damaged_edge)).encode(),
        lambda data: json.dumps(_damaged(data, _damaged_context)).encode(),
        lambda data: json.dumps(_damaged(data, lambda d: d["decisions"][0].update(states=[["x"]]))).encode(),
    ],
    ids=[
        "not-json",
        "truncated",
        "other-key",
        "no-such-atn-state",
        "negative-context",
        "fractional-alt",
        "no-such-token",
        "context-order",
        "bad-state",
    ],
)
def test_a_damaged_or_foreign_file_is_ignored_and_nothing_is_installed(
    parser: Any, tmp_path: Path, damage: Any
) -> None:
    cache = _saved(parser, tmp_path)
    cache.path.write_bytes(damage(json.loads(cache.path.read_bytes())))
    assert _cache(parser, tmp_path).load() == 0
    assert cache.states() == 0
    assert trees(parser, TEXTS[:2])  # the parser still works, learning as it always did


def _damaged(data: dict[str, Any], change: Any) -> dict[str, Any]:
    change(data)
    return data


def test_a_worker_saves_only_when_its_dfa_grew_enough(
    parser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_prediction_cache, "SAVE_SHARE", 1e-9)  # a write waits for a lot more CPU time
    cache = _cache(parser, tmp_path)
    cache.load()
    assert not cache.save_if_grown()  # nothing learnt
    trees(parser, TEXTS)
    assert cache.save_if_grown()  # the first write waits for nothing
    assert not cache.save_if_grown()  # nothing new since
    trees(parser, ["\\sqrt{x+1}-\\sqrt{x}", "\\left(\\frac{3}{4}\\right)^{-2}", "\\cos(2\\theta)"])
    assert cache.states() >= cache.saved_states + _prediction_cache.MIN_GROWTH
    assert not cache.save_if_grown()  # grown, but the last write's cost is not yet paid back
    monkeypatch.setattr(_prediction_cache, "SAVE_SHARE", 1e9)
    assert cache.save_if_grown()
    monkeypatch.setattr(_prediction_cache, "MAX_STATES", 10)
    trees(parser, ["\\int_0^1 x\\,dx", "\\binom{5}{2}", "|x-3|<2", "\\overline{AB}", "f'(x)=3x^2"])
    assert not cache.save_if_grown()  # too large to be worth loading


def test_the_cache_lives_under_the_users_cache_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("EVALSI_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _prediction_cache.cache_dir() == tmp_path / "xdg" / "evalsi"
    monkeypatch.setenv("EVALSI_CACHE_DIR", str(tmp_path / "own"))
    assert _prediction_cache.cache_dir() == tmp_path / "own"


def test_an_unwritable_directory_only_means_no_cache(parser: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = _cache(parser, blocker)  # its math-equiv directory cannot be made under a file
    trees(parser, TEXTS[:2])
    assert not cache.save()
    assert cache.load() == 0


def test_a_worker_writes_after_a_comparison_only_when_it_ended_well_before_the_backstop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from evalsi.evaluators.rl.math_equiv import _pool

    writes: list[bool] = []
    monkeypatch.setattr(_prediction_cache, "save_if_grown", lambda: writes.append(True))
    clock = iter([100.0, 100.2, 200.0, 203.0])

    class _Clock:
        @staticmethod
        def monotonic() -> float:
            return next(clock)

    monkeypatch.setattr(_pool, "time", _Clock)
    assert _pool.run_task(lambda x: x + 1, (1,), 1.0) == 2  # 0.2 s of a 1 s budget
    assert writes == [True]
    assert _pool.run_task(lambda x: x * 3, (2,), 1.0) == 6  # 3 s: closer to the backstop than a write should go
    assert writes == [True]


def test_a_worker_does_not_replace_a_larger_dfa_another_worker_wrote(
    parser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_prediction_cache, "SAVE_SHARE", 1e9)  # no waiting between writes here
    other = _cache(parser, tmp_path)
    trees(parser, TEXTS)
    assert other.save()
    larger = other.states()
    assert other.file_states() == larger
    written = other.path.read_bytes()

    fresh_dfas(parser)
    worker = _cache(parser, tmp_path)  # a worker that learnt fewer states, after the other one wrote
    trees(parser, TEXTS[:6])
    assert _prediction_cache.MIN_GROWTH <= worker.states() < larger
    assert not worker.save_if_grown()
    assert other.path.read_bytes() == written  # the larger DFA stays
    assert worker.saved_states == worker.states()  # and the worker waits for new growth before looking again

    trees(parser, [*TEXTS, "\\sqrt{x+1}-\\sqrt{x}", "\\left(\\frac{3}{4}\\right)^{-2}", "\\int_0^1 x\\,dx"])
    assert worker.states() > larger
    assert worker.save_if_grown()  # now it holds more than the file
    assert worker.file_states() == worker.states()


def test_the_state_count_of_a_missing_or_foreign_file_is_zero(parser: Any, tmp_path: Path) -> None:
    cache = _cache(parser, tmp_path)
    assert cache.file_states() == 0
    cache.path.parent.mkdir(parents=True)
    cache.path.write_bytes(b'{"states":12,"key":"x"}')
    assert cache.file_states() == 0


def test_a_write_after_a_load_keeps_the_loaded_rows_and_loads_back_to_the_same_dfa(parser: Any, tmp_path: Path) -> None:
    first = _cache(parser, tmp_path)
    trees(parser, TEXTS[:4])
    assert first.save()
    read = json.loads(first.path.read_bytes())
    fresh_dfas(parser)

    again = _cache(parser, tmp_path)
    loaded = again.load()
    learnt = trees(parser, TEXTS)
    assert again.states() > loaded
    expected = _prediction_cache._encode(parser, again.key)  # every state encoded afresh
    assert again.known is not None
    kept = [row for _, row in again.known.rows.values()]
    assert len(kept) == loaded
    for row in kept:
        row[2] += 1000  # a prediction no state has: it shows where a written row came from
    reusing = _prediction_cache._encode(parser, again.key, known=again.known)
    assert sum(row[2] >= 1000 for decision in reusing["decisions"] for row in decision["states"]) == loaded
    for row in kept:
        row[2] -= 1000
    assert again.save()
    written = json.loads(again.path.read_bytes())
    assert written["contexts"][: len(read["contexts"])] == read["contexts"]  # the loaded table first, as read
    rows = {decision["decision"]: decision["states"] for decision in written["decisions"]}
    for decision in read["decisions"]:  # each loaded state's row as it was read
        assert rows[decision["decision"]][: len(decision["states"])] == decision["states"]

    fresh_dfas(parser)
    assert _cache(parser, tmp_path).load() == expected["states"]
    assert _prediction_cache._encode(parser, again.key) == expected
    assert trees(parser, TEXTS) == learnt

"""A cold math-equiv pays only for what its records need: light imports, workers launched early and only when needed,
and LaTeX parsed in the workers by ANTLR's fast prediction with the trees full LL prediction gives."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from evalsi.evaluators import ScoreContext
from evalsi.evaluators.rl.math_equiv import MathEquiv
from evalsi.evaluators.rl.math_equiv import _pool as pool_module
from evalsi.records import Record

ROOT = Path(__file__).resolve().parents[3]
CTX = ScoreContext(component="math")


def _imported_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint(' '.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return set(done.stdout.split())


@pytest.mark.timeout(150)
def test_importing_math_equiv_leaves_the_reward_engine_http_and_sympy_unimported() -> None:
    loaded = _imported_after("import evalsi.evaluators.rl.math_equiv")
    assert "evalsi.evaluators.rl.math_equiv" in loaded
    assert not loaded & {"evalsi.rewards", "evalsi.specs", "evalsi.sandbox", "httpx", "sympy", "math_verify"}


@pytest.mark.timeout(150)
def test_the_package_still_offers_every_public_name_on_first_use() -> None:
    loaded = _imported_after(
        "import evalsi\n"
        "assert evalsi.rewards.from_mapping and evalsi.Reward and evalsi.Record and evalsi.specs\n"
        "from evalsi import RewardResult, from_rollout, errors\n"
        "assert {'rewards', 'Reward', 'specs'} <= set(dir(evalsi))\n"
        "try:\n    evalsi.no_such_name\nexcept AttributeError as exc:\n    assert 'no_such_name' in str(exc)\n"
        "else:\n    raise SystemExit('no AttributeError')"
    )
    assert {"evalsi.rewards", "evalsi.specs", "evalsi.errors"} <= loaded


class _Watched(Sequence[Record]):
    """A batch that notes, when its last record is reached, whether the template process was already launched."""

    def __init__(self, records: list[Record]) -> None:
        self.records = records
        self.template_at_last: int | None = None

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> Record:  # type: ignore[override]
        return self.records[index]

    def __iter__(self) -> Iterator[Record]:
        for index, record in enumerate(self.records):
            if index == len(self.records) - 1:
                self.template_at_last = pool_module._server._forkserver_pid  # type: ignore[attr-defined]
            yield record


@pytest.mark.timeout(300)  # starts the worker pool (imports and warm-up) twice on a busy machine
def test_workers_launch_at_the_first_record_that_needs_them_and_not_for_a_fast_batch() -> None:
    evaluator = MathEquiv()
    params = evaluator.parse_params({"workers": 1})
    try:
        evaluator.close()  # no template left by an earlier test
        assert pool_module._server._forkserver_pid is None  # type: ignore[attr-defined]

        fast = _Watched([Record(completion=f"\\boxed{{{n}}}", reference=str(n)) for n in range(50)])
        assert all(s.value for s in evaluator.score_batch(fast, params, CTX))
        assert pool_module._server._forkserver_pid is None  # type: ignore[attr-defined]

        symbolic = [Record(completion="\\boxed{2\\sqrt{2}}", reference="\\sqrt{8}")]
        mixed = _Watched(symbolic + [Record(completion=f"#### {n}", reference=str(n)) for n in range(50)])
        scores = evaluator.score_batch(mixed, params, CTX)
        assert [s.value for s in scores] == [True] * 51
        assert mixed.template_at_last is not None  # launched while the rest of the batch was still being read
    finally:
        evaluator.close()


@pytest.fixture
def two_stage(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Two-stage parsing installed in this process, the library's own methods restored afterwards."""
    from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy

    from evalsi.evaluators.rl.math_equiv import _parsing

    monkeypatch.setattr(_Latex2Sympy, "parse", _Latex2Sympy.parse)
    monkeypatch.setattr(_Latex2Sympy, "create_parser", _Latex2Sympy.create_parser)
    monkeypatch.setattr(_Latex2Sympy, "parse_number", _Latex2Sympy.parse_number)
    monkeypatch.setattr(_parsing, "_installed", False)
    yield


def _corpus_answers() -> list[str]:
    from evalsi.evaluators.rl.math_equiv._extract import extract_answer, extract_reference
    from evalsi.evaluators.rl.math_equiv._normalise import normalise_with_unit

    rows = [json.loads(line) for line in (ROOT / "testdata/math_equiv/corpus.jsonl").read_text().splitlines()]
    texts: set[str] = set()
    for row in rows[::3]:
        answer = extract_answer(row["completion"], last_number=True)
        for text in (extract_reference(row["gold"]).text, answer.text if answer else ""):
            canonical = normalise_with_unit(text)[0]
            if canonical:
                texts.add(canonical)
    return sorted(texts)


def _parse_all(texts: list[str]) -> list[str]:
    import sympy
    from latex2sympy2_extended import latex2sympy

    out = []
    for text in texts:
        try:
            out.append(sympy.srepr(latex2sympy(text)))
        except Exception as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    return out


@pytest.mark.timeout(600)
def test_two_stage_parsing_gives_the_trees_of_full_ll_parsing_on_the_corpus(
    two_stage: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy

    from evalsi.evaluators.rl.math_equiv import _parsing

    texts = [*_corpus_answers(), "\\frac{1}{", "x +* 2", "\\sqrt{", "1,2,3"]  # syntax errors fall back to LL
    assert len(texts) > 300
    full_ll = _parse_all(texts)

    assert _parsing.install() and _parsing.installed()
    modes: list[str] = []
    create_parser = _Latex2Sympy.create_parser

    def noting(self: object, latex: str) -> object:
        parser = create_parser(self, latex)
        modes.append(parser._interp.predictionMode.name)
        return parser

    monkeypatch.setattr(_Latex2Sympy, "create_parser", noting)
    assert _parse_all(texts) == full_ll
    assert modes.count("SLL") >= len(texts)  # every text is tried the fast way first...
    assert 0 < modes.count("LL") < len(texts) // 2  # ...and only those it cannot parse go through full LL


POWERS = [
    "x^2-1",
    "3x^{2}+12x+10",
    "x^2",
    "a^5+5a^4b+10a^3b^2",
    "\\pi r^2",
    "x^{n+1}",
    "x_1^2",
    "F_{n-1}^{2}+F_n^2",
    "x^y^z",
    "a^{b^{c}}",
    "e^{-x^2}",
    "\\frac{x^3-1}{x-1}",
    "\\sin^2 x+\\cos^2x",
    "2^{10}",
    "y^2+x^2=25",
]


RARE = ["x^2_1", "x^{a}_{b}+1", "x^2_{1}+y_1^2"]
"""A subscript after a power: ambiguous for the first stage too; those parse again in full LL."""


@pytest.mark.timeout(240)
def test_letters_raised_to_a_power_are_parsed_once_with_the_trees_of_full_ll(
    two_stage: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy

    from evalsi.evaluators.rl.math_equiv import _parsing

    full_ll = _parse_all(POWERS + RARE)
    assert _parsing.install()
    modes: list[str] = []
    create_parser = _Latex2Sympy.create_parser

    def noting(self: object, latex: str) -> object:
        parser = create_parser(self, latex)
        modes.append(parser._interp.predictionMode.name)
        return parser

    monkeypatch.setattr(_Latex2Sympy, "create_parser", noting)
    assert _parse_all(POWERS) == full_ll[: len(POWERS)]
    assert modes == ["SLL"] * len(POWERS)  # none of them is parsed a second time in full LL
    assert _parse_all(RARE) == full_ll[len(POWERS) :]


@pytest.mark.timeout(240)
def test_the_workers_parse_in_two_stages() -> None:
    from evalsi.evaluators.rl.math_equiv._parsing import installed
    from evalsi.evaluators.rl.math_equiv._pool import shared_pool

    try:
        assert shared_pool(1, 2048).submit(installed, (), 30).result(timeout=200) is True
    finally:
        MathEquiv().close()


@pytest.mark.timeout(240)
def test_numbers_are_read_once_each_with_sympys_own_values(two_stage: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import sympy
    from latex2sympy2_extended import latex2sympy

    from evalsi.evaluators.rl.math_equiv import _parsing

    texts = ["12", "007", "1,234", "0.5", "3.14159265358979323846", "1e3", "2"]
    expected = [sympy.srepr(latex2sympy(text)) for text in texts]
    assert _parsing.install()
    calls: list[str] = []
    number = sympy.Number

    def counting(*args: object) -> object:
        calls.append(str(args[0]))
        return number(*args)

    monkeypatch.setattr(sympy, "Number", counting)
    assert [sympy.srepr(latex2sympy(text)) for text in texts] == expected
    first = len(calls)
    assert first > 0
    assert [sympy.srepr(latex2sympy(text)) for text in texts * 2] == expected * 2
    assert len(calls) == first  # every text read again came from the memo

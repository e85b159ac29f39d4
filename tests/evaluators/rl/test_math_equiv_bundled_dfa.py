"""The parser's prediction cache that ships with evalsi: built for the installed parser, loaded when the user's
cache holds none, and the parses are the same with it as without it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("latex2sympy2_extended")

from evalsi.evaluators.rl.math_equiv import _prediction_cache
from evalsi.evaluators.rl.math_equiv._prediction_cache import BUNDLED, PredictionCache, installed_cache
from tests.evaluators.rl._parser_dfa import fresh_dfas, trees

REBUILD = "rebuild it with: .venv/bin/python scripts/build_math_dfa.py"

SAMPLE = [
    "42",
    "-\\frac{3}{4}",
    "2\\sqrt{5}",
    "\\frac{1+\\sqrt{5}}{2}",
    "x^2-5x+6",
    "(x-2)(x+3)",
    "y=2x+3",
    "(1,2)",
    "\\{1,2,3\\}",
    "[0,\\infty)",
    "(-\\infty,-3]\\cup[2,\\infty)",
    "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}",
    "\\sum_{k=0}^{n}x^k",
    "\\log_2 8",
    "10^{\\frac{\\sqrt{13}-5}{6}}",
    "e^{2\\pi i}",
    "\\sin^2(x)+\\cos^2(x)",
    "x\\le 3",
    "45^\\circ",
    "\\frac{1}{",  # a syntax error
]


def test_the_shipped_dfa_is_for_the_installed_antlr_latex2sympy_and_grammar(tmp_path: Path) -> None:
    assert BUNDLED.is_file(), f"{BUNDLED} is missing; {REBUILD}"
    assert BUNDLED.stat().st_size < 1_000_000, f"{BUNDLED} has grown past 1 MB; {REBUILD} with a higher --least"
    shipped = json.loads(gzip.decompress(BUNDLED.read_bytes()))
    assert shipped["key"] == installed_cache(tmp_path).key, (
        "the parser's prediction cache shipped with evalsi was built for another version of ANTLR, latex2sympy "
        f"or its grammar, so it is ignored; {REBUILD}"
    )


def test_with_no_cache_on_disk_the_shipped_dfa_is_loaded_and_parses_the_same(parser: Any, tmp_path: Path) -> None:
    expected = trees(parser, SAMPLE)  # learnt from empty DFAs
    fresh_dfas(parser)
    cache = installed_cache(tmp_path)
    loaded = cache.load()
    assert loaded > 100
    assert cache.source == "bundled"
    assert trees(parser, SAMPLE) == expected
    assert not cache.path.exists()  # loading writes nothing


def test_the_users_cache_comes_before_the_shipped_one(parser: Any, tmp_path: Path) -> None:
    cache = installed_cache(tmp_path)
    trees(parser, SAMPLE[:3])
    assert cache.save()
    saved = cache.states()
    fresh_dfas(parser)
    again = installed_cache(tmp_path)
    assert again.load() == saved
    assert again.source == "disk"


@pytest.mark.parametrize(
    "damage",
    [b"", b"not gzip", gzip.compress(b"{}", mtime=0), gzip.compress(b'{"key": "0"}', mtime=0)],
    ids=["empty", "not-gzip", "no-key", "other-key"],
)
def test_a_damaged_shipped_file_is_ignored(parser: Any, tmp_path: Path, damage: bytes) -> None:
    bundled = tmp_path / "antlr-dfa.json.gz"
    bundled.write_bytes(damage)
    cache = PredictionCache(parser, ["antlr", "latex2sympy", [1]], tmp_path, bundled)
    assert cache.load() == 0
    assert cache.source == ""
    assert trees(parser, SAMPLE[:2])


def test_an_exported_dfa_loads_back_whole_or_pruned_and_parses_the_same(parser: Any, tmp_path: Path) -> None:
    expected = trees(parser, SAMPLE)
    cache = PredictionCache(parser, ["antlr", "latex2sympy", [1]], tmp_path / "none", tmp_path / "all.json.gz")
    everything = cache.states()
    assert cache.export(tmp_path / "all.json.gz") == everything
    assert cache.export(tmp_path / "all.json.gz") == everything  # byte-for-byte the same each time
    whole = (tmp_path / "all.json.gz").read_bytes()
    cache.export(tmp_path / "all.json.gz")
    assert (tmp_path / "all.json.gz").read_bytes() == whole
    starts = cache.export(tmp_path / "starts.json.gz", keep=lambda state: False)
    assert 0 < starts < everything

    for name, states in (("all.json.gz", everything), ("starts.json.gz", starts)):
        fresh_dfas(parser)
        again = PredictionCache(parser, ["antlr", "latex2sympy", [1]], tmp_path / "none", tmp_path / name)
        assert again.load() == states
        assert trees(parser, SAMPLE) == expected
        assert again.states() >= states


def test_the_process_wide_cache_loads_the_shipped_dfa_into_an_empty_directory(
    parser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALSI_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_prediction_cache, "_cache", None)
    assert _prediction_cache.load() > 100
    assert _prediction_cache.load() == 0  # once per process

r"""Build ``corpus.jsonl``, the labelled regression corpus of math-equiv, from two sources.

    python testdata/math_equiv/build_corpus.py MATH_VERIFY_SDIST_TESTS_DIR

1. The grader test suite shipped in the math-verify 0.9.0 source distribution on PyPI (``pip download
   math-verify==0.9.0 --no-binary :all: --no-deps``; its ``tests/`` folder): every ``(gold, pred, expected)`` of
   its parametrised tests. The pairs are carried over with their label, except where a careful human grader
   differs from the label (the test records a parser limitation or a non-default setting): those are relabelled
   or marked ambiguous below, each with the reason (``RELABEL``, ``AMBIGUOUS``, ``DROP``).
2. Pairs written for this corpus (``source: constructed``): positives and hard negatives of every failure class,
   from ``constructed.py`` beside this file, labelled by hand (values of huge numbers computed exactly).

Each line: id, class, gold, completion, label, ambiguous, note, source.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from constructed import constructed  # noqa: E402

MV = "math-verify 0.9.0 sdist tests/{file}::{test}"

# Index (in file order of extraction) -> (label, note): the source's expected value reflects a parser limitation
# or a non-default setting; a careful grader reads the pair differently.
RELABEL: dict[tuple[str, int], tuple[bool, str]] = {
    ("test_latex_notation", 5): (True, "source expects 0 (inline math over a line break is not parsed); the answer is 9"),
    ("test_latex_notation", 6): (True, "source expects 0 (inline math over a line break is not parsed); the answer is 9"),
    ("test_set_rel_assymetry", 3): (True, "source expects 0 only with allow_set_relation_comp=False; same set"),
    ("test_string_extraction", 9): (False, "1 - 1/e and 1 + 1/e differ; the source records a known miss"),
}
AMBIGUOUS: dict[tuple[str, int], str] = {
    ("test_number_extraction", 5): "decimal comma (1000,99) vs thousands separator",
    ("test_number_extraction", 6): "decimal comma (1,22) vs thousands separator",
    ("test_number_extraction", 7): "decimal comma in prose",
    ("test_number_extraction", 17): "0,111: decimal comma or 111 thousandths",
    ("test_latex_notation_math", 2): "the gold is a whole model output, not a reference",
    ("test_latex_notation_math", 3): "answer stated, then a repetition loop cut off mid-sentence",
    ("test_latex_notation_math", 4): "malformed box split over two math spans",
    ("test_relations_math", 10): "chain 5+5+1 = 7 = 11 is false arithmetic; only the last value matches",
    ("test_relations_math", 12): "chain 5+5+1 = 7 = 11 is false arithmetic; only the last value matches",
    ("test_relations_math", 13): "chain with an approximation; which value is the answer differs by grader",
    ("test_relations_math", 15): "x \\approx 11 vs 11: approximation accepted by some graders",
    ("test_relations_math", 16): "1/3 \\approx 1.3: which side of the approximation is the answer",
    ("test_relations_math", 21): "gold chain 1 = \\zzz = x = 0 is not an answer",
    ("test_relations_math", 26): "chain z = 3+3 = 2 is false arithmetic; only the last value matches",
    ("test_relations_math", 27): "chain z = 3+3 = 2 is false arithmetic; only the last value matches",
    ("test_complex_math_expressions", 7): "0.33 for 1/3 at 2 decimals (the source sets precision 2)",
    ("test_complex_math_expressions", 13): "2.6667 for 8/3 at 2 decimals (the source sets precision 2)",
    ("test_math_extraction_edge_cases", 5): "answer stated, then a repetition loop cut off mid-sentence",
    ("test_math_extraction_edge_cases", 9): "gold written with doubled backslashes",
    ("test_math_extraction_edge_cases", 10): "gold written with doubled backslashes",
    ("test_math_extraction_edge_cases", 13): "answer stated, then a repetition loop cut off mid-sentence",
    ("test_math_extraction_additional_cases", 7): "ordered pair (1,3) vs the set {1,3}",
    ("test_math_extraction_additional_cases", 24): "32, 349 with a space: thousands separator or two numbers",
    ("test_boxed", 0): "gold written with doubled backslashes and a unit",
    ("test_open_thoughts", 28): "gold of two boxes with prose between: a list or not",
}
DROP = {
    ("test_complex_math_expressions", 4): "the test's string holds a form feed where \\f was meant",
    ("test_symbols", 0): "the test's string holds a tab where \\t was meant",
    ("test_strict_variable_comparison", 1): "the same pair with strict=False; kept once, strict",
    ("test_set_rel_assymetry", 1): "the same pair as index 0 with another flag; kept once",
    ("test_set_rel_assymetry", 2): "the same pair as index 3 with another flag; kept once",
}
TEST_CLASS = {
    "test_number_extraction": "thousands-vs-tuple",
    "test_simple_fraction_notation": "fraction",
    "test_sets_handling": "intervals",
    "test_latex_notation": "spellings",
    "test_percent_notation": "units",
    "test_latex_notation_math": "answer-sentence",
    "test_relations_math": "equations",
    "test_matrix_extraction": "expressions",
    "test_complex_math_expressions": "symbolic-slow",
    "test_math_extraction_edge_cases": "answer-sentence",
    "test_math_extraction_additional_cases": "answer-sentence",
    "test_set_rel_assymetry": "intervals",
    "test_sqrt_precision": "free-symbols",
    "test_symbols": "spellings",
    "test_boxed": "multi-box",
    "test_numina_cases": "equations",
    "test_open_thoughts": "multi-box",
    "test_strict_variable_comparison": "free-symbols",
    "test_string_extraction": "equations",
}


def math_verify_pairs(tests: Path) -> list[dict[str, object]]:
    """Every parametrised (gold, pred, expected) of the math-verify test files, with the overrides applied."""
    rows: list[dict[str, object]] = []
    for path in sorted(tests.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if not (isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", "") == "parametrize"):
                    continue
                try:
                    names = [n.strip() for n in ast.literal_eval(decorator.args[0]).split(",")]
                    values = ast.literal_eval(decorator.args[1])
                except ValueError:
                    continue  # a parametrisation built by code, not literal pairs
                for index, value in enumerate(values):
                    key = (node.name, index)
                    if key in DROP:
                        continue
                    item = dict(zip(names, value, strict=True))
                    expected = item.get("expected", item.get("result"))
                    label, note = bool(expected), ""
                    if key in RELABEL:
                        label, note = RELABEL[key]
                    ambiguous = key in AMBIGUOUS
                    if ambiguous:
                        note = AMBIGUOUS[key]
                    rows.append({
                        "id": f"mv-{node.name[5:]}-{index}",
                        "class": TEST_CLASS[node.name],
                        "gold": item["gold"],
                        "completion": item["pred"],
                        "label": label,
                        "ambiguous": ambiguous,
                        "note": note,
                        "source": MV.format(file=path.name, test=node.name),
                    })
    return rows


def main() -> None:
    """Write the corpus and print its size per class and source."""
    rows = math_verify_pairs(Path(sys.argv[1])) + constructed()
    seen: set[str] = set()
    for row in rows:
        assert row["id"] not in seen, row["id"]
        seen.add(str(row["id"]))
    with (HERE / "corpus.jsonl").open("w") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    counts: dict[str, list[int]] = {}
    for row in rows:
        c = counts.setdefault(str(row["class"]), [0, 0, 0])
        c[0 if row["label"] else 1] += 1
        c[2] += bool(row["ambiguous"])
    for name, (pos, neg, amb) in sorted(counts.items()):
        print(f"{name:20} +{pos:4} -{neg:4} ambiguous {amb}")
    print("total", len(rows))


if __name__ == "__main__":
    main()

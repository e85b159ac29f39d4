"""code-exec-tests: the program is cut out of a completion however a model writes its code.

Each completion below is written the way chat models answer coding tasks (prose, sample input and output,
usage examples, truncation, Windows line ends); a correct program must earn full credit in all of them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evalsi.evaluators import close_all, get_evaluator
from evalsi.evaluators.rl._code_extract import called_names, extract_program, fenced_blocks
from evalsi.sandbox import close_shared_pools
from tests.sandbox._helpers import score

SUM = "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"
STDIO = [{"input": "1 2\n", "output": "3\n"}, {"input": "4 5 6\n", "output": "15\n"}]
F = "def add(a, b):\n    return a + b\n"
MBPP = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]
TICKS = "```"


@pytest.fixture(autouse=True, scope="module")
def _pools() -> Iterator[None]:
    yield
    close_shared_pools()
    close_all()


STDIO_COMPLETIONS = {
    "bare fence": f"Read the numbers and sum them.\n\n{TICKS}\n{SUM}{TICKS}\n\nThis runs in O(n).",
    "tilde fence": f"Solution:\n~~~\n{SUM}~~~\n",
    "tilde fence tagged": f"Solution:\n~~~python\n{SUM}~~~\n",
    "upper case tag": f"{TICKS}Python\n{SUM}{TICKS}",
    "python3 tag": f"{TICKS}python3\n{SUM}{TICKS}",
    "PY tag with spaces": f"{TICKS} PY \n{SUM}{TICKS}",
    "attributes": f'Save this as solve.py:\n{TICKS}python title="solve.py" linenums="1"\n{SUM}{TICKS}\n',
    "pandoc attributes": f"{TICKS}{{.python .numberLines}}\n{SUM}{TICKS}",
    "four backticks": f"````python\n{SUM}````",
    "indented in a list": "1. Read the input.\n2. Print the sum:\n\n   ```python\n"
    + "".join("   " + line + "\n" for line in SUM.splitlines())
    + "   ```\n",
    "truncated": f"Here is my solution:\n{TICKS}python\n{SUM}",
    "truncated mid-line without newline": f"Here:\n{TICKS}python\n{SUM.rstrip()}",
    "examples then solution": (
        f"Example input:\n{TICKS}\n1 2\n{TICKS}\nExample output:\n{TICKS}\n3\n{TICKS}\n"
        f"The program:\n{TICKS}python\n{SUM}{TICKS}\n"
    ),
    "solution then sample run": (
        f"{TICKS}python\n{SUM}{TICKS}\nRunning it on the sample:\n{TICKS}\n$ echo 1 2 | python a.py\n3\n{TICKS}\n"
    ),
    "text and bash blocks around a bare one": (
        f"Input format:\n{TICKS}text\nN numbers\n{TICKS}\nCode:\n{TICKS}\n{SUM}{TICKS}\n"
        f"Run:\n{TICKS}bash\npython3 main.py < in.txt\n{TICKS}\n"
    ),
    "json block after the code": f"{TICKS}py\n{SUM}{TICKS}\nTests:\n{TICKS}json\n[1, 2]\n{TICKS}\n",
    "draft then final": f"First try:\n{TICKS}python\nprint(input())\n{TICKS}\nFixed:\n{TICKS}python\n{SUM}{TICKS}\n",
    "crlf": f"Answer:\r\n{TICKS}python\r\n{SUM.replace(chr(10), chr(13) + chr(10))}{TICKS}\r\nDone.\r\n",
    "crlf bare": f"Answer:\r\n{TICKS}\r\n{SUM.replace(chr(10), chr(13) + chr(10))}{TICKS}\r\n",
    "mislabelled only block": f"{TICKS}text\n{SUM}{TICKS}",
    "no fence at all": SUM,
    "no fence, prose around": f"Here is my solution:\n\n{SUM}\nIt reads every number and prints the sum.",
    "no fence, reasoning first": "We need the sum. So the answer is easy.\n" * 50 + SUM + "Done.",
}


@pytest.mark.parametrize("completion", STDIO_COMPLETIONS.values(), ids=STDIO_COMPLETIONS.keys())
def test_the_program_is_found(completion: str) -> None:
    assert extract_program(completion).strip() == SUM.strip()


@pytest.mark.sandbox
@pytest.mark.timeout(120)
@pytest.mark.parametrize("completion", STDIO_COMPLETIONS.values(), ids=STDIO_COMPLETIONS.keys())
def test_a_correct_program_earns_full_credit(completion: str) -> None:
    result = score(completion, tests=STDIO)
    assert result.status == "ok" and result.value == 1.0, result.reason


FUNCTION_COMPLETIONS = {
    "solution then usage example": (
        f"{TICKS}python\n{F}{TICKS}\nExample usage:\n{TICKS}python\nprint(add(1, 2))  # 3\n{TICKS}\n"
    ),
    "bare solution then tagged usage": f"{TICKS}\n{F}{TICKS}\nUsage:\n{TICKS}python\nadd(2, 2)\n{TICKS}\n",
    "helper block then solution": (
        f"A helper:\n{TICKS}python\ndef twice(x):\n    return 2 * x\n{TICKS}\nThe function:\n{TICKS}python\n{F}{TICKS}"
    ),
    "async-free class with the function": f"{TICKS}python\nclass Calc:\n    pass\n\n{F}{TICKS}\n",
}


@pytest.mark.parametrize("completion", FUNCTION_COMPLETIONS.values(), ids=FUNCTION_COMPLETIONS.keys())
def test_the_block_defining_the_tested_function_wins(completion: str) -> None:
    assert "def add(" in extract_program(completion, ["add"])


@pytest.mark.sandbox
@pytest.mark.timeout(120)
@pytest.mark.parametrize("completion", FUNCTION_COMPLETIONS.values(), ids=FUNCTION_COMPLETIONS.keys())
def test_function_tasks_earn_full_credit(completion: str) -> None:
    assert score(completion, test_list=MBPP).value == 1.0
    humaneval = "def check(candidate):\n    assert candidate(2, 3) == 5\n"
    assert score(completion, test=humaneval, entry_point="add").value == 1.0
    assert score(completion, inputs=[[1, 2], [0, 0]], outputs=[3, 0], fn_name="add").value == 1.0


def test_a_wrong_program_still_fails_however_it_is_fenced() -> None:
    """The rule must not pick a block by whether it passes: the solution's text decides, not its verdict."""
    wrong = f"{TICKS}\nprint(0)\n{TICKS}\nOutput:\n{TICKS}text\n3\n{TICKS}"
    assert extract_program(wrong) == "print(0)\n"


@pytest.mark.sandbox
@pytest.mark.timeout(120)
def test_a_wrong_program_scores_zero() -> None:
    wrong = f"{TICKS}\nprint(0)\n{TICKS}\nOutput:\n{TICKS}text\n3\n{TICKS}"
    assert score(wrong, tests=STDIO).value == 0.0


def test_blocks_know_their_kind() -> None:
    text = f"{TICKS}text\na\n{TICKS}\n{TICKS}\nb\n{TICKS}\n~~~PYTHON3\nc\n~~~\n{TICKS}cpp\nint x;\n{TICKS}"
    assert [(b.kind, b.text) for b in fenced_blocks(text)] == [
        ("other", "a\n"), ("bare", "b\n"), ("python", "c\n"), ("other", "int x;\n"),
    ]  # fmt: skip


def test_a_fence_closes_only_with_its_own_character_and_length() -> None:
    text = f"````python\nprint('{TICKS}')\n{TICKS}\nx = 1\n````\nafter"
    assert extract_program(text) == f"print('{TICKS}')\n{TICKS}\nx = 1\n"
    assert extract_program(f"~~~\na = 1\n{TICKS}\nb = 2\n~~~") == f"a = 1\n{TICKS}\nb = 2\n"


def test_inline_triple_backticks_are_not_fences() -> None:
    text = f"Wrap code in {TICKS}python fences like {TICKS}this{TICKS}.\n{TICKS}python\nprint(1)\n{TICKS}"
    assert extract_program(text) == "print(1)\n"


def test_only_other_languages_that_are_not_python_fall_back_to_the_whole_completion() -> None:
    text = f"Compile with:\n{TICKS}bash\ng++ -O2 main.cpp && ./a.out\n{TICKS}\n"
    assert extract_program(text) == text


def test_unfenced_code_between_prose() -> None:
    script = "a, b = map(int, input().split())\nfor _ in range(2):\n    print(a + b)\n"
    assert extract_program(f"Sure! Here you go.\n{script}\nExplanation: it adds them twice.") == script
    function = "def f(x):\n    if x:\n        return 1\n    return 2\n"
    assert extract_program(f"Code:\n{function}That is it: f(3) returns 1.") == function
    continuation = "    return sorted(x)\n\ndef helper(y):\n    return y\n"
    assert extract_program(continuation) == continuation  # continues a prompt's function: kept whole
    prose = "The answer is 42, since n = 6 and 6 * 7 = 42.\nNo code here."
    assert extract_program(prose) == prose


def test_called_names_come_from_entry_point_fn_name_and_asserts() -> None:
    meta = {
        "entry_point": "f",
        "fn_name": "g",
        "test_list": ["assert h(1) == len([1])", "assert math.isclose(h(2), 1)"],
    }
    assert called_names(meta) == ["f", "g", "h"]
    assert called_names({"entry_point": 3, "test_list": "not a list"}) == []


def test_called_names_are_listed_once_and_skip_what_the_caller_ignores() -> None:
    meta = {"entry_point": "f", "fn_name": "f", "test_list": ["assert f(1) == g(2) + g(3)", "assert isclose(g(4), 1)"]}
    assert called_names(meta) == ["f", "g", "isclose"]
    assert called_names(meta, ignore={"isclose", "g"}) == ["f"]
    assert called_names({"entry_point": "len", "test_list": ["assert len(len([1])) == 1"]}) == ["len"]


def test_the_rule_is_in_the_evaluator_description() -> None:
    from typer.testing import CliRunner

    from evalsi.cli.main import app

    doc = get_evaluator("code-exec-tests").__doc__ or ""
    for word in ("~~~", "untagged", "python3", "truncated", "entry_point", "another language", "whole completion"):
        assert word in doc
    shown = CliRunner().invoke(app, ["evaluators", "describe", "code-exec-tests"], terminal_width=200).stdout
    assert "\n1. a block tagged python" in shown and "\n    1." not in shown  # dedented, as written

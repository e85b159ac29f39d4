r"""Final-answer extraction, in the seed's order.

1. the last ``\boxed{…}`` (or ``\fbox{…}``), braces matched, so ``\boxed{\frac{1}{2}}`` is whole;
2. the last ``<answer>…</answer>``;
3. the last ``#### x`` (GSM8K);
4. the last "the answer is x" / "final answer is x" / "final answer: x" (case-insensitive);
5. else the last number (``1,234``, ``-3.5``, ``2/3``, ``\frac{1}{2}``, ``50%``, ``1.5e3``).

Every step is a linear scan (``rfind`` and regexes without nested quantifiers), so a megabyte completion costs
milliseconds, never a hang.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Source = Literal["boxed", "answer-tag", "####", "answer-is", "last-number", "reference"]

_BOXED_TRIES = 4
_BRACE = re.compile(r"(?<!\\)[{}]")
_ANSWER_TRIES = 16
_ANSWER_IS_PREFIX = re.compile(r"(?:final|the)\s+$")
_ANSWER_IS_SUFFIX = re.compile(r"\s*(?:is\s*:?|:)\s*")
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$((?:\\.|[^$\\])+)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_SENTENCE_END = re.compile(r"\.(?:\s|$)|\n|;\s|,\s(?=[A-Za-z])")
_LAST_NUMBER = re.compile(
    r"-?\\[dt]?frac\{\s*-?\d+(?:\.\d+)?\s*\}\{\s*-?\d+(?:\.\d+)?\s*\}"  # \frac{1}{2}
    r"|-?\\[dt]?frac\d\d"  # \frac12
    r"|-?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?:\s*/\s*\d+(?![\d.]))?(?:\s*\\?%)?"
    r"|-?\.\d+(?:\s*\\?%)?"
)


@dataclass(frozen=True, slots=True)
class Extracted:
    """An answer found in a text, and which rule found it."""

    text: str
    source: Source


def extract_answer(text: str, *, last_number: bool = True) -> Extracted | None:
    """The final answer of a completion, by the seed's rules in order; None when nothing is extractable."""
    boxed = last_boxed(text)
    if boxed is not None:
        return Extracted(boxed, "boxed")
    tag = _last_answer_tag(text)
    if tag is not None:
        return Extracted(tag, "answer-tag")
    marker = text.rfind("####")
    if marker >= 0:
        line = _trim(text[marker + 4 :].lstrip(" \t"))
        if line:
            return Extracted(line, "####")
    said = _answer_is(text)
    if said is not None:
        return Extracted(said, "answer-is")
    if last_number:
        number = _last_number(text)
        if number is not None:
            return Extracted(number, "last-number")
    return None


def extract_reference(reference: str) -> Extracted:
    r"""The gold answer: the last ``\boxed{}`` or ``#### x`` of a worked solution, else the reference as given."""
    found = (
        extract_answer(reference, last_number=False)
        if ("\\boxed" in reference or "####" in reference or "\\fbox" in reference)
        else None
    )
    return found if found is not None else Extracted(reference.strip(), "reference")


def last_boxed(text: str) -> str | None:
    r"""Contents of the last ``\boxed{…}``/``\fbox{…}`` (or ``\boxed x``) with balanced braces, else None.

    An unbalanced last box (the model ran out of tokens) falls back to the one before, at most
    ``_BOXED_TRIES`` times, so a text of a million ``\boxed{`` stays linear.
    """
    start, after = _last_box(text, len(text))
    for _ in range(_BOXED_TRIES):
        if start < 0:
            break
        body = _braced_after(text, after)
        if body is not None and body.strip():
            return body.strip()
        start, after = _last_box(text, start)
    return None


def _last_box(text: str, end: int) -> tuple[int, int]:
    r"""Start of the last ``\boxed``/``\fbox`` before ``end``, and where its argument starts; (-1, -1) if none.

    One ``rfind`` of their common part ("box") instead of one per spelling.
    """
    position = text.rfind("box", 0, end)
    while position >= 0:
        if text.startswith("\\boxed", position - 1):
            return position - 1, position + 5
        if text.startswith("\\fbox", position - 2):
            return position - 2, position + 3
        position = text.rfind("box", 0, position)
    return -1, -1


def _braced_after(text: str, position: int) -> str | None:
    r"""The balanced ``{…}`` group starting at ``position`` (after spaces), or ``\boxed 5``'s bare token."""
    n = len(text)
    while position < n and text[position] == " ":
        position += 1
    if position >= n:
        return None
    if text[position] != "{":
        # `\boxed 5`: a bare token up to the next space or dollar sign.
        end = position
        while end < n and text[end] not in " $\n":
            end += 1
        return text[position:end] if end > position and text[position - 1] == " " else None
    depth = 0
    for brace in _BRACE.finditer(text, position):
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return text[position + 1 : brace.start()]
    return None  # unbalanced: the model stopped mid-answer


def _last_answer_tag(text: str) -> str | None:
    """The last non-empty ``<answer>…</answer>``, found with ``rfind`` (a regex rescans on unclosed tags)."""
    lowered = text.lower() if "<ANSWER>" in text.upper() else text
    end = lowered.rfind("</answer>")
    for _ in range(_BOXED_TRIES):
        if end < 0:
            return None
        start = lowered.rfind("<answer>", 0, end)
        if start < 0:
            return None
        body = text[start + len("<answer>") : end].strip()
        if body:
            return body
        end = lowered.rfind("</answer>", 0, start)
    return None


def _answer_is(text: str) -> str | None:
    """What follows the last "the answer is" / "final answer:" on its line, trimmed to the answer itself.

    The word "answer" is found with ``rfind`` and only its surroundings are matched, so a long completion is
    not scanned by a case-insensitive regex at every position.
    """
    lowered = text.lower()
    end = len(lowered)
    for _ in range(_ANSWER_TRIES):
        position = lowered.rfind("answer", 0, end)
        if position < 0:
            return None
        after = _ANSWER_IS_SUFFIX.match(lowered, position + 6)
        if after is not None and _ANSWER_IS_PREFIX.search(lowered, max(0, position - 16), position):
            return _trim(text[after.end() :].lstrip())
        end = position
    return None


def _trim(rest: str) -> str | None:
    """The answer at the start of ``rest``: a leading math span, else the text up to the end of the sentence."""
    if not rest:
        return None
    span = _MATH_SPAN.match(rest)
    if span is not None:
        return next(g for g in span.groups() if g is not None).strip() or None
    end = _SENTENCE_END.search(rest)
    answer = (rest[: end.start()] if end is not None else rest).strip().rstrip(".").strip()
    return answer or None


def _last_number(text: str) -> str | None:
    match = None
    for match in _LAST_NUMBER.finditer(text):  # noqa: B007 - we want the last match
        pass
    return match.group(0).strip() if match is not None else None

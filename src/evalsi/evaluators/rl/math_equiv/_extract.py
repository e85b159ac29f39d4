r"""Final-answer extraction, in the documented order.

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

Source = Literal["boxed", "answer-tag", "####", "answer-is", "last-number", "reference", "cut-off", "loop"]

_BOXED_TRIES = 4
_BRACE = re.compile(r"(?<!\\)[{}]")
_ANSWER_TRIES = 16
_ANSWER_IS_PREFIX = re.compile(r"(?:final|the)\s+$")
_ANSWER_IS_SUFFIX = re.compile(r"\s*(?:is\s*:?|:)\s*")
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$((?:\\.|[^$\\])+)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_SENTENCE_END = re.compile(r"\.(?:\s|$)|\n|,\s(?=[A-Za-z])")
_LAST_NUMBER = re.compile(
    r"-?\\[dt]?frac\{\s*-?\d+(?:\.\d+)?\s*\}\{\s*-?\d+(?:\.\d+)?\s*\}"  # \frac{1}{2}
    r"|-?\\[dt]?frac\d\d"  # \frac12
    r"|(?<![A-Za-z_])-?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d{1,3}(?: \d{3})+(?![\d.,])|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?"
    r"(?:\s*/\s*\d+(?!\d|\.\d))?(?:\s*\\?%)?"
    r"|-?\.\d+(?:\s*\\?%)?"
)


@dataclass(frozen=True, slots=True)
class Extracted:
    r"""An answer found in a text, and which rule found it.

    ``items`` holds the answers of a group of adjacent boxes (``\boxed{4}, \boxed{-5}``), else just ``text``.
    An empty ``text`` with source ``cut-off`` or ``loop`` is a refusal: the final answer was cut off, or the
    completion ends in a degenerate repetition loop.
    """

    text: str
    source: Source
    items: tuple[str, ...] = ()


def extract_answer(text: str, *, last_number: bool = True) -> Extracted | None:
    """The final answer of a completion, by the documented rules in order; None when nothing is extractable."""
    boxes = boxed_group(text)
    if boxes == CUT_OFF:
        return Extracted("", "cut-off")
    if boxes:
        position = text.rfind("box")
        if _looping(text) and position < len(text) - _LOOP_TAIL:
            return Extracted("", "loop")
        phrase = text.lower().rfind("final answer")
        if phrase > position:  # a "Final Answer: …" line after the last box states the answer
            said = _answer_is(text[phrase:])
            if said is not None and said != CUT_OFF:
                return Extracted(said, "answer-is")
        return Extracted("; ".join(boxes) if len(boxes) > 1 else boxes[0], "boxed", tuple(boxes))
    tag = _last_answer_tag(text)
    if tag is not None:
        return Extracted(tag, "answer-tag")
    marker = text.rfind("####")
    if marker >= 0:
        line = _trim(text[marker + 4 :].lstrip(" \t"))
        if line:
            return Extracted(line, "####")
    said = _answer_is(text)
    if said == CUT_OFF:
        return Extracted("", "cut-off")
    if said is not None:
        return Extracted(said, "answer-is")
    if last_number:
        if _looping(text):
            return Extracted("", "loop")
        number = _last_math_or_number(text)
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
    if found is not None and found.text:
        return found
    return Extracted(reference.strip(), "reference")


CUT_OFF = "\x00cut-off"
"""Marker: the last box or answer phrase is unfinished (the completion stopped mid-answer)."""

_LOOP_PROBE = 48
_LOOP_TAIL = 240
_LOOP_REPEATS = 8
_LOOP_WINDOW = 12_000
_LOOP_VARIETY = 12


def _looping(text: str) -> bool:
    """Whether the completion ends in a repetition loop: a piece of its tail recurs many times just before it."""
    if len(text) < _LOOP_TAIL + _LOOP_PROBE * _LOOP_REPEATS:
        return False
    probe = text[-_LOOP_TAIL : -_LOOP_TAIL + _LOOP_PROBE]
    if len(set(probe)) < _LOOP_VARIETY:
        return False  # `((((…` or `\\frac{1}{\\frac{1}{…`: deep nesting, refused later, not prose in a loop
    return text.count(probe, max(0, len(text) - _LOOP_WINDOW)) >= _LOOP_REPEATS


_BOX_GAP = re.compile(
    r"(?:\s|\$|\\[()\[\]]|\\quad|\\qquad|\\[,;: ]|[,;.&]|\\\\|\band\b|\bor\b|"
    r"\\text\{[^{}]{0,40}\}|\\(?:text|mathrm)\s*\{\s*(?:and|or)\s*\}|\band\b|\bor\b|"
    r"[A-Za-z](?:_\{?\w+\}?)?\s*=|\([A-Za-z](?:,[A-Za-z])*\)\s*=)*+"
)
_MAX_BOX_GAP = 48


def boxed_group(text: str) -> list[str] | str:
    r"""The contents of the last group of adjacent boxes (``\boxed{1}, \boxed{2}``), else ``[]``.

    Boxes are adjacent when only spacing, punctuation, math delimiters, ``and``/``or``, a short ``\\text{}``
    phrase, or a name and ``=`` separate them (at most ``_MAX_BOX_GAP`` characters); an earlier box further back, or
    one separated by other words, is an intermediate result, not part of the answer.
    Returns ``CUT_OFF`` when the last box is unbalanced: the completion stopped inside its final answer, and an
    earlier box is not that answer.
    """
    start, after = _last_box(text, len(text))
    if start < 0:
        return []
    body = _braced_after(text, after)
    if body is None:
        return CUT_OFF
    if not body.strip():
        return []
    found = [body.strip()]
    for _ in range(_BOXED_TRIES * 4):
        previous, previous_after = _last_box(text, start)
        if previous < 0:
            break
        inner = _braced_after(text, previous_after)
        if inner is None or not inner.strip():
            break
        end = _group_end(text, previous_after)
        if end > start:
            break  # the earlier box encloses this one
        gap = text[end:start]
        if len(gap) > _MAX_BOX_GAP or not _BOX_GAP.fullmatch(gap) or "\n\n" in gap:
            break
        found.append(inner.strip())
        start = previous
    return found[::-1]


def _group_end(text: str, position: int) -> int:
    """Index just past the braced group (or bare token) that starts at ``position``."""
    n = len(text)
    while position < n and text[position] == " ":
        position += 1
    if position < n and text[position] == "{":
        depth = 0
        for brace in _BRACE.finditer(text, position):
            depth += 1 if brace.group() == "{" else -1
            if depth == 0:
                return brace.end()
    while position < n and text[position] not in " $\n":
        position += 1
    return position


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
    not scanned by a case-insensitive regex at every position. ``CUT_OFF`` when the phrase ends the completion.
    """
    lowered = text.lower()
    end = len(lowered)
    for _ in range(_ANSWER_TRIES):
        position = lowered.rfind("answer", 0, end)
        if position < 0:
            return None
        after = _ANSWER_IS_SUFFIX.match(lowered, position + 6)
        if after is not None and _ANSWER_IS_PREFIX.search(lowered, max(0, position - 16), position):
            rest = _MARKDOWN.sub("", text[after.end() :]).lstrip()
            if not rest.strip(" *_`#:."):
                return CUT_OFF
            return _trim(rest)
        end = position
    return None


_MARKDOWN = re.compile(r"\*\*|__|`+|^#+\s*", re.MULTILINE)
_WORDY = re.compile(r"[A-Za-z]{2,}\s+[A-Za-z]{2,}")
_SENTENCE_NUMBER = re.compile(
    r"(?<![A-Za-z_])-?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?![\d.]))?(?:\s*\\?%)?(?:\s*[A-Za-z][A-Za-z./^\d]*)?"
)


def _trim(rest: str) -> str | None:
    """The answer at the start of ``rest``.

    A leading math span, else the last math span or number of its sentence (whichever comes later), else the
    sentence.

    ``The smallest k is 12.`` gives ``12``; ``$x = 5$, which satisfies…`` gives ``x = 5``; ``The volume of
    $ABCD$ is 120`` gives ``120``; ``Evelyn`` stays.
    """
    rest = _MARKDOWN.sub("", rest).lstrip()
    if not rest:
        return None
    span = _MATH_SPAN.match(rest)
    if span is not None:
        return next(g for g in span.groups() if g is not None).strip() or None
    end = _SENTENCE_END.search(rest)
    sentence = (rest[: end.start()] if end is not None else rest).strip()
    spans = list(_MATH_SPAN.finditer(sentence))
    last_span = spans[-1] if spans else None
    outside = _MATH_SPAN.sub(lambda m: " " * len(m.group(0)), sentence)
    numbers = list(_SENTENCE_NUMBER.finditer(outside)) if _WORDY.search(outside) else []
    last_number = numbers[-1] if numbers else None
    if last_span is not None and (last_number is None or last_span.start() > last_number.start()):
        inner = next(g for g in last_span.groups() if g is not None).strip()
        if inner:
            return inner
    if last_number is not None:
        return last_number.group(0).strip()
    return sentence.rstrip(".").strip() or None


_LAST_SPAN = re.compile(r"\$\$(.+?)\$\$|\$((?:\\.|[^$\\])+)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)


def _last_math_or_number(text: str) -> str | None:
    """Without any answer marker: the last math span of the completion's tail, or its last number if later."""
    tail = text[-4000:]
    number = None
    for number in _LAST_NUMBER.finditer(tail):  # noqa: B007 - we want the last match
        pass
    span = None
    for span in _LAST_SPAN.finditer(tail):  # noqa: B007 - we want the last match
        pass
    if span is not None and (number is None or number.start() < span.end()):
        inner = next(g for g in span.groups() if g is not None).strip()
        if inner and "\n\n" not in inner.strip():
            return inner
    return number.group(0).strip() if number is not None else None


def _last_number(text: str) -> str | None:
    match = None
    for match in _LAST_NUMBER.finditer(text):  # noqa: B007 - we want the last match
        pass
    return match.group(0).strip() if match is not None else None

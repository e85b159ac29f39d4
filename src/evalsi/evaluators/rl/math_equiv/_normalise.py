r"""LaTeX and text normalisation of an extracted answer into a canonical string.

The canonical string is what the memo is keyed on, what the numeric fast path parses, what two answers are
compared on as text, and what the symbolic backend receives. It removes what never changes the value: math
delimiters, ``\left``/``\right``, spacing commands, ``\text{}`` units, currency signs, degree signs,
``\dfrac``/``\tfrac`` (→ ``\frac``), shorthand arguments (``\frac12`` → ``\frac{1}{2}``), and whitespace.
"""

from __future__ import annotations

import re

_PLAIN = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_DELIMITERS = re.compile(r"\\\$|\$|\\\(|\\\)|\\\[|\\\]|\\displaystyle|\\textstyle|\\left\.|\\right\.|\\left|\\right")
_SPACING = re.compile(r"\\[!,;: ]|~|\\quad|\\qquad")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree|\\textdegree|\\circ")
_FRAC_NAMES = re.compile(r"\\[dt]frac")
_SHORT_FRAC = re.compile(r"\\frac\s*(\d|\{[^{}]*\})\s*(\d|\{[^{}]*\})")
_SHORT_SQRT = re.compile(r"\\sqrt\s*(\d)")
_TEXT = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname|mathit|boldsymbol)\s*\{([^{}]*)\}")
_UNIT_WORDS = re.compile(r"\s*[A-Za-z][A-Za-z .]*")
_WORDS_AFTER_NUMBER = re.compile(r"^([-+]?[\d.,/]+%?)\s+[A-Za-z][A-Za-z .]+$")
_CURRENCY = re.compile(r"^(?:[€£¥₹]|USD|US\$|Rs\.?)\s*|\s*(?:USD|dollars?|cents?)$")
_COMMAND_SPACE = re.compile(r"(\\[A-Za-z]+) (?=[A-Za-z])")
_WHITESPACE = re.compile(r"\s+")


def normalise(answer: str) -> str:
    """The canonical string of an extracted answer (see the module docstring for what is removed)."""
    text = answer.strip().replace("−", "-")  # a typeset minus sign (U+2212) is a minus
    if _PLAIN.fullmatch(text):
        return text  # the common case (GSM8K): nothing to do
    text = _DELIMITERS.sub("", text).replace("{,}", ",")
    text = _SPACING.sub(" ", text)
    text = _DEGREES.sub("", text)
    text = _FRAC_NAMES.sub(r"\\frac", text)
    text = text.replace("\\%", "%").replace("\\infty", "\\infty ").replace("infinity", "\\infty ")
    text = _strip_text_groups(text)
    text = _SHORT_FRAC.sub(lambda m: f"\\frac{_group(m.group(1))}{_group(m.group(2))}", text)
    text = _SHORT_SQRT.sub(r"\\sqrt{\1}", text)
    text = _WHITESPACE.sub(" ", text).strip()
    text = _CURRENCY.sub("", text)
    words = _WORDS_AFTER_NUMBER.match(text)
    if words is not None:
        text = words.group(1)
    text = _COMMAND_SPACE.sub("\\1\x00", text).replace(" ", "").replace("\x00", " ")
    while text.endswith((".", "\\")) and not text.endswith("\\."):
        text = text[:-1]
    return text.lstrip("+") if text.startswith("+") and len(text) > 1 else text


def _group(token: str) -> str:
    return token if token.startswith("{") else "{" + token + "}"


def _strip_text_groups(text: str) -> str:
    r"""Unwrap ``\text{…}`` groups; a group of words ending the answer after other content is a unit: dropped."""
    if "\\" not in text:
        return text
    pieces: list[str] = []
    position = 0
    for match in _TEXT.finditer(text):
        before = text[position : match.start()]
        pieces.append(before)
        content = match.group(1)
        is_unit = (
            bool(_UNIT_WORDS.fullmatch(content))
            and "".join(pieces).strip() != ""
            and not text[match.end() :].strip(" .")
        )
        pieces.append("" if is_unit else content)
        position = match.end()
    pieces.append(text[position:])
    return "".join(pieces)

r"""LaTeX and text normalisation of an extracted answer into a canonical string and a unit.

The canonical string is what the memo is keyed on, what the fast path parses, what two answers are compared on
as text, and what the symbolic backend receives. It removes what never changes the value: math delimiters,
markdown, ``\left``/``\right``, spacing commands, ``\text{}`` wrappers, currency signs, degree signs,
``\dfrac``/``\tfrac`` (→ ``\frac``), shorthand arguments (``\frac12`` → ``\frac{1}{2}``), and whitespace. It
rewrites plain-text and Unicode spellings as LaTeX (``pi/3``, ``sqrt(5)``, ``exp(2)``, ``π``, ``√2``, ``∞``,
``\varnothing``), turns conjunctions (``and``, ``or``, ``\quad``) into semicolons (which always separate
answers, where a comma may be a thousands separator), reads mixed numbers (``1 1/2``, ``2\frac{3}{4}`` with a
proper fraction) as one fraction, gives a logarithm's base its braces (``\log_2 8`` → ``\log_{2}8``), and reads
juxtaposed numbers as a product (``2^4 7^2`` → ``2^4\cdot7^2``) unless they are a space-grouped number
(``1 000``), a matrix's first entry (``\begin{pmatrix} 1``) or a logarithm's argument.

A unit or suffix word after a number is split off (``5 \text{ km}`` → ``5`` and ``km``): a unit on one side
only is ignored, two different units are a mismatch (``7 a.m.`` vs ``7 p.m.``, ``3 hours`` vs ``3 minutes``).
``a.m.``/``p.m.`` turn clock times into 24-hour times, and ``thousand``/``million``/``billion`` scale the number.
"""

from __future__ import annotations

import re

_PLAIN = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_MARKDOWN = re.compile(r"\*\*|__|`+")
_DOUBLED = re.compile(r"\\\\(?=[A-Za-z()\[\]{}])")
_UNICODE = {
    "π": "\\pi ",
    "∞": "\\infty ",
    "≤": "\\le ",
    "≥": "\\ge ",
    "≠": "\\ne ",
    "×": "\\times ",
    "·": "\\cdot ",
    "²": "^2",
    "³": "^3",
    "∅": "\\emptyset ",
    "−": "-",
    "–": "-",
    "⋅": "\\cdot ",
    "∪": "\\cup ",
    "√": "\\sqrt",
}
_DELIMITERS = re.compile(
    r"\\\$|\$|\\\(|\\\)|\\\[|\\\]|\\displaystyle|\\textstyle|\\left\.|\\right\.|\\left|\\right|\\big[lr]?|\\Big[lr]?"
)
_SPACING = re.compile(r"(?<!\\)\\[,;: !]|~|\\enspace|\\thinspace")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree|\\textdegree|\\circ")
_FRAC_NAMES = re.compile(r"\\[dtc]frac")
_SHORT_FRAC = re.compile(r"\\frac\s*(\d|\{[^{}]*\})\s*(\d|\{[^{}]*\})")
_SHORT_SQRT = re.compile(r"\\sqrt\s*(\d+|[a-z](?![a-z]))")
_TEXT = re.compile(
    r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mbox|operatorname|mathit|boldsymbol|mathsf)"
    r"\s*\{([^{}]*)\}"
)
_CONJUNCTION = re.compile(r"\s*(?:\\quad|\\qquad|\\text\{\s*(?:and|or)\s*\}|\b(?:and|or)\b)\s*", re.IGNORECASE)
_SEPARATORS = re.compile(r"[,;][\s,;]*[,;]")
_PLAIN_PI = re.compile(r"(?<![\\A-Za-z])pi(?![A-Za-z])")
_PLAIN_CALL = re.compile(r"(?<![\\A-Za-z])(sqrt|exp)\s*\(([^()]*)\)")
_PERCENT_WORD = re.compile(r"\s*(?:percent(?:age)?|pct)\s*$", re.IGNORECASE)
_CURRENCY = re.compile(r"^(?:[€£¥₹]|USD|US\$|Rs\.?)\s*|\s*(?:USD)$")
_COMMAND_SPACE = re.compile(r"(\\[A-Za-z]+) (?=[A-Za-z])")
_JUXTAPOSED = re.compile(r"(?<=[\d}])\s+(?=\d)")
_NOT_A_FACTOR = re.compile(r"(?:\\begin\{[A-Za-z*]+\}(?:\{[^{}]*\})?|\\log_\{[^{}]*\})$")
"""What a number after a space does not multiply: a matrix's first entry, a logarithm's argument."""
_LOG_BASE = re.compile(r"\\log_(\d+|[A-Za-z])\s*(?=[\d(\\{])")
_MIXED = re.compile(
    r"(?<![\w.,^_{}\\/])(-?)(\d+)(?:\s+([1-9]\d*)/(\d+)|\s*\\frac\{([1-9]\d*)\}\{(\d+)\})(?![\d./^A-Za-z(\\])"
)
_SPACE_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?: \d{3})+(?:\.\d+)?")
_WHITESPACE = re.compile(r"\s+")
_NUMERIC_HEAD = re.compile(
    r"([-+]?(?:\d+\s*)?\\frac\{\d+\}\{\d+\}"  # \frac{7}{3}, a mixed number 2\frac{1}{3}
    r"|[-+]?\d+\s\d+/\d+(?![\d./])"  # a mixed number 2 1/3
    r"|[-+]?(?:\d[\d,;]*(?:\.\d+)?|\.\d+)(?:/\d+)?%?|\d{1,2}:\d{2})\s*"
)
"""A number an answer starts with, before its unit words (``2 1/3 cups``, ``\\frac{7}{3} cups``, ``12 apples``)."""
_UNIT_WORDS = re.compile(r"[A-Za-z][A-Za-z./ ]*(?:\^\{?[23]\}?)?")
_TEXT_UNIT = re.compile(
    r"\\(?:text|textnormal|textbf|textit|mathrm|mathbf|mbox)\s*\{\s*([A-Za-z][A-Za-z. /]*)\}(\s*\^\s*\{?[23]\}?)?\s*$"
)

_ONE_LETTER_UNITS = frozenset("mgshLJNWVK")

SCALE = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
"""Words that multiply the number before them."""

_UNIT_ALIASES = {
    "a.m": "am",
    "am": "am",
    "p.m": "pm",
    "pm": "pm",
    "feet": "ft",
    "foot": "ft",
    "ft": "ft",
    "inch": "in",
    "inches": "in",
    "in": "in",
    "hour": "h",
    "hours": "h",
    "hr": "h",
    "hrs": "h",
    "h": "h",
    "minute": "min",
    "minutes": "min",
    "min": "min",
    "mins": "min",
    "second": "s",
    "seconds": "s",
    "sec": "s",
    "secs": "s",
    "s": "s",
    "meter": "m",
    "meters": "m",
    "metre": "m",
    "metres": "m",
    "m": "m",
    "kilometer": "km",
    "kilometers": "km",
    "km": "km",
    "centimeter": "cm",
    "centimeters": "cm",
    "cm": "cm",
    "gram": "g",
    "grams": "g",
    "g": "g",
    "kilogram": "kg",
    "kilograms": "kg",
    "kg": "kg",
    "dollar": "dollar",
    "dollars": "dollar",
    "cent": "cent",
    "cents": "cent",
    "day": "day",
    "days": "day",
    "week": "week",
    "weeks": "week",
    "year": "year",
    "years": "year",
    "degree": "deg",
    "degrees": "deg",
    "unit": "",
    "units": "",
    "square unit": "",
    "square units": "",
}


def normalise(answer: str) -> str:
    """The canonical string of an extracted answer (see the module docstring for what is removed)."""
    return normalise_with_unit(answer)[0]


def normalise_with_unit(answer: str) -> tuple[str, str]:
    """The canonical string of an answer and its unit (``""`` when it has none), as described above."""
    text = answer.strip()
    if _PLAIN.fullmatch(text):
        return text, ""  # the common case (GSM8K): nothing to do
    text = _MARKDOWN.sub("", text)
    if "\\\\" in text and "\\begin" not in text:
        text = _DOUBLED.sub(r"\\", text)  # `\\frac` written with doubled backslashes
    for char, latex in _UNICODE.items():
        if char in text:
            text = text.replace(char, latex)
    text = _DELIMITERS.sub("", text).replace("{,}", ",").replace("\\!", "")
    text = _SPACING.sub(" ", text)
    text = _DEGREES.sub("", text)
    text = _FRAC_NAMES.sub(r"\\frac", text)
    text = text.replace("\\%", "%").replace("\\infty", "\\infty ").replace("infinity", "\\infty ")
    text = text.replace("\\varnothing", "\\emptyset ").replace("\\{\\}", "\\emptyset ")
    text = text.replace("\\lt", "<").replace("\\gt", ">").replace("\\leqslant", "\\le").replace("\\geqslant", "\\ge")
    text = _PERCENT_WORD.sub("%", text)
    text = text.strip()
    text, unit = _split_text_unit(text)
    text = _TEXT.sub(lambda m: m.group(1), text)
    text = _CONJUNCTION.sub(";", text)
    text = _SEPARATORS.sub(lambda m: ";" if ";" in m.group() else ",", text).strip(",;")
    text = _PLAIN_PI.sub("\\\\pi ", text)
    text = _PLAIN_CALL.sub(lambda m: ("\\sqrt{" if m.group(1) == "sqrt" else "e^{") + m.group(2) + "}", text)
    if "**" in text:
        text = text.replace("**", "^")
    text = text.replace("*", "\\cdot ")
    text = _SHORT_FRAC.sub(lambda m: f"\\frac{_group(m.group(1))}{_group(m.group(2))}", text)
    text = _SHORT_SQRT.sub(r"\\sqrt{\1}", text)
    text = _WHITESPACE.sub(" ", text).strip()
    text = _CURRENCY.sub("", text).lstrip("$")
    if not unit:
        text, unit = _split_plain_unit(text)
    if _SPACE_THOUSANDS.fullmatch(text):
        text = text.replace(" ", "")
    text = _LOG_BASE.sub(lambda m: f"\\log_{{{m.group(1)}}}", text)
    text = _MIXED.sub(_mixed_number, text)
    text = _JUXTAPOSED.sub(_product, text)
    text = _COMMAND_SPACE.sub("\\1\x00", text).replace(" ", "").replace("\x00", " ")
    while text.endswith((".", "\\", ",", ";")) and not text.endswith("\\."):
        text = text[:-1]
    text = text.lstrip("+") if text.startswith("+") and len(text) > 1 else text
    return _apply_unit(text, unit)


def _product(match: re.Match[str]) -> str:
    r"""``2^4 7^2`` is a product; ``\begin{pmatrix} 1`` and ``\log_{2} 8`` are not."""
    return " " if _NOT_A_FACTOR.search(match.string, 0, match.start()) else "\\cdot "


def _mixed_number(match: re.Match[str]) -> str:
    r"""``1 1/2`` and ``2\frac{3}{4}`` are mixed numbers (3/2, 11/4) when the fraction is proper; else as written."""
    sign, whole = match.group(1), int(match.group(2))
    top, bottom = (match.group(3), match.group(4)) if match.group(3) else (match.group(5), match.group(6))
    if int(bottom) <= int(top):
        return match.group(0)
    return f"{sign}\\frac{{{whole * int(bottom) + int(top)}}}{{{bottom}}}"


def _group(token: str) -> str:
    return token if token.startswith("{") else "{" + token + "}"


def _split_text_unit(text: str) -> tuple[str, str]:
    r"""A trailing ``\text{ km}`` (with ``^2``) after other content is the unit; a whole ``\text{}`` is not."""
    if "\\" not in text:
        return text, ""
    match = _TEXT_UNIT.search(text)
    if match is None or not text[: match.start()].strip():
        return text, ""
    unit = match.group(1).strip() + (match.group(2) or "").replace(" ", "")
    return text[: match.start()].strip(), unit


def _split_plain_unit(text: str) -> tuple[str, str]:
    """``12 apples``, ``24 cm^2``, ``7 a.m.``: a number followed by words; the words are the unit."""
    head = _NUMERIC_HEAD.match(text)
    if head is None or head.end() == len(text):
        return text, ""
    unit = text[head.end() :].strip()
    if not _UNIT_WORDS.fullmatch(unit):
        return text, ""
    if len(unit.replace(".", "")) == 1 and (unit not in _ONE_LETTER_UNITS or head.group(0) == head.group(1)):
        return text, ""  # `5 x` or `2m`: a variable, not a unit
    if not _is_unit(unit):
        return text, ""  # `2xy`: a product, not a unit
    return head.group(1), unit


_VOWEL = re.compile(r"[aeiouyAEIOUY]")


def _is_unit(unit: str) -> bool:
    """A known unit (``km/h``, ``cm^2``, ``a.m.``) or a word (``apples``): three letters or more, with a vowel."""
    for part in unit.split("/"):
        word = part.split("^")[0].strip()
        key = word.lower().rstrip(".")
        if key in _UNIT_ALIASES or key.replace(".", "") in _UNIT_ALIASES or key in SCALE:
            continue
        if len(word) < 3 or not _VOWEL.search(word):
            return False
    return True


def canonical_unit(unit: str) -> str:
    """A unit spelled one way: lower case, without dots or a plural ``s``, aliases merged (``feet`` → ``ft``)."""
    key = unit.lower().replace(" ", "").rstrip(".")
    key = key.replace("^{2}", "^2").replace("^{3}", "^3")
    power = ""
    if key.endswith(("^2", "^3")):
        key, power = key[:-2], key[-2:]
    plain = key.replace(".", "")
    found = _UNIT_ALIASES.get(key, _UNIT_ALIASES.get(plain))
    if found is None and plain.endswith("s") and len(plain) > 3:
        found = _UNIT_ALIASES.get(plain[:-1], plain[:-1])
    return (found if found is not None else plain) + power


def _apply_unit(text: str, unit: str) -> tuple[str, str]:
    """Scale words multiply the number; ``a.m.``/``p.m.`` make a 24-hour time; other units are returned."""
    if not unit:
        return text, ""
    words = unit.lower().split()
    if words and words[0] in SCALE and re.fullmatch(r"-?\d+(?:\.\d+)?", text):
        from decimal import Decimal

        value = Decimal(text) * SCALE[words[0]]
        text = format(value.normalize(), "f")
        unit = " ".join(unit.split()[1:])
        if not unit:
            return text, ""
    kind = canonical_unit(unit)
    if kind in ("am", "pm"):
        clock = re.fullmatch(r"(\d{1,2})(?::(\d{2}))?", text)
        if clock is not None:
            hour, minute = int(clock.group(1)) % 12, clock.group(2) or "00"
            return f"{hour + (12 if kind == 'pm' else 0)}:{minute}", "clock"
    return text, kind

r"""Answers made of several items: splitting, naming, relations, and matching against the reference's shape.

Shared by the scoring process (with the pure-Python item comparison) and the symbolic workers (with sympy), so
both apply the same rules:

- **Shape.** The reference decides whether a comma separates answers or thousands: ``12,350`` is one number
  when the reference is one number, ``3,-4`` or ``1, 2`` are two answers. Conjunctions (``and``, ``or``),
  ``\quad`` and groups of adjacent boxes were already turned into semicolons, which always separate answers
  (``100 or 200`` is two answers, never the number 100200). Bracketed groups (tuples, intervals, sets,
  matrices) are one item each.
- **Several answers.** A list answer matches a list reference when both have the same number of items and the
  items pair off one to one (in any order; by name when every item on both sides is named, ``a=3, b=7``). A
  list answer against a single reference fails — hedging (``\boxed{4}`` or ``\boxed{-5}``) never pays — unless
  the reference is a set or tuple whose elements the list spells out.
- **Names.** ``x = 5``, ``g(t) = 4t-1``, ``(p,q) = (3,2)``, ``|AB| = 1``: the left side is a name and the value
  after the last ``=`` the answer (``k = 2 + 2 = 4`` is 4); an ``=`` inside braces or brackets
  (``\sum_{k=0}^{n}``) is not one. A bare value answers a named one (``3`` and ``x = 3`` are equal), and the
  same name compares by value. Different names are different answers when both are variables (``x = 3`` is not
  ``y = 3``); ``y``, or the function's own name, stands for a function's value (``g(t) = 4t-1``, ``y = 4t-1`` and
  ``g = 4t-1`` are equal); any other pair of left sides (``\cos(x) = a`` and ``\sin(x) = a``) is compared as
  whole equations.
- **Equations.** An equation whose left side is an expression (``2x+4y-3=0``) stays whole, and two equations
  are equal when they are the same relation in the same variables (one is a constant multiple of the other:
  ``x = 3`` and ``2x = 6``).
- **Relations.** One-variable inequalities are intervals: ``x > -1`` is ``(-1,\infty)``, ``0 < x \le 5`` is
  ``(0,5]``, ``x \in [-2,7]`` is ``[-2,7]``. ``\pm a`` is the two answers ``a`` and ``-a``.

Every verdict carries how it was decided (``Verdict``): the comparison that decided a single item (``numeric``,
``exact``, ``equal at random points``, ``math-verify``…), or the shape rule that decided without comparing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

Verdict = tuple[bool | None, str]
"""(equal, how it was decided); ``None`` when it could not be decided."""

ItemEqual = Callable[[str, str], Verdict]
"""Compares two single items: True/False, or None when it cannot decide, with how it decided."""

_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?%?")
_OPEN = "([{"
_CLOSE = ")]}"
_NAME = re.compile(r"[^=+\-^<>]{1,24}")
_RELATION = re.compile(r"<=|>=|\\leq?|\\geq?|<|>")
_VARIABLE = re.compile(r"-?[A-Za-z](?:_\{?\w+\}?)?(?:\([A-Za-z]\))?")
_PLAIN_NAME = re.compile(r"(?:[A-Za-z]|\\[A-Za-z]+)(?:_\w+)?'*")
_APPLICATION = re.compile(r"[A-Za-z](?:_\w+)?\([^()]+\)")
_IN = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\\in")
_PLUS_MINUS = re.compile(r"^(?P<head>.*?)\\pm(?P<tail>.+)$")


def split_items(text: str, *, as_list: bool) -> list[str]:
    """Top-level items: semicolons always separate, commas too unless the text is one number with thousands.

    A comma-grouped number (``12,350``) is one item when ``as_list`` is off, or when it stands alone between
    semicolons (``1,500;2,000`` is two numbers).
    """
    if ";" in text and "(" not in text:
        named_groups = [split_items(group, as_list=True) for group in text.split(";")]
        if all(len(g) > 1 and all(named(i)[0] for i in g) for g in named_groups):
            return ["(" + ",".join(named(i)[1] for i in g) + ")" for g in named_groups]
    if ";" in text:
        groups = _split(text, ";")
        if len(groups) > 1:
            return [item for group in groups for item in split_items(group, as_list=False)]
        text = text.strip(";").replace(";", ",")  # inside brackets (``(1;2)``) a semicolon is a comma
    if not as_list and _THOUSANDS.fullmatch(text):
        return [text]
    out: list[str] = []
    for item in _split(text, ","):
        out.extend(_plus_minus(item))
    return out or [text]


def _split(text: str, separator: str) -> list[str]:
    """The non-empty pieces of ``text`` between top-level ``separator`` characters (outside any bracket)."""
    items: list[str] = []
    start = 0
    for index in _top_level(text, separator, floor=None):
        items.append(text[start:index])
        start = index + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _top_level(text: str, target: str, *, floor: int | None) -> Iterator[int]:
    r"""Positions of ``target`` outside every bracket (``\{`` and ``\}`` count as brackets).

    ``floor`` is the lowest depth a stray closing bracket takes the count to (``None``: no floor, so what
    follows a stray ``)`` counts as inside a bracket).
    """
    depth = 0
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and text.startswith(("\\{", "\\}"), index):
            depth += 1 if text[index + 1] == "{" else -1
            index += 2
            continue
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth = depth - 1 if floor is None else max(floor, depth - 1)
        elif char == target and depth == 0:
            yield index
        index += 1


def is_list(text: str) -> bool:
    """Whether a reference holds several answers (by the rules above)."""
    return len(split_items(text, as_list=False)) > 1


def _plus_minus(item: str) -> list[str]:
    match = _PLUS_MINUS.match(item)
    if match is None or "=" in match.group("tail") or "(" in match.group("head"):
        return [item]
    head, tail = match.group("head"), match.group("tail")
    name = ""
    if "=" in head:
        name, _, head = head.rpartition("=")
        name += "="
    if not head:
        return [f"{name}{tail}", f"{name}-{tail}"]
    return [f"{name}{head}+{tail}", f"{name}{head}-{tail}"]


def equals_signs(item: str) -> list[int]:
    r"""Positions of the ``=`` signs outside every bracket (``\sum_{k=0}^{n}`` has none), not ``<=``/``>=``."""
    return [index for index in _top_level(item, "=", floor=0) if item[index - 1 : index] not in ("<", ">", "!")]


def named(item: str) -> tuple[str | None, str]:
    """(name, value) of an item: ``x=5`` → (``x``, ``5``); an equation or a bare value has no name."""
    if any(op in item for op in ("<=", ">=", "!=")):
        return None, item
    signs = equals_signs(item)
    if not signs:
        return None, item
    name, value = item[: signs[0]], item[signs[-1] + 1 :]
    if not value or not name or name[0].isdigit() or not _NAME.fullmatch(name) or not re.search(r"[A-Za-z]", name):
        return None, item
    return name.replace("{", "").replace("}", ""), value


def is_equation(item: str) -> bool:
    """Whether an item is an equation whose left side is not a name (``2x+4y-3=0``)."""
    return named(item)[0] is None and bool(equals_signs(item))


def as_interval(item: str) -> str | None:
    """The interval a one-variable inequality describes, or None."""
    if _IN.match(item):
        rest = item[_IN.match(item).end() :]  # type: ignore[union-attr]
        return rest or None
    ops = list(_RELATION.finditer(item))
    if not ops or len(ops) > 2:
        return None
    parts = [item[: ops[0].start()]]
    for i, op in enumerate(ops):
        parts.append(item[op.end() : ops[i + 1].start() if i + 1 < len(ops) else len(item)])
    parts = [part.strip() for part in parts]
    kinds = [_kind(op.group()) for op in ops]
    if len(ops) == 1:
        left, right = parts
        if _VARIABLE.fullmatch(left) and right:
            var, bound, kind = left, right, kinds[0]
        elif _VARIABLE.fullmatch(right) and left:
            var, bound, kind = right, left, _flip(kinds[0])
        else:
            return None
        if var.startswith("-"):
            bound, kind = _negate(bound), _flip(kind)
        if kind[0] == "<":
            return f"(-\\infty,{bound}{']' if kind.endswith('=') else ')'}"
        return f"{'[' if kind.endswith('=') else '('}{bound},\\infty)"
    low, var, high = parts
    if not _VARIABLE.fullmatch(var) or var.startswith("-") or kinds[0][0] != kinds[1][0] or not low or not high:
        return None
    if kinds[0][0] == ">":
        low, high, kinds = high, low, [_flip(kinds[1]), _flip(kinds[0])]
    return f"{'[' if kinds[0].endswith('=') else '('}{low},{high}{']' if kinds[1].endswith('=') else ')'}"


def _kind(op: str) -> str:
    return {"<": "<", ">": ">", "<=": "<=", ">=": ">=", "\\le": "<=", "\\leq": "<=", "\\ge": ">=", "\\geq": ">="}[op]


def _flip(kind: str) -> str:
    return kind.replace("<", "?").replace(">", "<").replace("?", ">")


def _negate(bound: str) -> str:
    return bound[1:] if bound.startswith("-") else "-" + bound


def prepare(item: str) -> tuple[str | None, str]:
    """An item ready to compare: relations become intervals, then the name is split off."""
    interval = (
        as_interval(item)
        if ("<" in item or ">" in item or "\\le" in item or "\\ge" in item or "\\in" in item)
        else None
    )
    if interval is not None:
        return None, interval
    return named(item)


def _elements(item: str) -> tuple[str, list[str]] | None:
    r"""A bracketed set ``\{…\}``/``{…}`` or tuple ``(…)`` and its elements; None for anything else."""
    if item.startswith("\\{") and item.endswith("\\}"):
        return "set", split_items(item[2:-2], as_list=True)
    if item.startswith("{") and item.endswith("}") and "," in item:
        return "set", split_items(item[1:-1], as_list=True)
    if item.startswith("(") and item.endswith(")") and "," in item:
        return "tuple", split_items(item[1:-1], as_list=True)
    return None


def decide(gold: str, pred: str, item_equal: ItemEqual) -> Verdict:
    """Whether ``pred`` answers ``gold`` under the rules above, and how that was decided.

    None (undecided) when ``item_equal`` could not decide an item that matters.
    """
    as_list = is_list(gold)
    golds = _unique(split_items(gold, as_list=False))
    preds = _unique(split_items(pred, as_list=as_list))
    if len(golds) == 1 and len(preds) == 1:
        return _single(golds[0], preds[0], item_equal)
    shape = "list of answers"
    if len(golds) == 1 or len(preds) == 1:
        single, many, single_is_gold = (golds[0], preds, True) if len(golds) == 1 else (preds[0], golds, False)
        group = _elements(prepare(single)[1])
        if group is None or len(group[1]) != len(many):
            return False, (
                "several answers against one reference"
                if single_is_gold
                else f"one answer against a reference of {len(many)}"
            )
        golds, preds = (group[1], many) if single_is_gold else (many, group[1])
        if group[0] == "tuple":
            return _ordered(golds, preds, item_equal, "tuple spelled as a list")
        shape = "set spelled as a list"
    if len(golds) != len(preds):
        return False, f"{len(preds)} answers against a reference of {len(golds)}"
    g_items, p_items = [prepare(g) for g in golds], [prepare(p) for p in preds]
    g_names, p_names = [n for n, _ in g_items], [n for n, _ in p_items]
    if (
        None not in g_names
        and None not in p_names
        and len(set(g_names)) == len(g_names)
        and set(g_names) == set(p_names)
    ):
        by_name = dict(zip(p_names, preds, strict=True))
        return _ordered(golds, [by_name[n] for n in g_names], item_equal, "named answers")
    return _matching(golds, preds, item_equal, shape)


def _unique(items: list[str]) -> list[str]:
    r"""Items without exact repeats: an answer given twice is given once (``\boxed{6} \boxed{6}``)."""
    return list(dict.fromkeys(items))


def _single(gold: str, pred: str, item_equal: ItemEqual) -> Verdict:
    """Two single items: by value under the naming rules above; equations as relations."""
    (g_name, g_value), (p_name, p_value) = prepare(gold), prepare(pred)
    if (is_equation(gold) and p_name is not None) or (is_equation(pred) and g_name is not None):
        return item_equal(gold, pred)
    if g_name is not None and p_name is not None and g_name != p_name:
        if _PLAIN_NAME.fullmatch(g_name) and _PLAIN_NAME.fullmatch(p_name):
            return False, f"different variables ({g_name} and {p_name})"
        if not _function_value(g_name, p_name):
            return item_equal(gold, pred)
    same, how = item_equal(g_value, p_value)
    if same is None and (g_value != gold or p_value != pred):
        return item_equal(gold, pred)
    return same, how


def _function_value(a: str, b: str) -> bool:
    """Whether one name applies a function (``g(t)``) and the other names its value: ``y``, or ``g`` itself."""
    for call, other in ((a, b), (b, a)):
        if _APPLICATION.fullmatch(call) is not None and other in ("y", call.partition("(")[0]):
            return True
    return False


def _ordered(golds: list[str], preds: list[str], item_equal: ItemEqual, shape: str) -> Verdict:
    hows: list[str] = []
    undecided = False
    for g, p in zip(golds, preds, strict=True):
        same, how = _single(g, p, item_equal)
        if same is False:
            return False, f"{shape}: {how}"
        undecided |= same is None
        hows.append(how)
    return (None, f"{shape}: undecided") if undecided else (True, _joined(shape, hows))


def _matching(golds: list[str], preds: list[str], item_equal: ItemEqual, shape: str) -> Verdict:
    """Whether the items pair off one to one (greedy; equality is transitive enough for answers)."""
    free = list(range(len(preds)))
    hows: list[str] = []
    undecided = False
    for g in golds:
        for position, index in enumerate(free):
            same, how = _single(g, preds[index], item_equal)
            if same:
                del free[position]
                hows.append(how)
                break
            undecided |= same is None
        else:
            return (None, f"{shape}: undecided") if undecided else (False, f"{shape}: none matches {g!r}")
    return True, _joined(shape, hows)


def _joined(shape: str, hows: list[str]) -> str:
    """``list of answers (numeric, exact)``: the shape, then every way its items were decided."""
    return f"{shape} ({', '.join(dict.fromkeys(hows))})"

r"""Answers made of several items: splitting, naming, relations, and matching against the reference's shape.

Shared by the scoring process (with the pure-Python item comparison) and the symbolic workers (with sympy), so
both apply the same rules:

- **Shape.** The reference decides whether a comma separates answers or thousands: ``12,350`` is one number
  when the reference is one number, ``3,-4`` or ``1, 2`` are two answers. Conjunctions, ``\quad`` and groups of
  adjacent boxes were already turned into commas. Bracketed groups (tuples, intervals, sets, matrices) are one
  item each.
- **Several answers.** A list answer matches a list reference when both have the same number of items and the
  items pair off one to one (in any order; by name when every item on both sides is named, ``a=3, b=7``). A
  list answer against a single reference fails — hedging (``\boxed{4}`` or ``\boxed{-5}``) never pays — unless
  the reference is a set or tuple whose elements the list spells out.
- **Names.** ``x = 5``, ``g(t) = 4t-1``, ``(p,q) = (3,2)``, ``|AB| = 1``: the value after the last ``=`` is the
  answer (``k = 2 + 2 = 4`` is 4); an equation whose left side is an expression (``2x+4y-3=0``) stays whole.
- **Relations.** One-variable inequalities are intervals: ``x > -1`` is ``(-1,\infty)``, ``0 < x \le 5`` is
  ``(0,5]``, ``x \in [-2,7]`` is ``[-2,7]``. ``\pm a`` is the two answers ``a`` and ``-a``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

ItemEqual = Callable[[str, str], bool | None]
"""Compares two single items: True/False, or None when it cannot decide."""

_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?%?")
_OPEN = "([{"
_CLOSE = ")]}"
_NAME = re.compile(r"[^=+\-^<>]{1,24}")
_RELATION = re.compile(r"<=|>=|\\leq?|\\geq?|<|>")
_VARIABLE = re.compile(r"-?[A-Za-z](?:_\{?\w+\}?)?(?:\([A-Za-z]\))?")
_IN = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\\in")
_PLUS_MINUS = re.compile(r"^(?P<head>.*?)\\pm(?P<tail>.+)$")


def split_items(text: str, *, as_list: bool) -> list[str]:
    """Top-level comma-separated items (semicolons count as commas).

    One item when ``as_list`` is off and the text is a number with thousands separators.
    """
    if ";" in text and "(" not in text:
        groups = [split_items(group, as_list=True) for group in text.split(";")]
        if all(len(g) > 1 and all(named(i)[0] for i in g) for g in groups):
            return ["(" + ",".join(named(i)[1] for i in g) + ")" for g in groups]
    text = text.replace(";", ",")
    if not as_list and _THOUSANDS.fullmatch(text):
        return [text]
    items: list[str] = []
    depth = start = 0
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
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
        index += 1
    items.append(text[start:])
    out: list[str] = []
    for item in (i.strip() for i in items):
        if item:
            out.extend(_plus_minus(item))
    return out or [text]


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


def named(item: str) -> tuple[str | None, str]:
    """(name, value) of an item: ``x=5`` → (``x``, ``5``); an equation or a bare value has no name."""
    if "=" not in item or any(op in item for op in ("<=", ">=", "!=")):
        return None, item
    parts = item.split("=")
    name, value = parts[0], parts[-1]
    if not value or not name or name[0].isdigit() or not _NAME.fullmatch(name) or not re.search(r"[A-Za-z]", name):
        return None, item
    return name.replace("{", "").replace("}", ""), value


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


def decide(gold: str, pred: str, item_equal: ItemEqual) -> tuple[bool | None, str]:
    """Whether ``pred`` answers ``gold`` under the rules above; None when ``item_equal`` could not decide."""
    as_list = is_list(gold)
    golds = _unique(split_items(gold, as_list=False))
    preds = _unique(split_items(pred, as_list=as_list))
    if len(golds) == 1 and len(preds) == 1:
        return _single(golds[0], preds[0], item_equal), "single"
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
            return _ordered(golds, preds, item_equal), "tuple spelled as a list"
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
        by_name = dict(p_items)
        return _ordered([v for _, v in g_items], [by_name[n] for n in g_names], item_equal), "named answers"
    return _matching([v for _, v in g_items], [v for _, v in p_items], item_equal), "list of answers"


def _unique(items: list[str]) -> list[str]:
    r"""Items without exact repeats: an answer given twice is given once (``\boxed{6} \boxed{6}``)."""
    return list(dict.fromkeys(items))


def _single(gold: str, pred: str, item_equal: ItemEqual) -> bool | None:
    """Two single items: by value (names dropped); an equation against a named value compares as equations."""
    (g_name, g_value), (p_name, p_value) = prepare(gold), prepare(pred)
    g_equation = g_name is None and "=" in gold
    p_equation = p_name is None and "=" in pred
    if (g_equation and p_name is not None) or (p_equation and g_name is not None):
        return item_equal(gold, pred)
    same = item_equal(g_value, p_value)
    if same is None and (g_value != gold or p_value != pred):
        same = item_equal(gold, pred)
    return same


def _ordered(golds: list[str], preds: list[str], item_equal: ItemEqual) -> bool | None:
    undecided = False
    for g, p in zip(golds, preds, strict=True):
        same = _single(g, p, item_equal)
        if same is False:
            return False
        undecided |= same is None
    return None if undecided else True


def _matching(golds: list[str], preds: list[str], item_equal: ItemEqual) -> bool | None:
    """Whether the items pair off one to one (greedy; equality is transitive enough for answers)."""
    free = list(range(len(preds)))
    undecided = False
    for g in golds:
        for position, index in enumerate(free):
            same = _single(g, preds[index], item_equal)
            if same:
                del free[position]
                break
            undecided |= same is None
        else:
            return None if undecided else False
    return True

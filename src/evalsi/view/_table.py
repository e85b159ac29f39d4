"""The record table: filter, sort and page a run's records on the server, so a large run opens quickly."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from evalsi.view._runs import RunData, prompt_text

PAGE_SIZES = (25, 50, 100, 500)
OPS = {"ge": "≥", "le": "≤", "eq": "=", "gt": ">", "lt": "<"}
SORT_COLUMNS = ("index", "tokens", "latency")


class QueryError(ValueError):
    """A table query parameter is invalid; the message names it and what would be valid."""


@dataclass(frozen=True)
class Query:
    """What the user asked of the table: a filter, a sort order and a page."""

    sort: str = "index"
    desc: bool = False
    metric: str | None = None
    op: Literal["ge", "le", "eq", "gt", "lt"] = "ge"
    value: float | None = None
    status: str | None = None
    q: str = ""
    page: int = 1
    size: int = 50

    def params(self, **change: Any) -> dict[str, str]:
        """The query as URL parameters (with some fields changed), leaving out the defaults."""
        merged = {**self.__dict__, **change}
        out: dict[str, str] = {}
        for name, default in Query().__dict__.items():
            value = merged[name]
            if value != default and value is not None and value != "":
                out[name] = ("1" if value else "0") if isinstance(value, bool) else str(value)
        return out


def parse_query(params: Mapping[str, str], run: RunData) -> Query:
    """A query from URL parameters, checked against the run's metrics.

    Raises:
        QueryError: A parameter names an unknown column, metric, operator or status, or is not a number.

    """
    metrics = run.metric_names
    sort = params.get("sort", "index")
    if sort not in SORT_COLUMNS and sort not in metrics:
        raise QueryError(f"sort: unknown column {sort!r} (valid: {', '.join([*SORT_COLUMNS, *metrics])})")
    metric = params.get("metric") or None
    if metric is not None and metric not in metrics:
        raise QueryError(f"metric: unknown metric {metric!r} (valid: {', '.join(metrics) or 'none'})")
    op = params.get("op", "ge")
    if op not in OPS:
        raise QueryError(f"op: unknown operator {op!r} (valid: {', '.join(OPS)})")
    status = params.get("status") or None
    if status is not None and status not in ("ok", "error", "skipped"):
        raise QueryError(f"status: unknown status {status!r} (valid: ok, error, skipped)")
    value = _number(params, "value", float) if params.get("value") not in (None, "") else None
    page = int(_number(params, "page", int)) if params.get("page") else 1
    size = int(_number(params, "size", int)) if params.get("size") else 50
    if size not in PAGE_SIZES:
        raise QueryError(f"size: {size} is not a page size (valid: {', '.join(map(str, PAGE_SIZES))})")
    return Query(
        sort,
        params.get("desc") in ("1", "true"),
        metric,
        op,  # type: ignore[arg-type]
        value,
        status,
        params.get("q", "").strip(),
        max(page, 1),
        size,
    )


def _holds(value: float, op: str, threshold: float) -> bool:
    """Whether ``value op threshold`` (a nan, an unscored record, never matches)."""
    if op == "ge":
        return value >= threshold
    if op == "le":
        return value <= threshold
    if op == "gt":
        return value > threshold
    if op == "lt":
        return value < threshold
    return math.isclose(value, threshold, abs_tol=1e-9)


def _number(params: Mapping[str, str], name: str, kind: type[float] | type[int]) -> float:
    try:
        return kind(params[name])
    except ValueError:
        raise QueryError(f"{name}: {params[name]!r} is not a number") from None


@dataclass
class Page:
    """One page of the table: the matching count and the rows shown."""

    total: int
    matching: int
    page: int
    pages: int
    rows: list[dict[str, Any]]


def run_query(run: RunData, query: Query) -> Page:
    """The records matching the filter, sorted, and the rows of the requested page.

    The plain first view (dataset order, no filter) needs no row index, so it shows before the index is built.
    """
    if query.sort == "index" and query.metric is None and query.status is None and not query.q:
        count = len(run.records)
        pages = max(1, math.ceil(count / query.size))
        page = min(query.page, pages)
        shown = range(count - 1, -1, -1) if query.desc else range(count)
        rows = [row(run, i) for i in shown[(page - 1) * query.size : page * query.size]]
        return Page(count, count, page, pages, rows)
    index = run.index
    selected: list[int] = list(range(len(run.records)))
    if query.metric is not None and query.value is not None:
        column = index.values[query.metric]
        threshold = query.value
        selected = [i for i in selected if _holds(column[i], query.op, threshold)]
    if query.status is not None:
        wanted = query.status
        selected = [i for i in selected if wanted in index.statuses[i]]
    if query.q:
        needle = query.q.lower()
        texts = index.search_text(run.records)
        selected = [i for i in selected if needle in texts[i]]
    if query.sort != "index":
        column = {"tokens": index.tokens, "latency": index.latency}.get(query.sort) or index.values[query.sort]
        missing = -math.inf if query.desc else math.inf  # unscored rows last either way
        selected.sort(key=lambda i: missing if math.isnan(column[i]) else column[i], reverse=query.desc)
    elif query.desc:
        selected.reverse()
    pages = max(1, math.ceil(len(selected) / query.size))
    page = min(query.page, pages)
    page_rows = selected[(page - 1) * query.size : page * query.size]
    return Page(len(run.records), len(selected), page, pages, [row(run, i) for i in page_rows])


def row(run: RunData, position: int) -> dict[str, Any]:
    """One record's row: where it is, what it asked, its mean per metric, statuses, tokens and latency."""
    record = run.records[position]
    stats = run.stats(position)
    text = prompt_text(record.get("prompt"))
    return {
        "position": position,
        "index": record.get("index", position),
        "key": record.get("key"),
        "id": record.get("id"),
        "prompt": text[:160] + ("…" if len(text) > 160 else ""),
        "samples": len(record.get("samples") or []),
        "values": {m: _clean(v) for m, v in zip(run.metric_names, stats.values, strict=True)},
        "statuses": sorted(stats.statuses),
        "tokens": _clean(stats.tokens),
        "latency": _clean(stats.latency),
    }


def _clean(value: float) -> float | None:
    return None if math.isnan(value) else value

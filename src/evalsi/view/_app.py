"""The viewer's Starlette app: server-rendered pages and the same data as JSON, read-only.

Only GET routes exist (anything else is 405). Sources are reached by id from the catalog, never by path.
Pages are rendered by Jinja with autoescaping, and every response forbids inline scripts (Content Security
Policy), so a completion holding ``<script>`` is shown as text and could not run even if it slipped through.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
from jinja2 import Environment, PackageLoader, Undefined, select_autoescape
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from evalsi._util.trainer_logs import RewardStream
from evalsi.errors import DataError
from evalsi.runs import compare_runs
from evalsi.runs._compare import comparison_to_dict
from evalsi.runs._document import RECORD, validation_message
from evalsi.stats import describe_method
from evalsi.view import _charts
from evalsi.view._catalog import Catalog, Kind, Source
from evalsi.view._curves import BASE, load_curve, step_label, training_run_of, versus_base
from evalsi.view._monitors import monitor_views, monitors_json
from evalsi.view._rewards import TOTAL, RewardCache
from evalsi.view._runs import RunCache, RunData, describe_target, prompt_text
from evalsi.view._table import OPS, PAGE_SIZES, QueryError, parse_query, run_query

SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        b"base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


class SecurityHeaders:
    """Adds the security headers to every response (pages, JSON and static files alike)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


class NotFound(Exception):
    """No source with that id and kind, or no such record."""


def _num(value: Any, digits: int = 4) -> str:
    if value is None or isinstance(value, Undefined) or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    try:
        return f"{float(value):.{digits}f}"
    except (TypeError, ValueError):
        return str(value)


def _signed(value: Any) -> str:
    missing = value is None or isinstance(value, Undefined) or (isinstance(value, float) and math.isnan(value))
    return "–" if missing else f"{float(value):+.4f}"


class Viewer:
    """The pages and JSON endpoints over one catalog."""

    def __init__(self, catalog: Catalog, runs: RunCache | None = None) -> None:
        self.catalog = catalog
        self.runs = RunCache() if runs is None else runs
        self.rewards = RewardCache()
        self.env = Environment(
            loader=PackageLoader("evalsi.view", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self.env.filters["num"] = _num
        self.env.filters["signed"] = _signed
        self.env.globals.update(OPS=OPS, PAGE_SIZES=PAGE_SIZES, prompt_text=prompt_text)
        for name in self.env.list_templates():
            self.env.get_template(name)  # compiled now, not on a user's first page

    # -- helpers -------------------------------------------------------------------------------------------------

    def source(self, request: Request, kind: Kind, name: str = "id") -> Source:
        """The source the path parameter names, or 404."""
        source = self.catalog.get(str(request.path_params.get(name) or request.query_params.get(name, "")), kind)
        if source is None:
            raise NotFound(f"no {kind} with that id")
        return source

    def page(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        """A rendered page; links are built on ``base``, the path the app is mounted at."""
        base = request.scope.get("root_path", "").rstrip("/")
        html = self.env.get_template(template).render(base=base, request=request, **context)
        return HTMLResponse(html, status_code=status)

    def live_page(self, request: Request, name: str, **context: Any) -> HTMLResponse:
        """The page ``<name>.html``, or only its live part ``_<name>_live.html`` when the page's script asks for it.

        ``view.js`` fetches ``?fragment=live`` when the page's stamp changes and swaps the live part in place.
        """
        live = request.query_params.get("fragment") == "live"
        return self.page(request, f"_{name}_live.html" if live else f"{name}.html", **context)

    def run(self, path: Path) -> RunData:
        """The run at ``path`` (a source's, or a curve step's), read through the catalog and kept in the cache."""
        return self.runs.get(path, self.catalog.version(path), self.catalog.load)

    @staticmethod
    def json(data: Any, status: int = 200) -> Response:
        """A JSON response (NaN becomes null)."""
        return Response(orjson.dumps(data, default=str), status_code=status, media_type="application/json")

    # -- data ----------------------------------------------------------------------------------------------------

    def listing(self) -> dict[str, list[dict[str, Any]]]:
        """Every source with what the list page shows of it."""
        out: dict[str, list[dict[str, Any]]] = {"runs": [], "curves": [], "rewards": []}
        for source in self.catalog.scan():
            item: dict[str, Any] = {"id": source.id, "label": source.label}
            if source.kind == "run":
                item.update(self.catalog.headline(source))
                out["runs"].append(item)
            elif source.kind == "curve":
                out["curves"].append(item)
            else:
                out["rewards"].append(item)
        return out

    def run_summary(self, source: Source) -> dict[str, Any]:
        """A run's header, summary and status."""
        run = self.run(source.path)
        header = {k: v for k, v in run.header.items() if k != "summary"}
        target = describe_target((run.header.get("spec") or {}).get("target") or run.header.get("target"))
        return {
            "id": source.id,
            "label": source.label,
            "name": run.name,
            "status": run.status,
            "target": target,
            "records": len(run.records),
            "metrics": [m.__dict__ for m in run.metrics],
            "summary": run.summary,
            "header": header,
            "stamp": self.catalog.version(source.path),
        }

    def record(self, source: Source, position: int) -> dict[str, Any]:
        """One record of a run, whole (checked as the results document's model has it)."""
        run = self.run(source.path)
        if not 0 <= position < len(run.records):
            raise NotFound(f"no record {position} (the run has {len(run.records)})")
        record = run.records[position]
        try:
            RECORD.validate_python(record)
        except ValidationError as exc:
            raise DataError(validation_message(exc, f"records[{position}]"), file=source.label) from None
        return record

    # -- pages -----------------------------------------------------------------------------------------------------

    def training(self, base_url: str, metric: str | None) -> dict[str, Any]:
        """The learning curves grouped by training run, with one chart per spec overlaying the training runs.

        ``metric`` picks the metric the charts show (default: the first any curve reports). Returns ``metrics``
        (to pick from), ``metric``, ``charts`` (spec → chart) and ``runs`` (training run → its curves' data, or
        ``error`` for a curve that could not be read).
        """
        curves: list[dict[str, Any]] = []
        for source in self.catalog.scan():
            if source.kind != "curve":
                continue
            try:
                curves.append({"source": source, "data": self.curve_data(source, 0.0)})
            except DataError as exc:
                name = f"{source.path.parent.name} / {source.path.name}"
                curves.append({"source": source, "error": str(exc.detail), "name": name})
        metrics: list[str] = []
        for item in curves:
            metrics.extend(m for m in item.get("data", {}).get("metrics", []) if m not in metrics)
        chosen = metric if metric in metrics else (metrics[0] if metrics else None)
        by_spec: dict[str, list[dict[str, Any]]] = {}
        runs: dict[str, list[dict[str, Any]]] = {}
        for item in curves:
            data = item.get("data")
            training_run = data["trainingRun"] if data else item["source"].path.parent.name
            runs.setdefault(training_run, []).append(item)
            if data and chosen in data["metrics"]:
                by_spec.setdefault(data["spec"], []).append(data)
        charts = {
            spec: _charts.line_chart(
                [curve_line(d, chosen, base_url, d["trainingRun"]) for d in group], f"{spec}: {chosen}"
            )
            for spec, group in by_spec.items()
            if chosen is not None
        }
        return {"metrics": metrics, "metric": chosen, "charts": charts, "runs": runs}

    def listing_stamp(self) -> str:
        """What changes when any run or step file appears or changes (the list page polls it)."""
        parts = []
        for source in self.catalog.scan():
            if source.kind == "run":
                parts.append(f"{source.id}:{self.catalog.version(source.path)}")
            elif source.kind == "curve":
                parts.append(f"{source.id}:{self.catalog.curve_stamp(source)}")
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]

    def home(self, request: Request) -> Response:
        """Training runs first (their curves, overlaid per spec, and steps), then the other runs and reward files."""
        base_url = request.scope.get("root_path", "").rstrip("/")
        listing = self.listing()
        training = self.training(base_url, request.query_params.get("metric"))
        in_training = {
            p["run"]
            for curves in training["runs"].values()
            for c in curves
            for p in c.get("data", {}).get("points", [])
        }
        return self.live_page(
            request,
            "list",
            listing=listing,
            training=training,
            headlines={r["id"]: r for r in listing["runs"]},
            others=[r for r in listing["runs"] if r["id"] not in in_training],
            stamp=self.listing_stamp(),
        )

    def run_page(self, request: Request) -> Response:
        """A run: metrics, gates, status counts and the record table."""
        source = self.source(request, "run")
        run = self.run(source.path)
        query = parse_query(request.query_params, run)
        table = run_query(run, query)
        response = self.live_page(
            request,
            "run",
            source=source,
            run=run,
            summary=self.run_summary(source),
            query=query,
            table=table,
            others=[s for s in self.catalog.scan() if s.kind == "run" and s.id != source.id],
        )
        response.background = BackgroundTask(run.ensure_index)  # after the page is sent: sorting comes next
        return response

    def record_page(self, request: Request) -> Response:
        """One record: prompt, reference, every sample's completion, scores, tokens and latency."""
        source = self.source(request, "run")
        position = int(request.path_params["position"])
        record = self.record(source, position)
        run = self.run(source.path)
        return self.page(request, "record.html", source=source, run=run, record=record, position=position)

    def compare_page(self, request: Request) -> Response:
        """Two runs side by side: paired differences with CIs, McNemar and flipped records."""
        a, b = self.source(request, "run", "a"), self.source(request, "run", "b")
        result = self.comparison(a, b)
        run_a, run_b = self.run(a.path), self.run(b.path)
        return self.page(
            request,
            "compare.html",
            a=a,
            b=b,
            run_a=run_a,
            run_b=run_b,
            result=result,
            keys_a=run_a.by_key,
            keys_b=run_b.by_key,
        )

    def comparison(self, a: Source, b: Source) -> list[dict[str, Any]]:
        """evalsi.runs' comparison of run B against run A, as JSON."""
        return [comparison_to_dict(c) for c in compare_runs(self.run(a.path).loaded(), self.run(b.path).loaded())]

    def rewards_page(self, request: Request) -> Response:
        """A score file: the total's and each component's distribution, and the status counts."""
        source = self.source(request, "rewards")
        return self._rewards(request, source, None)

    def rewards_bin_page(self, request: Request) -> Response:
        """The same page with the rollouts behind one bar listed."""
        source = self.source(request, "rewards")
        return self._rewards(request, source, self.bin_members(request, self.rewards.get(source.path)))

    def _rewards(
        self, request: Request, source: Source, selected: tuple[str, list[int], tuple[float, float]] | None
    ) -> Response:
        data = self.rewards.get(source.path)
        base = request.scope.get("root_path", "").rstrip("/")
        charts = {}
        for name, hist in data.histograms.items():
            if hist is not None:

                def href(b: int, name: str = name) -> str:
                    return f"{base}/rewards/{source.id}/bins?{urlencode({'series': name, 'bin': b})}#rollouts"

                charts[name] = _charts.histogram_svg(hist, href, name)
        members = [] if selected is None else [data.rows[i] for i in selected[1]]
        return self.page(
            request,
            "rewards.html",
            source=source,
            data=data,
            charts=charts,
            TOTAL=TOTAL,
            selected=selected,
            members=members,
        )

    @staticmethod
    def bin_members(request: Request, data: Any) -> tuple[str, list[int], tuple[float, float]]:
        """The series, positions and interval of the histogram bar the query names."""
        series = request.query_params.get("series", TOTAL)
        hist = data.histograms.get(series)
        if hist is None:
            raise QueryError(f"series: no distribution {series!r} (valid: {', '.join(data.histograms)})")
        try:
            b = int(request.query_params.get("bin", ""))
        except ValueError:
            raise QueryError("bin: expected a bar number") from None
        if not 0 <= b < len(hist.counts):
            raise QueryError(f"bin: {b} is out of range (0..{len(hist.counts) - 1})")
        return series, hist.members[b], hist.edges(b)

    def curve_data(self, source: Source, max_drop: float) -> dict[str, Any]:
        """A learning curve as JSON: per step, each metric's estimate and its difference from the base."""

        def read(path: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
            run = self.run(path)
            return run.header, run.summary, run.status

        paths = self.catalog.curve_paths(source)
        curve = load_curve(source.path, read, max_drop, paths, lambda path: self.run(path).loaded())
        training_run = training_run_of(curve, source.path)
        run_ids = {s.path: s.id for s in self.catalog.scan() if s.kind == "run"}
        return {
            "name": f"{training_run} / {source.path.name}",
            "trainingRun": training_run,
            "spec": curve.spec,
            "metrics": curve.metrics,
            "points": [
                {
                    "step": step_label(p),
                    "status": p.run_status,
                    "run": run_ids.get(Path(p.path)) or run_ids.get(Path(p.path).resolve()),
                    "estimates": p.estimates,
                    "versusBase": versus_base(p),
                    "location": p.location,
                }
                for p in curve.points
            ],
        }

    def reward_stream(self, data: dict[str, Any]) -> RewardStream:
        """The training reward logged by a learning curve's trainer (:meth:`curve_data`: its steps' checkpoints)."""
        return self.catalog.trainer_logs(
            str(p["location"]) for p in data["points"] if p["step"] != BASE and p.get("location")
        )

    def curve_page(self, request: Request) -> Response:
        """Each metric per step with its interval, the base as a line, regressions marked; steps link to runs."""
        source = self.source(request, "curve")
        max_drop = float(request.query_params.get("drop") or 0.0)
        data = self.curve_data(source, max_drop)
        base_url = request.scope.get("root_path", "").rstrip("/")
        stream = self.reward_stream(data)
        lines = {metric: curve_line(data, metric, base_url, data["trainingRun"]) for metric in data["metrics"]}
        x_range = _charts.x_domain([p.x for line in lines.values() for p in line.points], stream.steps)
        charts = {metric: _charts.line_chart([line], metric, x_range=x_range) for metric, line in lines.items()}
        reward_charts = {
            name: _charts.line_chart(
                [
                    _charts.Line(
                        name, [_charts.Point(float(x), y, tip=f"step {x}: {_num(y)}") for x, y in _charts.thin(points)]
                    )
                ],
                f"training {name}",
                x_range=x_range,
                legend=False,
            )
            for name, points in stream.series.items()
        }
        monitors = monitor_views(stream, x_range)
        return self.live_page(
            request,
            "curve",
            source=source,
            data=data,
            charts=charts,
            stream=stream,
            reward_charts=reward_charts,
            monitors=monitors,
            drop=max_drop,
            stamp=self.catalog.curve_stamp(source),
        )

    # -- JSON ------------------------------------------------------------------------------------------------------

    def api_sources(self, request: Request) -> Response:
        """Every source and its headline."""
        return self.json(self.listing())

    def api_run(self, request: Request) -> Response:
        """A run's header and summary."""
        return self.json(self.run_summary(self.source(request, "run")))

    def api_sources_stamp(self, request: Request) -> Response:
        """What changes when any run or step changes (the list page polls it)."""
        return self.json({"stamp": self.listing_stamp()})

    def api_stamp(self, request: Request) -> Response:
        """What changes when the run's files change (the live page polls it)."""
        source = self.source(request, "run")
        return self.json({"stamp": self.catalog.version(source.path)})

    def api_records(self, request: Request) -> Response:
        """One page of the record table."""
        source = self.source(request, "run")
        run = self.run(source.path)
        table = run_query(run, parse_query(request.query_params, run))
        return self.json(table.__dict__)

    def api_record(self, request: Request) -> Response:
        """One record, whole."""
        return self.json(self.record(self.source(request, "run"), int(request.path_params["position"])))

    def api_compare(self, request: Request) -> Response:
        """The comparison of run ``b`` against run ``a``."""
        return self.json(self.comparison(self.source(request, "run", "a"), self.source(request, "run", "b")))

    def api_rewards(self, request: Request) -> Response:
        """A score file's counts and histograms."""
        data = self.rewards.get(self.source(request, "rewards").path)
        return self.json(
            {
                "rows": len(data.rows),
                "components": data.components,
                "statuses": dict(data.result_counts),
                "componentStatuses": {k: dict(v) for k, v in data.component_counts.items()},
                "histograms": {
                    name: None if h is None else {"low": h.low, "high": h.high, "counts": h.counts}
                    for name, h in data.histograms.items()
                },
            }
        )

    def api_rewards_bin(self, request: Request) -> Response:
        """The rollouts behind one histogram bar."""
        data = self.rewards.get(self.source(request, "rewards").path)
        series, members, interval = self.bin_members(request, data)
        return self.json({"series": series, "interval": interval, "rollouts": [data.rows[i] for i in members]})

    def api_curve_stamp(self, request: Request) -> Response:
        """What changes when a step file appears or changes (the curve page polls it while a watcher runs)."""
        return self.json({"stamp": self.catalog.curve_stamp(self.source(request, "curve"))})

    def api_curve(self, request: Request) -> Response:
        """A learning curve, with the training reward and monitors its trainer logged (``rewardStream``), if any."""
        data = self.curve_data(self.source(request, "curve"), float(request.query_params.get("drop") or 0))
        stream = self.reward_stream(data)
        data["rewardStream"] = {
            "source": stream.source,
            "series": stream.series,
            "monitors": monitors_json(stream),
            "notes": stream.notes,
        }
        return self.json(data)


def curve_line(data: dict[str, Any], metric: str, base_url: str, label: str) -> _charts.Line:
    """One metric of a learning curve (:meth:`Viewer.curve_data`) as a chart line: steps by number, the base apart.

    Each step's point carries its 95% interval (its method in the tooltip), links to its run, is red when it
    regressed and hollow while it is being evaluated; the base is the line's reference.
    """
    points = []
    reference = None
    for p in data["points"]:
        est = p["estimates"].get(metric) or {}
        mean = est.get("mean")
        if mean is None:
            continue
        low, high = est.get("ci_low"), est.get("ci_high")
        method = describe_method(str((est.get("ci") or {}).get("method") or ""))
        interval = (
            "" if low is None or high is None else f" [{_num(low)}, {_num(high)}]{f' ({method})' if method else ''}"
        )
        if p["step"] == BASE:
            reference = _charts.Reference(mean, low, high, f"{label} base {_num(mean, 3)}")
            continue
        if not isinstance(p["step"], int):
            continue
        regressed = bool((p["versusBase"].get(metric) or {}).get("regressed"))
        running = p["status"] == "running"
        tip = f"{label} step {p['step']}: {_num(mean)}{interval}{' running' if running else ''}"
        points.append(
            _charts.Point(
                float(p["step"]),
                mean,
                low,
                high,
                regressed=regressed,
                live=running,
                href=f"{base_url}/runs/{p['run']}" if p["run"] else "",
                tip=tip + (" regressed" if regressed else ""),
            )
        )
    return _charts.Line(label, points, reference)


def _errors(viewer: Viewer) -> dict[Any, Any]:
    def handler(status: int) -> Any:
        async def handle(request: Request, exc: Exception) -> Response:
            message = str(exc.detail) if isinstance(exc, DataError) else str(exc)
            if request.url.path.startswith(f"{request.scope.get('root_path', '')}/api/"):
                return viewer.json({"error": message}, status)
            return viewer.page(request, "error.html", status=status, message=message, code=status)

        return handle

    return {NotFound: handler(404), QueryError: handler(400), DataError: handler(422), ValueError: handler(400)}


def create_app(
    paths: Iterable[str | os.PathLike[str]] | Catalog,
    *,
    allowed_hosts: list[str] | None = None,
    debug: bool = False,
    runs: RunCache | None = None,
) -> Starlette:
    """The viewer over results files, reward score files and log directories (read-only).

    Args:
        paths: Files and directories the viewer may read; nothing outside them is served. Or a :class:`Catalog`
            of another kind (the evalsi server passes one reading its database).
        allowed_hosts: Host headers to accept (the command line passes the loopback names, which stops DNS
            rebinding); None accepts any, for an app mounted behind a server that checks hosts itself.
        debug: Starlette's debug tracebacks.
        runs: The cache of open runs (a server shares one, bounded in bytes, among its viewers); default: one of
            :data:`evalsi.view._runs.CACHE_BYTES`.

    """
    viewer = Viewer(paths if isinstance(paths, Catalog) else Catalog(paths), runs)
    static = StaticFiles(directory=Path(__file__).parent / "static")
    routes = [
        Route("/", viewer.home, name="home"),
        Route("/runs/{id}", viewer.run_page),
        Route("/runs/{id}/records/{position:int}", viewer.record_page),
        Route("/compare", viewer.compare_page),
        Route("/rewards/{id}", viewer.rewards_page),
        Route("/rewards/{id}/bins", viewer.rewards_bin_page),
        Route("/curves/{id}", viewer.curve_page),
        Route("/api/sources", viewer.api_sources),
        Route("/api/sources/stamp", viewer.api_sources_stamp),
        Route("/api/runs/{id}", viewer.api_run),
        Route("/api/runs/{id}/stamp", viewer.api_stamp),
        Route("/api/runs/{id}/records", viewer.api_records),
        Route("/api/runs/{id}/records/{position:int}", viewer.api_record),
        Route("/api/compare", viewer.api_compare),
        Route("/api/rewards/{id}", viewer.api_rewards),
        Route("/api/rewards/{id}/bins", viewer.api_rewards_bin),
        Route("/api/curves/{id}", viewer.api_curve),
        Route("/api/curves/{id}/stamp", viewer.api_curve_stamp),
        Mount("/static", app=static, name="static"),
    ]
    middleware = [Middleware(SecurityHeaders)]
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    app = Starlette(debug=debug, routes=routes, middleware=middleware, exception_handlers=_errors(viewer))
    app.state.viewer = viewer
    return app

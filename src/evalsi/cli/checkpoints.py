"""``evalsi checkpoints eval | watch | curve``: evaluate training checkpoints against run specs, and the curve.

Exit codes, the same for every command: 0 ok; 1 failed work (a checkpoint could not be served, downloaded or
evaluated, or records could not be generated: run again to resume); 2 bad usage or input (a spec, a dataset, a
location that cannot be opened, a checkpoint the ``--serve`` strategy cannot serve); 3 a checkpoint regressed or
failed its spec's gates (``curve``: the latest one).

Paths given here (``-f``, ``--log-dir``, ``--stop-file``, a local checkpoint, a path set with ``--set``) are
relative to the working directory; paths inside a spec are relative to the spec file.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from evalsi.cli._console import EXIT_FAILED, EXIT_GATE, EXIT_OK, fail, stderr, stdout
from evalsi.cli._options import gathered
from evalsi.cli._ray import PoolScorers, RayAddress, RayShardCount, RayWorkers, ray_shards
from evalsi.cli._tables import interval_note
from evalsi.errors import DataError, EvalsiError, SpecError
from evalsi.monitors import parse_stop_on
from evalsi.runs import RunsClient, load_run
from evalsi.stats import RegressionRule, describe_method
from evalsi.training import (
    DEFAULT_LOG_DIR,
    VLLM,
    Checkpoint,
    CheckpointEvaluator,
    Curve,
    CurvePoint,
    Endpoint,
    LocalDirectory,
    LoRA,
    RemoteDirectory,
    ServingStrategy,
    StepResult,
    Transformers,
    Watcher,
    build_curve,
    open_source,
    plot_curve,
)
from evalsi.training._evaluator import describe_result
from evalsi.training._plot import cell_text
from evalsi.training._server_runs import build_server_curve
from evalsi.training._sources import is_remote

app = typer.Typer(
    help="Evaluate training checkpoints against run specs, and draw the learning curve.", no_args_is_help=True
)

SERVE_CHOICES = ("transformers", "vllm", "lora", "endpoint")
SERVE_OPTIONS = {
    "transformers": ("--device", "--base-model", "--tokenizer"),
    "vllm": ("--vllm-bin", "--vllm-arg", "--tokenizer"),
    "lora": ("--base-url", "--model"),
    "endpoint": ("--base-url", "--model"),
}
"""The options each serving strategy reads."""

Files = Annotated[list[Path], typer.Option("--file", "-f", help="A RunSpec YAML file (repeatable).")]
TrainingRun = Annotated[str, typer.Option("--training-run", help="The training run's name (groups its results).")]
Serve = Annotated[
    str,
    typer.Option(
        "--serve",
        help="How checkpoints are served: transformers (in-process), vllm (starts vllm serve), "
        "lora (loads adapters into a running vLLM at --base-url), endpoint (already served).",
    ),
]
BaseUrl = Annotated[
    str | None,
    typer.Option("--base-url", help="The running server's OpenAI base URL (lora; endpoint: instead of the spec's)."),
]
Model = Annotated[
    str | None, typer.Option("--model", help="endpoint: the model name to request (default: the spec's target.model).")
]
LogDir = Annotated[Path, typer.Option("--log-dir", help="Where step results are kept: LOG_DIR/TRAINING_RUN/SPEC/.")]
Regression = Annotated[
    list[str] | None,
    typer.Option(
        "--regression",
        metavar="METRIC[:MAX_DROP]",
        help="Fail a step significantly below the base on METRIC by more than MAX_DROP (repeatable).",
    ),
]
Overrides = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a field of every spec, e.g. --set numSamples=200 (repeatable)."),
]
VllmBin = Annotated[str, typer.Option("--vllm-bin", help="vllm: the vllm executable.")]
VllmArgs = Annotated[
    list[str] | None,
    typer.Option(
        "--vllm-arg", help="vllm: one extra argument for vllm serve, e.g. --vllm-arg=--max-model-len=8192 (repeatable)."
    ),
]
Device = Annotated[str, typer.Option("--device", help="transformers: cpu, cuda, cuda:1...")]
BaseModel = Annotated[
    str | None,
    typer.Option(
        "--base-model",
        help="transformers: the model the checkpoints were trained from: what a state dictionary (step-N.pt) loads "
        "into, and the tokenizer of checkpoints saved without one.",
    ),
]
TokenizerOption = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        help="transformers, vllm: the tokenizer (path or name) to serve checkpoints with, in place of their own "
        "(for checkpoints a Trainer saved without processing_class).",
    ),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")]
Restart = Annotated[
    bool,
    typer.Option(
        "--restart",
        help="Evaluate each step from scratch, discarding its earlier results (complete or partial). Without it, "
        "results are reused or resumed only when the same checkpoint files, served the same way with the same "
        "sampling, produced them.",
    ),
]
Server = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="An evalsi server's URL: each step is stored there as a run (labels training-run, training-step, "
        "spec) and compared there with the base. The token is $EVALSI_TOKEN (evaluations.run).",
    ),
]

LogTo = Annotated[
    list[str] | None,
    typer.Option(
        "--log-to",
        help="Also log each step to tensorboard, mlflow and/or wandb (comma-separated or repeated; settings in "
        "the specs' loggers: sections), at the checkpoint's step.",
    ),
]


def make_serving(
    serve: str,
    base_url: str | None,
    model: str | None,
    vllm_bin: str,
    vllm_args: list[str] | None,
    device: str,
    base_model: str | None,
    log_dir: Path,
    tokenizer: str | None = None,
) -> ServingStrategy:
    """The serving strategy the options name; an option the strategy would ignore is refused."""
    given = {
        "--base-url": base_url is not None,
        "--model": model is not None,
        "--vllm-bin": vllm_bin != "vllm",
        "--vllm-arg": bool(vllm_args),
        "--device": device != "cpu",
        "--base-model": base_model is not None,
        "--tokenizer": tokenizer is not None,
    }
    if serve in SERVE_OPTIONS:
        unused = [name for name, set_ in given.items() if set_ and name not in SERVE_OPTIONS[serve]]
        if unused:
            users = [f"--serve {s}" for s, names in SERVE_OPTIONS.items() if unused[0] in names]
            fail(f"{unused[0]} does not apply to --serve {serve} (it is for {' and '.join(users)}); remove it")
    if serve == "endpoint":
        return Endpoint(base_url, model)
    if serve == "lora":
        if base_url is None:
            fail("--serve lora needs --base-url (the running vLLM, e.g. http://localhost:8000/v1)")
        return LoRA(base_url, base_model=model)
    if serve == "vllm":
        return VLLM(vllm_bin, vllm_args or [], log_dir=log_dir / "vllm-logs", tokenizer=tokenizer)
    if serve == "transformers":
        return Transformers(device, base_model=base_model, tokenizer=tokenizer)
    fail(f"--serve {serve!r} is not one of {', '.join(SERVE_CHOICES)}")


def fetch_location(location: str, step: int | None, cache_dir: Path) -> str | Path:
    """A remote checkpoint (``s3://.../checkpoint-100``, ``mlflow:<model>/<version>``) downloaded; else as given."""
    if location.startswith("mlflow:"):
        from evalsi.training._mlflow_source import fetch_version  # imports mlflow, an optional extra

        return fetch_version(location, step, cache_dir)
    if not is_remote(location):
        return location
    parent, _, name = location.rstrip("/").rpartition("/")
    source = RemoteDirectory(parent, cache_dir)
    match = [c for c in source.discover() if c.name == name]
    if not match:
        raise DataError(f"{location}: no checkpoint named {name!r} there (checkpoint-N, global_step_N, step-N)")
    return source.fetch(match[0])


def parse_step_option(text: str) -> int | None:
    """``base`` -> None; a step number -> int."""
    if text == "base":
        return None
    if text.isdigit():
        return int(text)
    fail(f"--step {text!r}: give base or a step number (e.g. --step 100)")


class Display:
    """The live progress on stderr: which checkpoint, which stage, and what is waiting.

    Each run's own bar shows the records done and the ETA.
    """

    def __init__(self, enabled: bool, console: Console = stderr) -> None:
        self.enabled = enabled
        self.console = console
        self._status: Any = None

    def stage(self, label: str, stage: str) -> None:
        """A step entered a stage."""
        self._clear()
        if not self.enabled:
            return
        name = "base" if label == "base" else f"step {label}"
        self.console.print(f"[bold]{name}[/]: {escape(stage)}", highlight=False)

    def waiting(self, pending: list[tuple[Checkpoint, str]]) -> None:
        """Checkpoints not ready yet, as one transient status line."""
        if not self.enabled:
            return
        text = "; ".join(f"{c.name} {why}" for c, why in pending) or "no new checkpoint"
        if self._status is None:
            self._status = self.console.status(f"waiting: {escape(text)}")
            self._status.start()
        else:
            self._status.update(f"waiting: {escape(text)}")

    def evaluated(self, checkpoint: Checkpoint, result: StepResult) -> None:
        """A checkpoint is done: its status and seconds, each spec's means with their change from the base."""
        self.result(checkpoint.name, result)

    def result(self, name: str, result: StepResult) -> None:
        """A step's status and seconds; per spec its means, their change from the base, and why it is not ok."""
        self._clear()
        if not self.enabled:
            return
        colour = "green" if result.status == "ok" else "bold red"
        self.console.print(
            f"[bold]{escape(name)}[/]: [{colour}]{result.status}[/] in {result.seconds:.1f} s", highlight=False
        )
        for line in step_lines(result):
            self.console.print(line, highlight=False, soft_wrap=True)

    def skipped(self, checkpoint: Checkpoint, reason: str) -> None:
        """A checkpoint no spec is due at."""
        self._clear()
        if self.enabled:
            self.console.print(
                f"[bold]{checkpoint.name}[/]: not evaluated: {escape(reason)}", highlight=False, soft_wrap=True
            )

    def failed(self, checkpoint: Checkpoint, reason: str) -> None:
        """A checkpoint could not be evaluated."""
        self._clear()
        self.console.print(f"[bold red]{checkpoint.name}: failed:[/] {escape(reason)}", highlight=False, soft_wrap=True)

    def _clear(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def close(self) -> None:
        """Stop the status line."""
        self._clear()


def step_lines(result: StepResult) -> list[str]:
    """Rich-markup lines of a step's result, under its status line.

    Per spec: each metric's mean with its change from the base (``*`` significant, ``!`` a regression), why the
    spec is not ok, and each regression's interval; then the specs not due at this step.
    """
    lines = []
    for spec in result.specs:
        point = CurvePoint(
            result.step,
            spec.path,
            spec.status == "complete",
            spec.gates_passed,
            spec.means,
            spec.comparisons,
            spec.regressions,
        )
        cells = ", ".join(f"{escape(m)} {cell_text(point, m)}" for m in spec.means) or "no metrics"
        lines.append(f"  {escape(spec.spec)}: {cells}" + (" (reused)" if spec.reused else ""))
        if point.status != "ok":
            lines.append(f"    [bold red]{point.status}[/]: {escape(spec.reason or 'see ' + str(spec.path))}")
        for rule in spec.regressions:
            d = spec.comparisons[rule.metric].difference
            lines.append(
                f"    [bold red]regression[/] {escape(rule.metric)} "
                f"{d.mean:+.4f} (95% CI [{d.ci_low:+.4f}, {d.ci_high:+.4f}], {describe_method(d.method)}) "
                f"beyond {escape(str(rule))}"
            )
    for name, every in result.not_due.items():
        lines.append(f"  {escape(name)}: not due at this step (every {every})")
    return lines


def step_exit_code(statuses: list[str], failed: bool = False) -> int:
    """The exit code of evaluated steps: 3 a regression or failed gate, else 1 a partial or failed step, else 0.

    A step's status is a verdict only on its records: a partial step's gates wait for the rest (1), while a
    significant drop is one even on the records there (3).
    """
    if any(s == "regressed" for s in statuses):
        return EXIT_GATE
    if failed or any(s == "partial" for s in statuses):
        return EXIT_FAILED
    if any(s == "gate failed" for s in statuses):
        return EXIT_GATE
    return EXIT_OK


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM stops like Ctrl-C: whatever is being served is stopped on the way out."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass(frozen=True)
class EvaluatorOptions:
    """What ``eval`` and ``watch`` share: the specs, the training run, how a checkpoint is served, where results go.

    Each field is a command-line option of both commands (see :func:`evalsi.cli._options.gathered`).
    """

    files: Files
    training_run: TrainingRun
    serve: Serve = "transformers"
    base_url: BaseUrl = None
    model: Model = None
    log_dir: LogDir = DEFAULT_LOG_DIR
    regression: Regression = None
    overrides: Overrides = None
    vllm_bin: VllmBin = "vllm"
    vllm_args: VllmArgs = None
    device: Device = "cpu"
    base_model: BaseModel = None
    server: Server = None
    restart: Restart = False
    tokenizer: TokenizerOption = None
    log_to: LogTo = None
    ray: RayAddress = None
    ray_workers: RayWorkers = 2
    shard_count: RayShardCount = None

    def serving(self) -> ServingStrategy:
        """The serving strategy ``--serve`` names, with its options."""
        return make_serving(
            self.serve,
            self.base_url,
            self.model,
            self.vllm_bin,
            self.vllm_args,
            self.device,
            self.base_model,
            self.log_dir,
            self.tokenizer,
        )

    def evaluator(self, display: Display, ctx: typer.Context | None = None) -> CheckpointEvaluator:
        """The checkpoint evaluator; with ``--ray``, its reward pool stops when the command ends (``ctx``)."""
        serving = self.serving()
        if self.shard_count is not None and self.ray is None:
            fail("--ray-shards needs --ray ADDRESS (the cluster the shards run on)")
        try:
            shards = ray_shards(self.ray, self.shard_count) if self.ray and self.shard_count else None
            scorer = PoolScorers(self.ray, self.ray_workers) if self.ray is not None and shards is None else None
            if scorer is not None and ctx is not None:
                ctx.call_on_close(scorer.close)
            return CheckpointEvaluator(
                self.files,
                self.training_run,
                serving,
                regression=self.regression or [],
                log_dir=self.log_dir,
                overrides=self.overrides or [],
                progress=display.enabled,
                on_stage=display.stage,
                server=self.server,
                restart=self.restart,
                log_to=self.log_to or [],
                scorer=scorer,
                shards=shards,
            )
        except (SpecError, DataError, ImportError) as exc:
            fail(str(exc))


@app.command("eval")
@gathered(EvaluatorOptions)
def eval_command(
    ctx: typer.Context,
    model_or_path: Annotated[
        str,
        typer.Argument(
            help="The checkpoint's directory or file (or s3://, gs://, hf:// URL, or mlflow:MODEL/VERSION), "
            "or for --step base the base model."
        ),
    ],
    step: Annotated[str, typer.Option("--step", help="base, or the checkpoint's step number.")],
    options: EvaluatorOptions,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the step's result as JSON (each spec's means and changes).")
    ] = False,
    quiet: Quiet = False,
    final: Annotated[
        bool,
        typer.Option("--final", help="The training's last step: every spec is evaluated, whatever its `every`."),
    ] = False,
) -> None:
    """Evaluate one checkpoint (or the base model) against the run specs; results go to LOG_DIR (and --server).

    A spec with `every: N` is evaluated at the base, at steps N divides, and with --final.
    Exit codes: 0 ok; 1 it could not be served or evaluated; 2 bad usage or input; 3 it regressed or failed a gate.
    """
    number = parse_step_option(step)
    display = Display(not quiet)
    evaluator = options.evaluator(display, ctx)
    label = "base" if number is None else f"step {number}"
    if not evaluator.due(number, final=final):
        cadence = ", ".join(f"{name} every {every}" for name, every in evaluator.cadence().items())
        if as_json:
            stdout.out(orjson.dumps(describe_result(evaluator.evaluate(model_or_path, number))).decode())
        stderr.print(
            f"{label}: not evaluated: no run spec is due at this step ({escape(cadence)}); --final evaluates all",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_OK)
    try:
        with _terminate_as_interrupt():
            location = fetch_location(model_or_path, number, options.log_dir / "downloads" / options.training_run)
            result = evaluator.evaluate(location, number, final=final)
    except KeyboardInterrupt:
        fail("interrupted: scored records are saved; run the same command again to resume", EXIT_FAILED)
    except (SpecError, DataError) as exc:
        fail(str(exc))
    except EvalsiError as exc:
        fail(str(exc), EXIT_FAILED)
    finally:
        display.close()
    if as_json:
        stdout.out(orjson.dumps(describe_result(result)).decode(), highlight=False)
    display.result(label, result)
    raise typer.Exit(step_exit_code([result.status]))


@app.command("watch")
@gathered(EvaluatorOptions)
def watch_command(
    ctx: typer.Context,
    directory: Annotated[
        str,
        typer.Argument(
            help="The training output directory to watch: a path, or s3://, gs://, hf:// (with evalsi\\[remote]), "
            "or mlflow:MODEL, a registered model's versions (with evalsi\\[mlflow] and MLFLOW_TRACKING_URI)."
        ),
    ],
    options: EvaluatorOptions,
    settle: Annotated[
        float,
        typer.Option(
            "--settle",
            min=0,
            help="Seconds a checkpoint must stay unchanged before it is evaluated (mlflow: READY versions need none).",
        ),
    ] = 60.0,
    poll: Annotated[float, typer.Option("--poll", min=0.01, help="Seconds between looks for new checkpoints.")] = 2.0,
    stop_file: Annotated[
        Path | None,
        typer.Option("--stop-file", help="Written when a checkpoint regresses (a training loop can stop on it)."),
    ] = None,
    stop_on: Annotated[
        list[str] | None,
        typer.Option(
            "--stop-on",
            help="Also write --stop-file when a checkpoint's trainer_state.json logged this monitor as fired: "
            "monitor:<signal> (repeatable; see evalsi.monitors.SIGNALS).",
        ),
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="Evaluate the checkpoints there now (waiting for those settling), then exit.")
    ] = False,
    quiet: Quiet = False,
) -> None:
    """Evaluate each new checkpoint in DIRECTORY once, in step order, as it settles. Stop with Ctrl-C.

    Finished steps are read from LOG_DIR, so a restarted watcher evaluates nothing twice and resumes a
    half-evaluated step. Exit codes: 0 ok; 1 a checkpoint could not be evaluated; 2 bad usage or spec;
    3 a checkpoint regressed or failed its spec's gates.
    """
    try:
        monitors = [parse_stop_on(name) for name in stop_on or []]
    except ValueError as exc:
        fail(f"--stop-on: {exc}")
    if monitors and stop_file is None:
        fail("--stop-on needs --stop-file: the file the training loop watches (evalsi_callback(None, stop_file=...))")
    display = Display(not quiet)
    evaluator = options.evaluator(display, ctx)
    try:
        base_done = evaluator.has_results(None)
    except EvalsiError as exc:  # the server is unreachable or refused the token
        fail(str(exc), EXIT_FAILED)
    if evaluator.rules and not base_done:
        stderr.print(
            "[yellow]note:[/] no base results yet, so regressions cannot be checked; evaluate the base "
            "with `evalsi checkpoints eval MODEL --step base` (same -f, --training-run, --log-dir, --server)",
            highlight=False,
        )
    try:
        source = open_source(directory, options.log_dir / "downloads" / options.training_run)
    except (SpecError, DataError) as exc:  # a location that cannot be opened: as `eval` says of it
        fail(str(exc))
    except EvalsiError as exc:  # a registry that does not answer
        fail(str(exc), EXIT_FAILED)
    if isinstance(source, LocalDirectory) and not source.path.is_dir():
        if once:  # nothing can appear there before --once returns: a mistyped directory
            fail(f"{directory}: no such directory (it resolves to {source.path})")
        stderr.print(f"[yellow]note:[/] {escape(str(source.path))} does not exist yet; waiting for it", highlight=False)
    watcher = Watcher(
        evaluator, source, settle=settle, poll=poll, stop_file=stop_file, once=once, display=display, stop_on=monitors
    )
    report = watcher.report
    try:
        with _terminate_as_interrupt():
            watcher.run()
    except KeyboardInterrupt:
        display.close()
        stderr.print(
            "stopped: finished steps are saved; a half-evaluated one resumes when the watcher restarts", highlight=False
        )
    except (SpecError, DataError) as exc:  # bad input: a spec or dataset, a checkpoint --serve cannot serve
        display.close()
        fail(str(exc))
    except EvalsiError as exc:  # the source or the evalsi server could not be read (one stopped answering)
        display.close()
        fail(str(exc), EXIT_FAILED)
    finally:
        display.close()
    if report.stop_file_written and stop_file is not None:
        stderr.print(f"[bold red]a checkpoint regressed[/]: wrote {escape(str(stop_file))}", highlight=False)
    raise typer.Exit(step_exit_code([r.status for _, r in report.evaluated], failed=bool(report.failed)))


@app.command("curve")
def curve_command(
    files: Files,
    training_run: TrainingRun,
    log_dir: LogDir = DEFAULT_LOG_DIR,
    regression: Regression = None,
    plot: Annotated[
        list[Path] | None,
        typer.Option("--plot", help="Draw the curve: curve.html (self-contained) or curve.png (needs evalsi\\[plot])."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the curve as JSON.")] = False,
    server: Server = None,
) -> None:
    """The learning curve: each step's metrics with the change from the base (* significant, ! regression).

    With --server, the steps are the server's runs and each is compared with the base there (CompareRuns).

    Exit codes: 0 ok; 2 bad usage, spec or no results; 3 the latest checkpoint regressed or failed a gate.
    """
    try:
        rules = [RegressionRule.parse(text) for text in regression or []]
    except ValueError as exc:
        fail(f"--regression: {exc}")
    curves: list[Curve] = []
    client = RunsClient(server) if server else None
    try:
        for file in files:
            run = load_run(file)
            if client is not None:
                curves.append(build_server_curve(client, training_run, run.spec.name, run.metric_names(), rules))
            else:
                curves.append(build_curve(log_dir, training_run, run.spec.name, run.metric_names(), rules))
    except (SpecError, DataError) as exc:
        fail(str(exc))
    except EvalsiError as exc:
        fail(str(exc), EXIT_FAILED)
    finally:
        if client is not None:
            client.close()
    known = {m for c in curves for m in c.metrics}
    for rule in rules:
        if rule.metric not in known:
            fail(f"--regression: {rule.metric!r} is not a metric of the specs (metrics: {', '.join(sorted(known))})")
    try:
        for path in plot or []:
            plot_curve(curves, path)
    except EvalsiError as exc:
        fail(str(exc))
    if as_json:
        stdout.out(orjson.dumps([c.to_dict() for c in curves]).decode(), highlight=False)
    else:
        for curve in curves:
            stdout.print(curve_table(curve))
        if any(p.changes for c in curves for p in c.points):
            stdout.print("* marks a significant change, ! a regression.", highlight=False)
        note = interval_note(
            (name, change.difference.method) for c in curves for p in c.points for name, change in p.changes.items()
        )
        if note is not None:
            stdout.print(f"change from the base, {note}", highlight=False)
    if any(c.failed for c in curves):
        raise typer.Exit(EXIT_GATE)


def curve_table(curve: Curve) -> Table:
    """The learning-curve table: step, each metric with its change from the base, status."""
    title = f"{curve.spec} · {curve.training_run}" + ("" if curve.base is not None else " (no base results)")
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    table.add_column("step", no_wrap=True)
    for metric in curve.metrics:
        table.add_column(metric, no_wrap=True)
    table.add_column("status", no_wrap=True)
    for point in curve.points:
        status = Text(point.status, style="" if point.status == "ok" else "bold red")
        table.add_row(point.label, *(cell_text(point, m) for m in curve.metrics), status)
    return table

"""Loading a RunSpec: ``--set`` overrides applied, validation with file/line/field errors, and binding its evaluators.

Evaluators are bound exactly as a RewardSpec's components (same binder, same params checks), into a
:class:`~evalsi.rewards.Reward` whose ``component_scores`` is the run's only scoring path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalsi.errors import SpecError
from evalsi.rewards import Reward, bind_component
from evalsi.runs._builtin import builtin_evaluators
from evalsi.runs._overrides import applied_overrides, override_at, put
from evalsi.runs._summary import MetricInfo, pass_k_names
from evalsi.specs import (
    API_VERSION,
    ComponentSpec,
    Resource,
    RewardSpec,
    RewardSpecBody,
    RunSpec,
    RunSpecBody,
    load_resources,
)
from evalsi.specs._resource import document_from_mapping, parse_resources, select_resource


@dataclass
class BoundRun:
    """A RunSpec ready to run: the validated spec, its evaluators bound into a Reward, and its metrics."""

    spec: RunSpec
    reward: Reward
    metrics: list[MetricInfo]
    base_dir: Path | None

    @property
    def body(self) -> RunSpecBody:
        """The validated ``spec`` section."""
        return self.spec.spec

    @property
    def output(self) -> Path:
        """Where the results file goes: ``spec.output`` (relative to the spec file), else ``<name>.results.json``."""
        if not self.body.output:
            return Path(f"{self.spec.name}.results.json")
        path = Path(self.body.output).expanduser()
        return path if path.is_absolute() or self.base_dir is None else self.base_dir / path

    def metric_names(self) -> list[str]:
        """Component means, then pass@k and pass^k metrics."""
        return [m.name for m in self.metrics] + [name for name, _, _ in pass_k_names(self.body.pass_k)]


def load_run(path: str | Path, name: str | None = None, overrides: Sequence[str] = ()) -> BoundRun:
    """Load the RunSpec in a YAML file, apply ``path.to.field=value`` overrides, validate and bind it.

    Paths in the file are relative to its folder; paths the overrides set, to the working directory.

    Args:
        path: The YAML file.
        name: Which RunSpec of the file, when it holds several.
        overrides: ``path.to.field=value`` texts (``--set``).

    Raises:
        SpecError: The file, an override, a field, a ``ref`` or a param is invalid (file, line, field path).

    """
    resource = select_resource(load_resources(path), "RunSpec", name, str(path))
    overridden, applied = applied_overrides(resource, overrides)
    base_dir = Path(path).absolute().parent  # fixed now: the spec's paths never follow a later change of directory
    try:
        return bind_run(overridden, base_dir)
    except SpecError as exc:
        culprit = override_at(exc, applied)
        if culprit is None:
            raise
        error = SpecError(exc.detail, file="--set", path=f"{culprit.dotted} ({exc.path})")
    if isinstance(culprit.value, str):
        raise error
    # an evaluator param may want text: retry with the value as written
    put(overridden.spec, culprit.keys, culprit.text)
    try:
        return bind_run(overridden, base_dir)
    except SpecError:
        raise error from None


def run_from_mapping(data: Mapping[str, Any], source: str | None = None, base_dir: Path | None = None) -> BoundRun:
    """Bind a RunSpec given as a mapping: a whole resource, or just its ``spec`` (named ``run``).

    Args:
        data: The resource or its ``spec``.
        source: What names it in errors, such as a file.
        base_dir: What the spec's relative paths are relative to; None for the working directory.

    Raises:
        SpecError: A field is invalid (names its path).

    """
    raw = dict(data)
    if "apiVersion" not in raw:
        raw = {"apiVersion": API_VERSION, "kind": "RunSpec", "metadata": {"name": "run"}, "spec": raw}
    resource = select_resource(parse_resources([document_from_mapping(raw, source)]), "RunSpec", None, source)
    return bind_run(resource, base_dir)


def bind_run(resource: Resource, base_dir: Path | None = None) -> BoundRun:
    """Validate a RunSpec resource and bind its evaluators (a built-in eval's own when none are given).

    ``base_dir`` is the folder the spec's relative paths are relative to (made absolute now); None leaves them
    relative to the working directory.

    Args:
        resource: The RunSpec resource.
        base_dir: What the spec's relative paths are relative to.

    Raises:
        SpecError: A field, a ``ref`` or a param is invalid (file, line, field path).

    """
    try:
        body = RunSpecBody.model_validate(resource.spec)
    except ValidationError as exc:
        raise resource.validation_error(exc) from None
    spec = RunSpec(name=resource.name, spec=body, source=resource.document.file)
    components: list[ComponentSpec] = list(body.evaluators)
    where_root: tuple[str | int, ...] = ("spec", "evaluators")
    if not components and body.dataset.builtin is not None:
        components = [ComponentSpec.model_validate(e) for e in builtin_evaluators(body.dataset.builtin)]
        where_root = ("spec", "dataset", "builtin")
    reward_body = RewardSpecBody(components=components, on_error="zero")
    bound = []
    seen: set[str] = set()
    for index, component in enumerate(components):
        where = (*where_root, index) if where_root[-1] == "evaluators" else where_root
        if component.display_name in seen:
            raise resource.error(f"two evaluators are named {component.display_name!r}; give one a `name`", where)
        seen.add(component.display_name)
        bound.append(bind_component(resource, component, reward_body, where, base_dir))
    reward = Reward(RewardSpec(name=resource.name, spec=reward_body, source=resource.document.file), bound)
    metrics = [MetricInfo(c.display_name, c.threshold) for c in components]
    run = BoundRun(spec, reward, metrics, None if base_dir is None else base_dir.absolute())
    _check_metric_names(resource, run)
    return run


def _check_metric_names(resource: Resource, run: BoundRun) -> None:
    names = {m.name for m in run.metrics}
    for key, ks in (("atK", run.body.pass_k.at_k), ("powK", run.body.pass_k.pow_k)):
        for index, metric in enumerate(ks.metrics if ks else []):
            if metric not in names:
                raise resource.error(
                    f"{metric!r} is not an evaluator of this run (evaluators: {', '.join(sorted(names))})",
                    ("spec", "passK", key, "metrics", index),
                )
    known = run.metric_names()
    for index, gate in enumerate(run.body.gates):
        if gate.metric not in known:
            raise resource.error(
                f"unknown metric {gate.metric!r} (metrics of this run: {', '.join(known)})",
                ("spec", "gates", index, "metric"),
            )

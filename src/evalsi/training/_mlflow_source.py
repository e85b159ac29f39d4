"""Checkpoints from an MLflow model registry: ``mlflow:<model>`` watches a registered model's versions.

Each version is a checkpoint. Its step is the version's ``step`` tag (an integer), else its version number; when
two versions claim one step, the newest version wins. A version counts as settled once the registry says it is
``READY`` (its files are complete by then; no settle wait applies), and holds a model when its artifacts do. The
artifacts are downloaded through the tracking server (``MLFLOW_TRACKING_URI``; a server started with
``--serve-artifacts`` proxies them) into a cache folder before serving. ``mlflow`` is imported only here, when
such a location is used (``pip install 'evalsi[mlflow]'``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsi.errors import DataError
from evalsi.training._checkpoints import Checkpoint, ModelFiles, Signature, find_model, model_kind, nested_folders
from evalsi.training._sources import LocationError, SourceError

PREFIX = "mlflow:"
READY = "READY"
STEP_TAG = "step"
TRACKING_URI_VARIABLE = "MLFLOW_TRACKING_URI"
_MLFLOW_FOLDERS = ("model",)
"""Where MLflow's own flavours put a model's files inside the logged model (``mlflow.transformers``: ``model/``)."""


def is_mlflow(location: str) -> bool:
    """Whether a location names an MLflow registered model (``mlflow:<model>``)."""
    return location.startswith(PREFIX)


def parse_version_location(location: str) -> tuple[str, str]:
    """``mlflow:<model>/<version>`` -> (model, version); a clear error for anything else."""
    model, _, version = location[len(PREFIX) :].rpartition("/")
    if not model or not version.isdigit():
        raise DataError(
            f"{location}: name one version of a registered model as mlflow:<model>/<version> (e.g. mlflow:grpo/3)"
        )
    return model, version


def _import_mlflow(location: str) -> Any:
    try:
        import mlflow
    except ImportError:
        raise LocationError(
            f"{location}: MLflow checkpoints need the MLflow client: pip install 'evalsi[mlflow]'"
        ) from None
    return mlflow


def _is_not_found(exc: Exception) -> bool:
    return getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST"


@dataclass(frozen=True)
class ModelVersion:
    """What the registry says about one model version."""

    version: str
    step: int
    tagged: bool
    """Whether the step came from a ``step`` tag (else it is the version number)."""
    status: str
    source: str
    created_ms: int
    updated_ms: int


class MlflowModel:
    """A registered model's versions, as checkpoints (see the module docstring).

    Args:
        model: The registered model's name.
        cache_dir: Where downloaded versions are kept (one folder per version).
        tracking_uri: The tracking server; default ``MLFLOW_TRACKING_URI``.

    Raises:
        SourceError: mlflow is not installed, no tracking server is named, or the server cannot be reached.
        DataError: no registered model of that name exists there.

    """

    settles_itself = True
    """The registry says when a version is complete (``READY``): the watcher's settle wait does not apply."""

    def __init__(self, model: str, cache_dir: Path, tracking_uri: str | None = None) -> None:
        if not model:
            raise DataError(f"{PREFIX}: name a registered model, e.g. mlflow:grpo-1")
        self.model = model
        self.description = f"{PREFIX}{model}"
        self.cache_dir = cache_dir
        self.mlflow = _import_mlflow(self.description)
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            raise LocationError(
                f"{self.description}: set {TRACKING_URI_VARIABLE} to the MLflow tracking server "
                "(e.g. http://127.0.0.1:5000) whose registry holds the model"
            )
        self.tracking_uri = uri
        self.client = self.mlflow.MlflowClient(tracking_uri=uri)
        self._versions: dict[str, ModelVersion] = {}
        self._models: dict[str, ModelFiles | None] = {}
        with self._errors("looking up the model"):
            try:
                self.client.get_registered_model(model)
            except self.mlflow.exceptions.MlflowException as exc:
                if not _is_not_found(exc):
                    raise
                raise DataError(
                    f"{self.description}: no registered model named {model!r} at {uri}{self._known_models()}"
                ) from None

    def _known_models(self) -> str:
        with contextlib.suppress(self.mlflow.exceptions.MlflowException):
            names = sorted(m.name for m in self.client.search_registered_models(max_results=20))
            return f" (registered models: {', '.join(names)})" if names else " (it has no registered models)"
        return ""

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """MLflow's own errors (the server unreachable, a refused request) as a SourceError naming the model."""
        try:
            yield
        except self.mlflow.exceptions.MlflowException as exc:
            raise SourceError(f"{self.description}: {doing} at {self.tracking_uri} failed: {exc}") from None

    def checkpoint(self, version: ModelVersion) -> Checkpoint:
        """The checkpoint a version is (its path only names it: ``mlflow:<model>/version-<N>``)."""
        return Checkpoint(Path(f"{PREFIX}{self.model}") / f"version-{version.version}", version.step)

    def versions(self) -> list[ModelVersion]:
        """Every version of the model as the registry has it now (a ``step`` tag that is not an integer fails)."""
        quote = '"' if "'" in self.model else "'"
        found: list[ModelVersion] = []
        token: str | None = None
        with self._errors("listing the model's versions"):
            while True:
                page = self.client.search_model_versions(
                    f"name = {quote}{self.model}{quote}", max_results=1000, page_token=token
                )
                found.extend(self._describe(v) for v in page)
                token = getattr(page, "token", None)
                if not token:
                    break
        for version in found:
            self._versions[version.version] = version
        return found

    def _describe(self, mv: Any) -> ModelVersion:
        version = str(mv.version)
        tag = (mv.tags or {}).get(STEP_TAG)
        if tag is None:
            step = int(version)
        elif re.fullmatch(r"\s*\d+\s*", str(tag)):
            step = int(tag)
        else:
            raise DataError(
                f"{self.description}: version {version} has step tag {tag!r}; the {STEP_TAG!r} tag must be a "
                "non-negative integer (the training step), or absent to use the version number"
            )
        status = str(getattr(mv.status, "name", mv.status))
        created, updated = int(mv.creation_timestamp or 0), int(mv.last_updated_timestamp or 0)
        return ModelVersion(version, step, tag is not None, status, str(mv.source or ""), created, updated)

    def discover(self) -> list[Checkpoint]:
        """One checkpoint per step, the newest version for a step two versions claim, by step."""
        by_step: dict[int, ModelVersion] = {}
        for version in self.versions():
            previous = by_step.get(version.step)
            if previous is None or int(version.version) > int(previous.version):
                by_step[version.step] = version
        return [self.checkpoint(by_step[step]) for step in sorted(by_step)]

    def version_of(self, checkpoint: Checkpoint) -> ModelVersion:
        """The registry's record for a checkpoint this source listed."""
        return self._versions[checkpoint.name.removeprefix("version-")]

    def find_model(self, checkpoint: Checkpoint) -> ModelFiles | None:
        """None until the version is ``READY``; then what its artifacts hold (judged from their listing)."""
        version = self.version_of(checkpoint)
        if version.status != READY:
            return None
        if version.version not in self._models:  # a READY version's files no longer change: list them once
            self._models[version.version] = self._judge(version, checkpoint.path)
        return self._models[version.version]

    def _uri(self, version: ModelVersion) -> str:
        return f"models:/{self.model}/{version.version}"

    def _judge(self, version: ModelVersion, path: Path) -> ModelFiles | None:
        with self._errors(f"listing version {version.version}'s artifacts"):
            root = str(self.client.get_model_version_download_uri(self.model, version.version)).rstrip("/")
            listings: dict[str, tuple[set[str], set[str]]] = {}

            def listing(folder: str) -> tuple[set[str], set[str]]:
                if folder not in listings:
                    uri = f"{root}/{folder}" if folder else root
                    entries = self.mlflow.artifacts.list_artifacts(artifact_uri=uri, tracking_uri=self.tracking_uri)
                    names = {e.path.rstrip("/").rpartition("/")[2]: e.is_dir for e in entries}
                    listings[folder] = ({n for n, d in names.items() if not d}, {n for n, d in names.items() if d})
                return listings[folder]

            def exists(folder: str) -> bool:
                parent, _, leaf = folder.rpartition("/")
                return not folder or ((not parent or exists(parent)) and leaf in listing(parent)[1])

            for folder in (*nested_folders(), *_MLFLOW_FOLDERS):
                if not exists(folder):
                    continue
                files = listing(folder)[0]

                def read(name: str, folder: str = folder) -> bytes | None:
                    try:
                        uri = f"{root}/{folder}/{name}" if folder else f"{root}/{name}"
                        text: str = self.mlflow.artifacts.load_text(uri)
                        return text.encode()
                    except (self.mlflow.exceptions.MlflowException, OSError):
                        return None

                kind = model_kind(files, read)
                if kind is not None:
                    return ModelFiles(kind, path / folder if folder else path)
        return None

    def signature(self, path: Path) -> Signature:
        """The version's status and last update (the registry's record of it, not its files)."""
        version = self._versions.get(path.name.removeprefix("version-"))
        if version is None:
            return Signature(())
        return Signature(((f"{path.name}:{version.status}", 0, version.updated_ms * 1_000_000),))

    def fetch(self, checkpoint: Checkpoint) -> Path:
        """Download the version's artifacts through the tracking server (once) and return the model's folder."""
        version = self.version_of(checkpoint)
        identity = f"{self.model}\0{version.version}\0{version.source}\0{version.created_ms}"
        digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", self.model).strip("-") or "model"
        target = self.cache_dir / f"{safe}-version-{version.version}-{digest}"
        if not target.exists():
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=f".{safe}-version-{version.version}.", dir=self.cache_dir))
            try:
                with self._errors(f"downloading version {version.version}"):
                    self.mlflow.artifacts.download_artifacts(
                        artifact_uri=self._uri(version), dst_path=str(partial), tracking_uri=self.tracking_uri
                    )
                os.replace(partial, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    shutil.rmtree(partial)
                raise
        for folder in _MLFLOW_FOLDERS:
            if (target / folder).is_dir() and find_model(target) is None and find_model(target / folder) is not None:
                return target / folder
        return target


def fetch_version(location: str, step: int | None, cache_dir: Path) -> Path:
    """``mlflow:<model>/<version>`` downloaded; its ``step`` tag, when it has one, must agree with ``step``."""
    model, number = parse_version_location(location)
    source = MlflowModel(model, cache_dir)
    versions = {v.version: v for v in source.versions()}
    version = versions.get(number)
    if version is None:
        known = ", ".join(sorted(versions, key=int)) or "none"
        raise DataError(f"{location}: model {model!r} has no version {number} (versions: {known})")
    if step is not None and version.tagged and version.step != step:
        raise DataError(f"{location}: --step {step} but version {number} is tagged step {version.step}")
    if version.status != READY:
        raise DataError(f"{location}: version {number} is {version.status}, not READY; evaluate it once it is")
    return source.fetch(source.checkpoint(version))

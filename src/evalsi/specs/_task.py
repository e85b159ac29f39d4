"""The ``Task`` resource: an agent task (an environment, its setup and a checker) for ``evalsi_harness``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evalsi._util.isolation import Isolation
from evalsi.specs._model import SpecModel as _Model
from evalsi.specs._resource import (
    API_VERSION,
    Resource,
    document_from_mapping,
    load_resources,
    parse_resources,
    select_resource,
)

CheckerScore = Literal["exit", "stdout"]


_PLATFORM = re.compile(r"^[a-z0-9]+/[a-z0-9_]+(?:/[a-z0-9]+)?$")


def check_image(value: str) -> str:
    """Check a task's ``image``: ``host``, or a path on disk, with an optional ``#REF`` naming one image of several.

    The path is a root filesystem directory, an OCI image layout or a ``docker save`` archive; an image in a
    registry (``python:3.12``) is refused, saying how to save it to disk.

    Args:
        value: The ``image`` as written.

    Raises:
        ValueError: The value is none of these.

    """
    if value == "host":
        return value
    path, sep, ref = value.partition("#")
    if not path or (sep and not ref):
        raise ValueError(f"{value!r} must be 'host' or a path, with an optional '#REF' after it (images/app.tar#app:1)")
    last = path.rstrip("/").rsplit("/", 1)[-1]
    if not sep and ("@sha256:" in path or ":" in last or (":" in path and "/" not in path.split(":", 1)[0])):
        raise ValueError(
            f"{value!r} looks like an image in a registry; images are read from disk, without a container runtime: "
            f"save it first (`skopeo copy docker://{value} oci:images/IMAGE:TAG`, or `docker save -o image.tar "
            f"{value}`), then give 'images/IMAGE#TAG' or 'image.tar'; or a root filesystem directory, or 'host'"
        )
    return value


def check_platform(value: str | None) -> str | None:
    """Check a task's ``platform``: ``os/arch[/variant]`` (``linux/amd64``, ``linux/arm/v7``), or None.

    Args:
        value: The ``platform`` as written.

    Raises:
        ValueError: The value is not of that form.

    """
    if value is not None and not _PLATFORM.match(value):
        raise ValueError(f"{value!r} is not a platform: give os/arch[/variant], e.g. linux/amd64 or linux/arm64")
    return value


def check_relative_path(value: str) -> str:
    """A path inside the work dir: relative, with no ``..`` (files are written there, never elsewhere).

    Args:
        value: The path as written.

    """
    path = PurePosixPath(value)
    if not value or path.is_absolute() or ".." in path.parts:
        raise ValueError(f"{value!r} must be a relative path inside the work dir, without '..'")
    return value


def _check_relative_paths(files: dict[str, str]) -> dict[str, str]:
    for path in files:
        check_relative_path(path)
    return files


WorkDirFiles = Annotated[dict[str, str], AfterValidator(_check_relative_paths)]
"""Files by their path inside the work dir (each checked by :func:`check_relative_path`), with their text."""


class StepLimitsSpec(_Model):
    """Limits of each action (a command, a file read or write), as the sandbox applies them."""

    wall_time: float = Field(default=30.0, gt=0, le=3600)
    """Seconds of wall-clock time before the command and everything it started are killed."""
    cpu_time: int = Field(default=30, ge=1, le=3600)
    """Seconds of CPU time."""
    memory_mb: int = Field(default=1024, ge=32, le=65536)
    """Address-space limit per process, in MiB."""
    max_processes: int = Field(default=64, ge=1, le=4096)
    """Processes and threads a command may run at once."""
    max_output_bytes: int = Field(default=64 << 10, ge=1024, le=64 << 20)
    """stdout and stderr beyond this are cut, and the observation says so."""
    max_file_mb: int = Field(default=64, ge=1, le=4096)
    """Largest file a command may write, in MiB."""


class EpisodeLimitsSpec(_Model):
    """Limits of a whole episode; past one the episode is truncated and the checker grades what is there."""

    wall_time: float = Field(default=600.0, gt=0)
    """Seconds of wall-clock time spent in actions over the episode."""
    cpu_time: float = Field(default=600.0, gt=0)
    """Seconds of CPU time used by actions over the episode."""


class LimitsSpec(_Model):
    """Per-step and per-episode limits."""

    step: StepLimitsSpec = Field(default_factory=StepLimitsSpec)
    episode: EpisodeLimitsSpec = Field(default_factory=EpisodeLimitsSpec)


class SetupSpec(_Model):
    """What the environment holds before the first step: files, then commands, run once and snapshotted."""

    files: WorkDirFiles = Field(default_factory=dict)
    """Work-dir files by relative path, with their text."""
    commands: list[str] = Field(default_factory=list)
    """Shell commands run in order in the work dir after the files are written; any failure fails the setup."""
    wall_time: float = Field(default=300.0, gt=0)
    """Seconds each setup command may take."""


class CheckerSpec(_Model):
    """How the end state is graded: a shell command, or a Python function, run in the environment."""

    command: str | None = None
    """A shell command run in the work dir after submission."""
    score: CheckerScore = "exit"
    """For ``command``: ``exit`` passes on exit status 0 and fails on 1 (any other status means the checker
    could not run); ``stdout`` reads a number in [0, 1] from the last non-empty line of its output."""
    callable: str | None = None
    """``file.py:function`` (relative to the task file): called with the environment, returns a bool or a number
    in [0, 1]."""
    files: WorkDirFiles = Field(default_factory=dict)
    """Files written into the work dir just before the checker runs (hidden tests the agent never sees)."""
    wall_time: float = Field(default=60.0, gt=0, le=3600)
    """Seconds the checker command may take."""

    @model_validator(mode="after")
    def _one_kind(self) -> CheckerSpec:
        if (self.command is None) == (self.callable is None):
            raise ValueError("a checker needs exactly one of command or callable")
        if self.callable is not None and ":" not in self.callable:
            raise ValueError(f"callable must be 'file.py:function' (got {self.callable!r})")
        return self


class TaskSpecBody(_Model):
    """The ``spec`` of a Task."""

    description: str
    """What the agent is asked to do: the first observation of every episode."""
    image: str = "host"
    """``host`` (the host's read-only system), or a path relative to the task file: a root filesystem directory,
    an OCI image layout directory or a ``docker save`` archive, ``#REF`` after it choosing one of several images."""
    platform: str | None = None
    """The platform to take from a multi-platform image (``linux/arm64``); default this machine's."""
    isolation: Isolation = "namespaced"
    """The sandbox rung episodes run at (a floor: never silently lowered)."""
    setup: SetupSpec = Field(default_factory=SetupSpec)
    checker: CheckerSpec
    max_steps: int = Field(default=30, ge=1, le=10_000)
    """Actions per episode; when they run out, the episode is truncated and the checker grades the end state."""
    limits: LimitsSpec = Field(default_factory=LimitsSpec)

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return check_image(value)

    @field_validator("platform")
    @classmethod
    def _platform(cls, value: str | None) -> str | None:
        return check_platform(value)


class TaskSpec(BaseModel):
    """A parsed Task resource: its name, body, and the file it came from (relative paths resolve against it)."""

    model_config = ConfigDict(frozen=True)

    name: str
    spec: TaskSpecBody
    source: str | None = None


def task_from_resource(resource: Resource) -> TaskSpec:
    """Validate a Task resource's spec.

    Raises:
        SpecError: A field is invalid; the message names the file, line and field path.

    """
    try:
        body = TaskSpecBody.model_validate(resource.spec)
    except ValidationError as exc:
        raise resource.validation_error(exc) from None
    return TaskSpec(name=resource.name, spec=body, source=resource.document.file)


def load_task_spec(source: str | Path, name: str | None = None, *, text: str | None = None) -> TaskSpec:
    """The Task in a YAML file (the one named ``name`` when the file holds several).

    Args:
        source: The YAML file, or a name for ``text``.
        name: Which Task when the file holds several.
        text: The YAML text; None reads ``source``.

    """
    resource = select_resource(load_resources(source, text=text), "Task", name, str(source))
    return task_from_resource(resource)


def task_spec_from_mapping(data: Mapping[str, Any], source: str | None = None) -> TaskSpec:
    """A Task given as a mapping: a whole resource, or just its ``spec`` (named ``task``).

    Args:
        data: A Task resource or its ``spec``.
        source: A name for it in error messages.

    """
    raw = dict(data)
    if "apiVersion" not in raw:
        raw = {"apiVersion": API_VERSION, "kind": "Task", "metadata": {"name": "task"}, "spec": raw}
    resources = parse_resources([document_from_mapping(raw, source)])
    return task_from_resource(select_resource(resources, "Task", None, source))

"""An agent task in Python: the environment (image, setup), the checker, and the limits of steps and episodes.

:func:`load_task` builds one from a ``kind: Task`` resource; constructing :class:`Task` directly is the same thing
in code (a checker may then be any Python callable).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from evalsi._util.modules import import_file
from evalsi.errors import SpecError
from evalsi.sandbox import Isolation, Limits
from evalsi.specs import StepLimitsSpec, TaskSpec, load_task_spec
from evalsi.specs._task import check_image, check_platform, check_relative_path

if TYPE_CHECKING:
    from evalsi_harness._environment import Environment

CheckFn = Callable[["Environment"], "float | bool"]
"""A Python checker: called with the episode's environment after submission; a bool or a number in [0, 1]."""


@dataclass(frozen=True)
class Setup:
    """What the work dir holds before the first step: ``files`` (relative path → text), then ``commands``."""

    files: Mapping[str, str] = field(default_factory=dict)
    commands: Sequence[str] = ()
    wall_time: float = 300.0
    """Seconds each setup command may take."""


@dataclass(frozen=True)
class CommandChecker:
    """A shell command run in the work dir after submission.

    ``score="exit"``: status 0 passes, 1 fails, anything else means the checker could not run. ``"stdout"``: the
    last non-empty line of its output is the score, a number in [0, 1].
    """

    command: str
    score: Literal["exit", "stdout"] = "exit"
    wall_time: float = 60.0


def step_limits(spec: StepLimitsSpec | None = None) -> Limits:
    """The sandbox limits of one action, from the spec's ``limits.step`` (defaults when None)."""
    spec = spec or StepLimitsSpec()
    return Limits(
        wall_time=spec.wall_time,
        cpu_time=spec.cpu_time,
        memory_bytes=spec.memory_mb << 20,
        max_processes=spec.max_processes,
        max_output_bytes=spec.max_output_bytes,
        max_file_bytes=spec.max_file_mb << 20,
    )


@dataclass(frozen=True)
class Task:
    """An agent task: what the agent is asked, where it works, and how its end state is graded.

    Raises:
        ValueError: A file path leaves the work dir, a limit is not positive, or the image or platform is not one
            (an image in a registry must be saved to disk first).

    """

    name: str
    description: str
    checker: CommandChecker | CheckFn
    setup: Setup = field(default_factory=Setup)
    checker_files: Mapping[str, str] = field(default_factory=dict)
    """Files written just before the checker runs (hidden tests the agent never sees)."""
    image: str = "host"
    """``host`` (the host's read-only system), or the path of a root filesystem directory, an OCI image layout
    or a ``docker save`` archive (``PATH#REF`` chooses one image of several), unpacked into the image cache."""
    platform: str | None = None
    """The platform taken from a multi-platform image (``linux/arm64``); None: this machine's."""
    isolation: Isolation = "namespaced"
    max_steps: int = 30
    step_limits: Limits = field(default_factory=step_limits)
    episode_wall_time: float = 600.0
    """Seconds of wall time spent in actions over an episode; past it the episode is truncated."""
    episode_cpu_time: float = 600.0
    """Seconds of CPU time used by actions over an episode; past it the episode is truncated."""

    def __post_init__(self) -> None:
        for path in [*self.setup.files, *self.checker_files]:
            check_relative_path(path)
        check_image(self.image)
        check_platform(self.platform)
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be at least 1 (got {self.max_steps})")
        if min(self.episode_wall_time, self.episode_cpu_time, self.setup.wall_time) <= 0:
            raise ValueError("episode and setup time limits must be positive")
        if isinstance(self.checker, CommandChecker) and self.checker.score not in ("exit", "stdout"):
            raise ValueError(f"checker score must be 'exit' or 'stdout' (got {self.checker.score!r})")

    @property
    def image_dir(self) -> str | None:
        """The image's path (a root filesystem directory, an OCI layout, an archive), or None for the host's."""
        return None if self.image == "host" else self.image.partition("#")[0]


def load_task(path: str | Path, name: str | None = None) -> Task:
    """The Task resource in a YAML file, as a :class:`Task` (image and callable paths relative to the file).

    Args:
        path: The YAML file.
        name: Which Task of the file, when it holds several.

    Raises:
        SpecError: The file or a field is invalid, or the checker callable cannot be loaded.

    """
    return task_from_spec(load_task_spec(path, name))


def task_from_spec(spec: TaskSpec) -> Task:
    """A :class:`Task` from a validated Task resource.

    Args:
        spec: The Task resource, validated.

    Raises:
        SpecError: The checker callable cannot be loaded.

    """
    body = spec.spec
    base = Path(spec.source).parent if spec.source else Path.cwd()
    checker: CommandChecker | CheckFn
    if body.checker.command is not None:
        checker = CommandChecker(body.checker.command, body.checker.score, body.checker.wall_time)
    else:
        checker = _load_callable(str(body.checker.callable), base, spec.source)
    image = body.image
    if image != "host":
        path, sep, ref = image.partition("#")
        image = str((base / path).resolve()) + sep + ref
    return Task(
        name=spec.name,
        description=body.description,
        checker=checker,
        setup=Setup(dict(body.setup.files), tuple(body.setup.commands), body.setup.wall_time),
        checker_files=dict(body.checker.files),
        image=image,
        platform=body.platform,
        isolation=body.isolation,
        max_steps=body.max_steps,
        step_limits=step_limits(body.limits.step),
        episode_wall_time=body.limits.episode.wall_time,
        episode_cpu_time=body.limits.episode.cpu_time,
    )


def _load_callable(reference: str, base: Path, source: str | None) -> CheckFn:
    file_part, _, attribute = reference.partition(":")
    path = Path(file_part) if Path(file_part).is_absolute() else base / file_part

    def fail(why: str) -> SpecError:
        message = f"cannot load checker callable {reference!r}: {why}"
        return SpecError(message, file=source, path="spec.checker.callable")

    try:
        module = import_file(path, "evalsi_task_checker")
    except ImportError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:
        raise fail(f"{type(exc).__name__}: {exc}") from None
    target: Any = getattr(module, attribute, None)
    if not callable(target):
        raise fail(f"{path} has no function {attribute!r}")
    fn: CheckFn = target
    return fn

"""The Task resource and its Python form: loading, defaults, and errors naming file, line and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from evalsi.errors import SpecError
from evalsi.sandbox import Limits
from evalsi.specs import load_task_spec, task_spec_from_mapping
from evalsi_harness import CommandChecker, Setup, Task, load_task

from .conftest import EXAMPLES, example

HEADER = "apiVersion: evals.si/v1alpha1\nkind: Task\nmetadata: {name: demo}\nspec:\n"


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "task.yaml"
    path.write_text(HEADER + textwrap.indent(textwrap.dedent(body).lstrip(), "  "))
    return path


def error(tmp_path: Path, body: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_task(write(tmp_path, body))
    return info.value


def test_every_example_loads_with_its_fields() -> None:
    fix = load_task(example("fix-failing-test"))
    assert fix.name == "fix-failing-test"
    assert set(fix.setup.files) == {"stats.py", "test_stats.py"}
    assert fix.setup.commands[0].startswith("git init")
    assert isinstance(fix.checker, CommandChecker) and fix.checker.score == "exit"
    assert set(fix.checker_files) == {"test_hidden_stats.py"}
    assert fix.step_limits.wall_time == 20 and fix.max_steps == 20
    shell = load_task(example("shell-sort-logs"))
    assert callable(shell.checker) and shell.checker.__name__ == "grade"
    assert load_task(example("write-file")).episode_wall_time == 60
    assert {p.name for p in EXAMPLES.iterdir() if (p / "task.yaml").exists()} >= {
        "write-file",
        "fix-failing-test",
        "shell-sort-logs",
    }


def test_defaults_and_limits_map_onto_the_sandbox(tmp_path: Path) -> None:
    task = load_task(write(tmp_path, "description: d\nchecker: {command: 'true'}\nlimits: {step: {memoryMb: 64}}"))
    assert task.image == "host" and task.isolation == "namespaced" and task.max_steps == 30
    assert task.step_limits == Limits(wall_time=30.0, cpu_time=30, memory_bytes=64 << 20, max_processes=64,
                                      max_output_bytes=64 << 10, max_file_bytes=64 << 20)  # fmt: skip


def test_unknown_field_names_file_line_and_path(tmp_path: Path) -> None:
    exc = error(tmp_path, "description: d\nchecker: {command: 'true'}\nmaxStep: 3\n")
    assert exc.file and exc.file.endswith("task.yaml")
    assert exc.line == 7 and exc.path == "spec.maxStep" and "unknown field" in str(exc)


def test_bad_values_are_named_with_what_is_valid(tmp_path: Path) -> None:
    exc = error(tmp_path, "description: d\nchecker: {command: 'true'}\nmaxSteps: 0\n")
    assert exc.path == "spec.maxSteps" and "greater than or equal to 1" in str(exc)
    exc = error(tmp_path, "description: d\nchecker: {command: 'true', callable: 'c.py:f'}\n")
    assert exc.path == "spec.checker" and "exactly one of command or callable" in str(exc)
    exc = error(tmp_path, "description: d\nchecker: {command: 'true', score: exitcode}\n")
    assert exc.path == "spec.checker.score" and "'exit' or 'stdout'" in str(exc)
    exc = error(tmp_path, "description: d\nchecker: {command: 'true'}\nsetup: {files: {../escape.txt: x}}\n")
    assert exc.path == "spec.setup.files" and "relative path inside the work dir" in str(exc)
    exc = error(tmp_path, "checker: {command: 'true'}\n")
    assert exc.path == "spec.description" and "required" in str(exc)
    exc = error(tmp_path, "description: d\nchecker: {command: 'true'}\nimage: python:3.12\n")
    assert exc.path == "spec.image" and "root filesystem directory" in str(exc)
    exc = error(tmp_path, "description: d\nchecker: {command: 'true'}\nisolation: docker\n")
    assert exc.path == "spec.isolation" and "'namespaced'" in str(exc)


def test_a_checker_callable_that_cannot_load_is_a_spec_error(tmp_path: Path) -> None:
    exc = error(tmp_path, "description: d\nchecker: {callable: 'missing.py:grade'}\n")
    assert exc.path == "spec.checker.callable" and "no such file" in str(exc)
    (tmp_path / "c.py").write_text("def other(env):\n    return True\n")
    exc = error(tmp_path, "description: d\nchecker: {callable: 'c.py:grade'}\n")
    assert "has no function 'grade'" in str(exc)


def test_image_directory_resolves_against_the_task_file(tmp_path: Path) -> None:
    task = load_task(write(tmp_path, "description: d\nchecker: {command: 'true'}\nimage: rootfs\n"))
    assert task.image_dir == str(tmp_path / "rootfs")


def test_an_image_archive_with_a_reference_and_a_platform_resolves_against_the_task_file(tmp_path: Path) -> None:
    body = "description: d\nchecker: {command: 'true'}\nimage: 'images/app.tar#app:1.0'\nplatform: linux/arm64\n"
    task = load_task(write(tmp_path, body))
    assert task.image == f"{tmp_path / 'images/app.tar'}#app:1.0" and task.image_dir == str(tmp_path / "images/app.tar")
    assert task.platform == "linux/arm64"
    exc = error(tmp_path, "description: d\nchecker: {command: 'true'}\nimage: ghcr.io/org/app:1.0\n")
    assert exc.path == "spec.image" and "skopeo copy docker://ghcr.io/org/app:1.0" in str(exc)
    exc = error(tmp_path, "description: d\nchecker: {command: 'true'}\nimage: 'app.tar#'\n")
    assert exc.path == "spec.image" and "optional '#REF'" in str(exc)
    exc = error(tmp_path, "description: d\nchecker: {command: 'true'}\nimage: app.tar\nplatform: arm64\n")
    assert exc.path == "spec.platform" and "os/arch[/variant]" in str(exc)


def test_a_file_with_several_tasks_is_chosen_by_name(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"

    def doc(name: str, description: str) -> str:
        return HEADER.replace("demo", name) + f"  description: {description}\n  checker: {{command: 'true'}}\n"

    path.write_text(doc("one", "first") + "---\n" + doc("two", "second"))
    assert load_task(path, "two").description == "second"
    with pytest.raises(SpecError, match="several Task resources"):
        load_task(path)


def test_mapping_form_and_python_form_agree() -> None:
    spec = task_spec_from_mapping({"description": "d", "checker": {"command": "true"}, "maxSteps": 4})
    assert spec.spec.max_steps == 4 and spec.name == "task"
    inline = HEADER + "  description: d\n  checker: {command: 'true'}\n"
    assert load_task_spec("inline.yaml", text=inline).name == "demo"
    with pytest.raises(ValueError, match="relative path inside the work dir"):
        Task("t", "d", CommandChecker("true"), setup=Setup(files={"/etc/passwd": "x"}))
    with pytest.raises(ValueError, match="max_steps must be at least 1"):
        Task("t", "d", CommandChecker("true"), max_steps=0)

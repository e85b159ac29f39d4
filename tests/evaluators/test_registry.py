"""The evaluator registry: built-ins, validation at registration, and packs found through entry points."""

from __future__ import annotations

import ast
import re
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

import evalsi.evaluators as ev
from evalsi.errors import UnknownEvaluatorError
from evalsi.evaluators import _registry


def test_builtins_are_listed_with_summaries() -> None:
    names = {cls.name for cls in ev.all_evaluators()}
    assert {"exact-match", "contains", "regex", "json-schema", "format-check", "overlong-penalty"} <= names


def test_unknown_name_suggests_close_ones() -> None:
    with pytest.raises(UnknownEvaluatorError) as info:
        ev.get_evaluator("overlong-penality")
    assert info.value.suggestions[0] == "overlong-penalty"


def test_registration_validates_the_class() -> None:
    class NoName(ev.Evaluator[ev.NoParams]):
        summary = "x"

        def score(self, record, params, ctx):
            return ev.Score.ok(1.0)

    with pytest.raises(ev.PluginValidationError, match="must set a non-empty class attribute `name`"):
        ev.register(NoName)

    class NoScore(ev.Evaluator[ev.NoParams]):
        name = "no-score"
        summary = "x"

    with pytest.raises(ev.PluginValidationError, match="must implement score"):
        ev.register(NoScore)


@pytest.fixture
def installed_pack(tmp_path: Path) -> Iterator[Path]:
    """A real distribution on sys.path whose entry point registers an evaluator (and one that is broken)."""
    package = tmp_path / "evalsi_testpack"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent(
            '''
            import evalsi.evaluators as ev

            class Shout(ev.Evaluator[ev.NoParams]):
                """Pass when the completion is upper case."""

                name = "shout"
                summary = "The completion is in capitals."
                pack = "testpack"

                def score(self, record, params, ctx):
                    return ev.Score.ok(record.completion_text.isupper())
            '''
        )
    )
    info = tmp_path / "evalsi_testpack-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evalsi-testpack\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[evalsi.evaluators]\nshout = evalsi_testpack:Shout\nbroken = evalsi_testpack:DoesNotExist\n"
    )
    sys.path.insert(0, str(tmp_path))
    saved = dict(_registry._classes)
    _registry._entry_points_loaded = False
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("evalsi_testpack", None)
        _registry._classes.clear()
        _registry._classes.update(saved)
        _registry._instances.pop("shout", None)
        _registry._entry_points_loaded = False


def test_entry_point_pack_is_found_on_a_miss_and_a_broken_one_warns(installed_pack: Path) -> None:
    import evalsi.rewards

    with pytest.warns(RuntimeWarning, match="evaluator pack 'broken'"):
        reward = evalsi.rewards.from_mapping({"components": [{"ref": "shout"}]})
    assert [r.total for r in reward.score([{"completion": "HI"}, {"completion": "hi"}])] == [1.0, 0.0]
    assert "shout" in ev.available_names()


def _declared_entry_points() -> dict[str, str]:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    return dict(pyproject["project"]["entry-points"][_registry.ENTRY_POINT_GROUP])


def test_builtins_are_found_through_the_installed_entry_point_like_any_pack() -> None:
    declared = _declared_entry_points()
    installed = {point.name: point.value for point in metadata.distribution("evalsi").entry_points}
    assert {n: v for n, v in installed.items() if n in declared} == declared, (
        "the installed metadata is older than pyproject.toml: reinstall (`pip install -e .`)"
    )
    for name, module in declared.items():
        cls = ev.evaluator_class(name)
        assert cls.name == name
        assert cls.__module__.startswith(module), f"{name} is declared in {module} but defined in {cls.__module__}"
    assert {"task-checker", "evaluation-test"} <= set(declared)


def test_the_registry_names_no_module_by_string() -> None:
    """Import contracts cannot see ``importlib.import_module("...")``: the registry must hold no module path."""
    source = Path(_registry.__file__).read_text()
    paths = [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"evalsi(_harness)?(\.\w+)+|evalsi_harness", node.value)
        and node.value != _registry.ENTRY_POINT_GROUP
    ]
    assert paths == [], f"the registry names modules by string: {paths}"


def test_an_installation_without_metadata_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_registry, "_classes", {})
    monkeypatch.setattr(_registry, "_points", metadata.EntryPoints(()))
    monkeypatch.setattr(_registry, "_entry_points_loaded", True)
    with pytest.raises(UnknownEvaluatorError, match=r"package metadata is missing.*pip install -e \."):
        ev.get_evaluator("exact-match")

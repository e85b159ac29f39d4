"""Loading RewardSpecs: every error names file, line and field path, and what would be valid."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import evalsi.rewards
from evalsi.errors import SpecError


def write(tmp_path: Path, text: str, name: str = "reward.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


HEADER = """\
apiVersion: evals.si/v1alpha1
kind: RewardSpec
metadata: {name: demo}
spec:
"""


def load_error(tmp_path: Path, body: str) -> SpecError:
    path = write(tmp_path, HEADER + textwrap.indent(textwrap.dedent(body), "  "))
    with pytest.raises(SpecError) as info:
        evalsi.rewards.load(path)
    return info.value


def test_seed_example_loads_with_every_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        apiVersion: evals.si/v1alpha1
        kind: RewardSpec
        metadata: {name: demo}
        spec:
          components:
            - ref: format-check
              name: format
              weight: 0.1
              gate: true
              threshold: 1
              onError: zero
              params: {pattern: "(?s).*answer.*"}
            - ref: exact-match
              name: exact
              weight: 0.9
              params: {ignore_case: true}
          floor: -1
          clip: [-1, 1]
          onError: none
          cache: {enabled: false}
          referenceField: gold
        """,
    )
    reward = evalsi.rewards.load(path)
    assert reward.name == "demo"
    assert reward.component_names == ["format", "exact"]
    body = reward.spec.spec
    assert (body.floor, body.clip, body.on_error, body.reference_field) == (-1, (-1, 1), "none", "gold")
    assert reward.cache is None
    assert [c.rule.on_error for c in reward.components] == ["zero", "none"]
    result = reward.score([{"completion": "the answer", "gold": "THE Answer"}])[0]
    assert result.total == 1.0
    assert result.components["exact"].value is True


def test_unknown_ref_suggests_closest_names_with_line(tmp_path: Path) -> None:
    error = load_error(tmp_path, "components:\n  - ref: exact-mach\n")
    assert error.line == 6
    assert error.path == "spec.components[0].ref"
    assert "did you mean 'exact-match'" in str(error)
    assert str(error).startswith(f"{error.file}:6: spec.components[0].ref:")


def test_unknown_param_is_an_error_listing_valid_params(tmp_path: Path) -> None:
    error = load_error(tmp_path, "components:\n  - ref: exact-match\n    params:\n      ignorecase: true\n")
    assert error.path == "spec.components[0].params.ignorecase"
    assert error.line == 8
    assert "valid params: collapse_whitespace, ignore_case, strip" in str(error)


def test_bad_param_value_names_the_param(tmp_path: Path) -> None:
    error = load_error(tmp_path, "components:\n  - ref: regex\n    params: {pattern: '(unclosed'}\n")
    assert error.path == "spec.components[0].params.pattern"
    assert "not a valid regular expression" in str(error)


def test_missing_required_param(tmp_path: Path) -> None:
    error = load_error(tmp_path, "components:\n  - ref: regex\n")
    assert error.path == "spec.components[0].params.pattern"
    assert "required" in str(error).lower()


def test_wrong_type_names_field_line_and_value(tmp_path: Path) -> None:
    error = load_error(tmp_path, "components:\n  - ref: exact-match\n  - ref: contains\n    weight: heavy\n")
    assert error.path == "spec.components[1].weight"
    assert error.line == 8
    assert "'heavy'" in str(error)


def test_an_inverted_clip_names_its_values_once(tmp_path: Path) -> None:
    error = load_error(tmp_path, "components:\n  - ref: exact-match\nclip: [1, 0]\n")
    assert error.path == "spec.clip" and str(error).count("got") == 1 and "got [1.0, 0.0]" in str(error)


def test_unknown_spec_field_is_rejected(tmp_path: Path) -> None:
    error = load_error(tmp_path, "components:\n  - ref: exact-match\nflor: 1\n")
    assert error.path == "spec.flor"
    assert "unknown field" in str(error)


@pytest.mark.parametrize("misplaced", ["sandbox: {minIsolation: gvisor}", "minIsolation: gvisor"])
def test_sandbox_under_spec_says_it_sits_on_a_component(tmp_path: Path, misplaced: str) -> None:
    error = load_error(tmp_path, f"{misplaced}\ncomponents:\n  - ref: code-exec-tests\n")
    assert error.line == 5 and "unknown field" in str(error)
    assert "sits on a component" in str(error) and "spec.components[i]" in str(error)
    assert "sits on a component" not in str(load_error(tmp_path, "components:\n  - ref: exact-match\nflor: 1\n"))


def test_sandbox_on_a_component_that_runs_no_code(tmp_path: Path) -> None:
    error = load_error(tmp_path, "components:\n  - ref: exact-match\n    sandbox: {minIsolation: namespaced}\n")
    assert error.path == "spec.components[0].sandbox"
    assert "does not run code" in str(error)


def test_invalid_isolation_rung_lists_valid_ones(tmp_path: Path) -> None:
    error = load_error(tmp_path, "components:\n  - ref: exact-match\n    sandbox: {minIsolation: vm}\n")
    assert error.path == "spec.components[0].sandbox.minIsolation"
    assert "'process'" in str(error) and "'namespaced'" in str(error)


def test_duplicate_component_names_point_at_the_second(tmp_path: Path) -> None:
    error = load_error(tmp_path, "components:\n  - ref: exact-match\n  - ref: exact-match\n")
    assert error.path == "spec.components[1].ref"
    assert error.line == 7
    assert "distinct `name`" in str(error)


def test_duplicate_yaml_keys_are_rejected(tmp_path: Path) -> None:
    error = load_error(tmp_path, "components:\n  - ref: exact-match\n    weight: 1\n    weight: 2\n")
    assert error.line == 8
    assert "duplicate key 'weight'" in str(error)


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "  components: [\n")
    with pytest.raises(SpecError) as info:
        evalsi.rewards.load(path)
    assert "invalid YAML" in str(info.value)
    assert info.value.line is not None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("apiVersion: v1\nkind: RewardSpec\nmetadata: {name: x}\nspec: {}\n", "apiVersion must be 'evals.si/v1alpha1'"),
        (
            "apiVersion: evals.si/v1alpha1\nkind: RewardSpek\nmetadata: {name: x}\nspec: {}\n",
            "did you mean 'RewardSpec'",
        ),
        ("apiVersion: evals.si/v1alpha1\nkind: RewardSpec\nspec: {}\n", "metadata.name is required"),
        ("apiVersion: evals.si/v1alpha1\nkind: RewardSpec\nmetadata: {name: x}\n", "spec is required"),
        ("- 1\n- 2\n", "a resource must be a mapping"),
    ],
)
def test_envelope_errors(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SpecError, match=message):
        evalsi.rewards.load(path)


def test_multi_document_file_picks_by_name(tmp_path: Path) -> None:
    one = HEADER.replace("demo", "one") + "  components: [{ref: exact-match}]\n"
    two = HEADER.replace("demo", "two") + "  components: [{ref: contains}]\n"
    path = write(tmp_path, one + "---\n" + two)
    assert evalsi.rewards.load(path, "two").component_names == ["contains"]
    with pytest.raises(SpecError, match="several RewardSpec resources"):
        evalsi.rewards.load(path)
    with pytest.raises(SpecError, match=r"no RewardSpec named 'three' \(found: one, two\)"):
        evalsi.rewards.load(path, "three")


def test_errors_in_a_later_document_name_their_own_line(tmp_path: Path) -> None:
    one = HEADER.replace("demo", "one") + "  components: [{ref: exact-match}]\n"
    two = HEADER.replace("demo", "two") + "  components:\n    - ref: nope\n"
    path = write(tmp_path, one + "---\n" + two)
    with pytest.raises(SpecError) as info:
        evalsi.rewards.load(path, "two")
    assert info.value.line == 12


def test_missing_file() -> None:
    with pytest.raises(SpecError, match="no such file"):
        evalsi.rewards.load("/nonexistent/reward.yaml")


def test_from_mapping_accepts_a_bare_spec_body_and_reports_paths() -> None:
    reward = evalsi.rewards.from_mapping({"components": [{"ref": "contains", "params": {"text": "x"}}]})
    assert reward.score([{"completion": "xyz"}])[0].total == 1.0
    with pytest.raises(SpecError) as info:
        evalsi.rewards.from_mapping({"components": [{"ref": "contains", "weight": "x"}]})
    assert info.value.path == "spec.components[0].weight"


def test_a_threshold_off_a_gate_would_never_be_read_and_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "  components:\n    - {ref: exact-match}\n    - {ref: contains, threshold: 0.5}\n")
    with pytest.raises(SpecError, match=r"reward\.yaml:5: spec\.components: .*components\[1\]\.threshold .*gate: true"):
        evalsi.rewards.load(path)
    gated = write(tmp_path, HEADER + "  components:\n    - {ref: contains, gate: true, threshold: 0.5}\n")
    assert evalsi.rewards.load(gated).component_names == ["contains"]


def test_metadata_holds_a_name_and_labels_only(tmp_path: Path) -> None:
    text = "apiVersion: evals.si/v1alpha1\nkind: RewardSpec\nmetadata: {name: x, nmae: y}\nspec: {components: []}\n"
    with pytest.raises(SpecError, match=r"reward\.yaml:3: metadata\.nmae: unknown field; metadata has name and labels"):
        evalsi.rewards.load(write(tmp_path, text))

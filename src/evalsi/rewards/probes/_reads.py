"""What a component reads, in the terms probes are keyed by, and what kind of check that makes it.

A probe applies to a component when the component reads what the probe attacks: a padded reference attacks
components that read the reference, a program that reads the tests attacks components that run test cases, a
prompt injection attacks components that ask a model. The keys come from the evaluator's declared cache fields
(what its score depends on), so a third-party evaluator is classified the same way as a built-in one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from evalsi.rewards._reward import BoundComponent

Key = Literal["completion", "prompt", "reference", "tests", "model", "code", "format", "schema", "tokens"]
"""What a component reads or does: the text it scores, the prompt, the reference, test cases, a served model
(judge or reward model), model-written code it runs, a format pattern, a JSON Schema, the token count."""

Kind = Literal["correctness", "shape", "constant"]
"""``correctness``: the score depends on a reference, test cases, code it runs or a model's verdict, so no probe
should earn it. ``shape``: it checks only the completion's form or length (a format, a pattern, a schema), which
a probe may satisfy by design. ``constant``: it does not read the completion at all (a precomputed score)."""

TEST_FIELDS: tuple[str, ...] = (
    "tests", "inputs", "outputs", "input_output", "fn_name", "test_list", "test_setup_code",
    "test_imports", "test", "entry_point",
)  # fmt: skip
"""Rollout fields that hold test cases (those ``code-exec-tests`` reads)."""

SOLUTION_FIELDS: tuple[str, ...] = ("canonical_solution", "solution", "solutions", "reference_solution")
"""Rollout fields that hold a known-good program (HumanEval's ``canonical_solution``, APPS' ``solutions``)."""


@dataclass(frozen=True)
class ComponentReads:
    """One component of a spec, with what it reads and the kind of check it is."""

    component: BoundComponent
    keys: frozenset[Key]
    kind: Kind

    @property
    def name(self) -> str:
        """The component's name in the spec."""
        return self.component.name

    @property
    def evaluator(self) -> str:
        """The evaluator's registered name."""
        return self.component.evaluator.name

    @property
    def oracle_keys(self) -> frozenset[Key]:
        """What an oracle must satisfy for this component: its reference, its tests (empty: no oracle applies).

        A component that asks a model is left out: a judge's or reward model's score of the reference is shown,
        but not required to be full (its scale and its leniency are the model's).
        """
        if self.kind != "correctness" or "model" in self.keys:
            return frozenset()
        keys: set[Key] = set()
        if "reference" in self.keys:
            keys.add("reference")
        if "tests" in self.keys:
            keys.add("tests")
        return frozenset(keys)


def component_reads(component: BoundComponent) -> ComponentReads:
    """Classify one bound component by the record fields its score depends on and what its evaluator does.

    Args:
        component: A bound component.

    """
    evaluator = component.evaluator
    keys: set[Key] = set()
    for field in evaluator.cache_fields(component.params):
        if field in ("completion", "completion_text"):
            keys.add("completion")
        elif field == "prompt":
            keys.add("prompt")
        elif field == "reference":
            keys.add("reference")
        elif field == "completion_tokens":
            keys.add("tokens")
        elif field == "metadata":
            keys.add("tests")  # the whole rollout: test cases included
        elif field.startswith("metadata.") and field.removeprefix("metadata.") in TEST_FIELDS:
            keys.add("tests")
    if evaluator.server_resource is not None:
        keys.add("model")
    if evaluator.runs_code:
        keys.add("code")
    if isinstance(getattr(component.params, "pattern", None), str):
        keys.add("format")
    if hasattr(component.params, "schema_"):
        keys.add("schema")
    return ComponentReads(component, frozenset(keys), _kind(keys))


def _kind(keys: set[Key]) -> Kind:
    if not keys & {"completion", "tokens"}:
        return "constant"
    if keys & {"reference", "tests", "model", "code"}:
        return "correctness"
    return "shape"

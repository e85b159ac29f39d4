"""The probe registry: generators of adversarial completions, each keyed by what it attacks.

A probe builds completions for one row of the data (its prompt, reference and test cases) that deserve no
reward: an empty answer, the prompt echoed, the reference buried in junk, a program that reads the tests. It
applies to the components that read one of its ``keys`` (see :mod:`evalsi.rewards.probes._reads`). A probe that
does not depend on the row (``once``) is built for the first row only, so a large one (a megabyte of LaTeX) is
scored once per spec.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalsi.evaluators.rl._code_extract import called_names
from evalsi.records import Record, reference_options
from evalsi.rewards.probes._reads import SOLUTION_FIELDS, TEST_FIELDS, ComponentReads, Key

_NOT_UNDER_TEST = frozenset(
    {"assert", "print", "set", "list", "tuple", "sorted", "abs", "len", "round", "int", "float", "str", "isclose",
     "all", "any", "sum", "min", "max", "dict", "frozenset", "bool", "type", "range", "map", "zip", "enumerate"}
)  # fmt: skip


@dataclass(frozen=True)
class ProbeLimits:
    """How much probing one spec may cost."""

    max_rows: int = 8
    """Distinct rows of the data (prompt, reference, test cases) the probes are built from."""
    max_rollouts: int = 512
    """Probe and oracle rollouts scored in all; rows past it are left out (the first row is always probed)."""
    latex_chars: int = 1_000_000
    """Size of the LaTeX flood (one completion per spec)."""
    padding_chars: int = 16_000
    """Size of the junk the reference is buried in."""
    candidates: int = 24
    """Most candidate answers listed at once."""


@dataclass(frozen=True)
class ProbeRow:
    """One distinct task of the data: where it came from, and the record its probes are built from."""

    index: int
    """The position of the rollout (or dataset row) it was taken from."""
    record: Record

    @property
    def prompt(self) -> str:
        """The prompt as text ("" without one)."""
        return self.record.prompt_text

    @property
    def references(self) -> list[str]:
        """The answers the reference accepts, as text (empty without a reference)."""
        return reference_options(self.record.reference)

    @property
    def reference(self) -> str | None:
        """The first answer the reference accepts."""
        options = self.references
        return options[0] if options else None

    def has_tests(self) -> bool:
        """Whether the row carries test cases."""
        return any(self.record.metadata.get(name) is not None for name in TEST_FIELDS)

    def solutions(self) -> list[str]:
        """Known-good programs in the row (``canonical_solution``, ``solution``, the first of ``solutions``)."""
        found: list[str] = []
        for name in SOLUTION_FIELDS:
            value: Any = self.record.metadata.get(name)
            if isinstance(value, str) and value.lstrip().startswith("["):
                value = _json_list(value)
            if isinstance(value, list):
                value = next((v for v in value if isinstance(v, str) and v.strip()), None)
            if isinstance(value, str) and value.strip() and value not in found:
                found.append(value)
        reference = self.reference
        if reference is not None and looks_like_code(reference) and reference not in found:
            found.append(reference)
        return found

    def called_names(self) -> list[str]:
        """Names of the functions the row's tests call (``entry_point``, ``fn_name``, those ``test_list`` calls)."""
        return called_names(self.record.metadata, _NOT_UNDER_TEST)


@dataclass(frozen=True)
class ProbeContext:
    """What every probe may use besides its row: the spec's components, candidate answers, the limits."""

    components: Sequence[ComponentReads]
    candidates: Sequence[str]
    """Distinct answers seen across the data (other rows' references, and small numbers or letters)."""
    limits: ProbeLimits = field(default_factory=ProbeLimits)


Variant = tuple[str, str]
"""(variant name, completion text)."""

Builder = Callable[[ProbeRow, ProbeContext], list[Variant]]


@dataclass(frozen=True)
class Probe:
    """A generator of completions that should earn no reward from the components reading one of ``keys``."""

    name: str
    summary: str
    keys: frozenset[Key]
    build: Builder
    once: bool = False
    """Built for the first row only (it does not depend on the row)."""

    def applies_to(self, component: ComponentReads) -> bool:
        """Whether the component reads what this probe attacks.

        Args:
            component: What one component reads.

        """
        return bool(self.keys & component.keys)


_PROBES: dict[str, Probe] = {}


def register_probe(probe: Probe) -> Probe:
    """Add a probe to the registry (a later one with the same name replaces it).

    Args:
        probe: The probe to add.

    """
    _PROBES[probe.name] = probe
    return probe


def probe(name: str, summary: str, keys: Iterable[Key], *, once: bool = False) -> Callable[[Builder], Builder]:
    """Decorator: register ``build`` as the probe ``name``."""

    def decorate(build: Builder) -> Builder:
        register_probe(Probe(name, summary, frozenset(keys), build, once))
        return build

    return decorate


BUILTIN_ORDER = (
    "empty", "prompt-echo", "reference-padded", "all-candidates", "wrong-place", "latex-flood", "judge-injection",
    "format-shell", "null-program", "exit-early", "tests-from-files", "tests-from-env", "always-equal",
)  # fmt: skip
"""The built-in probes, in the order reports list them (others follow in registration order)."""


def registered_probes() -> list[Probe]:
    """Every registered probe: the built-in ones in :data:`BUILTIN_ORDER`, then others as registered."""
    from evalsi.rewards.probes import _code, _shapes, _text  # noqa: F401  (registers the built-in probes)

    rank = {name: position for position, name in enumerate(BUILTIN_ORDER)}
    return sorted(_PROBES.values(), key=lambda p: rank.get(p.name, len(rank)))


def probes_for(components: Sequence[ComponentReads]) -> list[Probe]:
    """The probes that apply to at least one of the components, in registration order.

    Args:
        components: What each component reads.

    """
    return [p for p in registered_probes() if any(p.applies_to(c) for c in components)]


def looks_like_code(text: str) -> bool:
    """Whether a reference reads as a program rather than an answer (so it is an oracle for test cases)."""
    return "\n" in text.strip() and any(word in text for word in ("def ", "print(", "input(", "import ", "return "))


def _json_list(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None

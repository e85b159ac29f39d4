r"""The oracle: the data's own right answers, which must earn full reward.

A reference is tried in the forms answers take (as it is, ``\boxed{}``, ``<think>…</think><answer>…</answer>``,
``The answer is``, ``Answer:``, ``####``, a fenced block), and a known-good program (``canonical_solution``,
``solution``, the first of ``solutions``, or a reference that is a program) as a fenced python block and as it
is. Per component, the best of the forms must score 1: a component that no form of the right answer satisfies
pays for something else, or for nothing, and a reward that cannot be earned teaches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalsi.rewards.probes._code import fenced
from evalsi.rewards.probes._reads import Key
from evalsi.rewards.probes._registry import ProbeRow, looks_like_code


@dataclass(frozen=True)
class Rendering:
    """One form of a right answer, and what it is right for (``reference`` or ``tests``)."""

    name: str
    completion: str
    serves: Key


def renderings(row: ProbeRow) -> list[Rendering]:
    """Every form of the row's reference and known-good programs to score as the oracle."""
    out: list[Rendering] = []
    reference = row.reference
    if reference is not None and not looks_like_code(reference):
        out += [
            Rendering("as-is", reference, "reference"),
            Rendering("boxed", f"\\boxed{{{reference}}}", "reference"),
            Rendering("think-answer", f"<think>\n{reference}\n</think>\n<answer>{reference}</answer>", "reference"),
            Rendering("answer-is", f"The answer is {reference}.", "reference"),
            Rendering("answer-line", f"Answer: {reference}", "reference"),
            Rendering("gsm8k", f"#### {reference}", "reference"),
            Rendering("fenced-json", f"```json\n{reference}\n```", "reference"),
        ]
    for position, program in enumerate(row.solutions()):
        suffix = f"-{position + 1}" if position else ""
        out.append(Rendering(f"solution{suffix}", fenced(program), "tests"))
        out.append(Rendering(f"solution-as-is{suffix}", program, "tests"))
        if program == reference:  # a reference that is a program is also the reference-readers' answer
            out.append(Rendering(f"reference-program{suffix}", program, "reference"))
    return out

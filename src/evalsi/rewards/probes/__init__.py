"""Probes: adversarial rollouts built from a spec's own data, scored to show which components they earn.

``probe_reward(reward, records)`` builds, for each distinct task in the data, completions that deserve no reward
(an empty answer, the prompt echoed, the reference buried in junk, every candidate at once, the reference in a
think block, a megabyte of LaTeX, a program that exits early or reads its tests, a prompt injection aimed at a
judge, the bare shell of the format) and the data's own right answers (the oracle), scores them with the spec,
and reports per component which probes earned it and whether the right answers earn full reward.

Which probes apply depends on what each component's evaluator reads (its cache fields, whether it runs code or
asks a model): see :func:`component_reads` and the registry (:func:`registered_probes`, :func:`register_probe`).

Example:
    >>> import evalsi.rewards
    >>> from evalsi.rewards.probes import probe_reward
    >>> reward = evalsi.rewards.from_mapping({"components": [{"ref": "contains"}]})
    >>> rows = reward.records([{"prompt": "2+2?", "completion": "", "answer": "4"}])
    >>> report = probe_reward(reward, rows)
    >>> report.hackable, report.components[0].hacked_by[:2]
    (True, ['reference-padded', 'all-candidates'])

"""

from evalsi._util.public import publish
from evalsi.rewards.probes._reads import ComponentReads, Key, Kind, component_reads
from evalsi.rewards.probes._registry import (
    Probe,
    ProbeContext,
    ProbeLimits,
    ProbeRow,
    probes_for,
    register_probe,
    registered_probes,
)
from evalsi.rewards.probes._report import Cell, ComponentReport, Example, OracleCell, ProbeReport
from evalsi.rewards.probes._run import ORACLE, probe_reward

__all__ = [
    "ORACLE",
    "Cell",
    "ComponentReads",
    "ComponentReport",
    "Example",
    "Key",
    "Kind",
    "OracleCell",
    "Probe",
    "ProbeContext",
    "ProbeLimits",
    "ProbeReport",
    "ProbeRow",
    "component_reads",
    "probe_reward",
    "probes_for",
    "register_probe",
    "registered_probes",
]

publish(__name__)

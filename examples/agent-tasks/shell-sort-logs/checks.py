"""The checker of the sort-error-logs task: the fraction of log files that ended up where they belong."""

from __future__ import annotations

from evalsi_harness import Environment

EXPECTED = {f"service-{i}.log": ("errors" if i in (2, 5) else "logs") for i in range(1, 7)}


def grade(env: Environment) -> float:
    """1.0 when every file is in the right directory; the fraction of right ones otherwise."""
    found = env.bash("ls errors 2>/dev/null | sed 's|^|errors/|'; ls logs 2>/dev/null | sed 's|^|logs/|'")
    if found.reason != "exit":
        raise RuntimeError(f"listing the work dir failed: {found.reason}")
    places = {line.split("/", 1)[1]: line.split("/", 1)[0] for line in found.stdout.splitlines() if "/" in line}
    right = sum(places.get(name) == folder for name, folder in EXPECTED.items())
    return right / len(EXPECTED)

"""Reading TensorBoard event files back with the ``tensorboard`` package's own reader."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar written under ``logdir`` (all event files, every run folder): tag -> [(step, value)].

    Points are kept in the order they were written, duplicates included, so a test sees a value logged twice.
    """
    found: dict[str, list[tuple[int, float]]] = {}
    for events in sorted(logdir.rglob("events.out.tfevents.*")):
        reader = EventAccumulator(str(events), size_guidance={"scalars": 0}, purge_orphaned_data=False)
        reader.Reload()
        for tag in reader.Tags()["scalars"]:
            found.setdefault(tag, []).extend((e.step, e.value) for e in reader.Scalars(tag))
    return found

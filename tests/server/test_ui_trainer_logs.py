"""The server's viewer never reads a trainer's logs: a stored run's checkpoint location is the caller's data."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import orjson

from evalsi.server._ui_catalog import ProjectCatalog


def test_a_stored_checkpoint_location_is_never_read_even_under_the_catalog_s_root(tmp_path: Path) -> None:
    catalog = ProjectCatalog("team-a", cast(Any, None), cast(Any, None))
    log = {"log_history": [{"step": 1, "reward": 0.5}]}
    local = tmp_path / "out" / "checkpoint-1"
    local.mkdir(parents=True)
    (local / "trainer_state.json").write_bytes(orjson.dumps(log))
    for location in (str(local), str(catalog.base / "out" / "checkpoint-1")):
        stream = catalog.trainer_logs([location])
        assert stream.series == {} and stream.source == ""
        assert stream.notes == ["the training reward is not shown for runs stored on the server"]

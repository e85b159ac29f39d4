"""A results file written before the layout carried its version is listed and opened, migrated on read."""

from __future__ import annotations

from pathlib import Path

import orjson
from starlette.testclient import TestClient

from evalsi.view import create_app
from tests.view.conftest import ids
from tests.view.make import simple_run


def test_an_unversioned_results_file_is_listed_and_opened(tmp_path: Path) -> None:
    path = simple_run(tmp_path / "old.results.json", "old-run", [True, False, True])
    data = orjson.loads(path.read_bytes())
    del data["version"]
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    client = TestClient(create_app([tmp_path]))
    listed = client.get("/api/sources").json()["runs"]
    assert [(r["name"], r["status"]) for r in listed] == [("old-run", "complete")]
    page = client.get(f"/runs/{ids(client.get('/').text, 'runs')['old-run']}")
    assert page.status_code == 200 and "old-run" in page.text

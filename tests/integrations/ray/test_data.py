"""Offline scoring on Ray Data: the same JSON lines as `evalsi rewards score`, in input order, and resumable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import evalsi.rewards
from evalsi.cli.main import app
from evalsi.errors import DataError
from evalsi.ray import DatasetBatchError, score_dataset
from evalsi.ray._data import part_name
from evalsi.rewards import read_rollout_file
from evalsi.rewards.wire import result_json
from tests.integrations.ray import probe
from tests.integrations.ray._util import EXAMPLES, PROBE_MODULE, probe_spec
from tests.integrations.ray.conftest import Cluster


def expected_lines(spec: Path | dict[str, Any], rollouts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    reward = evalsi.rewards.load(spec) if isinstance(spec, Path) else evalsi.rewards.from_mapping(spec)
    records = reward.records(rollouts)
    results = reward.score_records(records)
    return [
        orjson.loads(orjson.dumps(result_json(r, i, record_id=rec.id)))
        for i, (rec, r) in enumerate(zip(records, results, strict=True))
    ]


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_the_cli_writes_what_local_scoring_writes(cluster: Cluster, tmp_path: Path) -> None:
    rollouts, _ = read_rollout_file(EXAMPLES / "math-rollouts.jsonl")
    data = tmp_path / "rollouts.jsonl"
    many = [dict(r, id=f"r{i}") for i, r in enumerate(rollouts * 9)]  # 108 rollouts, ids kept in the output
    data.write_bytes(b"\n".join(orjson.dumps(r) for r in many) + b"\n\n")
    local_out, ray_out = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    runner = CliRunner()
    spec = str(EXAMPLES / "math-reward.yaml")
    local = runner.invoke(app, ["rewards", "score", "-s", spec, "-d", str(data), "-o", str(local_out), "-q"])
    assert local.exit_code == 0, local.output
    on_ray = runner.invoke(
        app, ["rewards", "score", "-s", spec, "-d", str(data), "-o", str(ray_out), "--ray", cluster.address]
    )
    assert on_ray.exit_code == 0, on_ray.output
    assert ray_out.read_bytes() == local_out.read_bytes()
    assert not (tmp_path / "ray.jsonl.parts").exists()


def test_parquet_in_shards_of_row_groups(cluster: Cluster, tmp_path: Path) -> None:
    rollouts, _ = read_rollout_file(EXAMPLES / "code-rollouts.jsonl")
    rows = rollouts * 4
    data = tmp_path / "rollouts.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data, row_group_size=5)
    out = tmp_path / "scores.jsonl"
    report = score_dataset(EXAMPLES / "code-reward.yaml", data, out, shard_rows=8, num_workers=2, num_cpus=0.25)
    assert report.shards == 4 and report.rollouts == len(rows)
    assert read_lines(out) == expected_lines(EXAMPLES / "code-reward.yaml", pq.read_table(data).to_pylist())


def test_a_malformed_rollout_names_its_line_and_nothing_is_written(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "scored.log"
    spec = probe_spec(log)
    rows: list[dict[str, Any]] = [{"completion": f"row-{i:03d}"} for i in range(40)]
    rows[33] = {"prompt": "no completion here"}  # in shard 3 of 4
    data = tmp_path / "rollouts.jsonl"
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    out = tmp_path / "scores.jsonl"
    options: dict[str, Any] = {"shard_rows": 10, "num_workers": 2, "num_cpus": 0.25, "imports": [PROBE_MODULE]}
    with pytest.raises(DataError, match=r"rollouts\.jsonl:34: "):
        score_dataset(spec, data, out, **options)
    assert not out.exists()
    assert part_name(3) not in {p.name for p in (tmp_path / "scores.jsonl.parts").glob("part-*.jsonl")}
    rows[33] = {"completion": "row-033"}
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))  # a changed file: its shards start over
    report = score_dataset(spec, data, out, **options)
    assert report.resumed == 0
    assert [line["total"] for line in read_lines(out)] == [len(r["completion"]) / 10 for r in rows]


def test_an_interrupted_run_resumes_from_its_finished_shards(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "scored.log"
    spec = probe_spec(log)
    rows = [{"completion": f"resume-{i:03d}"} for i in range(40)]
    data = tmp_path / "rollouts.jsonl"
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    out = tmp_path / "scores.jsonl"
    options: dict[str, Any] = {"shard_rows": 10, "num_workers": 2, "num_cpus": 0.25, "imports": [PROBE_MODULE]}
    score_dataset(spec, data, out, **options)
    full = out.read_bytes()
    # rebuild the state of a run stopped after shards 0, 1 and 3: their parts, and the manifest
    from evalsi.ray._data import _finished
    from evalsi.ray._shards import fingerprint

    resource = evalsi.rewards.from_mapping(spec).to_resource()
    parts = tmp_path / "scores.jsonl.parts"
    _finished(parts, fingerprint(data, resource, 10, False))
    lines = full.splitlines(keepends=True)
    for shard in (0, 1, 3):
        (parts / part_name(shard)).write_bytes(b"".join(lines[shard * 10 : shard * 10 + 10]))
    out.unlink()
    before = len(probe.scored(log))
    report = score_dataset(spec, data, out, **options)
    assert report.resumed == 3
    assert out.read_bytes() == full
    assert sorted(text for _, text in probe.scored(log)[before:]) == [f"resume-{i:03d}" for i in range(20, 30)]


def test_a_failed_component_names_the_line_and_keeps_other_shards(cluster: Cluster, tmp_path: Path) -> None:
    body = {"components": [{"ref": "field-score", "name": "a", "params": {"field": "s"}}]}
    rows = [{"completion": "", "s": {"status": "ok", "value": 0.5}} for _ in range(12)]
    rows[7] = {"completion": "", "s": {"status": "error", "reason": "upstream down"}}
    data = tmp_path / "rollouts.jsonl"
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    with pytest.raises(DatasetBatchError) as failed:
        score_dataset(body, data, tmp_path / "out.jsonl", shard_rows=5, num_workers=1, num_cpus=0.25)
    assert (failed.value.index, failed.value.component, failed.value.where) == (7, "a", f"{data}:8")


def test_a_group_level_spec_scores_each_group_whole_as_in_process(cluster: Cluster, tmp_path: Path) -> None:
    spec = {"components": [{"ref": "exact-match"}, {"ref": "group-diversity"}]}
    # groups of 3, 4, 2, 5, 1 and 3: shards of 4 rollouts cut in the middle of groups; the groups' completions
    # repeat in part, so a group scored in two pieces gets other diversity scores than in process
    sizes = [3, 4, 2, 5, 1, 3]
    rows = [
        {"prompt": f"p{g}", "completion": f"answer {i % 2}", "answer": "answer 0"}
        for g, size in enumerate(sizes)
        for i in range(size)
    ]
    data = tmp_path / "rollouts.jsonl"
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    out = tmp_path / "scores.jsonl"
    report = score_dataset(spec, data, out, shard_rows=4, num_workers=2, num_cpus=0.25)
    assert report.shards == 3  # each ends at the first group boundary after 4 rollouts
    assert read_lines(out) == expected_lines(spec, rows)
    interleaved = tmp_path / "interleaved.jsonl"
    interleaved.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [*rows, rows[0]]))
    with pytest.raises(DataError, match=r"interleaved\.jsonl:19: .*sort the file by group"):
        score_dataset(spec, interleaved, tmp_path / "other.jsonl", shard_rows=4, num_workers=2, num_cpus=0.25)
    assert not (tmp_path / "other.jsonl.parts").exists()

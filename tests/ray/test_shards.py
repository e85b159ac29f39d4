"""Shards of a rollouts file for offline scoring on Ray: cut at line or row-group boundaries, errors by line."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalsi.errors import DataError
from evalsi.ray._metrics import quantiles
from evalsi.ray._options import PoolOptions
from evalsi.ray._shards import Shard, fingerprint, plan, read_shard
from evalsi.rewards import from_mapping


def write_jsonl(path: Path, rows: list[bytes]) -> Path:
    path.write_bytes(b"".join(row + b"\n" for row in rows))
    return path


def test_jsonl_shards_cover_every_rollout_once_with_its_line(tmp_path: Path) -> None:
    lines = [orjson.dumps({"completion": f"c{i}"}) for i in range(23)]
    lines[5:5] = [b"", b"   "]  # blank lines are not rollouts, but count as lines
    data = write_jsonl(tmp_path / "r.jsonl", lines)
    shards = plan(data, 10)
    assert [(s.first, s.rows) for s in shards] == [(0, 10), (10, 10), (20, 3)]
    seen: list[str] = []
    for shard in shards:
        back = Shard.from_item(shard.to_item())
        assert back == shard
        rows, source = read_shard(data, back)
        seen += [r["completion"] for r in rows]
        assert len(rows) == shard.rows
    assert seen == [f"c{i}" for i in range(23)]
    rows, source = read_shard(data, shards[1])
    # rollout 10 is c10, on line 13 (two blank lines came before it)
    assert str(source.error(0, "bad")) == f"{data}:13: bad"


def test_a_malformed_line_is_named_by_file_and_line(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "r.jsonl", [b'{"completion": "a"}', b'{"completion": "b"}', b"[1, 2]"])
    (shard,) = plan(data, 10)
    with pytest.raises(DataError, match=r"r\.jsonl:3: each line must be a JSON object"):
        read_shard(data, shard)


def test_parquet_shards_follow_row_groups_and_name_rows_in_the_file(tmp_path: Path) -> None:
    data = tmp_path / "r.parquet"
    pq.write_table(pa.Table.from_pylist([{"completion": f"c{i}"} for i in range(17)]), data, row_group_size=4)
    shards = plan(data, 8)
    assert [(s.first, s.rows, s.groups) for s in shards] == [(0, 8, (0, 1)), (8, 8, (2, 3)), (16, 1, (4,))]
    rows, source = read_shard(data, shards[1])
    assert [r["completion"] for r in rows] == [f"c{i}" for i in range(8, 16)]
    assert str(source.error(2, "bad")) == f"{data}: row 11: bad"


def test_a_json_array_is_refused_with_what_to_use(tmp_path: Path) -> None:
    data = tmp_path / "r.json"
    data.write_text('[{"completion": "a"}]')
    with pytest.raises(DataError, match="JSONL or Parquet"):
        plan(data, 10)


def test_the_fingerprint_changes_with_the_file_the_spec_and_the_options(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "r.jsonl", [b'{"completion": "a"}'])
    spec = from_mapping({"components": [{"ref": "exact-match"}]}).to_resource()
    other = from_mapping({"components": [{"ref": "contains"}]}).to_resource()
    base = fingerprint(data, spec, 10, False)
    assert base == fingerprint(data, spec, 10, False)
    assert (
        len(
            {
                base,
                fingerprint(data, other, 10, False),
                fingerprint(data, spec, 5, False),
                fingerprint(data, spec, 10, True),
            }
        )
        == 4
    )
    write_jsonl(data, [b'{"completion": "b"}', b'{"completion": "c"}'])
    assert fingerprint(data, spec, 10, False) != base


def test_pool_options_refuse_what_cannot_work() -> None:
    with pytest.raises(ValueError, match="num_workers must be at least 1"):
        PoolOptions(name="p", num_workers=0)
    with pytest.raises(ValueError, match="use 'ray'"):
        PoolOptions(name="p", cache="memcached")
    assert PoolOptions(name="p").coordinator_name == "evalsi-pool-p"


def test_quantiles_are_nearest_rank() -> None:
    assert quantiles([]) == {"p50": None, "p99": None}
    assert quantiles([float(i) for i in range(1, 101)]) == {"p50": 50.0, "p99": 99.0}
    assert quantiles([3.0]) == {"p50": 3.0, "p99": 3.0}

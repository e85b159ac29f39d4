"""Shards of a rollouts file for offline scoring on Ray: cut at line or row-group boundaries, errors by line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalsi.errors import DataError
from evalsi.ray._metrics import quantiles
from evalsi.ray._options import PoolOptions
from evalsi.ray._shards import Shard, cut, ends, fingerprint, first_regroup, group_keys, plan, read_shard
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


GROUP_SPEC = {"components": [{"ref": "exact-match"}, {"ref": "group-diversity"}]}


def grouped_rollouts(sizes: list[int]) -> list[dict[str, Any]]:
    """Groups of the given sizes, one after another (each group's prompt is its number)."""
    return [{"prompt": f"p{g}", "completion": f"c{g}-{i}"} for g, size in enumerate(sizes) for i in range(size)]


def test_a_record_level_spec_groups_nothing() -> None:
    assert group_keys(from_mapping({"components": [{"ref": "exact-match"}]})) is None


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_group_level_spec_never_splits_a_group_over_shards(tmp_path: Path, suffix: str) -> None:
    rollouts = grouped_rollouts([3, 4, 2, 5, 1, 3])
    data = tmp_path / f"r{suffix}"
    if suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rollouts), data, row_group_size=1)
    else:
        write_jsonl(data, [orjson.dumps(r) for r in rollouts[:5]] + [b""] + [orjson.dumps(r) for r in rollouts[5:]])
    reward = from_mapping(GROUP_SPEC)
    shards = plan(data, 4, group_keys(reward))
    # without groups: shards of 4 (cutting groups 1 and 3); with them: each ends at the first group end after 4
    assert [(s.first, s.rows) for s in shards] == [(0, 7), (7, 7), (14, 4)]
    assert [(s.first, s.rows) for s in plan(data, 4)][:2] == [(0, 4), (4, 4)]
    seen: list[list[str]] = []
    for shard in shards:
        rows, _ = read_shard(data, Shard.from_item(shard.to_item()))
        assert len(rows) == shard.rows
        seen.append([r["prompt"] for r in rows])
    assert [r["completion"] for shard in shards for r in read_shard(data, shard)[0]] == [
        r["completion"] for r in rollouts
    ]
    assert [sorted(set(prompts)) for prompts in seen] == [["p0", "p1"], ["p2", "p3"], ["p4", "p5"]]


def test_interleaved_groups_over_several_shards_are_refused_naming_the_line(tmp_path: Path) -> None:
    rollouts = grouped_rollouts([2, 2, 2])
    rollouts.append({"prompt": "p0", "completion": "late"})  # group p0 comes back after p1 and p2
    data = write_jsonl(tmp_path / "r.jsonl", [orjson.dumps(r) for r in rollouts])
    keys = group_keys(from_mapping(GROUP_SPEC))
    with pytest.raises(DataError, match=r"r\.jsonl:7: this rollout's group has rollouts earlier.*sort the file"):
        plan(data, 3, keys)
    (whole,) = plan(data, 10, keys)  # one shard holds every group whole: nothing to refuse
    assert (whole.first, whole.rows) == (0, 7)


def test_a_malformed_rollout_found_while_grouping_is_named_by_file_and_line(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "r.jsonl", [b'{"prompt": "p", "completion": "a"}', b"", b'{"prompt": "p"}'])
    with pytest.raises(DataError, match=r"r\.jsonl:3: "):
        plan(data, 10, group_keys(from_mapping(GROUP_SPEC)))


def test_shards_end_where_no_group_crosses() -> None:
    found: list[tuple[bytes | None, ...]] = [(b"a",), (b"b",), (b"a",), (None,), (b"c",), (b"c",)]
    assert ends(found, [1] * 6) == [False, False, True, True, False, True]
    assert ends(found, [2, 2, 2]) == [False, True, True]
    assert first_regroup(found) == 2
    assert first_regroup([(b"a", b"x"), (b"a", b"y"), (None, b"y"), (b"b", b"z")]) is None
    assert cut([1] * 6, [False, False, True, True, False, True], 2) == [(0, 3), (3, 6)]
    assert cut([1, 1, 1], [True, True, True], 5) == [(0, 3)]

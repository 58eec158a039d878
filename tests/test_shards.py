"""``pytest --shard I/N`` (tests/conftest.py): the GPU suite in interleaved shards."""

from __future__ import annotations

import pytest
from conftest import shard


def test_the_shards_cover_the_selection_once_each():
    """Every test lands in exactly one of the N shards, each every N-th from its own
    start, so each shard mixes the kinds of test that follow each other in the suite."""
    items = [f"test_{i}" for i in range(11)]
    shards = [shard(items, f"{i}/3") for i in (1, 2, 3)]
    assert [kept for kept, _ in shards] == [items[0::3], items[1::3], items[2::3]]
    assert sorted(test for kept, _ in shards for test in kept) == sorted(items)
    for kept, left_out in shards:
        assert sorted(kept + left_out) == sorted(items)
    assert shard(items, "1/1") == (items, [])


@pytest.mark.parametrize("spec", ["0/3", "4/3", "2/0", "x/3", "3"])
def test_a_shard_outside_its_count_is_refused(spec):
    with pytest.raises(pytest.UsageError):
        shard(["test_a", "test_b"], spec)

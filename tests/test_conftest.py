"""tests/conftest.py's hooks: ``pytest --shard I/N`` (the GPU suite in interleaved
shards), and a failed test's locals let go of."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def collected(tmp_path, *options) -> list[str]:
    """The test ids pytest collects from this module and test_errors.py with ``options``,
    run as a user runs it (from outside the source tree, which would shadow the package)."""
    modules = [str(Path(__file__).parent / name) for name in ("test_conftest.py", "test_errors.py")]
    done = subprocess.run([sys.executable, "-c", "import sys, pytest; sys.exit(pytest.main(sys.argv[1:]))",
                           *modules, "--collect-only", "-q", "-p", "no:cacheprovider", *options],
                          cwd=tmp_path, capture_output=True, text=True, check=True)
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_a_repeated_shard_splits_the_one_before(tmp_path):
    """``--shard 2/3 --shard 1/2``: the first half of the second third, every sixth
    test from the second, as one of two processes of a call given the second third."""
    everything = collected(tmp_path)
    assert len(everything) > 12
    assert collected(tmp_path, "--shard", "2/3", "--shard", "1/2") == everything[1::6]


def test_a_failed_tests_locals_are_let_go_of_at_once(tmp_path):
    """A failed test's arrays (GPU memory in the GPU suite) are freed when it ends,
    not when Python's cycle collector next runs: the test after it, with the
    collector off, finds them gone. Run as a user runs it, this folder's conftest.py
    a plugin."""
    (tmp_path / "test_two.py").write_text("""
import gc, weakref
held = []
class Array: pass
def test_fails():
    gc.disable()
    array = Array()
    held.append(weakref.ref(array))
    assert False
def test_after():
    assert held[0]() is None
""")
    run = ("import sys, pytest; sys.path.insert(0, sys.argv[1]); "
           "sys.exit(pytest.main([sys.argv[2], '-p', 'conftest', '-p', 'no:cacheprovider', '-q']))")
    done = subprocess.run([sys.executable, "-c", run, str(Path(__file__).parent), str(tmp_path / "test_two.py")],
                          cwd=tmp_path, capture_output=True, text=True)
    assert "1 failed, 1 passed" in done.stdout, done.stdout

"""The benchmark's report, without a GPU."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import lzma

import jax.numpy as jnp
import numpy as np
import pytest

from jax_tsmm import _mtsm, bench
from jax_tsmm.codegen import Config


def _row(config: Config | None, real_view: bool = False) -> dict:
    return {"op": "ab", "dtype": "float32", "M": 40, "N": 40, "K": 1 << 22,
            "config": dataclasses.asdict(config) if config else None, "real_view": real_view,
            "bytes": 3 << 30, "tsmm_s": 1e-3, "xla_s": 2e-3, "tsmm_pct": 90.0, "xla_pct": 45.0, "speedup": 2.0}


def test_markdown_names_the_kernel_of_each_row():
    """Each row of the Markdown report says which kind of kernel ran: the tensor-core
    paths by instruction (with Gauss's products, the Gram triangle and FMA edges where
    they run), FMA tiles or the flat mapping, a complex problem's real view, or XLA's
    dot where dispatch chose it."""
    tf32 = Config(tile_m=2, tile_n=5, mma=True, tf32x3=True)
    rows = [
        (_row(dataclasses.replace(tf32, wgmma=True, c_source="shared")), "wgmma 3xTF32"),
        (_row(tf32), "mma.sync 3xTF32"),
        (_row(Config(mma=True), real_view=True), "DMMA, real view"),
        (_row(Config(mma=True, gauss=True, fma_edges=True, triangle=True)), "DMMA, Gauss, triangle, FMA edges"),
        (_row(Config(mapping="flat")), "FMA flat"),
        (_row(Config()), "FMA"),
        (_row(None), "XLA dot"),
    ]
    report = {"device": "GPU", "jax": "0.10", "date": "2026-11-24", "k_sweep": [],
              "ceilings": {"read_bytes_per_s": 4e12, "copy_bytes_per_s": 3.9e12,
                           "peak_flops": {"float64": 6e13, "float32": 5e13}},
              "rows": [row for row, _ in rows]}
    table = bench.markdown(report).splitlines()
    assert "| kernel |" in table[2]
    for line, (_, label) in zip(table[4:], rows):
        assert line.split(" | ")[5] == label


def test_rows_report_each_librarys_bandwidth():
    """Each row prints and tabulates time, GB/s and % of roofline for both libraries
    (issue 4). The bytes are those the memory roofline divides by its ceiling: at a
    memory-bound shape, GB/s over the ceiling is the % of roofline."""
    ceilings = {"read_bytes_per_s": 4e12, "copy_bytes_per_s": 3e12, "peak_flops": {"float64": 1e15}}
    for op, m, n, k, elements, bandwidth in [("atb", 3, 7, 1000, 1000 * 10 + 21, 4e12),
                                             ("ab", 3, 7, 1000, 1000 * 10 + 21, 3e12),
                                             ("ab_update", 3, 7, 1000, 1000 * 17 + 21, 3e12)]:
        assert bench.moved_bytes(op, np.float64, m, n, k) == 8 * elements
        assert bench.roofline_seconds(op, np.float64, m, n, k, ceilings) == 8 * elements / bandwidth
    assert bench.mtsm_moved_bytes(np.float32, 100, 2, 300) == 4 * (100 * 300 + 300 * 2)

    row = _row(None)
    assert bench.gigabytes_per_s(row, "tsmm") == (3 << 30) / 1e-3 / 1e9
    report = {"device": "GPU", "jax": "0.10", "date": "2026-11-26", "k_sweep": [], "rows": [row],
              "ceilings": {**ceilings, "peak_flops": {"float64": 1e15, "float32": 1e15}}}
    header, _, line = bench.markdown(report).splitlines()[2:5]
    cells = dict(zip(header.strip("| ").split(" | "), line.strip("| ").split(" | ")))
    assert (cells["GB/s"], cells["XLA GB/s"], cells["% roofline"]) == ("3221", "1611", "90.0")


def test_summary_states_the_targets_per_shape_set():
    """The summary keeps M = N apart from the pairs (issue 4 states its speedup over
    M = N alone), counts the rows at 90 % and 85 % of roofline, and gives the least
    speedup also over the rows that ran a kernel."""
    kernel = Config(tile_m=1, tile_n=1)

    def row(m, n, pct, speedup, config=kernel):
        return {**_row(config), "op": "atb", "dtype": "float64", "M": m, "N": n, "tsmm_pct": pct,
                "xla_pct": pct / speedup, "speedup": speedup}

    rows = [row(3, 3, 95.0, 4.0), row(5, 5, 88.0, 0.99, None), row(7, 7, 80.0, 2.0), row(1, 8, 99.0, 0.97, None)]
    lines = bench.summary(rows).splitlines()
    assert ">=90%" in lines[0] and lines[0].endswith("kernels' min") and len(lines) == 3
    square, pairs = (line.split() for line in lines[1:])  # sorted: "M = N" before "pairs"
    assert square[2:5] == ["M", "=", "N"] and pairs[2] == "pairs"
    shapes, low, geomean, at_90, at_85, _, speedup, least, kernels_least = square[5:]
    assert (shapes, low, at_90, at_85, least, kernels_least) == ("3", "80.0", "1", "2", "0.99", "2.00")
    assert float(geomean) == round((95.0 * 88.0 * 80.0) ** (1 / 3), 1)
    assert float(speedup) == round((4.0 * 0.99 * 2.0) ** (1 / 3), 2)
    assert pairs[3:5] == ["1", "99.0"] and pairs[-2:] == ["0.97", "-"]  # XLA's dot on both sides


def test_ramp_up_summary_states_issue_4s_ramp_up_targets():
    """Per op and dtype of a K sweep: the least speedup at K = 2^16 and 2^20, and of
    the rows whose tall matrices together exceed 256 MiB (A alone for a Gram
    matrix) how many reach 80 % and the least."""
    def row(op, k, pct, speedup, width=8):
        return {**_row(None), "op": op, "dtype": "float64", "M": width, "N": width, "K": k, "tsmm_pct": pct,
                "xla_pct": pct / speedup, "speedup": speedup}

    over = (256 << 20) // (16 * 8) + 1  # the first K where A and B of width 8 exceed 256 MiB
    rows = [row("atb", 1 << 16, 30.0, 0.97), row("atb", 1 << 20, 70.0, 1.2), row("atb", over, 79.0, 1.5),
            row("atb", 1 << 22, 90.0, 1.1), row("atb", 1 << 22, 95.0, 1.0, width=24),
            row("gram", over, 60.0, 1.0), row("gram", 1 << 23, 85.0, 1.3)]
    header, atb, gram = bench.ramp_up_summary(rows).splitlines()
    assert "2^16" in header and "2^20" in header and "256 MiB" in header
    assert atb.split() == ["atb", "float64", "2", "0.97", "1.20", "3", "2", "79.0"]
    assert gram.split() == ["gram", "float64", "1", "-", "-", "1", "1", "85.0"]  # at `over` A alone is 128 MiB


def test_timed_loops_last_loop_seconds(monkeypatch):
    """Each timed loop makes enough trips to last LOOP_SECONDS at the expected time
    per call (longer loops time the clock a power cap settles at)."""
    trips = []

    def fake_loop(op, sets, updates_last):
        return lambda n: trips.append(n)

    monkeypatch.setattr(bench, "_timed_loop", fake_loop)
    monkeypatch.setattr(bench.jax, "block_until_ready", lambda x: x)
    for seconds, expected in ((0.02, 10), (0.3, 150)):
        monkeypatch.setattr(bench, "LOOP_SECONDS", seconds)
        trips.clear()
        bench.seconds_per_call(None, [(), ()], 1e-3, repeats=2)
        assert trips == [1, expected, 1, expected, 1]


def test_a_row_times_both_libraries_in_turns_each_first_in_every_other(monkeypatch):
    """jax_tsmm's and XLA's loops alternate, the order flipped each turn, so that
    neither always meets the clock the other left; each gets its own median."""
    timed, now = [], [0.0]
    per_call = {"ours": 2.0, "xla": 3.0}  # seconds a call, on a fake clock

    def fake_loop(op, sets, updates_last):
        def run(trips):
            timed.append((op, trips))
            now[0] += per_call[op] * trips * len(sets) + 7.0  # and a fixed cost a run
        return run

    monkeypatch.setattr(bench, "_timed_loop", fake_loop)
    monkeypatch.setattr(bench.jax, "block_until_ready", lambda x: x)
    monkeypatch.setattr(bench.time, "perf_counter", lambda: now[0])
    assert bench.seconds_per_call_in_turns(["ours", "xla"], [(), ()], 1e-3, repeats=3) == [2.0, 3.0]
    assert timed[:2] == [("ours", 1), ("xla", 1)]  # compiled and warmed first
    assert [op for op, trips in timed if trips > 1] == ["ours", "xla", "xla", "ours", "ours", "xla"]


def test_each_loop_in_turns_keeps_what_it_was_compiled_under():
    """With compiled_in each op's loop is traced and compiled inside its own context
    (the tuner's _dispatch.forced(spec)) and never traced again when the turns run
    outside it, so each loop keeps its kernel: real jitted loops, on this machine's
    device."""
    scale, traced = [1.0], []

    @contextlib.contextmanager
    def scaled(factor):
        scale.append(factor)
        try:
            yield
        finally:
            scale.pop()

    def op(x):  # reads the context at trace time, as dispatch reads the forced kernel at lowering
        traced.append(scale[-1])
        return x * scale[-1]

    sets = [(jnp.ones(8),)]
    times = bench.seconds_per_call_in_turns([op, op, op], sets, 1e-3, repeats=2, loop_seconds=2e-3,
                                            compiled_in=[scaled(2.0), None, scaled(3.0)])
    assert len(times) == 3 and all(np.isfinite(times))
    assert [factor for factor, _ in itertools.groupby(traced)] == [2.0, 1.0, 3.0]  # no trace after the compiles


def test_smaller_operands_rotate_more_sets():
    """Each trip of a timed loop costs the same besides its calls: sets of the
    bench's gigabyte operands rotate two at a time, smaller ones more, up to a cap."""
    assert bench.set_count(2 * bench.GIB) == bench.set_count(8 * bench.GIB) == 2
    assert bench.set_count(256 << 20) == 16
    assert bench.set_count(1 << 20) == bench.MAX_SETS
    assert bench.mtsm_set_count("float32", 8192, 8192, 64) == 15  # 256 MiB of A and 2 MiB of X
    # ...as long as every set's operands and result fit in HELD_BYTES
    assert bench.set_count(148 << 20, 8 * bench.GIB) == 2
    assert bench.set_count(bench.GIB, bench.GIB) == 4



def test_the_kernels_of_rows_sweep_and_mtsm_grid_are_gathered_once():
    """What main compiles in parallel before timing: the kernel of each row, each K
    of the sweep (up to SWEEP_MAX_BYTES a tall matrix) and each mtsm shape, once each."""
    dtype = np.dtype("float64")
    kernels = bench.kernels_to_time(["atb", "ab", "mtsm"], [dtype], [(5, 5), (40, 40)], [40], [65537, 1 << 28], False)
    expected = {bench.timed_kernel(op, dtype, m, m, k) for op in ("atb", "ab") for m, k in
                [(5, bench.problem_rows(5, 5, dtype)), (40, bench.problem_rows(40, 40, dtype)), (40, 65537)]}
    expected |= {_mtsm.select(dtype, t, n, False, size, "sm_90") for t in (False, True)
                 for n in bench.MTSM_WIDTHS for size in bench.MTSM_SIZES}
    assert len(set(kernels)) == len(kernels) and set(kernels) == expected - {None}
    float32 = np.dtype("float32")
    grid = bench.kernels_to_time(["mtsm"], [float32], [], [], [], False, mtsm_sizes=[2048], mtsm_widths=[3, 12])
    expected = {_mtsm.select(float32, t, n, False, 2048, "sm_90") for t in (False, True) for n in (3, 12)} - {None}
    assert expected and set(grid) == expected


def test_the_plot_has_a_panel_per_op_and_dtype_mtsm_included(tmp_path):
    """One panel (3 inches at 120 dpi) per op and dtype: the M = N sweeps and each
    mtsm layout, whose panel draws a line per M = K and library."""
    pytest.importorskip("matplotlib")
    rows = [dict(_row(None), op=op, dtype=dtype, M=w, N=w) for op, dtype in (("atb", "float64"), ("ab", "float64"))
            for w in (1, 2, 3)]
    rows += [dict(_row(None), op=op, M=size, K=size, N=n) for op in bench.MTSM_OPS for size in (2048, 8192)
             for n in (1, 2, 4)]
    path = tmp_path / "bench.png"
    bench.plot(rows, str(path), "GPU")
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(header[20:24], "big") == 4 * 3 * 120  # height: four panels
    sweep = [dict(_row(None), op="atb", dtype="float64", M=w, N=w, K=k) for w in (8, 24) for k in (1024, 4096)]
    bench.plot(rows, str(path), "GPU", sweep)
    assert int.from_bytes(path.read_bytes()[20:24], "big") == 5 * 3 * 120  # and the K sweep's


def _fake_gpu_run(monkeypatch, seconds_per_call=lambda *args, **kwargs: 1e-3):
    """bench.main on a faked GPU, with ``seconds_per_call`` for its timer."""

    class FakeGpu:
        platform, device_kind = "gpu", "Fake GPU"

    def devices(backend=None):
        if backend is not None:
            raise RuntimeError("no CUDA backend")  # _cuda's queries: lowering without a GPU
        return [FakeGpu()]

    ceilings = {"read_bytes_per_s": 1e12, "copy_bytes_per_s": 1e12,
                "peak_flops": {d: 1e13 for d in ("float64", "float32", "complex128", "complex64")}}
    monkeypatch.setattr(bench.jax, "devices", devices)
    monkeypatch.setattr(bench, "measure_ceilings", lambda: ceilings)
    monkeypatch.setattr(bench._kernels, "precompile", lambda specs, arch: None)
    monkeypatch.setattr(bench, "operand_sets", lambda *args: [])  # the gigabyte inputs, never timed here
    monkeypatch.setattr(bench, "seconds_per_call", seconds_per_call)
    monkeypatch.setattr(bench, "seconds_per_call_in_turns",
                        lambda ops, *args, **kwargs: [seconds_per_call(op, *args, **kwargs) for op in ops])


def test_main_numbers_every_row_as_it_is_timed(monkeypatch, tmp_path, capsys):
    """A whole run (its GPU faked, every call timed at 1 ms): after saying what it
    compiles and when that is done, the main rows (widths and the pairs asked
    for), the mtsm grid and the K sweep are numbered [i/total] as they come, then
    written out."""
    pytest.importorskip("matplotlib")
    _fake_gpu_run(monkeypatch)
    json_path = tmp_path / "run.json"
    bench.main(["--dtypes", "float32", "--ops", "atb,mtsm", "--widths", "1,2", "--pairs", "1x3",
                "--mtsm-sizes", "64", "--mtsm-widths", "1,3", "--k-sweep", "--k-sweep-widths", "2",
                "--k-sweep-k", "1024,2048,4096", "--json", str(json_path), "--plot", str(tmp_path / "run.png")])
    printed = capsys.readouterr().out.splitlines()
    numbered = [line.split("]")[0] + "]" for line in printed if line.startswith("[")]
    first_row = printed.index(next(line for line in printed if line.startswith("[")))
    compiling, ready = printed[first_row - 2:first_row]
    assert compiling.split(" ", 1)[1].startswith("kernels to time: compiling") and ready == "kernels ready in 0 s"
    total = 3 + 2 * 2 + 3  # atb at 1, 2 and 1 x 3; mtsm's layouts at N = 1, 3; the sweep's K
    assert numbered == [f"[{i}/{total}]" for i in range(1, total + 1)]
    report = json.loads(json_path.read_text())
    assert report["complete"]
    assert len(report["rows"]) == 3 + 4 and len(report["k_sweep"]) == 3
    assert [(row["M"], row["N"]) for row in report["rows"][:3]] == [(1, 1), (2, 2), (1, 3)]
    assert (tmp_path / "run.png").exists() and (tmp_path / "run.md").exists()


def test_a_k_sweep_runs_alone_without_the_square_rows(monkeypatch, tmp_path, capsys):
    """--no-squares and --no-pairs leave the K sweep alone: its rows, its plot panels
    and the ramp-up table, with no main rows and no summary table."""
    pytest.importorskip("matplotlib")
    _fake_gpu_run(monkeypatch)
    json_path = tmp_path / "run.json"
    bench.main(["--dtypes", "float64", "--ops", "atb", "--no-squares", "--no-pairs", "--k-sweep",
                "--k-sweep-widths", "2,3", "--k-sweep-k", "65536,1048576", "--json", str(json_path),
                "--plot", str(tmp_path / "run.png")])
    report = json.loads(json_path.read_text())
    assert report["rows"] == [] and len(report["k_sweep"]) == 4
    printed = capsys.readouterr().out
    assert "min x at 2^16" in printed and ">=90%" not in printed
    assert int.from_bytes((tmp_path / "run.png").read_bytes()[20:24], "big") == 3 * 120  # the sweep's one panel


def test_without_nvcc_a_run_compiles_nothing_and_its_rows_name_what_ran(monkeypatch, tmp_path, no_nvcc):
    """On a GPU without nvcc the lowering takes XLA's dot wherever the kernel is
    not prebuilt (3 x 3); the run asks the compiler for nothing (the real
    precompile, which would fail on a kernel it had to compile) and its rows
    name XLA's dot there and the prebuilt kernel where there is one (4 x 4, in
    an extension built with CUDA)."""
    pytest.importorskip("matplotlib")
    precompile = bench._kernels.precompile
    _fake_gpu_run(monkeypatch)
    monkeypatch.setattr(bench._kernels, "precompile", precompile)
    json_path = tmp_path / "run.json"
    with pytest.warns(RuntimeWarning, match="XLA's dot serves"):
        bench.main(["--dtypes", "float64", "--ops", "ab", "--widths", "3,4", "--no-pairs",
                    "--json", str(json_path), "--plot", str(tmp_path / "run.png")])
    rows = json.loads(json_path.read_text())["rows"]
    float64 = np.dtype("float64")
    here = bench._cuda.device_kind()  # named, dispatch's pick whether or not it runs here
    dispatched = [bench.timed_kernel("ab", float64, w, w, bench.problem_rows(w, w, float64), here) for w in (3, 4)]
    prebuilt = bench._kernels.prebuilt_names()
    assert any(spec is not None and spec.name not in prebuilt for spec in dispatched)
    expected = [dataclasses.asdict(spec.config) if spec is not None and spec.name in prebuilt else None
                for spec in dispatched]
    assert [row["config"] for row in rows] == expected


def test_a_run_cut_off_keeps_the_rows_it_timed(monkeypatch, tmp_path, capsys):
    """A run stopped after its second row (a device call's time limit) leaves a report
    of those two rows, marked incomplete, in JSON and Markdown; --summary tabulates it,
    also packed by xz as docs/bench keeps reports."""
    calls = itertools.count()

    def timer_that_stops(*args, **kwargs):
        if next(calls) == 2 * 2:  # each row times jax_tsmm and XLA's dot
            raise KeyboardInterrupt
        return 1e-3

    _fake_gpu_run(monkeypatch, timer_that_stops)
    json_path = tmp_path / "run.json"
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--dtypes", "float64", "--ops", "ab", "--widths", "1-4", "--no-pairs", "--json", str(json_path)])
    report = json.loads(json_path.read_text())
    assert not report["complete"]
    assert [(row["M"], row["N"]) for row in report["rows"]] == [(1, 1), (2, 2)]
    assert (tmp_path / "run.md").read_text().count("| ab | float64 |") == 2
    capsys.readouterr()  # the run's own lines
    bench.main(["--summary", str(json_path)])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"{json_path}: Fake GPU, {report['date']}, 2 rows, cut off"
    assert printed[2].split()[:4] == ["ab", "float64", "M", "="] and printed[2].split()[5] == "2"
    packed = tmp_path / "run.json.xz"
    packed.write_bytes(lzma.compress(json_path.read_bytes()))
    bench.main(["--summary", str(packed)])
    assert capsys.readouterr().out.splitlines()[1:] == printed[1:]


def _no_device_for_timing(monkeypatch):
    """Fail where the bench asks for the device it times (``jax.devices()``); the
    lookups of the GPU's architecture and model (``jax.devices("cuda")``) still answer."""
    devices = bench.jax.devices
    monkeypatch.setattr(bench.jax, "devices", lambda *args: devices(*args) if args else pytest.fail("no device wanted"))


def test_compile_only_compiles_the_models_kernels_without_a_gpu(monkeypatch, capsys):
    """--compile-only hands what the run would time to the compiler, for sm_90 where
    this machine has no GPU, and stops before any device is asked for."""
    asked = []
    monkeypatch.setattr(bench._kernels, "precompile", lambda specs, arch: asked.append((list(specs), arch)))
    _no_device_for_timing(monkeypatch)
    bench.main(["--compile-only", "--model", "--ops", "ab", "--dtypes", "float64", "--widths", "3", "--pairs", "48x1"])
    [(specs, arch)] = asked
    float64 = np.dtype("float64")
    assert arch == "sm_90"
    with bench.dispatch_context(True):
        assert specs == [bench.timed_kernel("ab", float64, m, n, bench.problem_rows(m, n, float64))
                         for m, n in ((3, 3), (48, 1))]
    assert "2 kernels for sm_90" in capsys.readouterr().out


def test_compile_only_follows_the_dispatch_of_a_named_gpu_model(monkeypatch, capsys):
    """--compile-only --device compiles what dispatch runs on that GPU model, its own
    tuning file over the architecture's, from a machine without it; --device is
    refused for a run, which times the GPU it runs on."""
    float64, h200 = np.dtype("float64"), "NVIDIA H200"
    rows = {m: bench.problem_rows(m, m, float64) for m in range(1, 65)}
    differs = [m for m, k in rows.items()
               if bench.timed_kernel("ab", float64, m, m, k, h200) != bench.timed_kernel("ab", float64, m, m, k, "")]
    assert differs, "the H200's own file chooses as the architecture's everywhere"
    asked = []
    monkeypatch.setattr(bench._kernels, "precompile", lambda specs, arch: asked.append(list(specs)))
    _no_device_for_timing(monkeypatch)
    width = differs[0]
    bench.main(["--compile-only", "--device", h200, "--ops", "ab", "--dtypes", "float64", "--widths", str(width),
                "--no-pairs"])
    assert asked == [[bench.timed_kernel("ab", float64, width, width, rows[width], h200)]]
    assert f"1 kernels for sm_90 ({h200})" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench.main(["--device", h200, "--ops", "ab", "--dtypes", "float64", "--widths", "8"])


def test_shapes_take_widths_and_pairs():
    """The bench's --pairs and the tuner's --shapes: widths and ranges as M = N, MxN as
    pairs; the bench's --pair-grid: every pair of its widths."""
    assert bench.parse_shapes("1-3,13x48,64x8") == [(1, 1), (2, 2), (3, 3), (13, 48), (64, 8)]
    assert bench.parse_shapes(",".join(f"{m}x{n}" for m, n in bench.DEFAULT_PAIRS)) == list(bench.DEFAULT_PAIRS)
    assert bench.grid_pairs("1-2,8") == [(1, 2), (1, 8), (2, 1), (2, 8), (8, 1), (8, 2)]

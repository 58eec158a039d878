"""The latest measurement of each kernel dispatch picks now, gathered from bench reports.

    python scripts/as_dispatched.py docs/bench/h200-2026-11-29ze-bench-f32-ab-1-64.json.xz \
        docs/bench/h200-2026-11-29z[f-h]-bench-f32-ab-retuned.json.xz [--ops ab] [--dtypes float32] [--plot out.png]

Reads bench reports (``python -m jax_tsmm.bench --json``) of one GPU model and
one loop length, oldest first, and keeps for each row (op, dtype, M, N, K) the latest one whose
kernel (its configuration, or XLA's dot) is the one dispatch picks for that
model from the shipped databases now. A row timed before a re-tune changed the
shape's kernel no longer counts; the re-tune's own bench row does. Prints
bench's summary of the rows kept, the reports each came from, and the shapes no
report timed with today's kernel; ``--plot`` draws the rows as the bench does.
The figures are of several runs, not one: what the database delivers by the
latest measurements of its choices.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

from jax_tsmm import _cuda, _dispatch, _mtsm, bench
from jax_tsmm.codegen import Config, MtsmConfig


def dispatched_kernel(row: dict, device: str) -> tuple[dict, bool] | None:
    """The kernel dispatch picks for the row's shape on GPU model ``device`` now, as a
    bench row records it (its configuration, and whether it runs the real view), or
    None for XLA's dot."""
    if row["op"] in bench.MTSM_OPS:
        size = _mtsm.problem_size(1, row["M"], row["K"])
        spec = _mtsm.select(row["dtype"], row["op"] == "mtsm_t", row["N"], False, size, _cuda.arch(), device)
        return None if spec is None else (dataclasses.asdict(spec.config), False)
    spec = bench.timed_kernel(row["op"], row["dtype"], row["M"], row["N"], row["K"], device)
    return None if spec is None else (dataclasses.asdict(spec.config), _dispatch.is_real_view(spec, row["dtype"]))


def recorded_kernel(row: dict) -> tuple[dict, bool] | None:
    """The row's kernel as ``dispatched_kernel`` gives it, its configuration with the
    defaults of fields added since it was timed (a field removed since reads as
    another kernel), or None for XLA's dot."""
    if row["config"] is None:
        return None
    kind = MtsmConfig if row["op"] in bench.MTSM_OPS else Config
    try:
        config = dataclasses.asdict(kind(**row["config"]))
    except TypeError:
        config = {"removed fields": sorted(row["config"])}
    return config, row.get("real_view", False)


def as_dispatched(reports: list[dict], names: list[str]) -> tuple[list[dict], str, list[tuple]]:
    """(the rows kept, each with its report's name under "report"; the GPU model; the
    shapes timed only with other kernels than today's)."""
    devices = {report["device"] for report in reports}
    if len(devices) != 1:
        raise SystemExit(f"reports of several GPU models: {sorted(devices)}")
    loops = {report.get("loop_seconds") for report in reports}
    if len(loops) != 1:  # under a power cap the loop's length moves the figures (bench --loop-seconds)
        raise SystemExit(f"reports timed in loops of several lengths: {sorted(loops, key=str)} s")
    device = devices.pop()
    latest, stale = {}, set()
    for report, name in zip(reports, names):
        for row in report["rows"]:
            shape = (row["op"], row["dtype"], row["M"], row["N"], row["K"])
            if recorded_kernel(row) == dispatched_kernel(row, device):
                latest[shape] = {**row, "report": name}
            else:
                stale.add(shape)
    return list(latest.values()), device, sorted(stale - set(latest))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", type=pathlib.Path, nargs="+", help="bench JSON reports, oldest first")
    parser.add_argument("--ops", default=None, help="only these ops' rows, e.g. atb,ab (default: all)")
    parser.add_argument("--dtypes", default=None, help="only these dtypes' rows, e.g. complex64 (default: all)")
    parser.add_argument("--plot", default=None, help="a PNG of the rows kept, as the bench draws them")
    args = parser.parse_args()
    reports = [bench.read_report(path) for path in args.reports]
    for report in reports:
        report["rows"] = [row for row in report["rows"]
                          if (args.ops is None or row["op"] in args.ops.split(","))
                          and (args.dtypes is None or row["dtype"] in args.dtypes.split(","))]
    rows, device, missing = as_dispatched(reports, [path.name for path in args.reports])
    print(f"{device}, loops of {reports[0].get('loop_seconds')} s: {len(rows)} rows, the latest measurement "
          "of the kernel dispatch picks now")
    print(bench.summary(rows))
    for path in args.reports:
        print(f"  {sum(row['report'] == path.name for row in rows):4} rows from {path.name}")
    for shape in missing:
        print("  timed only with another kernel than today's: {} {} {}x{} K={}".format(*shape))
    if args.plot:
        dates = sorted({report["date"] for report in reports})
        bench.plot(rows, args.plot, f"{device}, latest measurements as dispatched ({', '.join(dates)})")


if __name__ == "__main__":
    main()

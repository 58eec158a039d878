"""Autotuner: benchmark pruned candidate kernels per problem and K range, write the database.

    python -m jax_tsmm.tune [--ops atb,ab,ab_update,mtsm,mtsm_t] [--dtypes float64] [--shapes 1-64]
                            [--candidates 12] [--refine 2] [--k-min K] [--k-max K]
                            [--db PATH | --device-db]
    python -m jax_tsmm.tune --from-bench bench.json [...] [--device-db]
    python -m jax_tsmm.tune --xla-aligned-from bench.json [...] [--device-db]
    python -m jax_tsmm.tune --compile-only [--ops ...] [--dtypes ...] [--shapes ...] [--candidates N] [--k-min K]
    python -m jax_tsmm.tune --stale "NVIDIA H200" [--ops ...] [--dtypes ...] [--shapes ...] [--k-min K]
    python -m jax_tsmm.tune --only-stale [--ops ...] [--k-min K] [--confirm-seconds S] [--device-db]
    python -m jax_tsmm.tune --compile-only --only-stale "NVIDIA H200" [--ops ...] [--k-min K]

For each (op, dtype, M, N) and each K range, the candidates of
``codegen.search`` (pruned by hardware limits, occupancy and a register-reuse
model) are compiled in parallel, then timed on the same inputs as XLA's dot,
each in the bench's jitted loops (``bench.seconds_per_call``: called as
dispatch calls it, under the same clock as XLA).
Beside them compete dispatch's kernel before the run, its kernels on the
architecture's other GPU models, and the fastest winners at nearby tuned widths
(``nearby_winners``); ``--refine`` rounds of local search then time the
neighbours of the fastest. ``--stale`` lists, without a GPU, the entries of a
GPU model tuned before a different winner at a nearby width, which their
tuning could not time (``stale_ranges``); ``--only-stale`` tunes those ranges
alone (on a GPU, its model's; with ``--compile-only``, compiles for the model it
names), anew, the weakest first (``stale_pct``): a re-tune dates them today,
so a run cut off and run again goes on with the rest (and with the ranges its
new winners made stale). ``--confirm-seconds S`` times the fastest few and
XLA's dot again, in turns in loops of S seconds, and chooses among them (``confirmed``);
a range whose entry was decided in longer loops than the run's is confirmed in
loops as long (``verdict_seconds``), so a re-tune in short loops does not
overturn that verdict on a tie.
The winner goes into ``jax_tsmm/tuning/<arch>.json`` with its time, its % of
roofline and XLA's time; where XLA wins, the entry says so and dispatch uses
XLA. ab's fused update (``--ops ab_update``: V − Q C in place, against XLA's
dot and a separate elementwise pass) has entries of its own, tuned alike.
mtsm (``--ops mtsm,mtsm_t``, N from ``--shapes``) is tuned the same way
over ``codegen.search.mtsm_candidates``, at M = K = 1024, 2048, 8192, 16384 and 30720 (its K
ranges, MTSM_K_RANGES). Each K range is saved as it is done, so an interrupted
run keeps its finished ranges and resumes past finished problems (``--again``
tunes them anew, e.g. after new kernel options).
``--device-db`` writes the file of this GPU model instead
(``<arch>.<model>.json``, e.g. ``sm_90.NVIDIA_H200.json``), whose entries
dispatch prefers, key by key, on that model; on the model the architecture's
file was tuned on, that file (``database_file``). Without it a run on another
model than that one is refused rather than mixed into its file.

``--from-bench`` records the measurements of ``python -m jax_tsmm.bench --model``
runs (the model's kernel against XLA on the same inputs, its K-sweep too) as
one-candidate entries for problems the tuner has not covered, replacing older
bench entries of the same K range, so that dispatch falls back to XLA wherever
XLA measured faster, and keeps a complex problem on its real view where that is
what won (``"real_view": true``, with the real kernel it timed). The tuner's
own search times both (``candidate_specs``).

XLA's dot runs Aᵀ B at its fastest at K with a large power-of-two factor, which
the benchmark's K of most widths lacks, so the largest range's atb winner is
also timed against XLA at K = K_ALIGNED; where XLA is faster the entry says so
(``xla_faster_at``) and dispatch takes XLA at multiples of that K.
``--xla-aligned-from`` records the same from K sweeps of Aᵀ B at power-of-two K
(``bench --k-sweep``), on the entries that served them.

``--compile-only`` needs nvcc but no GPU: it compiles what the same tuning
would time before its local search, on any of the architecture's GPU models,
into the kernel cache, which can travel with the GPU machine's working tree
(``JAX_TSMM_CACHE_DIR`` naming it on both) so that the GPU idles only while the
local search's neighbours compile.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from jax_tsmm import _cuda, _dispatch, _kernels, _mtsm, bench
from jax_tsmm.codegen import Config, InvalidSpec, KernelSpec, MtsmConfig, MtsmProblem, MtsmSpec, Problem
from jax_tsmm.codegen.model import carried_to_update, fits_an_sm
from jax_tsmm.codegen.search import candidates, mtsm_candidates, mtsm_neighbours, neighbours
from jax_tsmm.codegen.spec import key_problem, op_name

# K ranges as (k_min, K timed); None times the benchmark's size (1 GiB matrices).
K_RANGES = ((0, 1 << 16), (1 << 18, 1 << 20), (1 << 22, None))
# mtsm's, as (from a call's size, M = K timed), a call's size being the M = K of the
# square problem with as many elements of A (_mtsm.problem_size): 1024 and 2048 for
# the sizes below the benchmark's (their fixed costs weigh: on an H100 kernels timed
# at 8192 ran 0.82x XLA at 2048, and kernels timed at 2048 0.74x at 1024), and the
# benchmark's three: XLA's dot picks other kernels at each (on an H200, 2026-11-29,
# float64 A X at N = 8 ran 1.05x XLA at 16384 and 0.97x at 30720 on one kernel; a
# 30720-square matrix takes four times as long to time, and where that range has no
# entry the 16384 range's serves it).
MTSM_K_RANGES = ((0, 1024), (1536, 2048), (4096, 8192), (16384, 16384), (24576, 30720))
# How much faster than XLA's dot an mtsm kernel must run where it is timed to take
# a range, which serves sizes up to 1.5-2x its own: on an H200 (2026-11-29) float64
# A X at N = 32 ran 1 % faster than XLA at 16384 and 0.91x XLA at 30720.
MTSM_MARGIN = 0.03
MTSM_OPS = ("mtsm", "mtsm_t")
K_ALIGNED = 1 << 22  # where the largest range's atb winner is timed against XLA once more
# How much faster than the kernel XLA's dot must run in a K sweep's row to mark the
# entry (``mark_aligned_xla_wins``): beyond issue 4's 0.98x, since a mark hands XLA
# every multiple of that K short of the kernel's own (on an H200, 2026-11-30, rows
# with XLA's dot on both sides read 0.93-1.01x at K = 2^20).
ALIGNED_XLA_MARGIN = 0.02
# A candidate whose result differs from XLA's by more than this, relative in the
# Frobenius norm, computes something else: correct kernels and XLA differ by their
# rounding, about u sqrt(K) (float32 at K = 4 million: 1e-4).
CHECK_TOLERANCE = 1e-2
# How far (in M and in N) a tuned width's winner is tried as a candidate of another,
# and how many such winners, the fastest: Tensile's nearest benchmarked size, here a
# seed rather than an answer.
NEARBY_REACH = 4
NEARBY_WINNERS = 2


def k_ranges(problem: Problem | MtsmProblem) -> tuple:
    """The K ranges ``problem`` is tuned for: K_RANGES, or mtsm's MTSM_K_RANGES."""
    return MTSM_K_RANGES if isinstance(problem, MtsmProblem) else K_RANGES


def largest_range_min(k: int) -> int:
    """Where the largest range's entry starts: at its threshold, or lower, at the K
    it was timed at (the benchmark's K of a wide problem, 2-4 million rows, lies
    below the threshold, and the entry must serve the benchmark's own calls)."""
    return min(K_RANGES[-1][0], k)


def candidate_specs(problem: Problem, limit: int, arch: str) -> list[KernelSpec]:
    """Up to ``limit`` candidates of the problem and, for a complex problem with a
    real view, up to ``limit`` of the real problem it can run as (the same bytes,
    on the tensor cores; see ``_dispatch``)."""
    specs = [KernelSpec(problem, c) for c in candidates(problem, limit, arch)]
    real = _dispatch.real_view_problem(problem)
    if real is not None:
        specs += [KernelSpec(real, c) for c in candidates(real, limit, arch)]
    return specs


def range_index(entry: dict, table=None) -> int:
    """Which range of ``table`` (K_RANGES, the default, or MTSM_K_RANGES) an entry
    was tuned for: the range the tuner recorded (``k_range``), or for older and
    bench-made entries the range whose K it was timed at (K_RANGES' largest is the
    benchmark's K of the problem, which varies, and is 2^20 for complex128 64x64:
    hence the record)."""
    if "k_range" in entry:
        return entry["k_range"]
    table = table or K_RANGES
    samples = [k_sample for _, k_sample in table if k_sample is not None]
    return samples.index(entry["k_tuned"]) if entry.get("k_tuned") in samples else len(table) - 1


def replace_ranges(old: list[dict], tuned: list[dict], ranges: set[int], table=None) -> list[dict]:
    """A key's entries after tuning ``ranges`` (indices into ``table``): the tuned
    ranges' new entries, and the old entries of the other ranges."""
    kept = [entry for entry in old if range_index(entry, table) not in ranges]
    return sorted(kept + tuned, key=lambda entry: entry["k_min"])


def agrees_with_xla(ours, operands, want) -> bool:
    """Whether ``ours`` (under a forced kernel) gives ``want``, XLA's result, on
    ``operands``: finite, and within CHECK_TOLERANCE of it in the Frobenius norm. The
    timing sees speed alone, so a kernel that computes something else could win on
    it; the GPU tests check the error bounds themselves."""
    got = jax.jit(lambda *o: ours(*o))(*operands)  # a fresh function: traced under the forced kernel
    error = float(jnp.linalg.norm((got - want).ravel()))
    return math.isfinite(error) and error <= CHECK_TOLERANCE * float(jnp.linalg.norm(want.ravel()))


def time_candidates(specs: list, incumbent, ours, xla, sets: list[tuple], roof: float, arch: str, refine: int,
                    neighbours_of, note=lambda spec: "", updates_last: bool = False) -> list[tuple[float, object]]:
    """(seconds per call, spec) of each of ``specs`` (KernelSpecs or MtsmSpecs) and of
    ``incumbent``, dispatch's choice before this run where it is a kernel the
    search does not offer (so a new entry beats it in the same run rather than a
    lucky figure of another day); then ``refine`` rounds of local search time the
    untried ``neighbours_of(spec)`` of the fastest so far, stopping early once a
    round finds nothing faster. A kernel that does not compile, or whose result on
    the first operand set is not XLA's (``agrees_with_xla``), is left out.
    ``updates_last``: each call updates its last operand in place, as ab's fused
    update runs in a solver and in the bench."""
    timings, wrong = [], []
    want = jax.jit(xla)(*sets[0])

    def time_all(trial: list) -> None:
        for spec in _kernels.compilable(trial, arch):
            with _dispatch.forced(spec):  # each timing traces a fresh jitted loop
                if not agrees_with_xla(ours, sets[0], want):
                    wrong.append(spec)
                    print(f"    wrong result, left out: {spec.config}{note(spec)}", flush=True)
                    continue
                timings.append((bench.seconds_per_call(ours, sets, roof, updates_last=updates_last), spec))
            label = note(spec) + ("  (dispatch's choice before this run)" if spec == incumbent else "")
            print(_timing_line(timings[-1][0], roof, spec) + label, flush=True)

    time_all(specs + ([incumbent] if incumbent is not None and incumbent not in specs else []))
    for _ in range(refine if timings else 0):
        best_s, best = min(timings, key=lambda t: t[0])
        tried = {spec for _, spec in timings} | set(wrong)
        fresh = [spec for spec in neighbours_of(best) if spec not in tried]
        if not fresh:
            break
        print(f"    refining around the fastest: {len(fresh)} neighbours", flush=True)
        time_all(fresh)
        if min(timings, key=lambda t: t[0])[0] >= best_s:
            break
    return timings


CONFIRM_FINALISTS = 3  # the fastest in the short loops, timed again in long ones (--confirm-seconds)
# The long loops overrule the short loops' order only by more than this: finalists
# within it of the fastest there are alike under the power cap, and the short loops,
# which the bench times too, tell them apart. On an H200 (2026-11-29) float32 ab 41's
# finalists ran 82.4 and 82.9 % in loops of 0.3 s, and the second, chosen, ran 88.0 %
# in the bench's 20 ms loops where the first had run 91.6.
CONFIRM_TIE = 0.01


def confirmed(timings: list, xla_s: float, ours, xla, sets: list[tuple], roof: float, seconds: float,
              updates_last: bool = False) -> tuple[list, float, dict]:
    """With ``seconds``, the CONFIRM_FINALISTS fastest of ``timings`` and XLA's dot
    timed again in loops of ``seconds``, in turns (``bench.seconds_per_call_in_turns``:
    each meets the clock the others met): (the chosen finalist's long
    timing, XLA's, the entry's fields that say so, its short loops' % of roofline
    among them: ``ranking_pct``). The chosen is the short loops'
    fastest finalist within CONFIRM_TIE of the fastest in the long loops. Short
    loops rank the candidates cheaply, but under an H200's power cap the clock falls
    over the first fraction of a second of a sustained run, and a kernel that led
    XLA's dot in 20 ms loops can trail it there (float64 mtsm A X 8: 1.02x XLA in the
    first 0.1 s, 0.89x after 3 s; docs/performance.md, sixty-second round). Without
    ``seconds`` (or timings), everything as it was."""
    if not seconds or not timings:
        return timings, xla_s, {}
    print(f"    the {CONFIRM_FINALISTS} fastest and XLA's dot again, in turns in loops of {seconds:g} s:", flush=True)
    specs = [spec for _, spec in sorted(timings, key=lambda t: t[0])[:CONFIRM_FINALISTS]]
    xla_s, *long_s = bench.seconds_per_call_in_turns(
        [xla] + [ours] * len(specs), sets, roof, updates_last=updates_last, loop_seconds=seconds,
        compiled_in=[None] + [_dispatch.forced(spec) for spec in specs])
    finalists = list(zip(long_s, specs))
    for finalist_s, spec in finalists:
        print(_timing_line(finalist_s, roof, spec), flush=True)
    print(f"    {xla_s * 1e3:8.3f} ms ({100 * roof / xla_s:5.1f}%)  XLA's dot", flush=True)
    fastest = min(long_s)
    chosen = next(t for t in finalists if t[0] <= fastest * (1 + CONFIRM_TIE))
    short_s = next(short_s for short_s, spec in timings if spec == chosen[1])
    return [chosen], xla_s, {"candidates": len(timings), "loop_seconds": seconds, "short_pct": 100 * roof / short_s}


def _timing_line(seconds: float, roof: float, spec) -> str:
    """A timed kernel's line of the tuner's log."""
    return f"    {seconds * 1e3:8.3f} ms ({100 * roof / seconds:5.1f}%)  {spec.config}"


def _entry(k_range: int, k_min: int, k: int, timings: list, xla_s: float, roof: float, margin: float = 0.0) -> dict:
    """A database entry of range ``k_range``: the fastest of ``timings``, or XLA (config None) where it was
    not faster by ``margin`` (a fraction of XLA's time) or no candidate gave the right result (no timings)."""
    best_s, best = min(timings, key=lambda t: t[0], default=(math.inf, None))
    print(f"  K>={k_min:<8} K={k:<10} best {best_s * 1e3:8.3f} ms ({100 * roof / best_s:5.1f}%)  "
          f"xla {xla_s * 1e3:8.3f} ms ({100 * roof / xla_s:5.1f}%)", flush=True)
    return {
        "k_range": k_range, "k_min": k_min, "k_tuned": k,
        "config": dataclasses.asdict(best.config) if best_s < xla_s * (1 - margin) else None,
        **({"tsmm_s": best_s, "tsmm_pct": 100 * roof / best_s} if timings else {}),
        "xla_s": xla_s, "xla_pct": 100 * roof / xla_s,
        "candidates": len(timings), "loop_seconds": bench.LOOP_SECONDS,
    }


def ranking_pct(entry: dict) -> float:
    """An entry's % of roofline in the short loops, which rank every candidate: a
    confirmed entry's tsmm_pct is its long loops' (``confirmed``), 5-12 points under
    the short loops' for the DMMA kernels on an H200 (docs/performance.md, seventieth
    round), so entries confirmed since also record the short loops' figure. Entries
    confirmed before record only the long loops'."""
    return entry.get("short_pct", entry.get("tsmm_pct") or 0.0)


def nearby_winners(problem: Problem, range_idx: int, entries: dict) -> dict[KernelSpec, str]:
    """The NEARBY_WINNERS fastest kernels (by ``ranking_pct``, then the nearest)
    that won range ``range_idx`` at tuned widths of ``problem``'s op and dtype
    within NEARBY_REACH of its M and N, applied to ``problem`` (or its real view,
    where that is what won) and valid there (``_fitted``), as kernel -> the key of
    the entry it won (e.g. "atb:float64:9x9"). A tile's padding covers a few more
    columns: on an H100 (2026-11-25) one real-view kernel won complex64 ab at each
    of 33..36 (93-94 % of roofline), where the model's ran 57-64 %."""
    key_op = op_name(problem)
    found = []
    for key, key_entries in entries.items():
        if key.split(":")[0] != key_op:
            continue
        other = key_problem(key)
        distance = max(abs(other.m - problem.m), abs(other.n - problem.n))
        if other.dtype != problem.dtype or not 0 < distance <= NEARBY_REACH:
            continue
        for entry in key_entries:
            target = _dispatch.real_view_problem(problem) if entry.get("real_view") else problem
            if range_index(entry) != range_idx or entry["config"] is None or target is None:
                continue
            spec = _fitted(KernelSpec(target, Config(**entry["config"])))
            if spec is not None:
                found.append((-ranking_pct(entry), distance, spec, key))
    winners = {}
    for *_, spec, key in sorted(found, key=lambda item: item[:2]):
        winners.setdefault(spec, key)
    return dict(list(winners.items())[:NEARBY_WINNERS])


def chosen_since(entry: dict) -> str:
    """The day ``entry``'s choice (its kernel, or XLA's dot) was first made for its
    range: ``since`` where a re-tune on a later day kept it (its ``date`` names the
    latest tuning), else its date; "" for an undated entry, which predates every
    dated one."""
    return entry.get("since", entry.get("date", ""))


def _since_of_kept_choice(problem: Problem | MtsmProblem, old: list[dict], entry: dict, table=None) -> str | None:
    """``chosen_since`` of the entry of ``old`` (a key's entries before a re-tune)
    that made the choice ``entry`` makes for the same range, or None where the
    re-tune chose anew."""
    config_type = MtsmConfig if isinstance(problem, MtsmProblem) else Config

    def choice(e: dict):
        return None if e["config"] is None else (config_type(**e["config"]), bool(e.get("real_view")))

    kept = [e for e in old if range_index(e, table) == entry["k_range"] and choice(e) == choice(entry)]
    return chosen_since(kept[0]) if kept else None


def stale_ranges(problem: Problem | MtsmProblem, entries: dict) -> dict[int, list[str]]:
    """The K ranges of ``problem``'s entries whose tuning could not have timed a
    winner ``nearby_winners`` offers now: a different kernel, chosen on a later
    day than the entry was tuned (``chosen_since``: a re-tune that keeps a kernel
    keeps its day, so that a neighbour re-tuned to the same kernel does not make
    the entries around it stale), as range -> the keys of those winners' entries.
    ``--stale`` lists them, for a re-tune: on an H200 the float64 ab entries it
    flags at 28, 29, 31, 39, 41, 50, 51 and 58 gained 4.1-8.4 % in GB/s when
    re-tuned (sixty-fourth round). A complex problem's entry is stale too where
    its real view's own entry (the same bytes and work: complex64 Aᴴ B 26 × 26 is
    float32 Aᵀ B 52 × 52) won later with another kernel, which the tuning times as
    dispatch's kernel of the real view: on an H200 (2026-11-30) complex64 atb 28 ran
    83.3 % on an undated early entry (9 candidates) where float32 atb 56's later
    winner ran 97.2 %; re-tuned, it took that kernel (94.4 %, sixty-ninth round).
    None of mtsm's: its nearby kernels are fitted per size, not kept as winners."""
    if isinstance(problem, MtsmProblem):
        return {}
    stale = {}
    real = _dispatch.real_view_problem(problem)
    for entry in entries.get(_dispatch.problem_key(problem), []):
        range_idx, config = range_index(entry), entry["config"]
        target = real if entry.get("real_view") else problem
        own = None if config is None else KernelSpec(target, Config(**config))
        date = entry.get("date", "")

        def won_later(winner: dict, range_idx=range_idx, date=date) -> bool:
            return range_index(winner) == range_idx and chosen_since(winner) > date

        later = [key for spec, key in nearby_winners(problem, range_idx, entries).items()
                 if spec != own and any(map(won_later, entries[key]))]
        if real is not None and any(
                won_later(winner) and winner["config"] is not None
                and KernelSpec(real, Config(**winner["config"])) != own
                for winner in entries.get(_dispatch.problem_key(real), [])):
            later.append(_dispatch.problem_key(real))
        if later:
            stale[range_idx] = later
    return stale


def _fitted(spec: KernelSpec) -> KernelSpec | None:
    """``spec``, or where it is invalid, the same kernel with its edges on the FMA
    units where that is valid (a narrower width's tensor-core atb tile then covers
    the wider problem's whole blocks: complex64 atb 40's 3xTF32 5×5 tile, 104 % of
    roofline on an H100, needs more registers than an SM has at 41 without), or None.
    Valid includes its blocks per SM fitting: a wider problem has more warps a block
    (float64 atb 30's 2×4 DMMA tile at two blocks per SM leaves 56 registers a thread
    at 33, and ptxas refuses m16n8k4 there)."""
    c = spec.config
    edged = ([KernelSpec(spec.problem, dataclasses.replace(c, fma_edges=True))]
             if spec.problem.op == "atb" and c.mma and not c.fma_edges else [])
    return next((candidate for candidate in [spec, *edged] if fits_an_sm(candidate)), None)


def opening_specs(problem: Problem, specs: list[KernelSpec], k: int, range_idx: int, arch: str,
                  device: str) -> tuple[list[KernelSpec], KernelSpec | None, dict[KernelSpec, str]]:
    """What a tuning of ``problem``'s range ``range_idx`` at K = ``k`` on a ``device``
    times besides the search's ``specs``, before its local search: the kernels
    dispatch picks for a complex problem's real view's problem and on the
    architecture's other GPU models, the winners at nearby widths on this one
    (``nearby_winners``), for ab's fused update plain ab's kernel carried to it
    (``carried_to_update``: an update entry otherwise hides it), and dispatch's
    kernel before the run; the second and third also as kernel -> where they
    come from. Where none of these nor any of ``specs`` exists, the model's
    kernel opens the run."""
    incumbent = _dispatch.select_problem(problem, k, arch, device)
    real = _dispatch.real_view_problem(problem)
    real_own = None if real is None else _dispatch.select_problem(real, k, arch, device)
    origins = {}
    for other in _dispatch.other_models(arch, device):
        spec = _dispatch.select_problem(problem, k, arch, other)
        if spec is not None:
            origins.setdefault(spec, f"dispatch's choice on {other}")
    for spec, key in nearby_winners(problem, range_idx, _dispatch.database(arch, device)).items():
        origins.setdefault(spec, f"the winner of {key}")
    plain = _dispatch.select_problem(dataclasses.replace(problem, update=False), k, arch, device) \
        if problem.update else None
    if plain is not None:
        update = dataclasses.replace(plain.problem, update=True)
        try:
            origins.setdefault(KernelSpec(update, carried_to_update(update, plain.config)), "plain ab's kernel, carried")
        except InvalidSpec:
            pass
    extra = [spec for spec in dict.fromkeys([real_own, *origins])
             if spec is not None and spec not in specs + [incumbent]]
    if not specs and not extra and incumbent is None:
        # Nothing opens the run (no search candidates asked, XLA's dot serving, nothing
        # near): the model's kernel does, so that the local search has a start (on an H100,
        # 2026-11-27, float64 ab 8x8 with --candidates 0 timed nothing).
        extra = candidate_specs(problem, 1, arch)
        origins.update({spec: "the model's kernel" for spec in extra})
    return extra, incumbent, origins


def tune_problem(problem: Problem, ceilings: dict, limit: int, arch: str, ranges: set[int] | None = None,
                 refine: int = 0, device: str = "", confirm_seconds: float = 0.0,
                 on_entry=lambda entry: None) -> list[dict]:
    """Entries for the K ranges ``ranges`` (indices into K_RANGES; None: all): the fastest candidate in each
    (``real_view`` where it is the real view's), or XLA where it measured faster.
    Among the candidates, the kernel dispatch picks today for the range (the
    shipped databases' entry for ``device``, or the model's), the kernels it
    picks on the architecture's other GPU models (their tuned winners: on an
    H100, 2026-11-24, the model's float32 Aᵀ B at 33..63 ran 56-72 % of roofline
    where the H200 had tuned 3xTF32 kernels), for a complex problem the kernel
    dispatch picks for its real view's problem (the same bytes, so its own tuned
    winner; an H100's complex entry otherwise stands in its way on an H200), and
    ``refine`` rounds of ``codegen.search.neighbours`` (see ``time_candidates``);
    with ``confirm_seconds``, chosen among the fastest timed again (``confirmed``).
    ``on_entry`` receives each range's entry as soon as it is known, and again
    once the timing at K_ALIGNED has marked it."""
    dtype = np.dtype(problem.dtype)
    specs = candidate_specs(problem, limit, arch)
    op = _dispatch.op_name(problem)
    ours, xla = bench.operations(op)

    def neighbours_of(spec: KernelSpec) -> list[KernelSpec]:
        return [KernelSpec(spec.problem, c) for c in neighbours(spec.problem, spec.config, arch)]

    def note(spec: KernelSpec) -> str:
        where = f"  ({origins[spec]})" if spec in origins else ""
        return ("  (real view)" if _dispatch.is_real_view(spec, problem.dtype) else "") + where

    entries = []
    for index, (range_min, k_sample) in enumerate(K_RANGES):
        if ranges is not None and index not in ranges:
            continue
        k = k_sample or bench.problem_rows(problem.m, problem.n, dtype)
        sets = bench.operand_sets(op, dtype, problem.m, problem.n, k, seed=k)
        roof = bench.roofline_seconds(op, dtype, problem.m, problem.n, k, ceilings)
        xla_s = bench.seconds_per_call(xla, sets, roof, updates_last=problem.update)  # as the bench times V - Q C
        extra, incumbent, origins = opening_specs(problem, specs, k, index, arch, device)
        timings = time_candidates(specs + extra, incumbent, ours, xla, sets, roof, arch, refine, neighbours_of, note,
                                  updates_last=problem.update)
        timings, xla_s, timed_in = confirmed(timings, xla_s, ours, xla, sets, roof, confirm_seconds,
                                             updates_last=problem.update)
        entry = _entry(index, range_min if k_sample else largest_range_min(k), k, timings, xla_s, roof) | timed_in
        best = min(timings, key=lambda t: t[0], default=(None, None))[1]
        if entry["config"] is not None and _dispatch.is_real_view(best, problem.dtype):
            entry["real_view"] = True  # config is the real problem's
        entries.append(entry)
        on_entry(entry)
        del sets
        if problem.op == "atb" and not k_sample and entry["config"] is not None and k % K_ALIGNED:
            entry.update(xla_at_aligned_k(problem, best, ceilings, ours, xla))
            on_entry(entry)
    return entries


def mtsm_opening_specs(problem: MtsmProblem, specs: list[MtsmSpec], size: int, arch: str,
                       device: str) -> tuple[list[MtsmSpec], MtsmSpec | None]:
    """``opening_specs`` of an mtsm problem at M = K = ``size``: the kernels dispatch
    picks on the architecture's other GPU models, the kernels the tuned widths
    nearest N chose at that size fitted to N (``_mtsm.fitted``: on an H100,
    2026-11-27, the wider one's ran untuned widths 1.33x faster than the
    model's in geometric mean), and dispatch's kernel before the run."""
    incumbent = _mtsm.select(problem.dtype, problem.transpose_a, problem.n, problem.conj, size, arch, device)
    elsewhere = [_mtsm.select(problem.dtype, problem.transpose_a, problem.n, problem.conj, size, arch, other)
                 for other in _dispatch.other_models(arch, device)]
    nearby = [_mtsm.fitted(problem, width, config)
              for width, config in _mtsm.tuned_neighbours(problem, size, arch, device) if config is not None]
    extra = [spec for spec in dict.fromkeys(elsewhere + nearby)
             if spec is not None and spec not in specs + [incumbent]]
    return extra, incumbent


def tune_mtsm_problem(problem: MtsmProblem, ceilings: dict, limit: int, arch: str, ranges: set[int] | None = None,
                      refine: int = 0, device: str = "", confirm_seconds: float = 0.0,
                      on_entry=lambda entry: None) -> list[dict]:
    """Entries for the ranges ``ranges`` of MTSM_K_RANGES (None: all), each timed at
    M = K = its size: the fastest of ``codegen.search.mtsm_candidates``, dispatch's
    kernel before this run, on this GPU and on the architecture's other GPU models,
    and ``refine`` rounds of their neighbours (with ``confirm_seconds``, of the
    fastest timed again, ``confirmed``), or XLA where the fastest was not
    MTSM_MARGIN faster; ``on_entry`` receives each range's entry as soon as it is known."""
    specs = [MtsmSpec(problem, c) for c in mtsm_candidates(problem, limit, arch)]
    ours, xla = bench.mtsm_operations(problem.transpose_a)

    def neighbours_of(spec: MtsmSpec) -> list[MtsmSpec]:
        return [MtsmSpec(problem, c) for c in mtsm_neighbours(problem, spec.config)]

    entries = []
    for index, (range_min, size) in enumerate(MTSM_K_RANGES):
        if ranges is not None and index not in ranges:
            continue
        sets = bench.mtsm_operand_sets(problem.dtype, size, size, problem.n, seed=size)
        roof = bench.mtsm_roofline_seconds(problem.dtype, size, problem.n, size, ceilings)
        xla_s = bench.seconds_per_call(xla, sets, roof)
        extra, incumbent = mtsm_opening_specs(problem, specs, size, arch, device)
        timings = time_candidates(specs + extra, incumbent, ours, xla, sets, roof, arch, refine, neighbours_of)
        timings, xla_s, timed_in = confirmed(timings, xla_s, ours, xla, sets, roof, confirm_seconds)
        entries.append(_entry(index, range_min, size, timings, xla_s, roof, MTSM_MARGIN) | timed_in)
        on_entry(entries[-1])
        del sets
    return entries


def opening_kernels(problem: Problem | MtsmProblem, limit: int, arch: str, ranges: set[int]) -> list:
    """Every kernel a tuning of ``problem`` over ``ranges`` times before its local
    search, on whichever GPU model of ``arch`` with a database file it runs
    (``--compile-only``)."""
    mtsm = isinstance(problem, MtsmProblem)
    specs = ([MtsmSpec(problem, c) for c in mtsm_candidates(problem, limit)] if mtsm
             else candidate_specs(problem, limit, arch))
    found = list(specs)
    for index in ranges:
        k = k_ranges(problem)[index][1]  # None: the benchmark's K (atb and ab's largest range)
        if k is None:
            k = bench.problem_rows(problem.m, problem.n, np.dtype(problem.dtype))
        for model in _dispatch.other_models(arch):
            if mtsm:
                extra, incumbent = mtsm_opening_specs(problem, specs, k, arch, model)
            else:
                extra, incumbent, _ = opening_specs(problem, specs, k, index, arch, model)
            found += [*extra, incumbent]
    return [spec for spec in dict.fromkeys(found) if spec is not None]


def xla_at_aligned_k(problem: Problem, spec: KernelSpec, ceilings: dict, ours, xla) -> dict:
    """The winner of an Aᵀ B problem against XLA at K = K_ALIGNED, a power of two,
    where XLA's dot runs at its fastest (the benchmark's K of most widths is not
    one; on an H200 XLA beat 10 of 64 float64 winners there): where XLA is faster,
    the fields by which dispatch takes it at multiples of that K. ``ours`` and
    ``xla`` are the timed calls (``bench.operations``)."""
    dtype, op = np.dtype(problem.dtype), op_name(problem)
    sets = bench.operand_sets(op, dtype, problem.m, problem.n, K_ALIGNED, seed=K_ALIGNED)
    roof = bench.roofline_seconds(op, dtype, problem.m, problem.n, K_ALIGNED, ceilings)
    xla_s = bench.seconds_per_call(xla, sets, roof)
    with _dispatch.forced(spec):
        ours_s = bench.seconds_per_call(ours, sets, roof)
    print(f"  K={K_ALIGNED:<10} the winner {ours_s * 1e3:8.3f} ms ({100 * roof / ours_s:5.1f}%)  "
          f"xla {xla_s * 1e3:8.3f} ms ({100 * roof / xla_s:5.1f}%)", flush=True)
    return {"xla_faster_at": K_ALIGNED, "xla_aligned_s": xla_s, "tsmm_aligned_s": ours_s} if xla_s < ours_s else {}


def entries_from_bench(reports: list[dict]) -> dict[str, list[dict]]:
    """One-candidate entries (the timed kernel against XLA) from bench reports:
    the main rows stand for the largest K range, the K-sweep rows for K ranges
    of their own; mtsm rows stand for K from their own K up. Only rows that
    timed a kernel count (``bench --model`` times one everywhere)."""
    measured = {}
    rows = [(largest_range_min(row["K"]), row, report) for report in reports for row in report["rows"]]
    rows += [(row["K"], row, report) for report in reports for row in report.get("k_sweep", [])]
    for k_min, row, report in rows:
        if row.get("config") is None:
            continue
        if row["op"] in ("mtsm", "mtsm_t"):  # ranges of the square size timed (_mtsm.problem_size)
            k_min = row["K"]
            key = _dispatch.mtsm_key(row["op"] == "mtsm_t", row["dtype"], row["N"])
        else:
            key = _dispatch.problem_key(_dispatch.named_problem(row["op"], row["dtype"], row["M"], row["N"]))
        won = row["tsmm_s"] < row["xla_s"]
        entry = {
            "k_min": k_min, "k_tuned": row["K"],
            "config": row["config"] if won else None,
            "tsmm_s": row["tsmm_s"], "tsmm_pct": row["tsmm_pct"],
            "xla_s": row["xla_s"], "xla_pct": row["xla_pct"],
            "candidates": 1, "source": f"bench {report['device']} {report['date']}",
        }
        if won and row.get("real_view"):
            entry["real_view"] = True  # config is then the real kernel's, as timed
        measured.setdefault(key, {})[k_min] = entry
    return {key: [by_k[k] for k in sorted(by_k)] for key, by_k in measured.items()}


def mark_aligned_xla_wins(reports: list[dict], entries: dict[str, list[dict]]) -> tuple[list[str], list[str]]:
    """Record in ``entries`` where XLA beat the dispatched kernel at a power-of-two K
    of a K sweep of Aᵀ B by more than ALIGNED_XLA_MARGIN (``xla_faster_at``, the
    smallest such K): on the entry that served that K (as ``_dispatch.tuned``
    picks it: the range's, below every range the lowest range's), if it still
    stands for the kernel that was timed (its config, or XLA's where dispatch fell
    to the model's kernel at that K).
    Where XLA won below the K the kernel was timed at and at or past it too, the
    entry says so (``xla_faster_past_tuned``): XLA then serves every multiple of
    the smaller K, the larger K included.
    Returns the keys marked and those whose serving entry is not in ``entries``."""
    marked, elsewhere = [], []
    for report in reports:
        for row in report.get("k_sweep", []):
            k = row["K"]
            if (row["op"] != "atb" or row.get("config") is None or k & (k - 1)
                    or row["xla_s"] * (1 + ALIGNED_XLA_MARGIN) >= row["tsmm_s"]):
                continue
            key = _dispatch.problem_key(Problem("atb", row["dtype"], row["M"], row["N"]))
            entry = _dispatch.range_entry(entries.get(key, []), k)
            if entry is None or entry["config"] is not None and Config(**entry["config"]) != Config(**row["config"]):
                elsewhere.append(key)
                continue
            faster_at = entry.get("xla_faster_at", k)
            if min(faster_at, k) < entry.get("k_tuned", 1) <= max(faster_at, k):
                entry["xla_faster_past_tuned"] = True
            if k <= faster_at:
                entry.update(xla_faster_at=k, xla_aligned_s=row["xla_s"], tsmm_aligned_s=row["tsmm_s"])
            marked.append(key)
    return marked, elsewhere


def verdict_seconds(entries: list[dict], ranges: set[int], table=None) -> float:
    """The longest loops the entries of ``ranges`` were decided in where longer than
    this run's, else 0: a re-tune confirms its finalists in loops as long, so that a
    tie in short loops does not overturn a verdict of long ones (on an H200,
    2026-12-01, complex128 Aᵀ B 32: XLA's dot 8 % ahead in loops of 0.3 s, then a
    kernel 0.2 % ahead in a re-tune of 20 ms loops)."""
    longest = max((entry.get("loop_seconds", 0.0) for entry in entries if range_index(entry, table) in ranges),
                  default=0.0)
    return longest if longest > bench.LOOP_SECONDS else 0.0


def _tuned_ranges(entries: list[dict], table=None) -> set[int]:
    """The K ranges the tuner wrote entries for (bench-made ones are tuned over)."""
    return {range_index(entry, table) for entry in entries if not entry.get("source", "").startswith("bench")}


def database_file(arch: str, device: str, of_model: bool) -> pathlib.Path:
    """The database a run on the GPU model ``device`` writes. ``of_model``
    (``--device-db``): the model's own file, or the architecture's where that was
    tuned on this model (a file of its own would shadow those entries key by key,
    from each key's lowest range up). Otherwise the architecture's file, which
    names the model it was tuned on: results of another model would be mixed into
    it under that model's name and ceilings, so that is refused."""
    shared = _dispatch.database_path(arch)
    tuned_on = json.loads(shared.read_text()).get("device", "") if shared.exists() else ""
    if tuned_on in ("", device):
        return shared
    if of_model:
        return _dispatch.database_path(arch, device)
    raise SystemExit(f"{shared.name} was tuned on an {tuned_on}, this is an {device}: pass --device-db "
                     "to write the file of this GPU model (or --db PATH)")


def _save(path: pathlib.Path, db: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(db, indent=1, sort_keys=True))
    os.replace(tmp, path)


def only_stale_model(named: str, compile_only: bool) -> str:
    """The GPU model whose stale ranges ``--only-stale`` tunes: this GPU's, or
    with ``--compile-only`` the one it names."""
    if compile_only:
        if not named:
            raise SystemExit("--only-stale with --compile-only names the GPU model, e.g. --only-stale 'NVIDIA H200'")
        return named
    here = _cuda.device_kind()
    if named and named != here:
        raise SystemExit(f"--only-stale {named!r}: this GPU is an {here}, whose own stale ranges a run tunes")
    return here


def stale_pct(problem: Problem, ranges: set[int], entries: dict) -> float:
    """The lowest % of roofline ``problem``'s entries of ``ranges`` recorded (``ranking_pct``):
    --only-stale re-tunes the weakest first, since a device call's limit may cut the rest."""
    return min((ranking_pct(entry) for entry in entries.get(_dispatch.problem_key(problem), [])
                if range_index(entry) in ranges), default=0.0)


def print_stale(problems: list, wanted, entries: dict, own: dict) -> None:
    """``--stale``: each stale problem and range (``stale_ranges``) of the ``wanted``
    ranges, from the K its entry serves (as the tuner's log names it: the largest
    range's entries start at the benchmark's K, below the threshold), marked where
    that entry is the architecture's file's, not one of ``own`` (the GPU model's
    file: a range it has no entry for, below its lowest), then per op and dtype a
    --shapes value naming them."""
    shapes = {}
    for problem in problems:
        key, table = _dispatch.problem_key(problem), k_ranges(problem)
        for range_idx, later in sorted(stale_ranges(problem, entries).items()):
            if range_idx in wanted(problem):
                entry = next(entry for entry in entries[key] if range_index(entry, table) == range_idx)
                start = entry.get("k_min", table[range_idx][0])
                shared = "" if entry in own.get(key, []) else " (the architecture's entry; none of this GPU's)"
                print(f"{key} K>={start}{shared}: later winners {', '.join(later)}")
                shape = str(problem.m) if problem.m == problem.n else f"{problem.m}x{problem.n}"
                shapes.setdefault((_dispatch.op_name(problem), problem.dtype), []).append(shape)
    for (op, dtype), listed in shapes.items():
        print(f"--ops {op} --dtypes {dtype} --shapes {','.join(dict.fromkeys(listed))}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="atb,ab",
                        help="atb, ab, ab_update (ab's fused V - Q C), gram (atb(a, a), M = N), mtsm (A X), "
                             "mtsm_t (Aᵀ X)")
    parser.add_argument("--dtypes", default="float64,float32,complex128,complex64")
    parser.add_argument("--shapes", default="1-64",
                        help="M = N values and M x N pairs, e.g. 1-64 or 3,8,13x48; mtsm's N values, e.g. 1,2,4,8")
    parser.add_argument("--candidates", type=int, default=12)
    parser.add_argument("--refine", type=int, default=2,
                        help="rounds of local search around the fastest candidate (0: none)")
    parser.add_argument("--db", type=pathlib.Path, default=None)
    parser.add_argument("--k-min", type=int, default=0,
                        help="tune only the K ranges from this one up (a quick look at large K)")
    parser.add_argument("--k-max", type=int, default=None,
                        help="tune only the K ranges up to this one (e.g. 262144: K = 2^16 and 2^20)")
    parser.add_argument("--again", action="store_true",
                        help="tune the chosen ranges even where the database has them (after new kernel options)")
    parser.add_argument("--from-bench", type=pathlib.Path, nargs="+", default=None,
                        help="record bench reports' measurements instead of tuning")
    parser.add_argument("--xla-aligned-from", type=pathlib.Path, nargs="+", default=None,
                        help="record where K sweeps of atb at power-of-two K found XLA faster")
    parser.add_argument("--compile-only", action="store_true",
                        help="compile what the tuning times before its local search into the kernel cache "
                             "($JAX_TSMM_CACHE_DIR), on any machine with nvcc, and stop: the cache can travel "
                             "to the GPU machine")
    bench.add_loop_seconds_option(parser)
    parser.add_argument("--confirm-seconds", type=float, default=0.0,
                        help=f"time the {CONFIRM_FINALISTS} fastest and XLA's dot again in loops of this long and "
                             "choose among them (0.3: the clock an H200's power cap settles at; 0: off; "
                             "a range whose entry was decided in longer loops than this run's is confirmed "
                             "in loops as long)")
    parser.add_argument("--stale", metavar="DEVICE", default=None,
                        help="list the shapes of --ops/--dtypes/--shapes whose entries on the GPU model DEVICE "
                             "(e.g. 'NVIDIA H200') predate a different winner at a nearby width, for --shapes "
                             "of a re-tune, and stop (no GPU needed)")
    parser.add_argument("--only-stale", nargs="?", const="", default=None, metavar="DEVICE",
                        help="tune only the ranges --stale lists for this GPU's model (with --compile-only: "
                             "compile for those of DEVICE, e.g. 'NVIDIA H200'), anew")
    parser.add_argument("--device-db", action="store_true",
                        help="write the database of the GPU model (this GPU's, or the bench reports'), "
                             "whose entries for a key serve from their lowest K range up: the architecture's "
                             "file where that was tuned on this model")
    args = parser.parse_args(argv)
    bench.set_loop_seconds(args.loop_seconds)
    if args.from_bench:
        reports = [bench.read_report(p) for p in args.from_bench]
        devices = {report["device"] for report in reports}
        if args.db:
            path = args.db
        elif len(devices) == 1:
            path = database_file("sm_90", next(iter(devices)), args.device_db)
        else:
            raise SystemExit(f"the reports are of several GPU models, {sorted(devices)}: record each model's apart")
        db = json.loads(path.read_text()) if path.exists() else {"entries": {}}
        if not args.db:
            db.setdefault("device", next(iter(devices)))  # the model a new file's entries were measured on
        for key, entries in entries_from_bench(reports).items():
            old = db["entries"].get(key, [])
            if not _tuned_ranges(old):  # tuned entries stay; newer bench rows replace their K range's
                by_k = {entry["k_min"]: entry for entry in old} | {entry["k_min"]: entry for entry in entries}
                db["entries"][key] = [by_k[k] for k in sorted(by_k)]
        _save(path, db)
        return
    if args.xla_aligned_from:
        reports = [bench.read_report(p) for p in args.xla_aligned_from]
        path = args.db or database_file("sm_90", reports[0]["device"], args.device_db)
        db = json.loads(path.read_text())
        marked, elsewhere = mark_aligned_xla_wins(reports, db["entries"])
        print(f"XLA faster at a power-of-two K, recorded: {', '.join(marked) or 'nowhere'}")
        if elsewhere:
            print(f"not recorded (served by another file, or by another kernel now): {', '.join(elsewhere)}")
        _save(path, db)
        return
    dtypes, ops = args.dtypes.split(","), args.ops.split(",")
    problems = [_dispatch.named_problem(op, dtype, m, n) for dtype in dtypes for op in ops if op not in MTSM_OPS
                for m, n in bench.op_shapes(op, bench.parse_shapes(args.shapes))]
    if set(ops) & set(MTSM_OPS):
        problems += [MtsmProblem(op == "mtsm_t", dtype, n) for dtype in dtypes for op in ops if op in MTSM_OPS
                     for n in bench.parse_widths(args.shapes)]

    def in_k_bounds(problem) -> set[int]:
        return {i for i, (range_min, _) in enumerate(k_ranges(problem))
                if args.k_min <= range_min and (args.k_max is None or range_min <= args.k_max)}

    wanted = in_k_bounds
    if args.only_stale is not None:
        stale_of = only_stale_model(args.only_stale, args.compile_only)
        entries = _dispatch.database(_cuda.arch(), stale_of)
        stale = {problem: in_k_bounds(problem) & set(stale_ranges(problem, entries)) for problem in problems}
        problems = sorted((problem for problem in problems if stale[problem]),
                          key=lambda problem: stale_pct(problem, stale[problem], entries))
        wanted = stale.__getitem__
        print(f"{len(problems)} problems with stale ranges on {stale_of}", flush=True)

    if args.stale is not None:
        own = database_file(_cuda.arch(), args.stale, of_model=True)
        print_stale(problems, wanted, _dispatch.database(_cuda.arch(), args.stale),
                    json.loads(own.read_text())["entries"] if own.exists() else {})
        return
    if args.compile_only:
        arch = _cuda.arch()  # the default architecture where this machine has no GPU
        kernels = list(dict.fromkeys(spec for problem in problems
                                     for spec in opening_kernels(problem, args.candidates, arch, wanted(problem))))
        _kernels.precompile(kernels, arch)
        print(f"{len(kernels)} kernels for {arch} in {_kernels.cache_dir()}")
        return
    jax.config.update("jax_enable_x64", True)
    if not _cuda.register_targets():
        raise SystemExit("jax_tsmm.tune needs a GPU and the CUDA extension")
    arch, device = _cuda.arch(), _cuda.device_kind()
    path = args.db or database_file(arch, device, args.device_db)
    path.parent.mkdir(parents=True, exist_ok=True)
    db = json.loads(path.read_text()) if path.exists() else {"entries": {}}
    ceilings = bench.measure_ceilings()
    db.update(device=device, arch=arch, ceilings=ceilings)
    for index, problem in enumerate(problems):
        if isinstance(problem, MtsmProblem):
            tune_one, key = tune_mtsm_problem, _dispatch.mtsm_key(problem.transpose_a, problem.dtype, problem.n)
        else:
            tune_one, key = tune_problem, _dispatch.problem_key(problem)
        table, ranges, old = k_ranges(problem), wanted(problem), db["entries"].get(key, [])
        if not (args.again or args.only_stale is not None) and ranges <= _tuned_ranges(old, table):
            continue  # resume
        print(f"[{index + 1}/{len(problems)}] {key}", flush=True)
        start = time.monotonic()
        confirm_seconds = max(args.confirm_seconds, verdict_seconds(old, ranges, table))
        if confirm_seconds > args.confirm_seconds:
            print(f"  confirmed in loops of {confirm_seconds:g} s, as the entries it replaces were", flush=True)

        def save(entry: dict, key=key, table=table, problem=problem, old=old) -> None:
            """Each range as it is done (a call's time limit cuts a problem, not its finished
            ranges), naming the GPU, the day it was timed on (a file gathers many runs)
            and the day its choice was first made (``chosen_since``)."""
            today = str(datetime.date.today())
            since = _since_of_kept_choice(problem, old, entry, table)
            entry = {**entry, "device": device, "date": today, **({} if since in (None, today) else {"since": since})}
            db["entries"][key] = replace_ranges(db["entries"].get(key, []), [entry], {entry["k_range"]}, table)
            db["date"] = today
            _save(path, db)

        tune_one(problem, ceilings, args.candidates, arch, ranges, args.refine, device, confirm_seconds,
                 on_entry=save)
        print(f"  {time.monotonic() - start:.0f} s", flush=True)  # for planning a device call's tuning


if __name__ == "__main__":
    main()

"""Size -> kernel selection: which kernel, or XLA's dot, serves a problem.

Precedence (Tensile's library logic): the tuning database, whose entries for
(op, dtype, M, N) are split into K ranges by thresholds (ab's fused update
without entries of its own: plain ab's kernel entry, carried to the update);
then the generator's model; XLA's dot where no kernel applies, where the
tuner measured XLA faster, and for untuned ab pairs where measured neighbours
say so (``_beside_an_xla_square``, ``_near_an_xla_pair``). ``choose`` gives the
reason with the choice (``python -m jax_tsmm.explain``). The database is this
GPU's architecture's file, overridden entry by entry by the file of this GPU
model where there is one: GPUs of one architecture differ in bandwidth (an H200
streams 1.45x an H100's bytes to the same tensor cores), so the fastest kernel
of a width can differ between them.

A complex problem may run as its real view: a complex (K, M) row-major matrix
is bit for bit a real (K, 2M) one, so op(A)ᵀ B is read off the real (2M, 2N)
product of the real views, and op(A) C is the real view of A times C expanded
into a real (2M, 2N) matrix (``_cuda`` expands and combines the small parts).
The same bytes and flops, but float64 runs on the FP64 tensor-core kernels
(~90 % of the memory roofline where the complex FMA kernels reach 56-80 %).
Where 2M and 2N fit MAX_WIDTH, the complex key's database entry decides
(``"real_view": true``, with the real kernel it timed), else the model's rule:
the real view where it moves the product onto the tensor cores (the real
problem's model kernel uses DMMA), with the real problem's tuned kernel if it
has one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import pathlib
import re

import numpy as np

from jax_tsmm.codegen import (Config, InvalidSpec, KernelSpec, MtsmSpec, Problem, carried_to_gram, carried_to_update,
                              default_config, runs_gauss)
from jax_tsmm.codegen.abi import MAX_BATCH_DIMS
from jax_tsmm.codegen.mtsm import mtsm_key
from jax_tsmm.codegen.spec import key_problem, named_problem, op_name, problem_key

KERNEL_DTYPES = ("float32", "float64", "complex64", "complex128")
MAX_WIDTH = 128
REAL_VIEW_MAX_FLOAT32_ATB_ENTRIES = 64 * 64  # of a complex64 real view's result, for the model's rule
REAL_COMPONENT = {"complex64": "float32", "complex128": "float64"}
SMALL_K = 1 << 17  # below it, where nothing was tuned that small, XLA serves (see tuned)
SMALL_K_TIMED = 1 << 16
SMALL_K_XLA_ALIGNED = 1 << 10  # below SMALL_K, atb's XLA serves at multiples of it too (see tuned)
SMALL_K_COMPLEX = 1 << 15  # SMALL_K of complex atb and ab (see tuned)
NEAREST_KERNEL_REACH = 4  # how far (a ratio of K) a kernel entry serves where an atb XLA entry does not hold
TUNING_DIR = pathlib.Path(__file__).parent / "tuning"

_forced: list[KernelSpec | MtsmSpec] = []


@contextlib.contextmanager
def forced(spec: KernelSpec | MtsmSpec):
    """Lower every matching call (atb/ab, or mtsm for an MtsmSpec) traced inside
    the block with ``spec`` (the tuner's lever)."""
    _forced.append(spec)
    try:
        yield
    finally:
        _forced.pop()


def forced_spec(*problems) -> KernelSpec | MtsmSpec | None:
    """The innermost forced spec of one of ``problems``, or None."""
    for spec in reversed(_forced):
        if spec.problem in problems:
            return spec
    return None


_model_only: list[bool] = []


@contextlib.contextmanager
def model_only():
    """Inside the block, calls lowered dispatch by the generator's model alone, as
    if the tuning database were empty and without the small-K rule (``tuned``),
    so the model's kernels run at every K (the bench's ``--model``; the tests)."""
    _model_only.append(True)
    try:
        yield
    finally:
        _model_only.pop()


def database_path(arch: str, device: str = "") -> pathlib.Path:
    """The database file of ``arch`` or, given its name as JAX reports it (e.g.
    "NVIDIA H200"), of one GPU model of it."""
    if not device:
        return TUNING_DIR / f"{arch}.json"
    return TUNING_DIR / f"{arch}.{re.sub(r'[^A-Za-z0-9]+', '_', device).strip('_')}.json"


def database(arch: str, device: str = "") -> dict:
    """The tuned entries for ``arch``: key -> list of {k_min, config | None, ...},
    sorted by k_min; config None means XLA's dot measured faster. Where the
    ``device`` model's file has entries for a key, they serve from its lowest K
    range up, and the architecture's serve only below it (a model's file may hold
    only the larger ranges tuned on it; an architecture's range inside the
    model's was measured on another GPU)."""
    if _model_only:
        return {}
    merged = dict(_database_file(database_path(arch)))
    for key, entries in (_database_file(database_path(arch, device)) if device else {}).items():
        lowest = min(e["k_min"] for e in entries)
        kept = [e for e in merged.get(key, []) if e["k_min"] < lowest]
        merged[key] = kept + sorted(entries, key=lambda e: e["k_min"])
    return merged


def other_models(arch: str, device: str = "") -> list[str]:
    """The GPU models of ``arch``, other than ``device``, whose winners a file of
    the package holds: the model the architecture's file was tuned on and each
    model with a file of its own (the tuner times their winners on this GPU too)."""
    paths = [database_path(arch), *sorted(TUNING_DIR.glob(f"{arch}.*.json"))]
    models = [json.loads(path.read_text()).get("device", "") for path in paths if path.exists()]
    return [model for model in dict.fromkeys(models) if model and model != device]


@functools.cache
def _database_file(path: pathlib.Path) -> dict:
    if not path.exists():
        return {}
    return json.loads(path.read_text())["entries"]


def tuned(key: str, k: int, arch: str, device: str = "", aligned_marks: bool = True) -> dict | None:
    """The database entry that serves K ({k_min, config, ...}; config None means
    use XLA, ``real_view`` that a complex problem runs as its real view), or None
    where the database has no say. The entry of the range holding K serves; below
    every range, the lowest range's (a measured choice beats the untimed model),
    except at K under SMALL_K for atb, ab and the Gram matrix (not the fused
    update, which saves XLA's second pass) of a real dtype where there are none,
    or they start higher, or
    the one that would serve was timed at NEAREST_KERNEL_REACH times K or more;
    there XLA's dot serves as if an entry timed at K = SMALL_K_TIMED had chosen
    it (not under ``model_only``, which times the model's kernels): on an H200
    (2026-11-23) the float32 kernels tuned at gigabyte sizes took 0.75-0.95x
    XLA's speed at K = 2^16 for 10 of 12 problems (1.1-1.8x at 2^20), and on an
    H100 XLA won every float64 atb tuned at 2^16. For atb that entry counts as XLA measured faster at
    multiples of SMALL_K_XLA_ALIGNED as well: on an H200 (2026-11-26) the model's
    float32 8 x 8 Aᵀ B took 0.21-0.37x XLA's speed at K = 2^10, 2^12 and 2^14 (its
    two launches cost 15 µs, XLA's dot 3-6 µs). Complex atb and ab do the same
    below SMALL_K_COMPLEX: on an H100 (2026-11-27), at K = 2^10 and 2^14 the ab
    kernels of 8 x 8 took 0.60-0.87x XLA's speed (complex128 1.28x at 2^14), the
    atb kernels of 24 x 24 and 52 x 52 0.38-0.76x (complex64 24 x 24 1.13x at
    2^14; at 8 x 8 1.2-1.8x, where XLA's complex Aᴴ B is slow at every K); at
    2^16 the kernels took 0.76-2.3x (complex128 atb 24 x 24 the 0.76x).

    XLA's Aᵀ B is fast only at some K: on an H100 (2026-11-22) at K = 2^16, 2^20
    and 2^22 it reached 60-95 % of roofline, at K = 65537, 99991, 1048573, 1500007
    and 2739138 only 8-31 % (docs/performance.md). So an atb (or Gram) entry that chose XLA
    holds only for K with at least the power-of-two factor of the K it was timed
    at; at other K the problem's kernel entry timed at the K nearest serves
    (``_nearest_kernel_entry``), else the model's kernel. Conversely, an atb
    kernel entry that XLA beat at a power-of-two K (``xla_faster_at``, recorded
    by the tuner at K = 2^22 and by ``tune --xla-aligned-from`` from K sweeps)
    gives way to XLA at multiples of that K, short of the K the kernel was timed
    at where that is larger: on an H200 (2026-11-23) at K = 2^22, XLA's float64
    Aᵀ B reached 74-97 % of roofline and beat the kernels tuned at gigabyte
    sizes at 10 of 64 widths (by up to 15 %). ``aligned_marks`` False leaves such
    kernel entries their kernel (see ``_gram_entry``)."""
    entries = database(arch, device).get(key, [])
    if not entries and _model_only:
        return None
    chosen = range_entry(entries, k)
    op, dtype, _ = key.split(":")
    small_k = small_k_of(dtype)
    if op in ("atb", "ab", "gram") and k < small_k and (
            chosen is None or chosen["k_min"] > k
            or chosen.get("k_tuned", chosen["k_min"]) >= NEAREST_KERNEL_REACH * k):
        chosen = {"k_min": 0, "k_tuned": SMALL_K_TIMED, "config": None, "xla_faster_at": SMALL_K_XLA_ALIGNED,
                  "rule": f"K under {small_k}, below the K ranges tuned: XLA's dot (the small-K rule)"}
    if chosen is None:
        return None
    if op in ("atb", "gram"):
        if chosen["config"] is None and not _xla_measured_faster(chosen, k):
            chosen = _nearest_kernel_entry(entries, k, "XLA's Aᵀ B was timed faster only at K aligned otherwise")
            if chosen is None:
                return None
        if chosen["config"] is not None and aligned_marks and _xla_measured_faster(chosen, k):
            return {"k_min": chosen["k_min"], "k_tuned": chosen["xla_faster_at"], "config": None,
                    "rule": f"XLA's Aᵀ B measured faster at K = {chosen['xla_faster_at']}, a factor of K"}
    return chosen


def range_entry(entries: list[dict], k: int) -> dict | None:
    """Of a key's entries (sorted by k_min), the one of the K range holding ``k``;
    below every range, the lowest range's; None without entries."""
    chosen = entries[0] if entries else None
    for entry in entries:
        if entry["k_min"] <= k:
            chosen = entry
    return chosen


def small_k_of(dtype: str) -> int:
    """The K under which XLA's dot serves atb and ab of ``dtype`` where nothing was
    tuned that small (``tuned``)."""
    return SMALL_K_COMPLEX if dtype.startswith("complex") else SMALL_K


def describe_entry(entry: dict, size: str = "K") -> str:
    """What a database entry says, and where it was measured, in words (``size``:
    what its K ranges count, mtsm's "M = K"). Every field but config is optional."""
    if "rule" in entry:
        return entry["rule"]
    kernel_s, xla_s = entry.get("tsmm_s"), entry.get("xla_s")
    if entry["config"] is not None:
        verdict = "its kernel measured fastest"
    elif kernel_s and xla_s and kernel_s < xla_s:  # mtsm's tuner keeps XLA's dot within tune.MTSM_MARGIN
        verdict = "its fastest kernel measured faster than XLA's dot by less than the tuner's margin"
    else:
        verdict = "XLA's dot measured faster"
    where = entry.get("source") or " ".join(["tuned", *filter(None, (entry.get("device"), entry.get("date")))])
    if entry.get("loop_seconds"):
        where += f" in loops of {entry['loop_seconds']:g} s"
    timed = f"{where}, at {size} = {entry.get('k_tuned', entry.get('k_min', 0)):,}"
    for label, library in (("kernel", "tsmm"), ("XLA's dot", "xla")):
        if entry.get(f"{library}_s"):
            pct = entry.get(f"{library}_pct")
            timed += f"; {label} {entry[f'{library}_s'] * 1e3:.3f} ms" + (f" ({pct:.1f} % of roofline)" if pct else "")
    return f"{verdict} ({timed})"


def _entry(problem: Problem, k: int, arch: str, device: str, real_view: bool = True,
           aligned_marks: bool = True) -> dict | None:
    """The database entry that serves ``problem`` at K (``tuned``). ab's fused update
    without entries of its own takes, in turn, the update entry of its real view
    (where ``real_view`` allows it), then plain ab's kernel entry of its shape with
    that kernel carried to the update (``carried_to_update``: y staged beside A
    where out is); where plain ab's entry chose XLA's dot, or has no kernel that
    takes the update, the database has no say (the update saves XLA's second pass)."""
    if problem.gram:
        return _gram_entry(problem, k, arch, device)
    entry = tuned(problem_key(problem), k, arch, device, aligned_marks)
    if problem.op == "atb" and problem.conj:
        entry = _conjugated_entry(problem, entry, k, arch, device)
    if entry is not None or not problem.update:
        return entry
    real = real_view_problem(problem) if real_view else None
    real_entry = tuned(problem_key(real), k, arch, device) if real is not None else None
    if real_entry is not None and real_entry["config"] is not None:
        return {**real_entry, "real_view": True, "rule": f"its real view's update entry: {describe_entry(real_entry)}"}
    plain = tuned(problem_key(dataclasses.replace(problem, update=False)), k, arch, device)
    kernel_problem = real if plain is not None and plain.get("real_view", False) else problem
    if plain is None or plain["config"] is None or kernel_problem is None:  # XLA, or a real view ruled out
        return None
    try:
        config = carried_to_update(kernel_problem, Config(**plain["config"]))
    except InvalidSpec:
        return None
    return {**plain, "config": dataclasses.asdict(config),
            "rule": f"plain ab's kernel entry, carried to the update: {describe_entry(plain)}"}


def _conjugated_entry(problem: Problem, entry: dict | None, k: int, arch: str, device: str) -> dict | None:
    """The entry of a complex Aᴴ B (``problem.conj``), given its key's ``entry``: an
    entry that chose XLA's dot timed XLA's Aᵀ B (the tuner's and the bench's op),
    and XLA's Aᴴ B runs far slower, so there the key's kernel entry timed nearest
    K serves, else the model's kernel (None); below SMALL_K the small-K rule
    stands, and so does a product of a single column (M or N 1), which XLA
    conjugates as it reduces. On an H200 (2026-11-30, scripts/gram_timing.py)
    XLA's Aᴴ B of complex128 4..64 ran at 22-44 % of the roofline, 1.26 ms at 32
    (our kernel 0.53 ms), where the database's entry had timed its Aᵀ B at 0.49
    ms; complex64's 1 x 1 ran at 101 %, as its Aᵀ B."""
    if (entry is None or entry["config"] is not None or k < small_k_of(problem.dtype)
            or min(problem.m, problem.n) == 1):
        return entry
    return _nearest_kernel_entry(database(arch, device).get(problem_key(problem), []), k,
                                 "Aᴴ B, where the key's XLA entry timed Aᵀ B")


def _gram_entry(problem: Problem, k: int, arch: str, device: str) -> dict | None:
    """The entry of a Gram matrix (``problem.gram``): its own key's, tuned as op
    "gram" (a complex one timed as Aᴴ A), else atb's entry of its shape with the
    kernel carried to the Gram matrix (``carried_to_gram``). An atb entry that chose
    XLA's dot holds: XLA's Aᵀ A reads its operand once too (on an H200, 2026-11-30,
    scripts/gram_timing.py, where such entries chose XLA: float64 1 and 32 in 0.24
    and 0.27 ms, the kernels carried in 0.25 and 0.29; at 8 0.31 against 0.29).
    Where XLA beat atb's kernel at an aligned K (``xla_faster_at``) the kernel
    carried serves still: it read two operands there, and XLA's Aᵀ A is slower than
    its Aᵀ B (on an H200, 2026-11-30, at K = 2^20: float32 24 and 40 at 34 % of the
    read-once roofline, the Gram kernels at 67 and 94 %)."""
    own = tuned(problem_key(problem), k, arch, device)
    if own is not None:
        return own
    entry = _entry(dataclasses.replace(problem, gram=False), k, arch, device, aligned_marks=False)
    if entry is None or entry["config"] is None:
        return entry
    kernel_problem = real_view_problem(problem) if entry.get("real_view", False) else problem
    config = carried_to_gram(kernel_problem, Config(**entry["config"]), arch)
    return {**entry, "config": dataclasses.asdict(config),
            "rule": f"atb's kernel entry, carried to the Gram matrix: {describe_entry(entry)}"}


def _nearest_kernel_entry(entries: list[dict], k: int, why: str) -> dict | None:
    """Of a key's entries that chose a kernel, the one timed at the K nearest ``k``
    (by ratio) within a factor of NEAREST_KERNEL_REACH, its rule saying ``why`` it
    serves instead of the entry that would, or None. Its kernel beat
    the model's where it was timed; the model's is untimed at any K. Further
    off, the rows a block streams (and so the stages its ring fills) differ too
    much to carry the measurement over. On an H100 (2026-11-25) the tuner chose XLA
    for complex128 Aᴴ B 49..59 at K = 2^16 and 2^20, where XLA reached 65-94 %
    of roofline, and its winners at 1.1-1.4 million rows reached 72-88 %; the
    model's kernel had reached 65 % at 51 (docs/performance.md, twenty-seventh
    round)."""
    def octaves(entry: dict) -> float:
        return abs(np.log2(entry.get("k_tuned", entry["k_min"]) / k))

    reach = np.log2(NEAREST_KERNEL_REACH)
    near = [entry for entry in entries if entry["config"] is not None and octaves(entry) <= reach]
    nearest = min(near, key=octaves, default=None)
    return nearest and {**nearest, "rule": f"{why}; the kernel entry timed nearest K: {describe_entry(nearest)}"}


def _xla_measured_faster(entry: dict, k: int) -> bool:
    """Whether XLA's Aᵀ B measured faster than the kernels at K aligned like ``k``:
    at multiples of the power-of-two part of the K an XLA entry was timed at, or
    of the power-of-two K where a K sweep found XLA faster (``xla_faster_at``),
    short of the larger K a kernel entry was timed faster at, unless XLA also won
    at an aligned K past that one (``xla_faster_past_tuned``: on an H200,
    2026-11-30, complex128 Aᵀ B 26, 28, 29, 60 and 63, timed at 1.1-2.6 million
    rows, lost to XLA at K = 2^20 by 2-15 % and had at 2^22 in the tuner)."""
    timed_k = entry.get("k_tuned", 1)
    faster_at = entry.get("xla_faster_at")
    if entry["config"] is None:
        return k % (timed_k & -timed_k) == 0 or bool(faster_at) and k % faster_at == 0
    return bool(faster_at) and k % faster_at == 0 and (
        entry.get("xla_faster_past_tuned", False) or not faster_at < timed_k <= k)


def real_view_problem(problem: Problem) -> Problem | None:
    """The real problem of twice the widths that computes complex ``problem`` on its
    operands' real views (conj goes into the expansion and combination), or None:
    a real problem, or too wide."""
    real_dtype = REAL_COMPONENT.get(problem.dtype)
    if real_dtype is None or 2 * max(problem.m, problem.n) > MAX_WIDTH:
        return None
    return Problem(problem.op, real_dtype, 2 * problem.m, 2 * problem.n, update=problem.update, gram=problem.gram)


def is_real_view(spec: KernelSpec, dtype) -> bool:
    """Whether ``spec`` serves a call on operands of ``dtype`` through their real view."""
    return spec.problem.dtype != np.dtype(dtype).name


def _model_prefers_real_view(problem: Problem, real: Problem, arch: str) -> bool:
    """Not where the model runs the complex problem by Gauss's products
    (complex128 atb with both widths in 57..64 on sm_90, model.GAUSS_ATB_WIDTHS).
    Else the real view pays where its real problem runs on the tensor cores (measured
    on an H100, 2026-11-22: complex atb 5..32 at 75-97 % of roofline as real
    views, ab 10..24 at 87-95 %); narrower, the complex FMA kernels do as well
    with no expansion or combination. Beyond a real result of 64x64 entries
    (complex atb wider than 32), on an H100 (2026-11-25, tuner): complex128's real
    view ran 52-68 % with the model's vector copies (65-77 % with the bulk copies
    the model now takes at 37 and 51) where the complex kernels ran 35-50 %, at all
    7 widths timed in 37..60. complex64's widened-float DMMA kernel with vector
    copies lost to the complex kernels at 37 and 44 (36.4 and 50.8 % against 59.2
    and 56.2 %); with bulk copies it won at 44 and 60 (59.7 and 90.5 % against 56.2
    and 68.5 %) and was not timed at the other widths, so a float32 real result
    stays within REAL_VIEW_MAX_FLOAT32_ATB_ENTRIES. ab's real view stays ahead of the
    complex kernels beyond 32 too (complex128 ab 40..64: 47-65 % against
    25-31 %)."""
    if runs_gauss(problem, arch):
        return False
    if real.op == "atb" and real.dtype == "float32" and real.m * real.n > REAL_VIEW_MAX_FLOAT32_ATB_ENTRIES:
        return False
    try:
        return default_config(real).mma
    except InvalidSpec:
        return False


def _prefers_real_view(entry: dict | None, problem: Problem, real: Problem, arch: str) -> bool:
    """The database's choice where it has an entry, else the model's rule."""
    return entry.get("real_view", False) if entry is not None else _model_prefers_real_view(problem, real, arch)


def select(op: str, dtype, m: int, n: int, k: int, batch_dims: int, conj: bool,
           arch: str = "sm_90", device: str = "", *, update: bool = False,
           real_view: bool = True, gram: bool = False) -> KernelSpec | None:
    """The kernel for this problem (``update``: ab's fused update), or None to use
    XLA's dot. For a complex problem it may be the kernel of the real view's
    problem (see the module docstring; ``is_real_view`` tells): where the real
    view fits and the database entry, or without one the model, says so.
    ``real_view=False`` rules it out (ab's update with a complex beta, which
    does not act on the real view as a scale). An ab of M != N without entries
    takes XLA's dot beside a square that chose it (``_beside_an_xla_square``)
    or nearest measured pairs of which one did (``_near_an_xla_pair``).
    ``gram``: atb of one operand passed as both (``Problem.gram``), served by its
    key's entries, kernels carried to it (``_gram_entry``). Complex Aᴴ B sets aside
    XLA entries, which timed Aᵀ B (``_conjugated_entry``).
    A forced spec serves the call's problem or its real view's."""
    return choose(op, dtype, m, n, k, batch_dims, conj, arch, device, update=update, real_view=real_view,
                  gram=gram).spec


def select_problem(problem: Problem, k: int, arch: str = "sm_90", device: str = "") -> KernelSpec | None:
    """``select`` for ``problem`` (unbatched) at K."""
    return select(problem.op, problem.dtype, problem.m, problem.n, k, 0, problem.conj, arch, device,
                  update=problem.update, gram=problem.gram)


@dataclasses.dataclass(frozen=True)
class Choice:
    """A kernel, or None for XLA's dot, and why, in words (``python -m jax_tsmm.explain``)."""
    spec: KernelSpec | MtsmSpec | None
    reason: str


def choose(op: str, dtype, m: int, n: int, k: int, batch_dims: int, conj: bool,
           arch: str = "sm_90", device: str = "", *, update: bool = False, real_view: bool = True,
           gram: bool = False) -> Choice:
    """``select``'s choice, with the reason for it."""
    dtype = np.dtype(dtype).name
    if dtype not in KERNEL_DTYPES:
        return Choice(None, f"no kernels for {dtype}")
    if batch_dims > MAX_BATCH_DIMS:
        return Choice(None, f"{batch_dims} batch axes after merging; the kernels take up to {MAX_BATCH_DIMS}")
    if not (1 <= m <= MAX_WIDTH and 1 <= n <= MAX_WIDTH) or k == 0:
        return Choice(None, f"no kernels for widths outside 1..{MAX_WIDTH} or K = 0")
    problem = Problem(op, dtype, m, n, conj=conj, update=update, gram=gram)
    real = real_view_problem(problem) if real_view else None
    spec = forced_spec(problem, real)
    if spec is not None:
        return Choice(spec, "forced (_dispatch.forced)")
    entry = _entry(problem, k, arch, device, real_view)
    if entry is not None and entry["config"] is None:
        return Choice(None, f"the database: {describe_entry(entry)}")
    if entry is None:
        beside = _beside_an_xla_square(problem, k, arch, device, real_view)
        if beside is not None:
            square, square_entry = beside
            return Choice(None, f"no entry serves it; beside {square.m} x {square.n}, whose entry chose XLA's dot by "
                                f"more than {1 - XLA_CLEARLY_FASTER:.0%} (_beside_an_xla_square): "
                                f"{describe_entry(square_entry)}")
        pairs = _near_an_xla_pair(problem, k, arch, device)
        if pairs:
            return Choice(None, f"no entry serves it; the nearest measured pairs ({', '.join(pairs)}) chose XLA's dot "
                                f"(_near_an_xla_pair): {describe_entry(next(iter(pairs.values())))}")
    if real is not None and _prefers_real_view(entry, problem, real, arch):
        if entry is not None:  # the real kernel this entry timed against this problem's XLA
            return Choice(KernelSpec(real, Config(**entry["config"])),
                          f"the database, as its real view: {describe_entry(entry)}")
        return _real_view_kernel(real, k, arch, device)
    if entry is not None and not entry.get("real_view", False):
        return Choice(KernelSpec(problem, Config(**entry["config"])), f"the database: {describe_entry(entry)}")
    try:
        return Choice(KernelSpec(problem, default_config(problem, arch)), "no entry serves it: the generator's model")
    except InvalidSpec:
        return Choice(None, "no entry serves it, and the model has no valid kernel")


def _beside_an_xla_square(problem: Problem, k: int, arch: str, device: str,
                          real_view: bool) -> tuple[Problem, dict] | None:
    """The square, M x M or N x N, beside ``problem``, an ab (or its fused update)
    of M != N without entries, with its entry, that chose XLA's dot at K by more
    than the spread between runs (its best kernel under XLA_CLEARLY_FASTER of
    XLA's speed). XLA's A C streams at 90-100 % of the copy roofline at many
    widths, and such squares tell where. On an H100 (2026-11-27, 1 GiB operands)
    the model's kernels ran 0.78-0.96x XLA at 7 of the 8 float64 ab pairs beside
    such a square (1.00x at the eighth), 1.14x at the one beside two kernel
    squares; beside squares where XLA had merely tied (float32 32 x 32,
    complex64 1 x 1, the float64 update's 1 x 1), 0.95-1.35x, three of six at
    1.31-1.35x. atb keeps the model's kernel beside any square: XLA's Aᵀ B ran
    19-32 % at all 18 pairs measured, the model's kernels 1.92-5.02x. An outer
    product 1 x N looks at N x N alone: out is most of its traffic, and XLA's
    dot ran such products at 31-42 % of the copy roofline wherever timed
    (2026-11-27: float32 1 x 21, float64 1 x 27 and 1 x 41, complex64 1 x 41
    on an H200; complex64 1 x 15, 1 x 41 and 1 x 58 on an H100), where beside
    float32 1 x 1, which chose XLA by 6 %, the model's kernel ran 1 x 21 at
    1.90x XLA (79.8 %)."""
    if problem.op != "ab" or problem.m == problem.n:
        return None
    widths = (problem.n,) if problem.m == 1 else (problem.m, problem.n)
    for width in widths:
        square = dataclasses.replace(problem, m=width, n=width)
        entry = _entry(square, k, arch, device, real_view)
        if _xla_clearly_faster(entry):
            return square, entry
    return None


def _near_an_xla_pair(problem: Problem, k: int, arch: str, device: str) -> dict[str, dict]:
    """The pairs nearest ``problem``, a plain float64 ab of M != N without
    entries (in octaves of M plus octaves of N), that have entries and chose
    XLA's dot at K, their kernel under PAIR_XLA_FASTER of XLA's speed: key ->
    the entry that serves K. The pairs' entries come from the tuner and from
    surveys of the model's kernels (``tune --from-bench`` of ``bench --model
    --pair-grid``), on both GPUs a grid of 12 widths (1, 2, 3, 4, 6, 8, .., 64)
    in float64 and of 7 (1, 2, 4, .., 64) in float32. On an H200 (2026-11-27,
    the model before ab's wide rows of A went to the tensor cores) XLA's dot beat
    the model's float64 kernel at 91 of the 132 float64 pairs there (0.64-0.998x;
    XLA's dot at 89 % of the copy roofline in geometric mean). Off the grid, at
    49 float64 pairs (eleven chosen, 38 drawn at random), the model's kernels ran
    under 0.98x XLA's speed at 18 (0.56-0.97x); with this rule none did, at
    1.088x XLA in geometric mean against 1.098x with the kernels everywhere. On
    an H100, with the model after that change, the same 38: none under 0.98x with the rule,
    1.004x against 0.987x with the kernels everywhere, though it gives up 18
    kernels that beat XLA's dot, which is weaker off the grid (performance.md,
    forty-eighth round). float32 is left
    out: off the grid XLA's float32 dot ran at 52 % in geometric mean (21-82 %,
    48 pairs; 70 % on the grid), and the rule would have cost 1.47x -> 1.25x to
    lift one of the two pairs under 0.98x. So is the fused update, which saves
    XLA's second pass."""
    if problem.op != "ab" or problem.update or problem.dtype != "float64" or problem.m == problem.n:
        return {}
    prefix = f"ab:{problem.dtype}:"
    distances = {}
    for key in database(arch, device):
        if key.startswith(prefix):
            pair = key_problem(key)
            if pair.m != pair.n:
                distances[key] = abs(math.log2(pair.m / problem.m)) + abs(math.log2(pair.n / problem.n))
    if not distances:
        return {}
    nearest = min(distances.values())
    entries = {key: tuned(key, k, arch, device) for key, distance in distances.items() if distance < nearest + 1e-9}
    return {key: entry for key, entry in entries.items() if _xla_clearly_faster(entry, PAIR_XLA_FASTER)}


# A square's entry counts as XLA's where its best kernel ran under this fraction of
# XLA's speed: ties (0.97-1.0 in the squares above) say nothing of a pair's kernel.
XLA_CLEARLY_FASTER = 0.95
# A measured pair's, where its kernel ran under issue 4's tolerance of XLA's speed (with
# 0.95 one of the 49 float64 pairs of _near_an_xla_pair ran a kernel at 0.97x).
PAIR_XLA_FASTER = 0.98


def _xla_clearly_faster(entry: dict | None, margin: float = XLA_CLEARLY_FASTER) -> bool:
    """Whether ``entry`` chose XLA's dot with its best kernel under ``margin`` of
    XLA's speed (an entry without timings, as the small-K rule's, counts)."""
    if entry is None or entry["config"] is not None:
        return False
    if entry.get("tsmm_s") is None or entry.get("xla_s") is None:
        return True
    return entry["xla_s"] < margin * entry["tsmm_s"]


def _real_view_kernel(real: Problem, k: int, arch: str, device: str) -> Choice:
    """The kernel of a real view's problem: its own tuned kernel where the database
    has one, else the model's. An entry of the real problem that chose XLA compared
    against the real dtype's dot, which says nothing about the complex one (XLA's
    complex ab reached 51-83 % where the real views reached 86-95 %)."""
    entry = _entry(real, k, arch, device)
    if entry is not None and entry["config"] is not None:
        return Choice(KernelSpec(real, Config(**entry["config"])),
                      f"no entry serves it; as its real view (the model's rule), by the real problem's entry: "
                      f"{describe_entry(entry)}")
    return Choice(KernelSpec(real, default_config(real, arch)),
                  "no entry serves it; as its real view (the model's rule), the model's kernel of the real problem")

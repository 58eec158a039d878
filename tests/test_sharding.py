"""SPMD partitioning along the long axis K, on 4 devices.

XLA_FLAGS must be set before JAX starts and the rest of the suite shares one
process, so where fewer than 4 devices are found these tests run again in a
subprocess on 4 forced host CPU devices (``test_in_subprocess``), and are
skipped here.

Each sharded result is compared with the unsharded one; the compiled HLO is
checked for the expected communication: K-sharded atb is one all-reduce of the
small result and never gathers A or B, K-sharded ab has no collective at all.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import jax_tsmm

N_DEVICES = 4
_CHILD = "JAX_TSMM_SHARDING_CHILD"
_enough = len(jax.devices()) >= N_DEVICES

needs_devices = pytest.mark.skipif(
    not _enough, reason=f"needs {N_DEVICES} devices (runs in test_in_subprocess)"
)


@pytest.mark.skipif(_enough or bool(os.environ.get(_CHILD)), reason="devices found: run directly")
def test_in_subprocess(tmp_path):
    env = dict(
        os.environ,
        XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={N_DEVICES}",
        JAX_PLATFORMS="cpu",
        **{_CHILD: "1"},
    )
    # Away from the source tree, so the installed package is the one imported.
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.abspath(__file__)]
    result = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    print(result.stdout.strip().splitlines()[-1])


# --- helpers -----------------------------------------------------------------


@pytest.fixture(params=["shardy", "gspmd"])
def partitioner(request):
    """Both partitioners: Shardy (the default) and GSPMD."""
    before = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", request.param == "shardy")
    yield request.param
    jax.config.update("jax_use_shardy_partitioner", before)


def mesh(shape=(N_DEVICES,), names=("x",), axis_type=AxisType.Explicit):
    devices = jax.devices()[: int(np.prod(shape))]
    return jax.make_mesh(shape, names, axis_types=(axis_type,) * len(shape), devices=devices)


def collectives(compiled_text: str) -> list[str]:
    ops = r"all-reduce|all-gather|all-to-all|collective-permute|reduce-scatter"
    return re.findall(rf"= \S+ ({ops})(?:-start)?\(", compiled_text)


def rand(shape, dtype=np.float64, seed=0):
    """NumPy data (jax.random would compile a program per shape)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def ref_atb(a, b, conj=False):
    return np.einsum("...km,...kn->...mn", np.conj(a) if conj else a, b)


def ref_ab(a, c):
    return np.einsum("...km,...mn->...kn", a, c)


def spec(x) -> tuple:
    """The PartitionSpec of an array's sharding, one entry per axis."""
    entries = tuple(x.sharding.spec)
    return entries + (None,) * (x.ndim - len(entries))


def close(got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-11, atol=1e-11)


def sharded(fn, m, in_specs, out_specs, *args):
    """``fn`` compiled under jit with NamedShardings on mesh ``m``, called on
    ``args``: (result, its compiled HLO text). Compiled once, for both."""
    to_sharding = lambda spec: NamedSharding(m, spec)  # noqa: E731
    out = None if out_specs is None else jax.tree.map(to_sharding, out_specs)
    jitted = jax.jit(fn, in_shardings=jax.tree.map(to_sharding, in_specs), out_shardings=out)
    compiled = jitted.lower(*args).compile()
    return compiled(*args), compiled.as_text()


K, M, N = 256, 8, 6


# --- K sharded -----------------------------------------------------------------


@needs_devices
@pytest.mark.parametrize("dtype, conj", [(np.float64, False), (np.complex128, True)])
def test_atb_k_sharded_is_one_all_reduce(partitioner, dtype, conj):
    a, b = rand((K, M), dtype, 0), rand((K, N), dtype, 1)
    out, hlo = sharded(lambda a, b: jax_tsmm.atb(a, b, conj=conj), mesh(), (P("x"), P("x")), P(), a, b)
    close(out, ref_atb(a, b, conj))
    assert collectives(hlo) == ["all-reduce"], collectives(hlo)
    # Each device multiplies its own K / 4 rows.
    assert re.search(rf"\[{K // N_DEVICES},{M}\]", hlo)


@needs_devices
@pytest.mark.parametrize("dtype, conj", [(np.float64, False), (np.complex128, True)])
def test_a_gram_matrix_k_sharded_reads_its_shard_once(partitioner, dtype, conj):
    """atb(a, a) (``gram_p``) with K sharded: the partitioned call takes the value
    once, so each device's product is lowered with its shard as both operands (its
    kernel reads it once, ``_cuda``), then one all-reduce."""
    a = rand((K, M), dtype, 0)
    gram = lambda a: jax_tsmm.atb(a, a, conj=conj)  # noqa: E731
    out, hlo = sharded(gram, mesh(), (P("x"),), P(), a)
    close(out, ref_atb(a, a, conj))
    assert collectives(hlo) == ["all-reduce"], collectives(hlo)
    lowered = jax.jit(gram, in_shardings=NamedSharding(mesh(), P("x"))).lower(a).as_text()
    assert re.findall(r"@CustomSPMDPartitioning\(([^)]*)\)", lowered) == ["%arg0"]


@needs_devices
def test_ab_k_sharded_has_no_communication(partitioner):
    a, c = rand((K, M), seed=0), rand((M, N), seed=1)
    out, hlo = sharded(jax_tsmm.ab, mesh(), (P("x"), P()), P("x"), a, c)
    close(out, ref_ab(a, c))
    assert spec(out) == ("x", None)
    assert collectives(hlo) == []


@needs_devices
def test_output_sharding_follows_without_out_shardings():
    m = mesh()
    a = jax.device_put(rand((K, M), seed=0), NamedSharding(m, P("x")))
    c = jax.device_put(rand((M, N), seed=1), NamedSharding(m, P()))
    out = jax.jit(jax_tsmm.ab)(a, c)
    assert spec(out) == ("x", None)
    gram = jax.jit(jax_tsmm.atb)(a, a)
    close(gram, ref_atb(np.asarray(a), np.asarray(a)))


@needs_devices
def test_block_gram_schmidt_step():
    """V - Q (Qᵀ V) with Q, V K-sharded: one all-reduce, the update stays local."""
    q, v = rand((K, M), seed=0), rand((K, N), seed=1)
    project = lambda q, v: v - jax_tsmm.ab(q, jax_tsmm.atb(q, v))  # noqa: E731
    out, hlo = sharded(project, mesh(), (P("x"), P("x")), P("x"), q, v)
    close(out, v - ref_ab(q, ref_atb(q, v)))
    assert collectives(hlo) == ["all-reduce"]


# --- grad ------------------------------------------------------------------------


@needs_devices
def test_grad_k_sharded(partitioner):
    a, b = rand((K, M), seed=0), rand((K, N), seed=1)
    loss = lambda a, b: jnp.sum(jax_tsmm.atb(a, b) ** 2)  # noqa: E731
    grad = jax.grad(loss, argnums=(0, 1))
    (da, db), hlo = sharded(grad, mesh(), (P("x"), P("x")), None, a, b)
    want_a, want_b = grad(a, b)
    close(da, want_a)
    close(db, want_b)
    # The cotangents come out sharded like the primals, through ab on the shards.
    assert spec(da) == spec(db) == ("x", None)
    assert collectives(hlo) == ["all-reduce"]


@needs_devices
def test_grad_of_ab_k_sharded():
    """The cotangent of the small c is atb of two K-sharded arrays: an all-reduce."""
    a, c = rand((K, M), seed=0), rand((M, N), seed=1)
    loss = lambda a, c: jnp.sum(jnp.sin(jax_tsmm.ab(a, c)))  # noqa: E731
    grad = jax.grad(loss, argnums=(0, 1))
    got, hlo = sharded(grad, mesh(), (P("x"), P()), None, a, c)
    for x, want in zip(got, grad(a, c)):
        close(x, want)
    assert "all-gather" not in collectives(hlo)


# --- batch axes ---------------------------------------------------------------------


@needs_devices
def test_batch_sharded_is_embarrassingly_parallel(partitioner):
    a, b, c = rand((4, K, M), seed=0), rand((4, K, N), seed=1), rand((4, M, N), seed=2)
    m = mesh()
    out, hlo = sharded(jax_tsmm.atb, m, (P("x"), P("x")), P("x"), a, b)
    close(out, ref_atb(a, b))
    assert collectives(hlo) == []
    out, hlo = sharded(jax_tsmm.ab, m, (P("x"), P("x")), P("x"), a, c)
    close(out, ref_ab(a, c))
    assert collectives(hlo) == []


@needs_devices
def test_batch_and_k_sharded_on_a_2d_mesh():
    a, b, c = rand((2, K, M), seed=0), rand((2, K, N), seed=1), rand((2, M, N), seed=2)
    m = mesh((2, 2), ("batch", "k"))
    out, hlo = sharded(jax_tsmm.atb, m, (P("batch", "k"), P("batch", "k")), P("batch"), a, b)
    close(out, ref_atb(a, b))
    assert collectives(hlo) == ["all-reduce"]
    out, hlo = sharded(jax_tsmm.ab, m, (P("batch", "k"), P("batch")), P("batch", "k"), a, c)
    close(out, ref_ab(a, c))
    assert collectives(hlo) == []


@needs_devices
def test_broadcast_batch_axis():
    """b has batch size 1 against a's 4: the batch axis is sharded on a only."""
    a, b = rand((4, K, M), seed=0), rand((1, K, N), seed=1)
    m = mesh((2, 2), ("batch", "k"))
    out, hlo = sharded(jax_tsmm.atb, m, (P("batch", "k"), P(None, "k")), P("batch"), a, b)
    close(out, ref_atb(a, b))
    assert "all-gather" not in collectives(hlo)


@needs_devices
def test_vmap_k_sharded():
    a, b = rand((3, K, M), seed=0), rand((3, K, N), seed=1)
    out, hlo = sharded(jax.vmap(jax_tsmm.atb), mesh(), (P(None, "x"), P(None, "x")), None, a, b)
    close(out, ref_atb(a, b))
    assert collectives(hlo) == ["all-reduce"]


# --- any other sharding: resharded, never an error -----------------------------------


ODD = [
    ((None, "x"), ()),  # A sharded along M: moved to K (all-to-all), not gathered
    (("x",), ("y",)),  # K of A and B on different mesh axes
    ((None, ("x", "y")), ("y",)),
    ((), ("x",)),  # only one operand K-sharded
    (("y",), (None, "x")),
    ((("x", "y"),), ()),  # K over both mesh axes
]


@needs_devices
@pytest.mark.parametrize("spec_a, spec_b", ODD)
def test_odd_shardings(partitioner, spec_a, spec_b):
    _check_odd(AxisType.Explicit, spec_a, spec_b)


@needs_devices
@pytest.mark.parametrize("spec_a, spec_b", ODD)
def test_odd_shardings_auto_axes(spec_a, spec_b):
    _check_odd(AxisType.Auto, spec_a, spec_b)


def _check_odd(axis_type, spec_a, spec_b):
    m = mesh((2, 2), ("x", "y"), axis_type)
    a, b, c = rand((K, M), seed=0), rand((K, N), seed=1), rand((M, N), seed=2)
    out, _ = sharded(jax_tsmm.atb, m, (P(*spec_a), P(*spec_b)), None, a, b)
    close(out, ref_atb(a, b))
    out, _ = sharded(jax_tsmm.ab, m, (P(*spec_a), P(*spec_b)), None, a, c)
    close(out, ref_ab(a, c))


@needs_devices
def test_k_not_divisible_by_the_mesh():
    """K = 255 rows cannot be split evenly in 4: computed replicated."""
    m = mesh((N_DEVICES,), ("x",), AxisType.Auto)
    a, b = rand((K - 1, M), seed=0), rand((K - 1, N), seed=1)
    constrain = lambda x: jax.lax.with_sharding_constraint(x, NamedSharding(m, P("x")))  # noqa: E731
    f = jax.jit(lambda a, b: jax_tsmm.atb(constrain(a), constrain(b)))
    close(f(a, b), ref_atb(a, b))


# --- shard_map ---------------------------------------------------------------------------


@needs_devices
def test_inside_shard_map():
    """Under shard_map the primitives see local shards: the caller sums."""
    m = mesh(axis_type=AxisType.Auto)
    a, b = rand((K, M), seed=0), rand((K, N), seed=1)

    def local(a, b):
        return jax.lax.psum(jax_tsmm.atb(a, b), "x"), jax_tsmm.ab(a, jax_tsmm.atb(a, b))

    f = jax.jit(jax.shard_map(local, mesh=m, in_specs=(P("x"), P("x")), out_specs=(P(), P("x"))))
    gram, update = f(a, b)
    close(gram, ref_atb(a, b))
    rows = K // N_DEVICES
    for i in range(N_DEVICES):
        block = slice(i * rows, (i + 1) * rows)
        close(update[block], ref_ab(a[block], ref_atb(a[block], b[block])))
    assert collectives(f.lower(a, b).compile().as_text()) == ["all-reduce"]


@needs_devices
def test_inside_partially_manual_shard_map(partitioner):
    """Manual over "x", automatic over "y": the primitive is partitioned along "y"."""
    m = mesh((2, 2), ("x", "y"), AxisType.Auto)
    a, b = rand((K, M), seed=0), rand((K, N), seed=1)
    local = lambda a, b: jax.lax.psum(jax_tsmm.atb(a, b), "x")  # noqa: E731
    f = jax.jit(jax.shard_map(local, mesh=m, in_specs=(P("x"), P("x")), out_specs=P(),
                              axis_names={"x"}))
    close(f(a, b), ref_atb(a, b))


# --- one device: no partitioning machinery at all -----------------------------------------


def test_one_device_lowers_to_the_local_computation():
    a, b = jnp.ones((K, M)), jnp.ones((K, N))
    text = jax.jit(jax_tsmm.atb).lower(a, b).as_text()
    assert "CustomSPMDPartitioning" not in text
    assert text.count("stablehlo.dot_general") == 1


@needs_devices
def test_mesh_of_one_device_with_explicit_axes():
    m = mesh((1,), ("x",))
    a, b = rand((K, M), seed=0), rand((K, N), seed=1)
    out, hlo = sharded(jax_tsmm.atb, m, (P("x"), P("x")), P(), a, b)
    close(out, ref_atb(a, b))
    assert "CustomSPMDPartitioning" not in hlo

"""The read ceiling against the size read: what a pure stream reaches below the bench's 2 GiB.

    python3 scripts/read_ceiling_by_size.py [--mib 64,128,256,512,1024,2048] [--json out.json]

The bench's read ceiling is measured on 2 GiB buffers, and the roofline of
every shape is taken from it. Smaller calls (the K sweep's ramp-up, mtsm at
8192) also pay a kernel's start and drain, which a streaming read pays too.
This times the package's read probe (``bench.stream_read_seconds``: the
bench's timed loops over fresh random data) at each size, rotating as many
buffers as the bench's operands of that size (``bench.set_count``; ``--sets``
overrides it), and prints GB/s and the fraction of the 2 GiB figure: as much
of a shape's roofline as a kernel that reads that many bytes once can reach.
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp

from jax_tsmm import bench

jax.config.update("jax_enable_x64", True)  # the probe's result is float64

MIB = 1 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", default="64,128,256,512,1024,2048", help="sizes in MiB, comma-separated")
    parser.add_argument("--sets", type=int, default=None, help="buffers rotated at every size")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    sizes = [int(m) for m in args.mib.split(",")]
    reference = bench.stream_ceilings()["read_bytes_per_s"]  # 2 GiB, as the bench takes it
    rates = {}
    for mib in sizes:
        n = mib * MIB // 4
        count = args.sets or bench.set_count(mib * MIB)
        buffers = [jax.random.uniform(jax.random.key(i), (n,), jnp.float32) for i in range(count)]
        seconds = bench.stream_read_seconds(buffers)
        rates[mib] = mib * MIB / seconds
        del buffers
    print(f"bench's read ceiling (2 GiB): {reference / 1e9:.0f} GB/s")
    print(f"{'MiB':>6} {'us':>9} {'GB/s':>7} {'of it':>8}")
    for mib in sizes:
        print(f"{mib:6d} {1e6 * mib * MIB / rates[mib]:9.1f} {rates[mib] / 1e9:7.0f} {100 * rates[mib] / reference:6.1f} %")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": jax.devices()[0].device_kind, "ceiling_read_bytes_per_s": reference,
                       "read_bytes_per_s": rates}, f, indent=1)


if __name__ == "__main__":
    main()

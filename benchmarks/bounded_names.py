"""Per-name time to decode a kernel name and to redact an NVTX name, as the name grows from 100 B
to 1 MB (a real name with word characters and the stems the patterns look for appended): time
per name stays within the bound the name's length sets, linear, where the old patterns were
quadratic. CPU only:

    python benchmarks/bounded_names.py
    PYTHONPATH=OTHER_CHECKOUT python benchmarks/bounded_names.py --sizes 100,1000,10000  # an older one
"""

from __future__ import annotations

import argparse
import time

from gemmscope.kernels import decode
from gemmscope.redaction.policy import Redactor

NAME = "nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_TNT"
RANGE = "Linear_fwd HF_TOKEN=hf_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC2eF4 "


def seconds(work, text: str) -> float:
    started = time.perf_counter()
    work(text)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000,10000,100000,1000000", help="name lengths, characters")
    args = parser.parse_args()
    seconds(decode.__wrapped__, NAME)  # the operand decoders compile their patterns on first use
    print("| name length | decode s | decode µs/KB | redact s | redact µs/KB |")
    print("|---|---|---|---|---|")
    for size in map(int, args.sizes.split(",")):
        kernel = (NAME + "_a_quantize" * size)[:size]
        rng = (RANGE + "token_a" * size)[:size]
        d = seconds(decode.__wrapped__, kernel)
        r = seconds(Redactor(), rng)
        print(f"| {size:,} | {d:.4f} | {d / size * 1e9:.1f} | {r:.4f} | {r / size * 1e9:.1f} |")


if __name__ == "__main__":
    main()

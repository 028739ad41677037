"""The input fuzzer (benchmarks/bench_input_fuzz.py) on a small seed: every case must pass.

The benchmark runs thousands of cases and prints the pass rate; CI runs a sample of every file kind,
so that a reader that starts to crash, hang or misread is caught at once.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_input_fuzz import KINDS, VALID, INVALID, fuzz, report  # noqa: E402

SEED, PER_KIND = 20_260_101, 3
# Kinds that run a whole search per case: left to the benchmark.
SLOW = {"optimize", "formula"}


def test_fuzz_sample_passes_every_case():
    kinds = [k for k, _ in KINDS if k not in SLOW]
    outcomes = fuzz(SEED, PER_KIND, jobs=2, timeout_s=30, kinds=kinds, per_kind=True)
    failures = [o for o in outcomes if o.verdict != "pass"]
    assert not failures, report(outcomes, SEED, f"python benchmarks/bench_input_fuzz.py --cases {PER_KIND} "
                                                f"--seed {SEED} --per-kind --kinds {','.join(kinds)}")
    assert len(outcomes) == PER_KIND * len(kinds)  # every file kind is sampled
    expectations = {o.case.expect for o in outcomes}
    assert {VALID, INVALID} <= expectations  # the oracle both refuses and accepts

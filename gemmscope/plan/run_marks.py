"""The NVTX labels a `gemmscope profile` run's workload leaves in its trace, and profile reads back:
one place for both sides, with nothing to import (the workload runs on the GPU, beside torch)."""

RANGE_PREFIX = "gemmscope.gemm|"  # a timed entry's range: its GEMM, recipe, mode and iterations
WARMUP_PREFIX = "gemmscope.warmup|"  # an entry's warm-up iterations
RESULT_PREFIX = "gemmscope.result|"  # an entry's CUDA-event timings or why it could not run
PLAN_PREFIX = "gemmscope.plan|"  # the run's plan, as JSON

"""Where the GPU time went: training steps (steps), the breakdown (diagnosis), findings, GEMM
TFLOP/s against peaks (throughput), and two runs side by side (compare_runs)."""

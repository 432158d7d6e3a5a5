"""A command run under nsys or torch.profiler with gemmscope's hook, its traces read as it runs
(capturing: `gemmscope.capture`), and what this machine can run and capture (doctor)."""

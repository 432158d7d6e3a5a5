"""The plan and profile side of gemmscope: a model's configuration (model_config, hf_config) turned
into the GEMMs it runs (shapes), each run through Transformer Engine at every recipe on a GPU
(gpu_profile, workload, the NVTX labels of run_marks), and a profile run directory read back from
its trace (profile_run). The check side (traces, attribution, judging, diagnosis) reads any run."""

from pathlib import Path

# The profile run shipped with gemmscope (an H200's), what `gemmscope profile` shows without a GPU.
EXAMPLE_RUN = Path(__file__).parent.parent / "examples" / "h200-codonfm-5b"

"""The fixture folders the tests read, named once (each folder's README.md says what it holds)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CPU = FIXTURES / "cpu"  # programs captured with real nsys at test time (conftest.py)
KINETO = FIXTURES / "kineto"  # torch.profiler traces of programs run on a CPU
HF_CONFIGS = FIXTURES / "hf_configs"
GPU = FIXTURES / "gpu"  # real captures on an H200
CORPUS = GPU / "corpus"  # programs nobody here wrote, on H100 and 2×H200
STEPS = GPU / "steps"
GPU_KINETO = GPU / "kineto"

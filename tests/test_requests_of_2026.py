"""How people ask for precision in 2026, judged on real runs captured on an H100 by `gemmscope verify
--profiler torch` (tests/fixtures/gpu/kineto/README.md: the command lines; the traces in its requests_2026/), each program counting
what it ran itself (`*.expected.json`), not from gemmscope:

- Megatron-Core's per-module recipe (`--te-precision-config-file`, megatron-core 0.19.0): every
  linear_proj BF16, every linear_fc2 FP8 block scaling, the rest FP8 current scaling;
- torchao float8 training with `emulate` on: each float8 GEMM an FP32 GEMM, on purpose."""

import json
from collections import Counter

from cli_runner import invoke
from fixture_paths import GPU_KINETO

MEGATRON = GPU_KINETO / "requests_2026" / "megatron_per_module.json.gz"
TORCHAO = GPU_KINETO / "requests_2026" / "torchao_emulated.json.gz"


def _expected(trace) -> dict:
    return json.loads(trace.with_name(trace.name.replace(".json.gz", ".expected.json")).read_text())


def test_a_megatron_per_module_recipe_passes_its_bf16_modules_as_coverage_naming_who_asked():
    expected = _expected(MEGATRON)
    done = invoke("verify", "--trace", MEGATRON, "--format", "json")
    assert done.exit_code == 0, done.output[-2000:]
    summary = json.loads(done.stdout)["summary"]
    assert summary["gemm_launches"] == sum(n for per_pass in expected["per_precision"].values()
                                           for n in per_pass.values())
    groups = {g["layer"]: g for g in summary["coverage"]["groups"]}
    proj = {m["path"] for m in expected["te_modules"] if m["path"].endswith(".linear_proj")}
    assert set(groups) == proj | {"output_layer"}
    assert {groups[p]["why"] for p in proj} == {'quant_recipe config "bf16" (matcher "*.linear_proj")'}
    assert groups["output_layer"].get("why") is None  # Megatron's own layer outside autocast: no recipe asked


def test_under_expect_exactly_the_modules_another_recipe_asked_are_flagged_each_with_its_cause():
    expected = _expected(MEGATRON)
    done = invoke("verify", "--trace", MEGATRON, "--expect", "fp8-current", "--format", "json", "--per-launch")
    assert done.exit_code == 1, done.output[-2000:]
    mismatches = json.loads(done.stdout)["mismatches"]
    others = sum(n for precision, per_pass in expected["per_precision"].items() if precision != "fp8-current"
                 for n in per_pass.values())
    assert len(mismatches) == others
    by_module = {m["path"]: m for m in expected["te_modules"]}
    causes = Counter((by_module[g["layer"]]["matcher"]["config_key"] if g["layer"] in by_module else g["layer"],
                      g["cause"], g["requested"]) for g in mismatches)
    per_pass = len(expected["passes"])
    steps, layers = expected["steps"], expected["layers"]
    assert causes == {("bf16", "module-recipe", "bf16"): steps * layers * per_pass,
                      ("fp8_blockwise", "module-recipe", "fp8-block"): steps * layers * per_pass,
                      ("output_layer", "requested-bf16", "bf16"): steps * per_pass}


def test_torchao_s_emulation_is_an_expected_substitution_with_its_cause():
    expected = _expected(TORCHAO)
    emulated = {(linear["path"], p): gemm["count"] for linear in expected["linears"] if linear.get("emulated")
                for p, gemm in linear["gemms"].items() if gemm["emulated"]}
    done = invoke("analyze", TORCHAO, "--format", "json", "--per-launch")
    assert done.exit_code == 0, done.output[-2000:]
    gemms = json.loads(done.stdout)["gemms"]
    ran = Counter((g["layer"], g["te_pass"]) for g in gemms if (g["layer"], g["te_pass"]) in emulated)
    assert ran == emulated
    judged = {(g["verdict"], g["cause"], g["requested"], g["precision"]) for g in gemms
              if (g["layer"], g["te_pass"]) in emulated}
    assert judged == {("EXPECTED-SUBSTITUTION", "emulated", "fp8", "fp32")}
    assert "FALLBACK" not in {g["verdict"] for g in gemms}

"""`gemmscope whatif` on a grouped (MoE) module whose member shapes the hook recorded: an export
with nsys's schema (tests/nsys_export.py) holding what the hook writes around TE's
general_grouped_gemm calls of a Megatron MoE model's experts (TE GroupedLinear, 4 experts; the
routing, so the tokens per expert, changes every call), read into the GEMM frame, grouped, planned
with the m_splits that stand for the calls, run through the runner's spec and read back from a
measurement in the runner's protocol. (A trace recorded without members: test_whatif.py's MoE
fixture, said unmeasurable.)"""

from __future__ import annotations

import json

import pytest

import gemmscope as gs
from gemmscope.autocast_hook.gemmscope_protocol import (
    AUTOCAST_PREFIX,
    GEMM_PREFIX,
    STEP_PREFIX,
    format_members,
    format_record,
    parse_members,
)
from gemmscope.plan.profile_run import parse_label, range_label
from gemmscope.plan.run_marks import PLAN_PREFIX, RANGE_PREFIX, RESULT_PREFIX
from gemmscope.whatif import advice, changes, measure
from gemmscope.whatif.groups import group_gemms

from fixture_paths import CORPUS
from nsys_export import MARK, PUSH_POP, START_END, HandBuiltExport

PID = 4242
IN, OUT = 64, 128
# A Float8BlockScaling GEMM kernel (cuBLAS on an H200, tests/fixtures/gpu/corpus/megatron_moe_fp8-block).
FP8_BLOCK_GEMM = "nvjet_sm90_qqtst_128x128_128x6_2x4_h_bz_coopA_algo2_Ablk128_Bvec128_bias_TNN"
EXPERTS = "decoder.layers.{}.mlp.experts.linear_fc1"
PROJ = "decoder.layers.{}.self_attention.linear_proj"
# Tokens per expert of each call, per step and layer (1024 in all, 1040 where the program padded
# an expert's). Step 0 is the warm-up, left out. Steps 1-2 sorted largest first average
# (367, 323, 171, 167); nearest (L1): 300,300,212,212, the call (212,300,212,300). With step 0's
# calls counted it would be (400,200,224,200).
SPLITS = {0: [(1024, 0, 0, 0), (1024, 0, 0, 0)],
          1: [(400, 200, 224, 200), (256, 256, 256, 256)],
          2: [(212, 300, 212, 300), (512, 512, 16, 0)]}
STANDS_FOR = "212,300,212,300"
# Per pass, a member's (M, N, K) from its tokens (TE's layouts: fprop TN, dgrad NN, wgrad NT).
MEMBER = {"fprop": lambda t: (t, OUT, IN), "dgrad": lambda t: (t, IN, OUT), "wgrad": lambda t: (OUT, IN, t)}


def _moe_export(path, schema_from):
    """Per step and layer: the experts' grouped fprop on the main thread, dgrad and wgrad on the
    autograd thread, each a hook record around one FP8 block-scaled GEMM kernel; a te.Linear
    (linear_proj, 1024 tokens) beside them; the hook's step marks; all inside a
    Float8BlockScaling autocast. Returns the members fields written."""
    export = HandBuiltExport(path, schema_from)
    export.thread(PID, PID, "python")
    export.thread(PID, PID + 1, "pt_autograd_0")
    clock, written = 1_000, set()

    def gemm(tid, record):
        nonlocal clock
        export.nvtx(PUSH_POP, PID, tid, clock, clock + 3_000, format_record(GEMM_PREFIX, record))
        export.launch(PID, tid, clock + 100, clock + 200, kernel=FP8_BLOCK_GEMM, kernel_ns=2_000)
        clock += 5_000

    for step, calls in SPLITS.items():
        for layer, splits in enumerate(calls):
            for gemm_pass, tid in (("fprop", PID), ("dgrad", PID + 1), ("wgrad", PID + 1)):
                members = format_members([MEMBER[gemm_pass](t) for t in splits])
                written.add(members)
                gemm(tid, {"entry": "general_grouped_gemm", "module": "GroupedLinear", "owner": "TEGroupedLinear",
                           "layer": EXPERTS.format(layer), "pass": gemm_pass, "a": "fp8-block", "b": "fp8-block",
                           "flops": sum(2 * m * n * k for m, n, k in parse_members(members)), "members": members})
                m, n, k = MEMBER[gemm_pass](1024)
                gemm(tid, {"entry": "general_gemm", "module": "Linear", "owner": "TERowParallelLinear",
                           "layer": PROJ.format(layer), "pass": gemm_pass, "a": "fp8-block", "b": "fp8-block",
                           "m": m, "n": n, "k": k, "flops": 2 * m * n * k})
        export.nvtx(MARK, PID, PID, clock, None, f"{STEP_PREFIX}n={step}")
        clock += 1_000
    export.nvtx(PUSH_POP, PID, PID, 500, clock, f"{AUTOCAST_PREFIX}Float8BlockScaling)")
    export.close()
    return written


@pytest.fixture(scope="module")
def moe(tmp_path_factory, gpu_sqlite):
    path = tmp_path_factory.mktemp("moe") / "moe.sqlite"
    written = _moe_export(path, gpu_sqlite("te_linear_bf16"))
    return gs.check(path).judgement, written


def test_the_members_a_record_holds_are_read_into_the_gemm_frame(moe):
    verification, written = moe
    gemms = verification.gemms
    grouped = gemms["layer"].astype(str).str.contains("experts")
    assert set(gemms.loc[grouped, "gemm_members"]) == written
    assert gemms.loc[~grouped, "gemm_members"].isna().all()  # a call of one GEMM has m, n, k instead
    assert gemms.loc[grouped, ["gemm_m", "gemm_n", "gemm_k"]].isna().all().all()
    assert (gemms.loc[grouped, "requested"] == "fp8-block").all()


def test_a_grouped_module_is_planned_with_the_m_splits_that_stand_for_its_calls(moe):
    run = group_gemms(moe[0])
    assert run.framework == "megatron-core" and run.recipes == ["fp8-block"]
    experts = run.groups.set_index("name").loc[EXPERTS.format("*")]
    assert experts["module_class"] == "GroupedLinear" and experts["precision"] == "fp8-block"
    shapes = run.shapes[run.shapes["group"] == experts["group"]]
    assert len(shapes) == 1  # one shape, whatever the routing and the padding
    shape = shapes.iloc[0]
    assert (shape["tokens"], shape["in_features"], shape["out_features"]) == (1024, IN, OUT)
    assert shape["passes"] == "dgrad,fprop,wgrad" and shape["m_splits"] == STANDS_FOR
    planned = measure.plan(run).set_index("group")
    assert planned.loc[experts["group"], "kind"] == measure.GROUPED_KIND
    assert planned["unmeasurable"].isna().all()
    entries = measure.spec(measure.plan(run), run, iters=2, warmup=0)["entries"]
    grouped = [e for e in entries if e["kind"] == measure.GROUPED_KIND]
    assert [(e["group"], e["m"], e["k"], e["n"], e["m_splits"]) for e in grouped] == [
        (experts["group"], 1024, IN, OUT, [212, 300, 212, 300])]
    assert all("m_splits" not in e for e in entries if e["kind"] != measure.GROUPED_KIND)


def test_the_runner_builds_a_grouped_entry_whose_range_the_reader_names_back(moe):
    from gemmscope.whatif import runner

    run = group_gemms(moe[0])
    spec = measure.spec(measure.plan(run), run, iters=2, warmup=0)
    entries = runner.entries(spec)
    grouped = [e for e in entries if e.mode == measure.GROUPED_KIND]
    assert {e.m_splits for e in grouped} == {(212, 300, 212, 300)} and len(grouped) == len(spec["entries"][0]["recipes"])
    assert all(e.m_splits == () for e in entries if e.mode != measure.GROUPED_KIND)
    for entry in entries:
        result = parse_label(entry.label(RESULT_PREFIX) + "|status=ok|e2e_ms=0.02")
        assert range_label(result) == entry.label(RANGE_PREFIX)
    assert "|m=1024|k=64|n=128|m_splits=212,300,212,300|iters=2" in grouped[0].label(RANGE_PREFIX)


@pytest.mark.parametrize("bf16_ns, action, bf16_layers", [(4_000, "keep", 0), (1_000, "move", 2)])
def test_a_measured_grouped_module_is_advised_and_changed_with_its_layer(moe, gpu_sqlite, tmp_path, bf16_ns, action,
                                                                        bf16_layers):
    """A measurement in the runner's protocol: BF16 twice (or half) FP8 block scaling's kernel
    time, for the experts and the projection alike. The experts' group gets its figure at BF16
    from its own rows; Megatron's arguments move whole layers, experts included, and the change's
    prediction counts the experts (never a partial sum)."""
    from gemmscope.plan.workload import Entry

    run = group_gemms(moe[0])
    spec = measure.spec(measure.plan(run), run, iters=2, warmup=0)
    folder = tmp_path / "measurement"
    folder.mkdir()
    export = HandBuiltExport(folder / "trace.sqlite", gpu_sqlite("te_linear_bf16"))
    export.thread(PID, PID, "python")
    export.nvtx(MARK, PID, PID, 1_000, None, PLAN_PREFIX + json.dumps({"whatif": spec["plan"]}))
    clock = 10_000
    for item in spec["entries"]:
        for recipe, ns in (("bf16", bf16_ns), ("fp8-block", 2_000)):
            entry = Entry(item["group"], "fwd+bwd", item["m"], item["k"], item["n"], recipe, item["kind"], 2,
                          tuple(item.get("m_splits", ())))
            start = clock
            for _ in range(entry.iters * 3):  # forward, dgrad, wgrad per iteration
                export.launch(PID, PID, clock, clock + 100, kernel=FP8_BLOCK_GEMM, kernel_ns=ns)
                clock += ns + 500
            export.nvtx(START_END, PID, PID, start - 10, clock, entry.label(RANGE_PREFIX))
            export.nvtx(MARK, PID, PID, clock + 10, None, entry.label(RESULT_PREFIX)
                        + "|status=ok|e2e_ms=0.02|e2e_iqr_ms=0.001|e2e_mean_ms=0.02")
            clock += 10_000
    export.close()
    results, device = measure.read_measurement(folder)
    experts = run.groups.set_index("name").loc[EXPERTS.format("*")]
    rows = results[results["group"] == experts["group"]].set_index("recipe")
    assert rows.loc["bf16", "gemm_ms"] == pytest.approx(bf16_ns * 3e-6) and rows.loc["fp8-block", "gemm_ms"] == (
        pytest.approx(0.006))
    advised = advice.advise(run, results, device)
    group = advised.groups.set_index("group").loc[experts["group"]]
    assert group["target"] == "bf16" and group["action"] == action
    assert group["target_ms"] == pytest.approx(experts["now_ms"] * bf16_ns / 2_000)
    written = changes.write_changes(run, advised)
    args = written.files[changes.MEGATRON_ARGS]
    assert (f"--num-layers-at-start-in-bf16 {bf16_layers}" in args) == bool(bf16_layers)
    assert written.predicted_ms == pytest.approx(run.groups["now_ms"].sum() * (bf16_ns / 2_000 if bf16_layers else 1))


def test_a_real_megatron_moe_capture_records_each_experts_tokens_and_is_planned_grouped():
    """Megatron-Core's MoE (4 experts, top-2, TE GroupedLinear) captured under verify on an H200:
    every grouped call records 4 members whose features are the program's (hidden 1024, expert FFN
    4096 / top-2) and whose tokens add up to at least the 2 × 512 tokens routed twice; whatif counts
    one call per layer and step and plans the experts as grouped modules with those splits, nothing
    said unmeasurable."""
    from gemmscope.autocast_hook.gemmscope_protocol import parse_members

    trace = CORPUS / "megatron_moe_fp8-block_members.sqlite.xz"
    expected = json.loads(trace.with_name("megatron_moe_fp8-block_members.expected.json").read_text())
    gemms = gs.check(trace).judgement.gemms
    recorded = gemms[gemms["gemm_members"].notna()].drop_duplicates(["layer", "te_pass", "gemm_members"])
    routed = 2 * 512 * 2  # batch × seq × top-k, the program's defaults
    hidden, expert_ffn = 1024, 4096 // 2
    assert len(recorded) and recorded["layer"].str.contains(r"\.mlp\.experts\.linear_fc[12]$").all()
    for layer, te_pass, text in zip(recorded["layer"], recorded["te_pass"], recorded["gemm_members"]):
        members = parse_members(text)
        assert members is not None and len(members) == expected["experts"]
        tokens_at = {"fprop": 0, "dgrad": 0, "wgrad": 2}[te_pass]  # wgrad contracts over the tokens
        assert routed <= sum(m[tokens_at] for m in members) < routed + 64 * expected["experts"]
        features = {m[i] for m in members for i in range(3) if i != tokens_at}
        assert features == {hidden, expert_ffn}, (layer, te_pass, text)
    run = group_gemms(gs.check(trace).judgement)
    # a grouped call launches a GEMM per expert: still one call per layer and step
    experts_groups = run.groups[run.groups["module_class"] == "GroupedLinear"]
    assert len(experts_groups) == 2 and (experts_groups["calls_per_step"] == expected["layers"]).all()
    shapes = measure.plan(run)
    experts = shapes[shapes["kind"] == "te-grouped-linear"]
    assert len(experts) == 2 and shapes["unmeasurable"].isna().all()
    for tokens, splits in zip(experts["tokens"], experts["m_splits"].str.split(",")):  # as the runner's label
        assert len(splits) == expected["experts"] and sum(map(int, splits)) == tokens

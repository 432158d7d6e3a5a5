import csv
import dataclasses
import io
import json
import math

import pytest
from click.testing import CliRunner

from gemmscope.cli import main
from gemmscope.errors import InputError
from gemmscope.plan.hf_config import from_hf_config, resolve_config
from gemmscope.plan.model_config import PRESETS, LatentAttention, Mamba2Mixer, ModelConfig, preset
from gemmscope.plan.shapes import PASSES, Gemm, plan, plan_frame

from cli_runner import gemmscope
from fixture_paths import FIXTURES, HF_CONFIGS


def shapes(gemms):
    return [(g.op, g.pass_, g.m, g.k, g.n) for g in gemms]


def mkn(gemm):
    return gemm.m, gemm.k, gemm.n


def by_op_pass(gemms):
    return {(g.op, g.pass_): g for g in gemms}


def test_codonfm_5b_matches_te_benchmark_shapes():
    config = resolve_config("codonfm-5b", micro_batch_size=31, seq_len=512)
    expected = json.loads((FIXTURES / "codonfm_5b_te_shapes.json").read_text())
    assert shapes(plan(config)) == [tuple(row) for row in expected["shapes"]]
    assert {g.count for g in plan(config)} == {24}


def test_llama_3_8b_gqa_and_gated_mlp():
    gemms = by_op_pass(plan(preset("llama-3-8b")))
    assert gemms["qkv", "fprop"].n == 4096 + 2 * 8 * 128 == 6144
    assert gemms["mlp_up", "fprop"].n == 2 * 14336 == 28672
    assert gemms["mlp_down", "fprop"].k == 14336


def test_flops_and_dict():
    gemm = Gemm("qkv", "fprop", 2, 3, 5, count=7)
    assert gemm.flops == 60
    assert gemm.as_dict() == {"op": "qkv", "pass": "fprop", "m": 2, "k": 3, "n": 5,
                              "flops": 60, "count": 7, "total_flops": 420}


def test_every_pass_costs_the_same_flops():
    gemms = plan(preset("mixtral-8x7b"), lm_head=True)
    per_pass = {p: [g.flops for g in gemms if g.pass_ == p] for p in PASSES}
    assert per_pass["fprop"] == per_pass["dgrad"] == per_pass["wgrad"]


def test_lm_head_last_in_each_pass_and_runs_once():
    gemms = plan(resolve_config("llama-3-8b", seq_len=4096), lm_head=True)
    assert [g.op for g in gemms if g.op == "lm_head"] == ["lm_head"] * 3
    heads = by_op_pass(gemms)
    assert mkn(heads["lm_head", "fprop"]) == (4096, 4096, 128256)
    assert mkn(heads["lm_head", "dgrad"]) == (4096, 128256, 4096)
    assert mkn(heads["lm_head", "wgrad"]) == (4096, 4096, 128256)
    assert heads["lm_head", "fprop"].count == 1
    assert [g.op for g in gemms[:5]] == ["qkv", "attn_out", "mlp_up", "mlp_down", "lm_head"]


def test_lm_head_needs_vocab():
    config = ModelConfig(hidden_size=1024, intermediate_size=4096, num_attention_heads=16, num_layers=2)
    with pytest.raises(InputError, match="vocab_size"):
        plan(config, lm_head=True)


def test_tensor_parallel_splits_megatron_style():
    gemms = by_op_pass(plan(resolve_config("llama-3-70b", tp=8, seq_len=1024), lm_head=True))
    # 64 heads and 8 kv heads of 128 over 8 ranks: 8 query heads + 2·1 kv heads per rank
    assert gemms["qkv", "fprop"].n == (8 + 2) * 128
    assert gemms["attn_out", "fprop"].k == 8 * 128 and gemms["attn_out", "fprop"].n == 8192
    assert gemms["mlp_up", "fprop"].n == 2 * 28672 // 8
    assert gemms["mlp_down", "fprop"].k == 28672 // 8 and gemms["mlp_down", "fprop"].n == 8192
    assert gemms["lm_head", "fprop"].n == 128256 // 8
    assert gemms["qkv", "fprop"].m == 1024  # no sequence parallelism


def test_mixtral_experts_even_routing():
    config = resolve_config("mixtral-8x7b", micro_batch_size=2, seq_len=4096)
    gemms = plan(config)
    assert [g.op for g in gemms[:5]] == ["qkv", "attn_out", "router", "expert_up", "expert_down"]
    ops = by_op_pass(gemms)
    assert mkn(ops["router", "fprop"]) == (8192, 4096, 8)
    assert ops["router", "fprop"].count == 32
    routed = 8192 * 2 // 8
    assert (ops["expert_up", "fprop"].m, ops["expert_up", "fprop"].n) == (routed, 2 * 14336)
    assert mkn(ops["expert_down", "dgrad"]) == (routed, 4096, 14336)
    assert (ops["expert_up", "wgrad"].m, ops["expert_up", "wgrad"].k) == (4096, routed)
    assert ops["expert_up", "fprop"].count == 32 * 8
    assert "mlp_up" not in {g.op for g in gemms}


def test_routed_tokens_round_up_and_experts_split_by_tp():
    config = ModelConfig(hidden_size=512, intermediate_size=2048, num_attention_heads=8, num_layers=1,
                         micro_batch_size=1, seq_len=10, num_experts=3, moe_top_k=2,
                         moe_intermediate_size=256, activation="swiglu", tp=2)
    ops = by_op_pass(plan(config))
    assert ops["expert_up", "fprop"].m == math.ceil(10 * 2 / 3) == 7
    assert ops["expert_up", "fprop"].n == 2 * 256 // 2
    assert ops["expert_down", "fprop"].k == 256 // 2
    assert ops["router", "fprop"].n == 3  # replicated, not split


def test_explicit_head_dim_sets_attention_width():
    config = ModelConfig(hidden_size=1024, intermediate_size=4096, num_attention_heads=16, num_layers=1,
                         num_kv_heads=4, head_dim=128)
    ops = by_op_pass(plan(config))
    assert ops["qkv", "fprop"].n == (16 + 2 * 4) * 128
    assert ops["attn_out", "fprop"].k == 16 * 128


def test_plan_frame_columns_and_totals():
    frame = plan_frame(plan(preset("codonfm-5b")))
    assert list(frame.columns) == ["op", "pass", "m", "k", "n", "flops", "count", "total_flops"]
    assert len(frame) == 12
    assert (frame["total_flops"] == frame["flops"] * frame["count"]).all()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_plan(name):
    config = preset(name)
    assert config.name == name
    assert len(plan(config, lm_head=True)) == 3 * (5 if config.num_experts == 0 else 6)


def test_preset_architectures():
    assert dataclasses.astuple(preset("gpt3-175b"))[:4] == (12288, 49152, 96, 96)
    assert preset("gpt3-175b").vocab_size == 50257
    assert preset("codonfm-5b").kv_heads == 32 and preset("codonfm-5b").head_size == 128
    assert preset("llama-3-70b").kv_heads == 8
    assert preset("Llama-3-8B") == preset("llama-3-8b")


def test_unknown_preset_lists_known_names():
    with pytest.raises(InputError, match="llama-3-8b") as error:
        preset("llama-9")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("fields, message", [
    (dict(hidden_size=0), "hidden_size"),
    (dict(num_layers=2.5), "num_layers"),
    (dict(seq_len=True), "seq_len"),
    (dict(activation="silu"), "activation"),
    (dict(num_kv_heads=5), "num_kv_heads"),
    (dict(num_attention_heads=12), "divisible by num_attention_heads"),
    (dict(tp=3), "not divisible by tp 3"),
    (dict(num_kv_heads=2, tp=4), "num_kv_heads 2 is not divisible by tp 4"),
    (dict(intermediate_size=4100, tp=8), "intermediate_size"),
    (dict(num_experts=4, moe_top_k=5), "moe_top_k"),
    (dict(num_experts=4, moe_top_k=0), "moe_top_k"),
    (dict(moe_top_k=2), "num_experts"),
    (dict(num_experts=-1), "num_experts"),
])
def test_invalid_configs(fields, message):
    base = dict(hidden_size=4096, intermediate_size=16384, num_attention_heads=32, num_layers=2)
    with pytest.raises(InputError, match=message):
        ModelConfig(**{**base, **fields})


def test_vocab_not_divisible_by_tp_fails_only_for_lm_head():
    config = resolve_config("gpt3-175b", tp=8)
    assert len(plan(config)) == 12
    with pytest.raises(InputError, match="51200"):
        plan(config, lm_head=True)
    padded = plan(resolve_config("gpt3-175b", tp=8, vocab_size=51200), lm_head=True)
    assert by_op_pass(padded)["lm_head", "fprop"].n == 6400


def test_resolve_overrides_and_flags():
    config = resolve_config("llama-3-8b", micro_batch_size=4, seq_len=None, num_layers=2)
    assert (config.micro_batch_size, config.seq_len, config.num_layers) == (4, 2048, 2)
    custom = resolve_config(hidden_size=2048, intermediate_size=8192, num_attention_heads=16, num_layers=4,
                            seq_len=1024, activation="geglu")
    assert custom.name == "custom" and by_op_pass(plan(custom))["mlp_up", "fprop"].n == 16384
    # head_dim and kv heads follow an overridden hidden size rather than keeping the preset's
    assert resolve_config("codonfm-5b", hidden_size=2048).head_size == 64


def test_resolve_names_missing_flags():
    with pytest.raises(InputError) as error:
        resolve_config(hidden_size=1024, num_layers=None)
    assert "--intermediate-size" in str(error.value) and "--num-attention-heads" in str(error.value)
    assert "--num-layers" in str(error.value) and "--hidden-size" not in str(error.value)


def test_resolve_rejects_preset_and_config_together():
    with pytest.raises(InputError):
        resolve_config("llama-3-8b", str(HF_CONFIGS / "gpt2" / "config.json"))


def test_hf_llama_3_8b_equals_preset():
    config = from_hf_config(HF_CONFIGS / "meta-llama-3-8b" / "config.json")
    assert config == dataclasses.replace(preset("llama-3-8b"), name="meta-llama-3-8b")


def test_hf_mixtral_equals_preset():
    config = from_hf_config(HF_CONFIGS / "mixtral-8x7b-instruct-v0.1")  # a model directory works too
    assert config == dataclasses.replace(preset("mixtral-8x7b"), name="mixtral-8x7b-instruct-v0.1")


def test_hf_gpt2_keys():
    config = from_hf_config(str(HF_CONFIGS / "gpt2" / "config.json"))
    assert dataclasses.astuple(config)[:4] == (768, 3072, 12, 12)  # hidden, intermediate (4x), heads, layers
    assert (config.kv_heads, config.vocab_size, config.activation) == (12, 50257, "gelu")
    assert config.num_experts == 0


def test_resolve_from_hf_config_with_overrides():
    config = resolve_config(config_path=str(HF_CONFIGS / "gpt2"), seq_len=1024, tp=2)
    ops = by_op_pass(plan(config))
    assert (ops["qkv", "fprop"].m, ops["qkv", "fprop"].n) == (1024, 3 * 768 // 2)


def write_json(tmp_path, text):
    path = tmp_path / "config.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ("{not json", "not JSON"),
    ("[1, 2]", "JSON object"),
    ('{"hidden_size": 64, "num_attention_heads": 4, "hidden_act": "silu"}', "num_hidden_layers or n_layer"),
    ('{"num_attention_heads": 4, "num_hidden_layers": 2, "hidden_act": "gelu"}', "hidden_size or n_embd"),
    ('{"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2}',
     "hidden_act or activation_function"),
    ('{"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "hidden_act": "tanh"}',
     "tanh"),
    ('{"hidden_size": "64", "num_attention_heads": 4, "num_hidden_layers": 2, "hidden_act": "gelu"}',
     "hidden_size"),
    ('{"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "hidden_act": "silu",'
     ' "num_local_experts": 4}', "num_experts_per_tok"),
    ('{"model_type": ["llama"], "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,'
     ' "num_hidden_layers": 2}', r'model_type must be a name, not \["llama"\]'),
])
def test_hf_bad_configs(tmp_path, text, message):
    with pytest.raises(InputError, match=message) as error:
        from_hf_config(write_json(tmp_path, text))
    assert "\n" not in str(error.value)


def test_hf_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        from_hf_config(tmp_path / "absent.json")
    with pytest.raises(InputError, match="no such file"):
        from_hf_config(tmp_path)  # a directory without config.json


def test_hf_gemma_style_gelu_is_gated(tmp_path):
    path = write_json(tmp_path, '{"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576,'
                                ' "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,'
                                ' "num_hidden_layers": 28, "hidden_act": "gelu_pytorch_tanh"}')
    config = from_hf_config(path)
    assert config.activation == "geglu" and config.head_size == 256


# --- models with layers of several kinds, from their published config.json ---------------------------
# Expected numbers are derived here by hand from each published architecture.

def hf_dict(model):
    return json.loads((HF_CONFIGS / model / "config.json").read_text())


def counts(gemms):
    """Launch count per op of one pass (every pass runs the same ops)."""
    return {g.op: g.count for g in gemms if g.pass_ == "fprop"}


def test_hf_deepseek_v3_layers():
    config = from_hf_config(HF_CONFIGS / "deepseek-v3")
    # first_k_dense_replace 3, moe_layer_freq 1: three dense layers, then MoE up to layer 60
    assert config.layers == ("*-",) * 3 + ("*E",) * 58
    assert (config.num_experts, config.moe_top_k, config.moe_intermediate_size) == (256, 8, 2048)
    assert config.shared_expert_intermediate_size == 1 * 2048
    assert config.mtp_layers == 1
    assert config.head_dim is None and config.mla.qk_head_dim == 128 + 64


def test_hf_deepseek_v3_mla_and_expert_gemms():
    config = from_hf_config(HF_CONFIGS / "deepseek-v3")
    gemms = plan(config, lm_head=True)
    ops = by_op_pass(gemms)
    tokens, hidden, heads = 2048, 7168, 128
    assert mkn(ops["q_a_proj", "fprop"]) == (tokens, hidden, 1536)
    assert mkn(ops["q_b_proj", "fprop"]) == (tokens, 1536, heads * (128 + 64)) == (2048, 1536, 24576)
    assert mkn(ops["kv_a_proj_with_mqa", "fprop"]) == (tokens, hidden, 512 + 64)
    assert mkn(ops["kv_b_proj", "fprop"]) == (tokens, 512, heads * (128 + 128))
    assert mkn(ops["attn_out", "fprop"]) == (tokens, heads * 128, hidden)
    assert mkn(ops["q_b_proj", "dgrad"]) == (tokens, 24576, 1536)
    assert mkn(ops["kv_b_proj", "wgrad"]) == (512, tokens, 32768)
    assert mkn(ops["mlp_up", "fprop"]) == (tokens, hidden, 2 * 18432)  # SwiGLU: gate and up fused
    assert mkn(ops["mlp_down", "fprop"]) == (tokens, 18432, hidden)
    assert mkn(ops["router", "fprop"]) == (tokens, hidden, 256)
    routed = tokens * 8 // 256  # 64 tokens per expert under even top-8 routing
    assert mkn(ops["expert_up", "fprop"]) == (routed, hidden, 2 * 2048)
    assert mkn(ops["expert_down", "fprop"]) == (routed, 2048, hidden)
    assert mkn(ops["shared_expert_up", "fprop"]) == (tokens, hidden, 2 * 1 * 2048)
    assert mkn(ops["shared_expert_down", "fprop"]) == (tokens, 1 * 2048, hidden)
    assert mkn(ops["mtp_eh_proj", "fprop"]) == (tokens, 2 * hidden, hidden)
    assert mkn(ops["lm_head", "fprop"]) == (tokens, hidden, 129280)
    # 61 layers plus the MTP module's layer, built like the last (MoE) one; the MTP module predicts
    # its token through the shared LM head, so that runs twice
    mla = {op: 62 for op in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "attn_out")}
    moe = {"router": 58 + 1, "expert_up": (58 + 1) * 256, "expert_down": (58 + 1) * 256,
           "shared_expert_up": 58 + 1, "shared_expert_down": 58 + 1}
    assert counts(gemms) == {**mla, "mlp_up": 3, "mlp_down": 3, **moe, "mtp_eh_proj": 1, "lm_head": 2}
    assert [g.op for g in gemms[:7]] == ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj",
                                         "attn_out", "mlp_up", "mlp_down"]


def test_deepseek_v3_without_mtp_has_61_layers():
    config = dataclasses.replace(from_hf_config(HF_CONFIGS / "deepseek-v3"), mtp_layers=0)
    per_op = counts(plan(config, lm_head=True))
    assert (per_op["q_a_proj"], per_op["mlp_up"], per_op["router"], per_op["lm_head"]) == (61, 3, 58, 1)
    assert "mtp_eh_proj" not in per_op


def test_deepseek_v3_tensor_parallel():
    ops = by_op_pass(plan(resolve_config(config_path=str(HF_CONFIGS / "deepseek-v3"), tp=8)))
    heads = 128 // 8
    assert ops["q_a_proj", "fprop"].n == 1536  # down projections into the latents are replicated
    assert ops["kv_a_proj_with_mqa", "fprop"].n == 576
    assert ops["q_b_proj", "fprop"].n == heads * 192  # up projections column-parallel by head
    assert ops["kv_b_proj", "fprop"].n == heads * 256
    assert ops["attn_out", "fprop"].k == heads * 128  # row-parallel
    assert ops["shared_expert_up", "fprop"].n == 2 * 2048 // 8
    assert ops["shared_expert_down", "fprop"].k == 2048 // 8
    assert ops["router", "fprop"].n == 256
    assert ops["mtp_eh_proj", "fprop"].n == 7168 // 8


def test_deepseek_layers_cannot_be_shortened():
    with pytest.raises(InputError, match="num_layers 4 does not match the 61 layers") as error:
        resolve_config(config_path=str(HF_CONFIGS / "deepseek-v3"), num_layers=4)
    assert "\n" not in str(error.value)


def test_deepseek_v2_style_plain_q_proj_and_moe_layer_freq(tmp_path):
    # DeepSeek-V2-Lite's shape of MLA: no query latent (q_lora_rank null)
    hf = {**hf_dict("deepseek-v3"), "model_type": "deepseek_v2", "q_lora_rank": None, "num_hidden_layers": 8,
          "first_k_dense_replace": 1, "moe_layer_freq": 2}
    del hf["num_nextn_predict_layers"]
    config = from_hf_config(write_json(tmp_path, json.dumps(hf)))
    # MoE where layer >= 1 and layer % 2 == 0: layers 2, 4, 6
    assert config.layers == ("*-", "*-", "*E", "*-", "*E", "*-", "*E", "*-")
    gemms = plan(config)
    assert mkn(by_op_pass(gemms)["q_proj", "fprop"]) == (2048, 7168, 128 * 192)
    assert {"q_a_proj", "q_b_proj", "mtp_eh_proj"}.isdisjoint(counts(gemms))
    assert (counts(gemms)["mlp_up"], counts(gemms)["router"]) == (5, 3)


def test_hf_qwen3_moe():
    config = from_hf_config(HF_CONFIGS / "qwen3-30b-a3b")
    gemms = plan(config, lm_head=True)
    ops = by_op_pass(gemms)
    tokens, hidden = 2048, 2048
    # head_dim 128 is explicit: 32 query heads span 4096, twice the hidden size
    assert mkn(ops["qkv", "fprop"]) == (tokens, hidden, (32 + 2 * 4) * 128)
    assert mkn(ops["attn_out", "fprop"]) == (tokens, 32 * 128, hidden)
    assert mkn(ops["router", "fprop"]) == (tokens, hidden, 128)
    routed = tokens * 8 // 128
    assert mkn(ops["expert_up", "fprop"]) == (routed, hidden, 2 * 768)
    assert mkn(ops["expert_down", "fprop"]) == (routed, 768, hidden)
    assert counts(gemms) == {"qkv": 48, "attn_out": 48, "router": 48, "expert_up": 48 * 128,
                             "expert_down": 48 * 128, "lm_head": 1}
    # every layer MoE: a uniform stack, so --num-layers still shortens it
    assert config.layer_pattern is None
    assert counts(plan(dataclasses.replace(config, num_layers=2)))["router"] == 2


def test_qwen_moe_sparse_step_and_mlp_only_layers(tmp_path):
    hf = {**hf_dict("qwen3-30b-a3b"), "decoder_sparse_step": 2, "mlp_only_layers": [1]}
    gemms = plan(from_hf_config(write_json(tmp_path, json.dumps(hf))))
    # MoE where (layer + 1) % 2 == 0 and layer != 1: 24 odd layers less layer 1
    assert (counts(gemms)["router"], counts(gemms)["mlp_up"]) == (23, 48 - 23)
    assert by_op_pass(gemms)["mlp_up", "fprop"].n == 2 * 6144


def test_qwen2_moe_shared_expert_and_its_gate(tmp_path):
    # Qwen1.5-MoE-A2.7B's sizes
    hf = {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
          "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 24, "hidden_act": "silu",
          "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
          "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1, "mlp_only_layers": []}
    gemms = plan(from_hf_config(write_json(tmp_path, json.dumps(hf))))
    ops = by_op_pass(gemms)
    assert ops["expert_up", "fprop"].m == math.ceil(2048 * 4 / 60) == 137
    assert mkn(ops["shared_expert_up", "fprop"]) == (2048, 2048, 2 * 5632)
    assert mkn(ops["shared_expert_gate", "fprop"]) == (2048, 2048, 1)
    assert counts(gemms)["shared_expert_gate"] == 24


def test_hf_nemotron_h_hybrid():
    config = from_hf_config(HF_CONFIGS / "nemotron-h-56b-base-8k")
    assert config.block_counts == {"M": 54, "-": 54, "*": 10}
    gemms = plan(config, lm_head=True)
    ops = by_op_pass(gemms)
    tokens, hidden = 2048, 8192
    inner = 256 * 64  # mamba_num_heads · mamba_head_dim
    # in_proj: z and x (inner each), B and C (n_groups · ssm_state_size each), dt (one per head)
    assert mkn(ops["mamba_in_proj", "fprop"]) == (tokens, hidden, 2 * inner + 2 * 8 * 256 + 256)
    assert ops["mamba_in_proj", "fprop"].n == 37120
    assert mkn(ops["mamba_out_proj", "fprop"]) == (tokens, inner, hidden)
    assert mkn(ops["mlp_up", "fprop"]) == (tokens, hidden, 32768)  # relu²: one up projection, no gate
    assert mkn(ops["mlp_down", "fprop"]) == (tokens, 32768, hidden)
    assert mkn(ops["qkv", "fprop"]) == (tokens, hidden, (64 + 2 * 8) * 128)
    assert counts(gemms) == {"mamba_in_proj": 54, "mamba_out_proj": 54, "mlp_up": 54, "mlp_down": 54,
                             "qkv": 10, "attn_out": 10, "lm_head": 1}
    assert config.activation == "relu2"


def test_nemotron_h_tensor_parallel(tmp_path):
    ops = by_op_pass(plan(resolve_config(config_path=str(HF_CONFIGS / "nemotron-h-56b-base-8k"), tp=8)))
    assert ops["mamba_in_proj", "fprop"].n == 37120 // 8  # 32 heads and 1 group per rank
    assert ops["mamba_out_proj", "fprop"].k == 256 * 64 // 8
    four_groups = write_json(tmp_path, json.dumps({**hf_dict("nemotron-h-56b-base-8k"), "n_groups": 4}))
    with pytest.raises(InputError, match="mamba groups 4 is not divisible by tp 8"):
        resolve_config(config_path=str(four_groups), tp=8)


def test_hf_nemotron_h_moe_blocks():
    config = from_hf_config(HF_CONFIGS / "nemotron-3-nano-30b-a3b")
    assert config.block_counts == {"M": 23, "E": 23, "*": 6}
    gemms = plan(config)
    ops = by_op_pass(gemms)
    tokens, hidden = 2048, 2688
    assert mkn(ops["mamba_in_proj", "fprop"]) == (tokens, hidden, 2 * 64 * 64 + 2 * 8 * 128 + 64)
    assert mkn(ops["router", "fprop"]) == (tokens, hidden, 128)
    routed = math.ceil(tokens * 6 / 128)
    assert mkn(ops["expert_up", "fprop"]) == (routed, hidden, 1856)  # experts are relu² MLPs, no gate
    assert mkn(ops["expert_down", "fprop"]) == (routed, 1856, hidden)
    assert mkn(ops["shared_expert_up", "fprop"]) == (tokens, hidden, 3712)
    assert mkn(ops["qkv", "fprop"]) == (tokens, hidden, (32 + 2 * 2) * 128)
    assert counts(gemms)["expert_up"] == 23 * 128
    assert "mlp_up" not in counts(gemms)


def test_nemotron_h_layers_block_type_reads_like_the_pattern(tmp_path):
    hf = hf_dict("nemotron-h-56b-base-8k")
    names = {"M": "mamba", "*": "attention", "-": "mlp"}
    hf["layers_block_type"] = [names[block] for block in hf.pop("hybrid_override_pattern")]
    config = from_hf_config(write_json(tmp_path, json.dumps(hf)))
    from_pattern = from_hf_config(HF_CONFIGS / "nemotron-h-56b-base-8k")
    assert config == dataclasses.replace(from_pattern, name=config.name)


@pytest.mark.parametrize("model, changes, message", [
    ("nemotron-h-56b-base-8k", {"num_hidden_layers": 52},
     "num_hidden_layers 52 does not match the 118 layers"),
    ("nemotron-h-56b-base-8k", {"hybrid_override_pattern": "M-X*", "num_hidden_layers": 4},
     "unknown block 'X'"),
    ("nemotron-h-56b-base-8k", {"mlp_hidden_act": "silu"}, "no gate"),
    ("nemotron-3-nano-30b-a3b", {"moe_shared_expert_intermediate_size": None},
     "no moe_shared_expert_intermediate_size"),
    ("deepseek-v3", {"first_k_dense_replace": None}, "no first_k_dense_replace"),
    ("deepseek-v3", {"moe_layer_freq": 0}, "moe_layer_freq"),
    ("qwen3-30b-a3b", {"mlp_only_layers": "1,2"}, "mlp_only_layers"),
])
def test_hf_bad_layer_layouts(tmp_path, model, changes, message):
    with pytest.raises(InputError, match=message) as error:
        from_hf_config(write_json(tmp_path, json.dumps({**hf_dict(model), **changes})))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("model, changes, field", [
    # DeepSeek-V3's architecture under a model type the planner does not know (Kimi K2 ships it so)
    ("deepseek-v3", {"model_type": "kimi_k2"}, "n_routed_experts"),
    ("meta-llama-3-8b", {"kv_lora_rank": 512}, "kv_lora_rank"),
    ("meta-llama-3-8b", {"num_experts": 8, "num_experts_per_tok": 2}, "num_experts"),
    ("mixtral-8x7b-instruct-v0.1", {"n_shared_experts": 2}, "n_shared_experts"),
    ("mixtral-8x7b-instruct-v0.1", {"first_k_dense_replace": 1}, "first_k_dense_replace"),
    ("qwen3-30b-a3b", {"shared_expert_intermediate_size": 4096}, "shared_expert_intermediate_size"),
    ("deepseek-v3", {"model_type": "deepseek_v2"}, "num_nextn_predict_layers"),
    ("meta-llama-3-8b", {"hybrid_override_pattern": "M*M*"}, "hybrid_override_pattern"),
    ("nemotron-3-nano-30b-a3b", {"moe_latent_size": 1024}, "moe_latent_size"),
    ("meta-llama-3-8b", {"model_type": "jamba", "attn_layer_period": 8}, "attn_layer_period"),
    ("meta-llama-3-8b", {"model_type": "qwen3_next", "linear_num_key_heads": 16}, "linear_num_key_heads"),
])
def test_hf_unmodelled_gemm_fields_are_refused(tmp_path, model, changes, field):
    with pytest.raises(InputError, match=f"field '{field}' changes the GEMMs") as error:
        from_hf_config(write_json(tmp_path, json.dumps({**hf_dict(model), **changes})))
    assert "\n" not in str(error.value)


def test_hf_unset_architecture_fields_are_ignored(tmp_path):
    hf = {**hf_dict("meta-llama-3-8b"), "num_experts": 0, "q_lora_rank": None, "mlp_only_layers": []}
    config = from_hf_config(write_json(tmp_path, json.dumps(hf)))
    assert config == dataclasses.replace(preset("llama-3-8b"), name=config.name)


@pytest.mark.parametrize("fields, message", [
    (dict(layer_pattern=("*-", "*X")), "unknown block 'X'"),
    (dict(layer_pattern=("*-",)), "num_layers 2 does not match the 1 layers"),
    (dict(layer_pattern=("*-", "*E")), "MoE blocks"),
    (dict(layer_pattern=("M", "*")), "Mamba2"),
    (dict(layer_pattern="*-*-"), "tuple"),
    (dict(num_experts=4, moe_top_k=1, layer_pattern=("*-", "*-")), "no layer has an MoE block"),
    (dict(mtp_layers=-1), "mtp_layers"),
    (dict(shared_expert_intermediate_size=0), "shared_expert_intermediate_size"),
    (dict(shared_expert_gate=True), "shared_expert_gate needs"),
])
def test_invalid_layer_patterns(fields, message):
    base = dict(hidden_size=4096, intermediate_size=16384, num_attention_heads=32, num_layers=2)
    with pytest.raises(InputError, match=message):
        ModelConfig(**{**base, **fields})


def test_mamba_sizes_are_checked():
    with pytest.raises(InputError, match="not a multiple of its groups"):
        Mamba2Mixer(num_heads=12, head_dim=64, groups=8, state_size=128)
    with pytest.raises(InputError, match="mamba head_dim"):
        Mamba2Mixer(num_heads=8, head_dim=0, groups=8, state_size=128)
    with pytest.raises(InputError, match="q_lora_rank"):
        LatentAttention(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                        q_lora_rank=0)


# --- the command line on these configs: in-process with click's CliRunner, exit codes in a subprocess ---

def run_shapes(*args):
    return CliRunner().invoke(main, ["shapes", *map(str, args)], catch_exceptions=False)


def test_cli_shapes_prints_deepseek_v3_ops():
    result = run_shapes("--config", HF_CONFIGS / "deepseek-v3" / "config.json", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = {(row["op"], row["pass"]): row for row in json.loads(result.stdout)["gemms"]}
    assert {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "shared_expert_up",
            "shared_expert_down", "mtp_eh_proj"} <= {op for op, _ in rows}
    assert (rows["q_b_proj", "fprop"]["n"], rows["router", "fprop"]["count"]) == (24576, 59)
    table = run_shapes("--config", HF_CONFIGS / "deepseek-v3", "--mtp-layers", "0")
    assert table.exit_code == 0, table.output
    assert "kv_b_proj" in table.stdout and "mtp_eh_proj" not in table.stdout


def test_cli_shapes_prints_nemotron_h_mamba_ops():
    result = run_shapes("--config", HF_CONFIGS / "nemotron-h-56b-base-8k", "--tp", "8", "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    in_proj = next(row for row in rows if (row["op"], row["pass"]) == ("mamba_in_proj", "fprop"))
    assert (in_proj["n"], in_proj["count"]) == (str(37120 // 8), "54")
    assert "mamba_out_proj" in {row["op"] for row in rows}


def test_cli_shapes_unmodelled_field_is_one_line_exit_2(tmp_path):
    path = write_json(tmp_path, json.dumps({**hf_dict("deepseek-v3"), "model_type": "kimi_k2"}))
    done = gemmscope("shapes", "--config", path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("gemmscope: error: ")
    assert "'n_routed_experts' changes the GEMMs" in done.stderr and "kimi_k2" in done.stderr

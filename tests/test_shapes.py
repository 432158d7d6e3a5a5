import dataclasses
import json
import math
from pathlib import Path

import pytest

from gemmscope.errors import InputError
from gemmscope.shapes import (
    PASSES,
    PRESETS,
    Gemm,
    ModelConfig,
    from_hf_config,
    plan,
    plan_frame,
    preset,
    resolve_config,
)

HF_CONFIGS = Path(__file__).parent / "fixtures" / "hf_configs"


def shapes(gemms):
    return [(g.op, g.pass_, g.m, g.k, g.n) for g in gemms]


def mkn(gemm):
    return gemm.m, gemm.k, gemm.n


def by_op_pass(gemms):
    return {(g.op, g.pass_): g for g in gemms}


def test_codonfm_5b_matches_te_benchmark_shapes():
    config = resolve_config("codonfm-5b", micro_batch_size=31, seq_len=512)
    expected = json.loads((Path(__file__).parent / "fixtures" / "codonfm_5b_te_shapes.json").read_text())
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

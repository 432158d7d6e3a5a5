"""Model config -> the GEMMs one micro-batch's forward and backward pass runs.

Shapes follow Transformer Engine's GEMM benchmark convention (M, K, N): a linear layer
Y = X·Wᵀ over T = micro_batch_size·seq_len tokens with I in-features and O out-features runs

    fprop (T, I, O)    dgrad (T, O, I)    wgrad (I, T, O)

and one launch costs 2·M·K·N FLOPs. Tensor parallelism is Megatron style without sequence
parallelism: every rank sees all T tokens; qkv, mlp_up, expert_up and lm_head are column-parallel
(O / tp), attn_out, mlp_down and expert_down row-parallel (I / tp), the router is replicated. The
projections of MLA, shared experts, Mamba2 and MTP follow Megatron-Core's layer specs too: the
function that plans each says how it is split. The model itself: gemmscope.plan.model_config.
"""

import math
from dataclasses import dataclass

import pandas as pd

from gemmscope.errors import InputError
from gemmscope.plan.model_config import ATTENTION, GATED_ACTIVATIONS, MAMBA, MLP, MOE, ModelConfig

PASSES = ("fprop", "dgrad", "wgrad")


@dataclass(frozen=True)
class Gemm:
    """One GEMM shape in (M, K, N) form and how often one micro-batch runs it on one TP rank."""

    op: str
    pass_: str
    m: int
    k: int
    n: int
    count: int

    @property
    def flops(self) -> int:
        """FLOPs of one launch."""
        return 2 * self.m * self.k * self.n

    def as_dict(self) -> dict:
        return {"op": self.op, "pass": self.pass_, "m": self.m, "k": self.k, "n": self.n,
                "flops": self.flops, "count": self.count, "total_flops": self.flops * self.count}



@dataclass(frozen=True)
class _Linear:
    """A linear layer as the GEMMs see it on one TP rank."""

    op: str
    tokens: int
    in_features: int
    out_features: int
    count: int

    def gemm(self, pass_: str) -> Gemm:
        m, k, n = {
            "fprop": (self.tokens, self.in_features, self.out_features),
            "dgrad": (self.tokens, self.out_features, self.in_features),
            "wgrad": (self.in_features, self.tokens, self.out_features),
        }[pass_]
        return Gemm(self.op, pass_, m, k, n, self.count)



def _up_factor(config: ModelConfig) -> int:
    return 2 if config.activation in GATED_ACTIVATIONS else 1


def _attention_linears(config: ModelConfig, count: int) -> list[_Linear]:
    if config.mla is not None:
        return _latent_attention_linears(config, count)
    tokens, hidden, tp = config.tokens, config.hidden_size, config.tp
    qkv_heads = (config.num_attention_heads + 2 * config.kv_heads) // tp  # q, k and v heads on one rank
    return [
        _Linear("qkv", tokens, hidden, qkv_heads * config.head_size, count),
        _Linear("attn_out", tokens, config.num_attention_heads // tp * config.head_size, hidden, count),
    ]


def _latent_attention_linears(config: ModelConfig, count: int) -> list[_Linear]:
    """MLA as DeepSeek builds it. Megatron-Core's MLA spec keeps the down projections into the
    latents (q_a_proj, kv_a_proj_with_mqa) whole on every rank (TELinear, not split), splits the up
    projections out of them (q_proj, q_b_proj, kv_b_proj) by head, column-parallel, and the output
    projection by head too, row-parallel."""
    mla, tokens, hidden = config.mla, config.tokens, config.hidden_size
    assert mla is not None  # _attention_linears sends only MLA configs here
    heads = config.num_attention_heads // config.tp  # on one rank
    if mla.q_lora_rank is None:
        queries = [_Linear("q_proj", tokens, hidden, heads * mla.qk_head_dim, count)]
    else:
        queries = [_Linear("q_a_proj", tokens, hidden, mla.q_lora_rank, count),
                   _Linear("q_b_proj", tokens, mla.q_lora_rank, heads * mla.qk_head_dim, count)]
    return queries + [
        # the keys' and values' latent, plus the one rope key that all heads share
        _Linear("kv_a_proj_with_mqa", tokens, hidden, mla.kv_lora_rank + mla.qk_rope_head_dim, count),
        _Linear("kv_b_proj", tokens, mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + mla.v_head_dim),
                count),
        _Linear("attn_out", tokens, heads * mla.v_head_dim, hidden, count),
    ]


def _mlp_linears(config: ModelConfig, count: int) -> list[_Linear]:
    tokens, hidden = config.tokens, config.hidden_size
    width = config.intermediate_size // config.tp
    return [
        _Linear("mlp_up", tokens, hidden, _up_factor(config) * width, count),
        _Linear("mlp_down", tokens, width, hidden, count),
    ]


def _moe_linears(config: ModelConfig, count: int) -> list[_Linear]:
    tokens, hidden, tp = config.tokens, config.hidden_size, config.tp
    expert_tokens = math.ceil(tokens * config.moe_top_k / config.num_experts)
    expert_width = config.expert_intermediate_size // tp
    expert_count = count * config.num_experts
    linears = [
        _Linear("router", tokens, hidden, config.num_experts, count),
        _Linear("expert_up", expert_tokens, hidden, _up_factor(config) * expert_width, expert_count),
        _Linear("expert_down", expert_tokens, expert_width, hidden, expert_count),
    ]
    if config.shared_expert_intermediate_size:
        # Every token runs the shared expert too: a dense MLP that Megatron's SharedExpertMLP splits
        # by tp like any other (up column-parallel, down row-parallel).
        shared_width = config.shared_expert_intermediate_size // tp
        linears += [
            _Linear("shared_expert_up", tokens, hidden, _up_factor(config) * shared_width, count),
            _Linear("shared_expert_down", tokens, shared_width, hidden, count),
        ]
        if config.shared_expert_gate:
            # Qwen2-MoE scales the shared expert's output by sigmoid(x·w): a replicated hidden → 1
            # projection
            linears.append(_Linear("shared_expert_gate", tokens, hidden, 1, count))
    return linears


def _mamba_linears(config: ModelConfig, count: int) -> list[_Linear]:
    """A Mamba2 block's two projections. The depthwise conv1d and the selective-state scan between
    them run as kernels of their own (causal-conv1d, the chunked SSD scan), not as linear layers
    through TE, so they are not planned. Megatron's MambaMixer splits in_proj column-parallel (each of
    z, x, B, C and dt is per head or per group, and tp divides both) and out_proj row-parallel."""
    mamba, tokens, hidden, tp = config.mamba, config.tokens, config.hidden_size, config.tp
    assert mamba is not None  # ModelConfig refuses Mamba2 blocks without Mamba2 sizes
    return [
        _Linear("mamba_in_proj", tokens, hidden, mamba.in_proj_size // tp, count),
        _Linear("mamba_out_proj", tokens, mamba.inner_size // tp, hidden, count),
    ]


_BLOCK_LINEARS = {ATTENTION: _attention_linears, MLP: _mlp_linears, MOE: _moe_linears, MAMBA: _mamba_linears}


def plan(config: ModelConfig, lm_head: bool = False) -> list[Gemm]:
    """Every GEMM of one micro-batch: all fprop, then all dgrad, then all wgrad; in each pass the
    blocks in the order they first appear in the layers, then MTP's projection and the LM head.

    MoE blocks assume even routing: each expert gets ceil(T·top_k / num_experts) tokens.
    Experts are split by tp like the dense MLP (Megatron's default); expert parallelism is not modelled.
    """
    tp, tokens, hidden = config.tp, config.tokens, config.hidden_size
    linears = [linear for block, count in config.block_counts.items()
               for linear in _BLOCK_LINEARS[block](config, count)]
    if config.mtp_layers:
        # An MTP module projects [its input's hidden state; the next token's embedding] back to hidden:
        # Megatron builds this eh_proj column-parallel.
        linears.append(_Linear("mtp_eh_proj", tokens, 2 * hidden, hidden // tp, config.mtp_layers))
    if lm_head:
        if config.vocab_size is None:
            raise InputError(f"lm_head needs a vocab_size, and {config.name} has none")
        if config.vocab_size % tp:
            padded = math.ceil(config.vocab_size / (128 * tp)) * 128 * tp
            raise InputError(f"vocab_size {config.vocab_size} is not divisible by tp {tp}; "
                             f"give the padded size (Megatron pads to a multiple of 128·tp: {padded})")
        # each MTP module predicts one more token through the same, shared, LM head
        linears.append(_Linear("lm_head", tokens, hidden, config.vocab_size // tp, 1 + config.mtp_layers))
    return [linear.gemm(pass_) for pass_ in PASSES for linear in linears]


def plan_frame(gemms: list[Gemm]) -> pd.DataFrame:
    """The plan as a table: op, pass, m, k, n, flops, count, total_flops."""
    return pd.DataFrame([gemm.as_dict() for gemm in gemms],
                        columns=["op", "pass", "m", "k", "n", "flops", "count", "total_flops"])

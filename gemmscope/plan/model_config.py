"""A model's architecture, as far as its GEMMs go: ModelConfig (with its MLA attention and
Mamba2 mixer parts) and the presets.

A model is a stack of layers, each a sequence of blocks written in Nemotron-H's notation (its
`hybrid_override_pattern`): `*` attention, `-` MLP, `E` mixture of experts, `M` Mamba2. A Llama
layer is `*-`, a Mixtral layer `*E`, a Nemotron-H layer one block.
"""


from collections import Counter
from dataclasses import dataclass
from typing import TypeGuard

from gemmscope.errors import InputError

ACTIVATIONS = ("gelu", "relu", "relu2", "swiglu", "geglu", "reglu")
GATED_ACTIVATIONS = ("swiglu", "geglu", "reglu")  # gate and up projections fused: mlp_up's N doubles

ATTENTION, MLP, MOE, MAMBA = "*", "-", "E", "M"
BLOCKS = {ATTENTION: "attention", MLP: "MLP", MOE: "MoE", MAMBA: "Mamba2"}


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def require_positive_int(field: str, value: object) -> None:
    if not is_int(value) or value <= 0:
        raise InputError(f"{field} must be a positive integer, got {value!r}")


def require_non_negative_int(field: str, value: object) -> None:
    if not is_int(value) or value < 0:
        raise InputError(f"{field} must be a non-negative integer, got {value!r}")


@dataclass(frozen=True)
class LatentAttention:
    """DeepSeek's multi-head latent attention (MLA): keys and values, and optionally queries, are
    projected down to a low-rank latent and back up per head.

    Queries and keys have qk_nope_head_dim + qk_rope_head_dim dimensions per head; the rope part of
    the key is one for all heads and comes straight from kv_a_proj_with_mqa. Values have v_head_dim.
    """

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None  # None: queries come from the hidden state through one q_proj

    def __post_init__(self) -> None:
        for field in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            require_positive_int(field, getattr(self, field))
        if self.q_lora_rank is not None:
            require_positive_int("q_lora_rank", self.q_lora_rank)

    @property
    def qk_head_dim(self) -> int:
        """Query and key dimensions of one head."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class Mamba2Mixer:
    """The sizes of a Mamba2 block: num_heads heads of head_dim channels; B and C have groups
    groups of state_size each."""

    num_heads: int
    head_dim: int
    groups: int
    state_size: int

    def __post_init__(self) -> None:
        for field in ("num_heads", "head_dim", "groups", "state_size"):
            require_positive_int(f"mamba {field}", getattr(self, field))
        if self.num_heads % self.groups:
            raise InputError(f"mamba num_heads {self.num_heads} is not a multiple of its groups "
                             f"{self.groups}")

    @property
    def inner_size(self) -> int:
        """Channels of the scan's input x and of the gate z: num_heads · head_dim."""
        return self.num_heads * self.head_dim

    @property
    def in_proj_size(self) -> int:
        """in_proj's out-features: z and x (inner_size each), B and C (groups · state_size each) and
        dt (one per head)."""
        return 2 * self.inner_size + 2 * self.groups * self.state_size + self.num_heads


@dataclass(frozen=True)
class ModelConfig:
    """One model's architecture plus the run settings that set its GEMM shapes.

    num_kv_heads and head_dim stay None when they take their defaults (all heads; hidden_size /
    num_attention_heads), so that overriding hidden_size or the head count keeps them consistent.

    layer_pattern gives each layer's blocks (see the module docstring), e.g. ("*-",) * 3 + ("*E",) * 58
    for DeepSeek-V3. None: every layer is attention followed by MoE (num_experts > 0) or an MLP, and
    num_layers can change freely. shared_expert_intermediate_size is the width of the dense MLP that
    every token of an MoE block runs besides its routed experts; shared_expert_gate, Qwen2-MoE's
    sigmoid gate on it. mla makes attention blocks multi-head latent attention; mamba sizes the `M`
    blocks. mtp_layers counts DeepSeek-V3's multi-token prediction modules, trained with the model:
    each runs mtp_eh_proj, one more layer built like the last one, and the LM head again.
    """

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_layers: int
    micro_batch_size: int = 1
    seq_len: int = 2048
    num_kv_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int | None = None
    activation: str = "gelu"
    tp: int = 1
    num_experts: int = 0
    moe_top_k: int = 0
    moe_intermediate_size: int | None = None
    layer_pattern: tuple[str, ...] | None = None
    shared_expert_intermediate_size: int | None = None
    shared_expert_gate: bool = False
    mla: LatentAttention | None = None
    mamba: Mamba2Mixer | None = None
    mtp_layers: int = 0
    name: str = "custom"

    def __post_init__(self) -> None:
        for field in ("hidden_size", "intermediate_size", "num_attention_heads", "num_layers",
                      "micro_batch_size", "seq_len", "tp"):
            require_positive_int(field, getattr(self, field))
        for field in ("num_kv_heads", "head_dim", "vocab_size", "moe_intermediate_size",
                      "shared_expert_intermediate_size"):
            if getattr(self, field) is not None:
                require_positive_int(field, getattr(self, field))
        for field in ("num_experts", "moe_top_k", "mtp_layers"):
            require_non_negative_int(field, getattr(self, field))
        if self.activation not in ACTIVATIONS:
            raise InputError(f"unknown activation {self.activation!r}; known: {', '.join(ACTIVATIONS)}")
        if self.mla is None and self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise InputError(f"hidden_size {self.hidden_size} is not divisible by "
                             f"num_attention_heads {self.num_attention_heads}; give head_dim")
        if self.num_attention_heads % self.kv_heads:
            raise InputError(f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                             f"num_kv_heads {self.kv_heads}")
        if self.num_experts and not 1 <= self.moe_top_k <= self.num_experts:
            raise InputError(f"moe_top_k must be 1..num_experts ({self.num_experts}), got {self.moe_top_k}")
        if not self.num_experts and self.moe_top_k:
            raise InputError(f"moe_top_k {self.moe_top_k} needs num_experts > 0")
        if self.shared_expert_gate and not self.shared_expert_intermediate_size:
            raise InputError("shared_expert_gate needs shared_expert_intermediate_size")
        self._check_layer_pattern()
        self._check_tp_split()

    def _check_layer_pattern(self) -> None:
        pattern = self.layer_pattern
        if pattern is not None:
            if not (isinstance(pattern, tuple) and pattern
                    and all(isinstance(layer, str) and layer for layer in pattern)):
                raise InputError(f"layer_pattern must be a non-empty tuple of block strings such as '*-', "
                                 f"got {pattern!r}")
            unknown = sorted(set("".join(pattern)) - set(BLOCKS))
            if unknown:
                known = ", ".join(f"{block} {kind}" for block, kind in BLOCKS.items())
                raise InputError(f"unknown block {unknown[0]!r} in the layer pattern; known: {known}")
            if len(pattern) != self.num_layers:
                raise InputError(f"num_layers {self.num_layers} does not match the {len(pattern)} layers of "
                                 f"{self.name}'s layer pattern: its layers differ, so their number is fixed")
        blocks = self.block_counts
        if MOE in blocks and not self.num_experts:
            raise InputError("the layer pattern has MoE blocks (E) but num_experts is 0")
        if self.num_experts and MOE not in blocks:
            raise InputError(f"num_experts is {self.num_experts} but no layer has an MoE block (E)")
        if MAMBA in blocks and self.mamba is None:
            raise InputError("the layer pattern has Mamba2 blocks (M) but no Mamba2 sizes")

    def _check_tp_split(self) -> None:
        # Megatron splits heads, kv heads, FFN widths and Mamba2 heads and groups across ranks, so each
        # that a planned block uses must divide evenly. The vocabulary is checked only when lm_head is
        # planned: it matters for nothing else, and published vocabularies (GPT-3's 50257, CodonFM's 69)
        # often do not divide by tp.
        blocks = self.block_counts
        split_sizes = {}
        if ATTENTION in blocks:
            split_sizes["num_attention_heads"] = self.num_attention_heads
            if self.mla is None:
                split_sizes["num_kv_heads"] = self.kv_heads
        if MLP in blocks:
            split_sizes["intermediate_size"] = self.intermediate_size
        if MOE in blocks:
            expert_field = "moe_intermediate_size" if self.moe_intermediate_size else "intermediate_size"
            split_sizes[expert_field] = self.expert_intermediate_size
            if self.shared_expert_intermediate_size:
                split_sizes["shared_expert_intermediate_size"] = self.shared_expert_intermediate_size
        if MAMBA in blocks:
            assert self.mamba is not None  # _check_layer_pattern refused Mamba2 blocks without Mamba2 sizes
            split_sizes["mamba num_heads"] = self.mamba.num_heads
            split_sizes["mamba groups"] = self.mamba.groups
        if self.mtp_layers:
            split_sizes["hidden_size"] = self.hidden_size  # mtp_eh_proj's out-features
        for field, value in split_sizes.items():
            if value % self.tp:
                raise InputError(f"{field} {value} is not divisible by tp {self.tp}")

    @property
    def tokens(self) -> int:
        """Rows of every activation matrix: micro_batch_size · seq_len."""
        return self.micro_batch_size * self.seq_len

    @property
    def kv_heads(self) -> int:
        """num_kv_heads with its default (multi-head attention) applied."""
        return self.num_kv_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        """head_dim with its default (hidden_size / num_attention_heads) applied."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def expert_intermediate_size(self) -> int:
        """FFN width of one expert."""
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def layers(self) -> tuple[str, ...]:
        """Each layer's blocks: layer_pattern, or by default attention then MoE or MLP."""
        if self.layer_pattern is not None:
            return self.layer_pattern
        return (ATTENTION + (MOE if self.num_experts else MLP),) * self.num_layers

    @property
    def block_counts(self) -> dict[str, int]:
        """How many blocks of each kind one micro-batch runs, MTP layers included, in the order the
        blocks first appear."""
        mtp = (self.layers[-1],) * self.mtp_layers
        return dict(Counter("".join(self.layers + mtp)))



# Architectures as published: Meta's, Mistral's, Alibaba's and OpenAI's configs, NVIDIA's CodonFM code.
PRESETS: dict[str, ModelConfig] = {
    # Encodon 5B (NVIDIA CodonFM): bidirectional encoder, MHA, GELU; vocabulary = 64 codons + 5 specials.
    "codonfm-5b": ModelConfig(hidden_size=4096, intermediate_size=16384, num_attention_heads=32,
                              num_layers=24, vocab_size=69, activation="gelu", name="codonfm-5b"),
    "llama-3-8b": ModelConfig(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                              num_layers=32, num_kv_heads=8, vocab_size=128256, activation="swiglu",
                              name="llama-3-8b"),
    "llama-3-70b": ModelConfig(hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
                               num_layers=80, num_kv_heads=8, vocab_size=128256, activation="swiglu",
                               name="llama-3-70b"),
    # 8 kv heads as in Meta's paper and current config (the first Hugging Face upload said 16).
    "llama-3.1-405b": ModelConfig(hidden_size=16384, intermediate_size=53248, num_attention_heads=128,
                                  num_layers=126, num_kv_heads=8, vocab_size=128256,
                                  activation="swiglu", name="llama-3.1-405b"),
    "qwen2-7b": ModelConfig(hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
                            num_layers=28, num_kv_heads=4, vocab_size=152064, activation="swiglu",
                            name="qwen2-7b"),
    "mixtral-8x7b": ModelConfig(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                num_layers=32, num_kv_heads=8, vocab_size=32000, activation="swiglu",
                                num_experts=8, moe_top_k=2, name="mixtral-8x7b"),
    "gpt3-175b": ModelConfig(hidden_size=12288, intermediate_size=49152, num_attention_heads=96,
                             num_layers=96, vocab_size=50257, activation="gelu", name="gpt3-175b"),
}


def preset(name: str) -> ModelConfig:
    """The preset called `name` (case-insensitive)."""
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise InputError(f"unknown model {name!r}; known: {', '.join(PRESETS)}") from None

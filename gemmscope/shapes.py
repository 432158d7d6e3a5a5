"""Model config -> the GEMMs one micro-batch's forward and backward pass runs.

Shapes follow Transformer Engine's GEMM benchmark convention (M, K, N): a linear layer
Y = X·Wᵀ over T = micro_batch_size·seq_len tokens with I in-features and O out-features runs

    fprop (T, I, O)    dgrad (T, O, I)    wgrad (I, T, O)

and one launch costs 2·M·K·N FLOPs. Tensor parallelism is Megatron style without sequence
parallelism: every rank sees all T tokens; qkv, mlp_up, expert_up and lm_head are column-parallel
(O / tp), attn_out, mlp_down and expert_down row-parallel (I / tp), the router is replicated. The
projections of MLA, shared experts, Mamba2 and MTP follow Megatron-Core's layer specs too: the
function that plans each says how it is split.

A model is a stack of layers, each a sequence of blocks written in Nemotron-H's notation (its
`hybrid_override_pattern`): `*` attention, `-` MLP, `E` mixture of experts, `M` Mamba2. A Llama
layer is `*-`, a Mixtral layer `*E`, a Nemotron-H layer one block.
"""

import dataclasses
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gemmscope.errors import InputError

ACTIVATIONS = ("gelu", "relu", "relu2", "swiglu", "geglu", "reglu")
GATED_ACTIVATIONS = ("swiglu", "geglu", "reglu")  # gate and up projections fused: mlp_up's N doubles
PASSES = ("fprop", "dgrad", "wgrad")

ATTENTION, MLP, MOE, MAMBA = "*", "-", "E", "M"
BLOCKS = {ATTENTION: "attention", MLP: "MLP", MOE: "MoE", MAMBA: "Mamba2"}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require_positive_int(field: str, value: object) -> None:
    if not _is_int(value) or value <= 0:
        raise InputError(f"{field} must be a positive integer, got {value!r}")


def _require_non_negative_int(field: str, value: object) -> None:
    if not _is_int(value) or value < 0:
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
            _require_positive_int(field, getattr(self, field))
        if self.q_lora_rank is not None:
            _require_positive_int("q_lora_rank", self.q_lora_rank)

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
            _require_positive_int(f"mamba {field}", getattr(self, field))
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
            _require_positive_int(field, getattr(self, field))
        for field in ("num_kv_heads", "head_dim", "vocab_size", "moe_intermediate_size",
                      "shared_expert_intermediate_size"):
            if getattr(self, field) is not None:
                _require_positive_int(field, getattr(self, field))
        for field in ("num_experts", "moe_top_k", "mtp_layers"):
            _require_non_negative_int(field, getattr(self, field))
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



# Model types (as config.json's model_type names them) whose layers the readers below model.
_MIXTRAL_STYLE = (None, "mixtral")  # None: a config without model_type, read the Mixtral way
_QWEN_MOE = ("qwen2_moe", "qwen3_moe")
_DEEPSEEK = ("deepseek_v2", "deepseek_v3")
_NEMOTRON_H = ("nemotron_h",)
_MOE_MODEL_TYPES = _MIXTRAL_STYLE + _QWEN_MOE + _DEEPSEEK + _NEMOTRON_H

# Config keys that change which GEMMs a model runs, beyond a dense transformer's, each with the model
# types planned correctly when it is set. A config that sets one for any other model type is refused:
# planning it without the key would silently give another model, usually a dense one. Keys mapped to
# () are known only as signs of layers this module does not model.
ARCHITECTURE_KEYS: dict[str, tuple[str | None, ...]] = {
    # routed experts, under each family's names
    "num_local_experts": _MOE_MODEL_TYPES,
    "num_experts": _MOE_MODEL_TYPES,
    "n_routed_experts": _MOE_MODEL_TYPES,
    "num_experts_per_tok": _MOE_MODEL_TYPES,
    "moe_intermediate_size": _MOE_MODEL_TYPES,
    # which layers are MoE
    "decoder_sparse_step": _QWEN_MOE,
    "mlp_only_layers": _QWEN_MOE,
    "first_k_dense_replace": _DEEPSEEK,
    "moe_layer_freq": _DEEPSEEK,
    # shared experts
    "shared_expert_intermediate_size": ("qwen2_moe",),
    "n_shared_experts": _DEEPSEEK + _NEMOTRON_H,
    "moe_shared_expert_intermediate_size": _NEMOTRON_H,
    # multi-head latent attention
    "q_lora_rank": _DEEPSEEK,
    "kv_lora_rank": _DEEPSEEK,
    "qk_nope_head_dim": _DEEPSEEK,
    "qk_rope_head_dim": _DEEPSEEK,
    "v_head_dim": _DEEPSEEK,
    # multi-token prediction
    "num_nextn_predict_layers": ("deepseek_v3",),
    # hybrid layouts and Mamba2
    "hybrid_override_pattern": _NEMOTRON_H,
    "layers_block_type": _NEMOTRON_H,
    "mamba_num_heads": _NEMOTRON_H,
    "mamba_head_dim": _NEMOTRON_H,
    "ssm_state_size": _NEMOTRON_H,
    "n_groups": _NEMOTRON_H,
    "mamba_n_groups": _NEMOTRON_H,
    # known only as signs of layers not modelled
    "moe_latent_size": (),  # Nemotron-3 Super: experts behind latent projections
    "mtp_hybrid_override_pattern": (),  # Nemotron-H's MTP layers
    "attn_layer_period": (),  # Jamba's attention and expert layer placement
    "expert_layer_period": (),
    "mamba_d_state": (),  # Jamba, Zamba
    "state_size": (),  # Mamba, FalconMamba
    "ssm_cfg": (),  # mamba_ssm's own configs
    "linear_num_key_heads": (),  # Qwen3-Next and Qwen3.5's linear attention
    "index_n_heads": (),  # DeepSeek-V3.2's sparse-attention indexer
    "num_shared_experts": (),  # shared experts under a name no reader here knows
    "moe_num_experts": (),  # ERNIE 4.5
    "ffn_config": (),  # DBRX keeps its experts in here
}


def _is_set(value: object) -> bool:
    """Whether a config value takes effect: not null, false, zero or empty."""
    return value not in (None, False, 0, "", [], {})


def _refuse_unmodelled_keys(hf: dict) -> None:
    model_type = hf.get("model_type")
    for key, model_types in ARCHITECTURE_KEYS.items():
        if not _is_set(hf.get(key)) or model_type in model_types:
            continue
        if not model_types:
            raise InputError(f"field {key!r} changes the GEMMs in a way gemmscope does not model")
        modelled = ", ".join("(none)" if t is None else t for t in model_types)
        raise InputError(f"field {key!r} changes the GEMMs, and gemmscope models it only for model_type "
                         f"{modelled}, not {model_type!r}")


def _first(hf: dict, *keys: str, required: bool = True):
    """The value of the first of keys that is set (not null); None or an error when none is."""
    for key in keys:
        if hf.get(key) is not None:
            return hf[key]
    if required:
        raise InputError(f"no {' or '.join(keys)}")
    return None


def from_hf_config(path: str | Path) -> ModelConfig:
    """Architecture from a Hugging Face config.json (or a model directory holding one).

    Reads llama/mistral/mixtral/qwen2 keys and their gpt2 aliases (n_embd, n_inner, n_head,
    n_layer), and the layers of Qwen2-MoE and Qwen3-MoE, DeepSeek-V2 and V3, and Nemotron-H. A key
    of ARCHITECTURE_KEYS that is not modelled for the config's model_type is an error.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        hf = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read {path}: {error}") from None
    except json.JSONDecodeError as error:
        raise InputError(f"{path} is not JSON: {error.msg} at line {error.lineno}") from None
    if not isinstance(hf, dict):
        raise InputError(f"{path} is not a model config: expected a JSON object")
    name = path.resolve().parent.name if path.name == "config.json" else path.stem
    try:
        _refuse_unmodelled_keys(hf)
        read_fields = _FAMILY_READERS.get(hf.get("model_type"), _transformer_fields)
        return ModelConfig(**read_fields(hf), name=name)
    except InputError as error:
        raise InputError(f"{path}: {error}") from None


def _transformer_fields(hf: dict) -> dict:
    """A transformer whose layers are all alike: attention, then an MLP or Mixtral-style experts."""
    hidden_size = _first(hf, "hidden_size", "n_embd")
    _require_positive_int("hidden_size", hidden_size)
    intermediate_size = _first(hf, "intermediate_size", "n_inner", required=False)
    num_experts = _first(hf, "num_local_experts", "num_experts", "n_routed_experts", required=False) or 0
    return dict(
        hidden_size=hidden_size,
        # gpt2 leaves n_inner null for the classic 4x MLP
        intermediate_size=4 * hidden_size if intermediate_size is None else intermediate_size,
        num_attention_heads=_first(hf, "num_attention_heads", "n_head"),
        num_layers=_first(hf, "num_hidden_layers", "n_layer"),
        num_kv_heads=hf.get("num_key_value_heads"),
        head_dim=hf.get("head_dim"),
        vocab_size=hf.get("vocab_size"),
        activation=_activation_from_hf(_first(hf, "hidden_act", "activation_function"), hf.get("model_type")),
        num_experts=num_experts,
        moe_top_k=_first(hf, "num_experts_per_tok") if num_experts else 0,
        moe_intermediate_size=hf.get("moe_intermediate_size") if num_experts else None,
    )


def _layer_pattern(is_moe: list[bool], num_experts: int) -> tuple[str, ...] | None:
    """Attention-then-FFN layers as a pattern; None where all are the default layer, so that
    num_layers can still be overridden."""
    layers = tuple(ATTENTION + (MOE if moe else MLP) for moe in is_moe)
    default = ATTENTION + (MOE if num_experts else MLP)
    return None if all(layer == default for layer in layers) else layers


def _qwen_moe_fields(hf: dict) -> dict:
    """Qwen2-MoE and Qwen3-MoE as transformers builds them: layer i is MoE unless it is in
    mlp_only_layers or i + 1 is not a multiple of decoder_sparse_step; the others have a dense MLP
    of intermediate_size. Qwen2-MoE's MoE layers also run a shared expert behind a sigmoid gate."""
    fields = _transformer_fields(hf)
    num_layers = fields["num_layers"]
    _require_positive_int("num_hidden_layers", num_layers)
    step = hf.get("decoder_sparse_step")
    step = 1 if step is None else step  # transformers' default
    _require_positive_int("decoder_sparse_step", step)
    dense_only = hf.get("mlp_only_layers") or []
    if not isinstance(dense_only, list) or not all(_is_int(layer) for layer in dense_only):
        raise InputError(f"mlp_only_layers must be a list of layer indices, got {dense_only!r}")
    is_moe = [fields["num_experts"] > 0 and layer not in dense_only and (layer + 1) % step == 0
              for layer in range(num_layers)]
    fields["layer_pattern"] = _layer_pattern(is_moe, fields["num_experts"])
    if _is_set(hf.get("shared_expert_intermediate_size")):
        fields.update(shared_expert_intermediate_size=hf["shared_expert_intermediate_size"],
                      shared_expert_gate=True)
    return fields


def _deepseek_fields(hf: dict) -> dict:
    """DeepSeek-V2 and V3 as DeepSeek's own modeling code builds them (transformers' port drops
    moe_layer_freq and the MTP module): multi-head latent attention in every layer; layer i is MoE
    when i >= first_k_dense_replace and i is a multiple of moe_layer_freq, else a dense MLP of
    intermediate_size; MoE layers run their n_shared_experts as one MLP n_shared_experts ·
    moe_intermediate_size wide; V3 trains with num_nextn_predict_layers MTP modules."""
    fields = _transformer_fields(hf)
    num_layers, num_experts = fields["num_layers"], fields["num_experts"]
    _require_positive_int("num_hidden_layers", num_layers)
    first_dense = _first(hf, "first_k_dense_replace")
    _require_non_negative_int("first_k_dense_replace", first_dense)
    moe_every = _first(hf, "moe_layer_freq")
    _require_positive_int("moe_layer_freq", moe_every)
    is_moe = [num_experts > 0 and layer >= first_dense and layer % moe_every == 0
              for layer in range(num_layers)]
    shared_experts = hf.get("n_shared_experts") or 0
    _require_non_negative_int("n_shared_experts", shared_experts)
    if num_experts:
        fields["moe_intermediate_size"] = _first(hf, "moe_intermediate_size")
        _require_positive_int("moe_intermediate_size", fields["moe_intermediate_size"])
    fields.update(
        head_dim=None,  # MLA sizes its heads itself; transformers saves head_dim = qk_rope_head_dim
        layer_pattern=_layer_pattern(is_moe, num_experts),
        shared_expert_intermediate_size=(shared_experts * fields["moe_intermediate_size"]
                                         if num_experts and shared_experts else None),
        mla=LatentAttention(kv_lora_rank=_first(hf, "kv_lora_rank"),
                            qk_nope_head_dim=_first(hf, "qk_nope_head_dim"),
                            qk_rope_head_dim=_first(hf, "qk_rope_head_dim"),
                            v_head_dim=_first(hf, "v_head_dim"),
                            q_lora_rank=hf.get("q_lora_rank")),
        mtp_layers=hf.get("num_nextn_predict_layers") or 0,
    )
    return fields


# Nemotron-H's block names in layers_block_type, as newer exports write its layout.
_NEMOTRON_H_BLOCK_NAMES = {"mamba": MAMBA, "linear_attention": MAMBA, "attention": ATTENTION,
                           "full_attention": ATTENTION, "mlp": MLP, "moe": MOE}


def _nemotron_h_fields(hf: dict) -> dict:
    """Nemotron-H as transformers builds it: one block per layer, from hybrid_override_pattern (or
    layers_block_type); attention with its own head_dim; MLPs and experts without a gate (up
    projection, mlp_hidden_act, down projection); MoE blocks also run one shared expert
    moe_shared_expert_intermediate_size wide."""
    layout = _first(hf, "hybrid_override_pattern", "layers_block_type")
    if isinstance(layout, list) and all(isinstance(block, str) for block in layout):
        unknown = [block for block in layout if block not in _NEMOTRON_H_BLOCK_NAMES]
        if unknown:
            raise InputError(f"unknown block type {unknown[0]!r} in layers_block_type; known: "
                             f"{', '.join(_NEMOTRON_H_BLOCK_NAMES)}")
        layout = "".join(_NEMOTRON_H_BLOCK_NAMES[block] for block in layout)
    if not isinstance(layout, str) or not layout:
        raise InputError(f"hybrid_override_pattern must be a non-empty string, got {layout!r}")
    num_layers = hf.get("num_hidden_layers")
    if num_layers is not None and num_layers != len(layout):
        raise InputError(f"num_hidden_layers {num_layers!r} does not match the {len(layout)} layers of "
                         f"hybrid_override_pattern")
    mlp_activation = _first(hf, "mlp_hidden_act")
    activation = _activation_from_hf(mlp_activation, hf.get("model_type"))
    if activation in GATED_ACTIVATIONS:
        raise InputError(f"mlp_hidden_act {mlp_activation!r}: Nemotron-H's MLPs have no gate, and a plain "
                         f"{mlp_activation} MLP is not modelled")
    fields = dict(
        hidden_size=_first(hf, "hidden_size"),
        intermediate_size=_first(hf, "intermediate_size"),
        num_attention_heads=_first(hf, "num_attention_heads"),
        num_layers=len(layout),
        num_kv_heads=hf.get("num_key_value_heads"),
        head_dim=_first(hf, "head_dim", "attention_head_dim"),
        vocab_size=hf.get("vocab_size"),
        activation=activation,
        layer_pattern=tuple(layout),
    )
    if MAMBA in layout:
        fields["mamba"] = Mamba2Mixer(num_heads=_first(hf, "mamba_num_heads"),
                                      head_dim=_first(hf, "mamba_head_dim"),
                                      groups=_first(hf, "n_groups", "mamba_n_groups"),
                                      state_size=_first(hf, "ssm_state_size"))
    if MOE in layout:
        fields.update(num_experts=_first(hf, "n_routed_experts", "num_local_experts"),
                      moe_top_k=_first(hf, "num_experts_per_tok"),
                      moe_intermediate_size=_first(hf, "moe_intermediate_size"),
                      shared_expert_intermediate_size=_first(hf, "moe_shared_expert_intermediate_size"))
    return fields


_FAMILY_READERS = {"qwen2_moe": _qwen_moe_fields, "qwen3_moe": _qwen_moe_fields,
                   "deepseek_v2": _deepseek_fields, "deepseek_v3": _deepseek_fields,
                   "nemotron_h": _nemotron_h_fields}

# Hugging Face families whose gelu MLP is gated (GeGLU); silu MLPs are gated in every family but
# Nemotron-H, whose reader refuses them.
_GEGLU_MODEL_TYPES = ("gemma", "gemma2", "gemma3_text")


def _activation_from_hf(hf_activation: object, model_type: str | None) -> str:
    if not isinstance(hf_activation, str):
        raise InputError(f"activation {hf_activation!r} is not a name")
    if hf_activation in ("silu", "swish"):
        return "swiglu"
    if "gelu" in hf_activation:
        return "geglu" if model_type in _GEGLU_MODEL_TYPES else "gelu"
    if hf_activation in ("relu", "relu2"):
        return hf_activation
    raise InputError(f"unsupported activation {hf_activation!r}")


_REQUIRED_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_layers")


def resolve_config(model: str | None = None, config_path: str | None = None, **overrides) -> ModelConfig:
    """A preset, a Hugging Face config, or (neither given) a config built from overrides alone.

    Overrides that are not None replace the matching ModelConfig fields.
    """
    if model and config_path:
        raise InputError("give a preset model or a config file, not both")
    overrides = {field: value for field, value in overrides.items() if value is not None}
    if model:
        return dataclasses.replace(preset(model), **overrides)
    if config_path:
        return dataclasses.replace(from_hf_config(config_path), **overrides)
    missing = [field for field in _REQUIRED_FIELDS if field not in overrides]
    if missing:
        flags = ", ".join("--" + field.replace("_", "-") for field in missing)
        raise InputError(f"without a preset or a config file these are needed: {flags}")
    return ModelConfig(**overrides)


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

"""Model config -> the GEMMs one micro-batch's forward and backward pass runs.

Shapes follow Transformer Engine's GEMM benchmark convention (M, K, N): a linear layer
Y = X·Wᵀ over T = micro_batch_size·seq_len tokens with I in-features and O out-features runs

    fprop (T, I, O)    dgrad (T, O, I)    wgrad (I, T, O)

and one launch costs 2·M·K·N FLOPs. Tensor parallelism is Megatron style without sequence
parallelism: every rank sees all T tokens; qkv, mlp_up, expert_up and lm_head are column-parallel
(O / tp), attn_out, mlp_down and expert_down row-parallel (I / tp), the router is replicated.
"""

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gemmscope.errors import InputError

ACTIVATIONS = ("gelu", "relu", "swiglu", "geglu", "reglu")
GATED_ACTIVATIONS = ("swiglu", "geglu", "reglu")  # gate and up projections fused: mlp_up's N doubles
PASSES = ("fprop", "dgrad", "wgrad")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require_positive_int(field: str, value: object) -> None:
    if not _is_int(value) or value <= 0:
        raise InputError(f"{field} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class ModelConfig:
    """One transformer's architecture plus the run settings that set its GEMM shapes.

    num_kv_heads and head_dim stay None when they take their defaults (all heads; hidden_size /
    num_attention_heads), so that overriding hidden_size or the head count keeps them consistent.
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
    name: str = "custom"

    def __post_init__(self) -> None:
        for field in ("hidden_size", "intermediate_size", "num_attention_heads", "num_layers",
                      "micro_batch_size", "seq_len", "tp"):
            _require_positive_int(field, getattr(self, field))
        for field in ("num_kv_heads", "head_dim", "vocab_size", "moe_intermediate_size"):
            if getattr(self, field) is not None:
                _require_positive_int(field, getattr(self, field))
        for field in ("num_experts", "moe_top_k"):
            value = getattr(self, field)
            if not _is_int(value) or value < 0:
                raise InputError(f"{field} must be a non-negative integer, got {value!r}")
        if self.activation not in ACTIVATIONS:
            raise InputError(f"unknown activation {self.activation!r}; known: {', '.join(ACTIVATIONS)}")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise InputError(f"hidden_size {self.hidden_size} is not divisible by "
                             f"num_attention_heads {self.num_attention_heads}; give head_dim")
        if self.num_attention_heads % self.kv_heads:
            raise InputError(f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                             f"num_kv_heads {self.kv_heads}")
        if self.num_experts and not 1 <= self.moe_top_k <= self.num_experts:
            raise InputError(f"moe_top_k must be 1..num_experts ({self.num_experts}), got {self.moe_top_k}")
        if not self.num_experts and self.moe_top_k:
            raise InputError(f"moe_top_k {self.moe_top_k} needs num_experts > 0")
        # Megatron splits heads, kv heads and the FFN width across ranks, so each must divide evenly.
        # The vocabulary is checked only when lm_head is planned: it matters for nothing else, and
        # published vocabularies (GPT-3's 50257, CodonFM's 69) often do not divide by tp.
        split_ffn_field = ("moe_intermediate_size" if self.num_experts and self.moe_intermediate_size
                           else "intermediate_size")
        split_sizes = {"num_attention_heads": self.num_attention_heads, "num_kv_heads": self.kv_heads,
                       split_ffn_field: getattr(self, split_ffn_field)}
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


# Hugging Face families whose gelu MLP is gated (GeGLU); silu MLPs are gated in every family.
_GEGLU_MODEL_TYPES = ("gemma", "gemma2", "gemma3_text")


def from_hf_config(path: str | Path) -> ModelConfig:
    """Architecture from a Hugging Face config.json (or a model directory holding one).

    Reads llama/mistral/mixtral/qwen2 keys and their gpt2 aliases (n_embd, n_inner, n_head,
    n_layer). Shared experts (Qwen2-MoE, DeepSeek) are not modelled.
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

    def first(*keys: str, required: bool = True):
        for key in keys:
            if hf.get(key) is not None:
                return hf[key]
        if required:
            raise InputError(f"no {' or '.join(keys)}")
        return None

    try:
        hidden_size = first("hidden_size", "n_embd")
        _require_positive_int("hidden_size", hidden_size)
        intermediate_size = first("intermediate_size", "n_inner", required=False)
        num_experts = first("num_local_experts", "num_experts", required=False) or 0
        return ModelConfig(
            hidden_size=hidden_size,
            # gpt2 leaves n_inner null for the classic 4x MLP
            intermediate_size=4 * hidden_size if intermediate_size is None else intermediate_size,
            num_attention_heads=first("num_attention_heads", "n_head"),
            num_layers=first("num_hidden_layers", "n_layer"),
            num_kv_heads=hf.get("num_key_value_heads"),
            head_dim=hf.get("head_dim"),
            vocab_size=hf.get("vocab_size"),
            activation=_activation_from_hf(first("hidden_act", "activation_function"), hf.get("model_type")),
            num_experts=num_experts,
            moe_top_k=first("num_experts_per_tok") if num_experts else 0,
            moe_intermediate_size=hf.get("moe_intermediate_size") if num_experts else None,
            name=path.resolve().parent.name if path.name == "config.json" else path.stem,
        )
    except InputError as error:
        raise InputError(f"{path}: {error}") from None


def _activation_from_hf(hf_activation: object, model_type: str | None) -> str:
    if not isinstance(hf_activation, str):
        raise InputError(f"activation {hf_activation!r} is not a name")
    if hf_activation in ("silu", "swish"):
        return "swiglu"
    if "gelu" in hf_activation:
        return "geglu" if model_type in _GEGLU_MODEL_TYPES else "gelu"
    if hf_activation == "relu":
        return "relu"
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


def plan(config: ModelConfig, lm_head: bool = False) -> list[Gemm]:
    """Every GEMM of one micro-batch: all fprop, then all dgrad, then all wgrad, each in layer order.

    MoE layers assume even routing: each expert gets ceil(T·top_k / num_experts) tokens.
    Experts are split by tp like the dense MLP (Megatron's default); expert parallelism is not modelled.
    """
    tp, tokens, layers, hidden = config.tp, config.tokens, config.num_layers, config.hidden_size
    up_factor = 2 if config.activation in GATED_ACTIVATIONS else 1
    qkv_heads = (config.num_attention_heads + 2 * config.kv_heads) // tp  # q, k and v heads on one rank
    linears = [
        _Linear("qkv", tokens, hidden, qkv_heads * config.head_size, layers),
        _Linear("attn_out", tokens, config.num_attention_heads // tp * config.head_size, hidden, layers),
    ]
    if config.num_experts:
        expert_tokens = math.ceil(tokens * config.moe_top_k / config.num_experts)
        expert_width = config.expert_intermediate_size // tp
        expert_count = layers * config.num_experts
        linears += [
            _Linear("router", tokens, hidden, config.num_experts, layers),
            _Linear("expert_up", expert_tokens, hidden, up_factor * expert_width, expert_count),
            _Linear("expert_down", expert_tokens, expert_width, hidden, expert_count),
        ]
    else:
        width = config.intermediate_size // tp
        linears += [
            _Linear("mlp_up", tokens, hidden, up_factor * width, layers),
            _Linear("mlp_down", tokens, width, hidden, layers),
        ]
    if lm_head:
        if config.vocab_size is None:
            raise InputError(f"lm_head needs a vocab_size, and {config.name} has none")
        if config.vocab_size % tp:
            padded = math.ceil(config.vocab_size / (128 * tp)) * 128 * tp
            raise InputError(f"vocab_size {config.vocab_size} is not divisible by tp {tp}; "
                             f"give the padded size (Megatron pads to a multiple of 128·tp: {padded})")
        linears.append(_Linear("lm_head", tokens, hidden, config.vocab_size // tp, 1))
    return [linear.gemm(pass_) for pass_ in PASSES for linear in linears]


def plan_frame(gemms: list[Gemm]) -> pd.DataFrame:
    """The plan as a table: op, pass, m, k, n, flops, count, total_flops."""
    return pd.DataFrame([gemm.as_dict() for gemm in gemms],
                        columns=["op", "pass", "m", "k", "n", "flops", "count", "total_flops"])

"""A ModelConfig from a Hugging Face config.json (dense and Mixtral-style models, Qwen2-MoE and
Qwen3-MoE, DeepSeek-V2/V3, Nemotron-H), or from a preset, a config file or flags (`resolve_config`).
A key that changes the GEMMs in a way gemmscope does not model is an error, never a silently
dense plan."""


import dataclasses
import json
from pathlib import Path

from gemmscope.errors import InputError
from gemmscope.plan.model_config import (
    ATTENTION,
    GATED_ACTIVATIONS,
    MAMBA,
    MLP,
    MOE,
    LatentAttention,
    Mamba2Mixer,
    ModelConfig,
    is_int,
    preset,
    require_non_negative_int,
    require_positive_int,
)

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
    if not isinstance(hf.get("model_type"), (str, type(None))):  # it is looked up in tables keyed by name
        raise InputError(f"{path}: model_type must be a name, not {json.dumps(hf['model_type'])}")
    name = path.resolve().parent.name if path.name == "config.json" else path.stem
    try:
        _refuse_unmodelled_keys(hf)
        # a config without model_type (None) is no key: it is read as a plain transformer
        read_fields = _FAMILY_READERS.get(hf.get("model_type"), _transformer_fields)  # type: ignore[arg-type]
        return ModelConfig(**read_fields(hf), name=name)
    except InputError as error:
        raise InputError(f"{path}: {error}") from None


def _transformer_fields(hf: dict) -> dict:
    """A transformer whose layers are all alike: attention, then an MLP or Mixtral-style experts."""
    hidden_size = _first(hf, "hidden_size", "n_embd")
    require_positive_int("hidden_size", hidden_size)
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
    require_positive_int("num_hidden_layers", num_layers)
    step = hf.get("decoder_sparse_step")
    step = 1 if step is None else step  # transformers' default
    require_positive_int("decoder_sparse_step", step)
    dense_only = hf.get("mlp_only_layers") or []
    if not isinstance(dense_only, list) or not all(is_int(layer) for layer in dense_only):
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
    require_positive_int("num_hidden_layers", num_layers)
    first_dense = _first(hf, "first_k_dense_replace")
    require_non_negative_int("first_k_dense_replace", first_dense)
    moe_every = _first(hf, "moe_layer_freq")
    require_positive_int("moe_layer_freq", moe_every)
    is_moe = [num_experts > 0 and layer >= first_dense and layer % moe_every == 0
              for layer in range(num_layers)]
    shared_experts = hf.get("n_shared_experts") or 0
    require_non_negative_int("n_shared_experts", shared_experts)
    if num_experts:
        fields["moe_intermediate_size"] = _first(hf, "moe_intermediate_size")
        require_positive_int("moe_intermediate_size", fields["moe_intermediate_size"])
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

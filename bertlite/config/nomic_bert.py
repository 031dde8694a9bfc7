"""NomicBertConfig: transformers' NomicBertConfig fields and defaults, validated.

NomicBERT is BERT's post-norm encoder with rotary positions (rope_parameters' rope_theta) instead of position
embeddings, a fused bias-free query|key|value and a SwiGLU feed-forward. The original hub layout (nomic-embed-text:
GPT-2's field names, auto_map to nomic-ai/nomic-bert-2048's code) is read too: from_original_layout maps its fields
onto these and refuses by name what NomicBERT's modules do not compute. Importable without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from bertlite.config.bert import BertConfig
from bertlite.config.checks import names_original_code

# BertConfig's fields NomicBERT has no form of: config.json keeps them only if it carried them.
NOT_NOMIC_FIELDS = ("position_embedding_type", "use_cache", "is_decoder", "add_cross_attention", "tie_word_embeddings")
# transformers' default rotary base for NomicBERT.
DEFAULT_ROPE_THETA = 1000.0
# The original config's names (GPT-2's) -> NomicBertConfig's; a key that says a config is the original's.
ORIGINAL_NAMES = {
    "n_embd": "hidden_size",
    "n_layer": "num_hidden_layers",
    "n_head": "num_attention_heads",
    "n_positions": "max_position_embeddings",
    "layer_norm_epsilon": "layer_norm_eps",
    "resid_pdrop": "hidden_dropout_prob",
    "attn_pdrop": "attention_probs_dropout_prob",
}
# The original's defaults (its config class on GPT2Config's) where a config.json leaves a field out.
ORIGINAL_DEFAULTS = {
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_positions": 1024,
    "layer_norm_epsilon": 1e-5,
    "resid_pdrop": 0.1,
    "attn_pdrop": 0.1,
    "activation_function": "gelu_new",
    "rotary_emb_base": 1000,
}
# The original's gated activations -> hidden_act (its "glu" is sigmoid gating).
ORIGINAL_ACTIVATIONS = {"swiglu": "silu", "geglu": "gelu", "glu": "sigmoid"}
# Switches whose other values change what the original computes: (its default, the value NomicBERT's modules have).
ORIGINAL_SWITCHES = {
    "rotary_emb_fraction": (0.0, 1.0),
    "rotary_emb_interleaved": (False, False),
    "rotary_emb_scale_base": (None, None),
    "rotary_scaling_factor": (1.0, None),
    "qkv_proj_bias": (True, False),
    "mlp_fc1_bias": (True, False),
    "mlp_fc2_bias": (True, False),
    "prenorm": (False, False),
    "parallel_block": (False, False),
    "use_rms_norm": (False, False),
    "causal": (False, False),
}
# The original's fields that choose its kernels or training loss, or GPT-2's that its encoder never reads.
ORIGINAL_KERNEL_FIELDS = (
    "embd_pdrop",
    "fused_bias_fc",
    "fused_dropout_add_ln",
    "use_flash_attn",
    "use_xentropy",
    "dense_seq_output",
    "pad_vocab_size_multiple",
    "parallel_block_tied_norm",
    "max_trained_positions",
    "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx",
    "reorder_and_upcast_attn",
    "summary_activation",
    "summary_first_dropout",
    "summary_proj_to_labels",
    "summary_type",
    "summary_use_proj",
)
# The original's gated feed-forward rounds its width up to a multiple of this.
ORIGINAL_MULTIPLE_OF = 256
ORIGINAL_CODE_REPOS = ("nomic-ai/nomic-bert-2048",)
ORIGINAL_MODULES = ("configuration_hf_nomic_bert", "modeling_hf_nomic_bert")


def is_original_layout(config_dict: dict[str, Any]) -> bool:
    """Whether a nomic_bert config.json is the original's (GPT-2's field names) rather than transformers'."""
    return any(name in config_dict for name in ("n_embd", "n_layer", "n_head", "activation_function"))


def from_original_layout(config_dict: dict[str, Any]) -> dict[str, Any]:
    """config.json of the original layout (nomic-embed-text's) as NomicBertConfig's fields.

    Args:
        config_dict: the original's config.json keys and values.

    Returns:
        The same config under NomicBertConfig's names: the feed-forward's width as the original rounds it,
        rotary_emb_base in rope_parameters, the kernel switches dropped, auto_map dropped when it names only
        the original's classes (else kept, and refused by the loader's own-code check).

    Raises:
        ValueError: a field whose computation NomicBERT's modules do not have, named.
    """
    data = {**ORIGINAL_DEFAULTS, **config_dict}
    for name, (default, supported) in ORIGINAL_SWITCHES.items():
        value = data.pop(name, default)
        if value != supported and not (name == "rotary_scaling_factor" and not value):
            raise ValueError(f"nomic_bert's original {name}={value!r} is not implemented (supported: {supported!r})")
    activation = data.pop("activation_function")
    if activation not in ORIGINAL_ACTIVATIONS:
        raise ValueError(
            f"nomic_bert's original activation_function={activation!r} is not implemented (supported: "
            f"{', '.join(ORIGINAL_ACTIVATIONS)})"
        )
    hidden = data["n_embd"]
    width = data.pop("n_inner", None) or int(8 * hidden / 3)
    data["intermediate_size"] = -(-width // ORIGINAL_MULTIPLE_OF) * ORIGINAL_MULTIPLE_OF
    data["hidden_act"] = ORIGINAL_ACTIVATIONS[activation]
    data["rope_parameters"] = {"rope_type": "default", "rope_theta": float(data.pop("rotary_emb_base"))}
    for old, new in ORIGINAL_NAMES.items():
        data[new] = data.pop(old)
    for name in ORIGINAL_KERNEL_FIELDS:
        data.pop(name, None)
    auto_map = data.get("auto_map")
    if isinstance(auto_map, dict) and all(
        names_original_code(value, ORIGINAL_CODE_REPOS, ORIGINAL_MODULES, "NomicBert")
        for key, value in auto_map.items()
        if key != "AutoTokenizer"
    ):
        del data["auto_map"]
    return data


@dataclass
class NomicBertConfig(BertConfig):
    """NomicBERT's config (transformers' NomicBertConfig): BERT's fields with NomicBERT's defaults, head_dim (None:
    hidden_size // num_attention_heads, the only size transformers' module runs) and rope_parameters (rope_type
    "default" and rope_theta)."""

    model_types: ClassVar[tuple[str, ...]] = ("nomic_bert",)
    not_family_fields: ClassVar[tuple[str, ...]] = NOT_NOMIC_FIELDS
    vocab_size: int = 30528
    hidden_act: str = "silu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 2048
    model_type: str = "nomic_bert"
    head_dim: int | None = None  # a field here, as transformers' config keeps it
    rope_parameters: dict[str, Any] | None = None

    def __post_init__(self, num_labels: int | None, attn_implementation: str | None) -> None:
        super().__post_init__(num_labels, attn_implementation)
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.head_dim != self.hidden_size // self.num_attention_heads:
            raise ValueError(
                f"head_dim={self.head_dim!r}: NomicBERT's heads split hidden_size={self.hidden_size} evenly "
                f"({self.hidden_size // self.num_attention_heads} each)"
            )
        if self.position_embedding_type != "absolute" or self.is_decoder or self.add_cross_attention:
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r}, is_decoder={self.is_decoder!r}: a "
                "NomicBERT model is an encoder with rotary positions"
            )
        given = self.rope_parameters
        if given is not None and not isinstance(given, dict):
            raise ValueError(f"rope_parameters must be an object (rope_type, rope_theta), got {given!r}")
        params = {"rope_type": "default", "rope_theta": DEFAULT_ROPE_THETA, **(given or {})}
        if params["rope_type"] != "default":
            raise ValueError(
                f"rope_parameters: rope_type={params['rope_type']!r} is not implemented (supported: default)"
            )
        theta = params["rope_theta"]
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta <= 0:
            raise ValueError(f"rope_parameters: rope_theta must be a positive number, got {theta!r}")
        self.rope_parameters = params

    @property
    def rope_theta(self) -> float:
        """The rotary base."""
        return float(self.rope_parameters["rope_theta"])

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> BertConfig:
        """BertConfig.from_dict; the original layout's config.json (GPT-2's field names) is read through
        from_original_layout.

        Args:
            config_dict: config.json's keys and values.
            **kwargs: keys that override config_dict's.

        Returns:
            The validated config.
        """
        if is_original_layout(config_dict):
            config_dict = from_original_layout(config_dict)
        return super().from_dict(config_dict, **kwargs)

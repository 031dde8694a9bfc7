"""JinaEmbeddingsV3Config: transformers' JinaEmbeddingsV3Config fields and defaults, validated, and the task adapters.

jina-embeddings-v3 is GTE's post-norm rotary encoder with a plain feed-forward, so its config is GteConfig's with
Jina's defaults. The original hub layout (model_type "xlm-roberta", auto_map to the code of
jinaai/xlm-roberta-flash-implementation) is read too: from_original_layout maps its fields onto these and keeps its
task adapters' fields (lora_adaptations, lora_rank, lora_alpha, task_instructions) as keys config.json carries,
which the model reads.
Importable without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from bertlite.config.bert import BertConfig
from bertlite.config.checks import names_original_code
from bertlite.config.gte import GteConfig

# BertConfig's fields jina-embeddings-v3 has no form of: config.json keeps them only if it carried them.
NOT_JINA_V3_FIELDS = ("position_embedding_type", "is_decoder", "add_cross_attention")
# The original layout's model_type and its code's repo, which auto_map names.
ORIGINAL_MODEL_TYPE = "xlm-roberta"
ORIGINAL_CODE_REPO = "jinaai/xlm-roberta-flash-implementation"
# The original code's modules, which auto_map names as `[repo--]module.Class`.
ORIGINAL_MODULES = ("configuration_xlm_roberta", "modeling_lora", "modeling_xlm_roberta")
# The original's class names -> Jina's here; its base model wrapped in the task adapters is the base model.
ORIGINAL_CLASSES = {
    "XLMRobertaLoRA": "JinaEmbeddingsV3Model",
    "XLMRobertaModel": "JinaEmbeddingsV3Model",
    "XLMRobertaForMaskedLM": "JinaEmbeddingsV3ForMaskedLM",
    "XLMRobertaForSequenceClassification": "JinaEmbeddingsV3ForSequenceClassification",
}
# The original's fields that choose its kernels or training (flash-attention, checkpointing, fused ops, freezing):
# the outputs are the same without them.
ORIGINAL_KERNEL_FIELDS = (
    "use_flash_attn",
    "use_reentrant",
    "fused_bias_fc",
    "fused_mlp",
    "fused_dropout_add_ln",
    "mlp_checkpoint_lvl",
    "pad_vocab_size_multiple",
    "load_trained_adapters",
    "lora_main_params_trainable",
)
# The task adapters' fields, kept as config.json's keys (transformers' native config has none of them).
ADAPTER_FIELDS = ("lora_adaptations", "lora_rank", "lora_alpha", "lora_dropout_p", "task_instructions")


def _names_original_code(value: Any) -> bool:
    """Whether an auto_map value names the original's own code (`[ORIGINAL_CODE_REPO--]module.XLMRoberta...`)."""
    return names_original_code(value, (ORIGINAL_CODE_REPO,), ORIGINAL_MODULES, "XLMRoberta")


def is_original_layout(config_dict: dict[str, Any]) -> bool:
    """Whether a config.json is jina-embeddings-v3's original layout: model_type "xlm-roberta" with an auto_map
    naming jinaai/xlm-roberta-flash-implementation's code.

    Args:
        config_dict: config.json's keys and values.

    Returns:
        True for the original layout.
    """
    auto_map = config_dict.get("auto_map")
    if config_dict.get("model_type") != ORIGINAL_MODEL_TYPE or not isinstance(auto_map, dict):
        return False
    return any(_names_original_code(value) and ORIGINAL_CODE_REPO in value for value in auto_map.values())


def from_original_layout(config_dict: dict[str, Any]) -> dict[str, Any]:
    """config.json of the original layout (model_type "xlm-roberta", Jina's flash implementation) as
    JinaEmbeddingsV3Config's fields.

    Args:
        config_dict: the original's config.json keys and values.

    Returns:
        The same config under Jina's names: rotary_emb_base in rope_parameters, the kernel switches dropped,
        auto_map's entries naming the original's code dropped (others kept, and refused by the loader's own-code
        check), architectures renamed; the adapters' fields kept as they are.

    Raises:
        ValueError: a field whose computation the modules here do not have, named.
    """
    data = {**config_dict, "model_type": JinaEmbeddingsV3Config.model_type}
    head_dim = data.get("hidden_size", 1024) // data.get("num_attention_heads", 16)
    unsupported = {
        "position_embedding_type": (data.pop("position_embedding_type", "rotary"), "rotary"),
        "rotary_emb_interleaved": (data.pop("rotary_emb_interleaved", False), False),
        "rotary_emb_scale_base": (data.pop("rotary_emb_scale_base", None), None),
        "rotary_emb_dim": (data.pop("rotary_emb_dim", head_dim), head_dim),
        "last_layer_subset": (data.pop("last_layer_subset", False), False),
    }
    for name, (value, supported) in unsupported.items():
        if value != supported:
            raise ValueError(
                f"model_type='xlm-roberta' (Jina's flash implementation) with {name}={value!r} is not implemented "
                f"(supported: {supported!r})"
            )
    for name in ORIGINAL_KERNEL_FIELDS:
        data.pop(name, None)
    data["rope_parameters"] = {"rope_type": "default", "rope_theta": data.pop("rotary_emb_base", 10_000.0)}
    auto_map = data.get("auto_map")
    if isinstance(auto_map, dict):
        # Entries naming other code stay, for the loader's own-code check to refuse by name.
        others = {k: v for k, v in auto_map.items() if k != "AutoTokenizer" and not _names_original_code(v)}
        data["auto_map"] = others
        if not others:
            del data["auto_map"]
    if isinstance(data.get("architectures"), list):
        data["architectures"] = [ORIGINAL_CLASSES.get(name, name) for name in data["architectures"]]
    return data


@dataclass
class JinaEmbeddingsV3Config(GteConfig):
    """jina-embeddings-v3's config (transformers' JinaEmbeddingsV3Config): GTE's fields with Jina's defaults
    (rope_parameters' rope_theta 20000). The task adapters' fields, when config.json has them, are read through
    the properties below."""

    model_types: ClassVar[tuple[str, ...]] = ("jina_embeddings_v3",)
    not_family_fields: ClassVar[tuple[str, ...]] = NOT_JINA_V3_FIELDS
    default_rope_theta: ClassVar[float] = 20_000.0
    vocab_size: int = 250002
    hidden_size: int = 1024
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    intermediate_size: int = 4096
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 8194
    layer_norm_eps: float = 1e-5
    bos_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 2
    model_type: str = "jina_embeddings_v3"

    def __post_init__(self, num_labels: int | None, attn_implementation: str | None) -> None:
        super().__post_init__(num_labels, attn_implementation)
        if self.type_vocab_size == 0:
            raise ValueError("type_vocab_size must be a positive integer, got 0 (jina-embeddings-v3 has token types)")
        self._check_adapters()

    def _check_adapters(self) -> None:
        """The adapters' fields, when config.json has lora_adaptations: task names, a positive rank."""
        tasks = self.extra.get("lora_adaptations")
        if tasks is None:
            return
        if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) for t in tasks):
            raise ValueError(f"lora_adaptations must be a non-empty list of task names, got {tasks!r}")
        if len(set(tasks)) != len(tasks):
            raise ValueError(f"lora_adaptations names a task twice: {tasks!r}")
        rank = self.lora_rank
        if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
            raise ValueError(f"lora_rank must be a positive integer, got {rank!r}")
        alpha = self.lora_alpha
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise ValueError(f"lora_alpha must be a number, got {alpha!r}")
        instructions = self.task_instructions
        if not isinstance(instructions, dict) or not all(isinstance(v, str) for v in instructions.values()):
            raise ValueError(f"task_instructions must map task names to strings, got {instructions!r}")
        if set(instructions) - set(tasks):
            raise ValueError(
                f"task_instructions names tasks not in lora_adaptations: {sorted(set(instructions) - set(tasks))}"
            )

    @property
    def lora_adaptations(self) -> list[str]:
        """The task adapters' names, in the order of their index in lora_A and lora_B; [] without adapters."""
        return list(self.extra.get("lora_adaptations") or [])

    @property
    def lora_rank(self) -> int:
        """The adapters' rank (the original's default 4)."""
        return self.extra.get("lora_rank", 4)

    @property
    def lora_alpha(self) -> float:
        """The adapters' alpha; each adds alpha / rank times its low-rank product (the original's default 1)."""
        return self.extra.get("lora_alpha", 1)

    @property
    def task_instructions(self) -> dict[str, str]:
        """Each task's instruction, the text its inputs start with (the original's encode prepends it)."""
        return dict(self.extra.get("task_instructions") or {})

    def task_id(self, task: str) -> int:
        """The index of `task`'s adapter.

        Args:
            task: a name in lora_adaptations.

        Returns:
            Its index.

        Raises:
            ValueError: an unknown task (naming the tasks there are), or a model without adapters.
        """
        tasks = self.lora_adaptations
        if not tasks:
            raise ValueError(f"task={task!r}: this model has no task adapters (config.json has no lora_adaptations)")
        if task not in tasks:
            raise ValueError(f"unknown task {task!r}; the tasks are {', '.join(tasks)}")
        return tasks.index(task)

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> BertConfig:
        """GteConfig.from_dict; the original layout's config.json is read through from_original_layout.

        Args:
            config_dict: config.json's keys and values.
            **kwargs: keys that override config_dict's.

        Returns:
            The validated config.
        """
        if is_original_layout(config_dict):
            config_dict = from_original_layout(config_dict)
        return super().from_dict(config_dict, **kwargs)

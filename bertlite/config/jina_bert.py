"""JinaBertConfig: the config of JinaBERT-v2 (jina-embeddings-v2-base-en and kin), validated.

JinaBERT-v2 has no transformers module: its checkpoints are typed "bert" and name their own code in auto_map
(jinaai/jina-bert-implementation's JinaBertConfig and JinaBertModel), with position_embedding_type "alibi" and
feed_forward_type "geglu" or "reglu"; jina-embeddings-v2-base-code's variant names jinaai/jina-bert-v2-qk-post-norm's
code (qk_post_norm). bertlite reads that layout with no code run (is_original_layout says which
config.json is one) and writes it back the same way, so a saved folder stays loadable by the original code.
Importable without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from bertlite.config.bert import BertConfig

# The repo of the original code that auto_map names, and its class names bertlite implements.
ORIGINAL_CODE_REPO = "jinaai/jina-bert-implementation"
# The repo of jina-embeddings-v2-base-code's variant: LayerNorms on query and key, the layer's own post-norms.
QK_POST_NORM_CODE_REPO = "jinaai/jina-bert-v2-qk-post-norm"
ORIGINAL_CLASSES = ("JinaBertConfig", "JinaBertModel", "JinaBertForMaskedLM", "JinaBertForSequenceClassification")
# What save_pretrained writes when the config was not read from such a config.json (the hub checkpoints' map).
DEFAULT_AUTO_MAP = {
    "AutoConfig": f"{ORIGINAL_CODE_REPO}--configuration_bert.JinaBertConfig",
    "AutoModel": f"{ORIGINAL_CODE_REPO}--modeling_bert.JinaBertModel",
    "AutoModelForMaskedLM": f"{ORIGINAL_CODE_REPO}--modeling_bert.JinaBertForMaskedLM",
    "AutoModelForSequenceClassification": f"{ORIGINAL_CODE_REPO}--modeling_bert.JinaBertForSequenceClassification",
}
# feed_forward_type -> the activation its gated feed-forward applies (the original's nn.ReLU and exact nn.GELU).
FEED_FORWARD_ACTIVATIONS = {"geglu": "gelu", "reglu": "relu"}
# BertConfig's fields JinaBERT has no form of: config.json keeps them only if it carried them.
NOT_JINA_FIELDS = ("is_decoder", "add_cross_attention")


def _code_repo(value: Any) -> str | None:
    """The repo of an auto_map value naming one of the original's classes (`<repo>--modeling_bert.JinaBertModel`,
    the repo one of the two variants'), else None."""
    if not isinstance(value, str):
        return None
    repo, _, name = value.rpartition("--")
    module, _, cls = name.partition(".")
    known = repo in (ORIGINAL_CODE_REPO, QK_POST_NORM_CODE_REPO)
    return repo if known and module in ("configuration_bert", "modeling_bert") and cls in ORIGINAL_CLASSES else None


def is_original_layout(config_dict: dict[str, Any]) -> bool:
    """Whether config.json is JinaBERT-v2's original layout: model_type "bert", ALiBi positions, and an auto_map
    whose every model class is the original's (any other code stays refused by the loader).

    Args:
        config_dict: config.json's keys and values.

    Returns:
        True for the original layout.
    """
    if config_dict.get("model_type", "bert") != "bert" or config_dict.get("position_embedding_type") != "alibi":
        return False
    return names_original_code(config_dict.get("auto_map"))


def names_original_code(auto_map: Any) -> bool:
    """Whether an auto_map names the original's classes and no other code (a tokenizer of its own aside).

    Args:
        auto_map: config.json's auto_map.

    Returns:
        True for a dict whose every model class is the original's.
    """
    return original_code_repo(auto_map) is not None


def original_code_repo(auto_map: Any) -> str | None:
    """The repo of the original's code an auto_map names (ORIGINAL_CODE_REPO or QK_POST_NORM_CODE_REPO).

    Args:
        auto_map: config.json's auto_map.

    Returns:
        The repo when every model class it names is that repo's (a tokenizer of its own aside), else None.
    """
    if not isinstance(auto_map, dict):
        return None
    repos = {_code_repo(value) for key, value in auto_map.items() if key != "AutoTokenizer"}
    return repos.pop() if len(repos) == 1 and None not in repos else None


@dataclass
class JinaBertConfig(BertConfig):
    """JinaBERT-v2's config: BERT's fields (position_embedding_type "alibi", the only one it runs), feed_forward_type
    (the gated feed-forward's activation: "geglu" or "reglu") and auto_map, the original code's classes written
    back to config.json (None: DEFAULT_AUTO_MAP). The original's attn_implementation ("torch" or None, its kernel
    switch) is kept in extra and written back; it does not change the outputs."""

    model_types: ClassVar[tuple[str, ...]] = ("jina_bert",)
    not_family_fields: ClassVar[tuple[str, ...]] = NOT_JINA_FIELDS
    max_position_embeddings: int = 8192
    position_embedding_type: str = "alibi"
    model_type: str = "jina_bert"
    feed_forward_type: str = "geglu"
    auto_map: dict[str, str] | None = None

    def __post_init__(self, num_labels: int | None, attn_implementation: str | None) -> None:
        alibi = self.position_embedding_type == "alibi"
        if alibi:
            self.position_embedding_type = "absolute"  # BERT's check knows no "alibi"; JinaBERT's own check is below
        try:
            super().__post_init__(num_labels, attn_implementation)
        finally:
            if alibi:
                self.position_embedding_type = "alibi"
        if not alibi or self.is_decoder or self.add_cross_attention:
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r}, is_decoder={self.is_decoder!r}, "
                f"add_cross_attention={self.add_cross_attention!r}: a JinaBERT-v2 model is an encoder with ALiBi "
                "positions (position_embedding_type 'alibi')"
            )
        if self.feed_forward_type not in FEED_FORWARD_ACTIVATIONS:
            raise ValueError(
                f"feed_forward_type={self.feed_forward_type!r} is not implemented "
                f"(supported: {', '.join(FEED_FORWARD_ACTIVATIONS)})"
            )
        if self.auto_map is not None and not names_original_code(self.auto_map):
            raise ValueError(
                f"auto_map={self.auto_map!r} names code other than one JinaBERT-v2 variant's ({ORIGINAL_CODE_REPO} "
                f"or {QK_POST_NORM_CODE_REPO})"
            )

    @property
    def qk_post_norm(self) -> bool:
        """Whether this is jina-embeddings-v2-base-code's variant (auto_map names QK_POST_NORM_CODE_REPO):
        LayerNorms on query and key, and the layer's own post-norms around the feed-forward."""
        return original_code_repo(self.auto_map) == QK_POST_NORM_CODE_REPO

    @property
    def feed_forward_act(self) -> str:
        """The activation of the gated feed-forward, an ACT2FN name."""
        return FEED_FORWARD_ACTIVATIONS[self.feed_forward_type]

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> BertConfig:
        """BertConfig.from_dict on the original layout (model_type "bert", see is_original_layout) or on
        model_type "jina_bert"; the original's attn_implementation is kept in extra, not taken as bertlite's.

        Args:
            config_dict: config.json's keys and values.
            **kwargs: keys that override config_dict's.

        Returns:
            The validated config.
        """
        data = {**config_dict, **kwargs}
        original_attention = {}
        if is_original_layout(data):
            data["model_type"] = "jina_bert"
            if "attn_implementation" in data:
                # The original's kernel switch ("torch": SDPA), not one of bertlite's attention names.
                original_attention["attn_implementation"] = data.pop("attn_implementation")
        config = super().from_dict(data)
        config.extra.update(original_attention)
        return config

    def to_dict(self) -> dict[str, Any]:
        """config.json's keys in the original layout: model_type "bert" and auto_map naming the original's code."""
        out = super().to_dict()
        out["model_type"] = "bert"
        out["auto_map"] = dict(self.auto_map or DEFAULT_AUTO_MAP)
        return out

"""The configs: BertConfig (config.bert), what makes one valid (config.checks), and the family's config
classes with CONFIG_CLASSES, by model_type (config.families).

Importable without torch, so tools can read and check a config cheaply.
"""

from bertlite.config.bert import BertConfig, as_bert_config, bind_attention
from bertlite.config.checks import (
    BERT_MODEL_TYPES,
    CONFIG_NAME,
    PROBLEM_TYPES,
    SIZE_FIELDS,
    SUPPORTED_ACTIVATIONS,
    SUPPORTED_POSITION_EMBEDDINGS,
    TELEMETRY_KWARGS,
    read_json,
    read_json_object,
)
from bertlite.config.families import (
    CONFIG_CLASSES,
    FAMILIES,
    FAMILY_HEADS,
    CamembertConfig,
    DebertaV2Config,
    DistilBertConfig,
    ElectraConfig,
    EuroBertConfig,
    Family,
    GteConfig,
    JinaBertConfig,
    JinaEmbeddingsV3Config,
    ModernBertConfig,
    MPNetConfig,
    NomicBertConfig,
    RobertaConfig,
    XLMRobertaConfig,
)
from bertlite.hub import HUB_KWARGS as HUB_KWARGS  # re-exported: auto.py and tokenization read it here

__all__ = [
    "BERT_MODEL_TYPES",
    "CONFIG_CLASSES",
    "CONFIG_NAME",
    "FAMILIES",
    "FAMILY_HEADS",
    "HUB_KWARGS",
    "PROBLEM_TYPES",
    "SIZE_FIELDS",
    "SUPPORTED_ACTIVATIONS",
    "SUPPORTED_POSITION_EMBEDDINGS",
    "TELEMETRY_KWARGS",
    "BertConfig",
    "CamembertConfig",
    "DebertaV2Config",
    "DistilBertConfig",
    "ElectraConfig",
    "EuroBertConfig",
    "Family",
    "GteConfig",
    "JinaBertConfig",
    "JinaEmbeddingsV3Config",
    "MPNetConfig",
    "ModernBertConfig",
    "NomicBertConfig",
    "RobertaConfig",
    "XLMRobertaConfig",
    "as_bert_config",
    "bind_attention",
    "read_json",
    "read_json_object",
]

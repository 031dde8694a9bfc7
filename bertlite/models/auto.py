"""transformers' Auto entry points for BERT checkpoints: AutoConfig, AutoModel, AutoModelFor<Task>, AutoTokenizer.

`AutoModelForSequenceClassification.from_pretrained(path, num_labels=3)` is bertlite's
BertForSequenceClassification.from_pretrained with every keyword passed on; before
that, config.json's model_type (or, without one, its architectures) is read so a
checkpoint of another model is refused by name instead of failing on its keys.
No torch import here until a model is built, no tokenizers import until a tokenizer is (tested).
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from bertlite.config import (
    BERT_MODEL_TYPES,
    CONFIG_CLASSES,
    CONFIG_NAME,
    FAMILIES,
    BertConfig,
    as_bert_config,
    read_json_object,
)
from bertlite.config.checks import check_encoder
from bertlite.config.families import MODEL_TYPE_ALIASES, family_model_type
from bertlite.hub import pop_hub_kwargs, resolve_file

if TYPE_CHECKING:
    from bertlite.models.bert import BertPreTrainedModel
    from bertlite.tokenization import BertTokenizer

# transformers' architecture name (config.json "architectures") -> the transformers Auto class that
# loads it; bertlite's class of the same name is the model, bertlite's Auto class of the same name
# builds it. `bertlite parity` compares a head through this table.
ARCHITECTURES = {
    "BertModel": "AutoModel",
    "BertForPreTraining": "AutoModelForPreTraining",
    "BertForMaskedLM": "AutoModelForMaskedLM",
    "BertLMHeadModel": "AutoModelForCausalLM",
    "BertForNextSentencePrediction": "AutoModelForNextSentencePrediction",
    "BertForSequenceClassification": "AutoModelForSequenceClassification",
    "BertForMultipleChoice": "AutoModelForMultipleChoice",
    "BertForTokenClassification": "AutoModelForTokenClassification",
    "BertForQuestionAnswering": "AutoModelForQuestionAnswering",
}


# model_type -> the bertlite class of each family's base model.
BASE_MODELS = {model_type: f"{family.prefix}Model" for model_type, family in FAMILIES.items()}


def checkpoint_model_type(
    name_or_path: str | os.PathLike, what: str, model_types: tuple[str, ...], **hub_kwargs: Any
) -> tuple[str, list[str]]:
    """The model_type of a checkpoint's config.json, refused by name when `what` does not load it.

    A missing config.json is left to the loader, whose error names what to check.

    Args:
        name_or_path: a checkpoint folder, a hub id, or a path to config.json itself.
        what: the Auto class's name, for the message.
        model_types: the model_type values `what` loads.
        **hub_kwargs: hub options of bertlite.hub.resolve_file (revision, subfolder, ...).

    Returns:
        (model_type, architectures): "bert" for a config.json without model_type (or none), and the
        config's architectures (maybe empty).

    Raises:
        ValueError: a model_type not in model_types, or no model_type and non-BERT architectures.
    """
    path = name_or_path if os.path.isfile(name_or_path) else resolve_file(name_or_path, CONFIG_NAME, **hub_kwargs)
    if path is None:
        return "bert", []
    data = read_json_object(path)
    architectures = data.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise ValueError(f"{path}: architectures must be a list of class names, got {architectures!r}")
    try:
        check_encoder(data, (*FAMILIES, *MODEL_TYPE_ALIASES))
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    model_type = family_model_type(data)
    if model_type is None:
        others = [a for a in architectures if not a.startswith("Bert")]
        if others:
            raise ValueError(
                f"{path}: no model_type, and architectures={others!r} is not a BERT model; "
                f"bertlite.{what} loads BERT checkpoints only"
            )
        return "bert", architectures
    if model_type not in model_types:
        family = "is not a BERT checkpoint"
        if model_type in BASE_MODELS:
            family = "has its base model in bertlite (bertlite.AutoModel), not this class yet"
        raise ValueError(
            f"{path}: model_type={model_type!r} {family}; bertlite.{what} loads model_type "
            f"{' or '.join(repr(t) for t in model_types)} only"
        )
    return model_type, architectures


def read_model_type(name_or_path: str | os.PathLike, hub_kwargs: dict[str, Any]) -> str:
    """config.json's model_type ("bert" without one, or for a model bertlite does not have: the loader's
    error then names it).

    Args:
        name_or_path: a checkpoint folder or hub id.
        hub_kwargs: hub options; None values are left out.

    Returns:
        The model_type.
    """
    given = {k: v for k, v in hub_kwargs.items() if v is not None}
    try:
        return checkpoint_model_type(name_or_path, "from_pretrained", tuple(BASE_MODELS), **given)[0]
    except ValueError:
        return "bert"


def check_bert_checkpoint(name_or_path: str | os.PathLike, what: str, **hub_kwargs: Any) -> list[str]:
    """Refuse a config.json of another model by name.

    A missing config.json is left to the loader, whose error names what to check.

    Args:
        name_or_path: a checkpoint folder, a hub id, or a path to config.json itself.
        what: the Auto class's name, for the message.
        **hub_kwargs: hub options of bertlite.hub.resolve_file (revision, subfolder, ...).

    Returns:
        The config's architectures (maybe empty; empty without a config.json).

    Raises:
        ValueError: a model_type that is not BERT's, or no model_type and non-BERT architectures.
    """
    return checkpoint_model_type(name_or_path, what, BERT_MODEL_TYPES, **hub_kwargs)[1]


def as_family_config(config: Any) -> BertConfig:
    """A bertlite config of its family for `config`: itself, or one made from another library's config object
    by its model_type (a transformers RobertaConfig becomes a bertlite RobertaConfig).

    Raises:
        TypeError: neither a bertlite config nor an object with to_dict().
        ValueError: its values are not a config bertlite runs (naming the field).
    """
    if isinstance(config, BertConfig):
        return config
    return as_bert_config(config, CONFIG_CLASSES.get(getattr(config, "model_type", "bert"), BertConfig))


class _Auto:
    """Not instantiable, as in transformers: the class methods build the real object."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise OSError(
            f"{type(self).__name__} is built with {type(self).__name__}.from_pretrained(name_or_path) "
            f"or {type(self).__name__}.from_config(config), not directly"
        )


class AutoConfig(_Auto):
    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, **kwargs: Any) -> Any:
        """Load the config of its model_type's family (BertConfig, RobertaConfig, ...), refusing another's by name.

        Args:
            name_or_path: a checkpoint folder, a hub id, or a path to config.json.
            **kwargs: as BertConfig.from_pretrained's (field overrides, hub options).

        Returns:
            <family config>.from_pretrained(name_or_path, **kwargs).

        Raises:
            ValueError: the config is not a model bertlite has.
        """
        model_type, _ = checkpoint_model_type(
            name_or_path, cls.__name__, tuple(BASE_MODELS), **pop_hub_kwargs(dict(kwargs))
        )
        return CONFIG_CLASSES[model_type].from_pretrained(name_or_path, **kwargs)

    @classmethod
    def for_model(cls, model_type: str, **kwargs: Any) -> BertConfig:
        """Build a new config, as transformers' AutoConfig.for_model.

        Args:
            model_type: a key of bertlite.config.CONFIG_CLASSES ("bert", "roberta", "xlm-roberta", "camembert").
            **kwargs: the config's fields.

        Returns:
            The family's config class (**kwargs).

        Raises:
            ValueError: another model_type.
        """
        if model_type not in CONFIG_CLASSES:
            raise ValueError(
                f"model_type={model_type!r} is not a model bertlite has; bertlite.AutoConfig builds "
                f"{', '.join(repr(t) for t in CONFIG_CLASSES)}"
            )
        return CONFIG_CLASSES[model_type](**kwargs)


class _AutoModel(_Auto):
    _model_class = "BertModel"

    @classmethod
    def model_types(cls) -> tuple[str, ...]:
        """The model_type values this Auto class loads: BERT's, and each family that has this head."""
        suffix = cls._model_class.removeprefix("Bert")
        return tuple(t for t, family in FAMILIES.items() if t == "bert" or suffix in family.heads)

    @classmethod
    def model_class(cls, model_type: str = "bert") -> type[BertPreTrainedModel]:
        """The bertlite class this Auto class builds for a model_type (BertForMaskedLM, XLMRobertaForMaskedLM...)."""
        if model_type != "bert":
            family = FAMILIES[model_type]
            module = importlib.import_module(family.module)
            return getattr(module, family.prefix + cls._model_class.removeprefix("Bert"))
        from bertlite.models.heads import MODEL_CLASSES

        return MODEL_CLASSES[cls._model_class]

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, *model_args: Any, **kwargs: Any) -> BertPreTrainedModel:
        """Load the model class of this Auto class, after refusing a checkpoint whose config.json is not BERT's.

        Args:
            name_or_path: a local checkpoint folder or a hub id.
            *model_args: passed on to the class's from_pretrained.
            **kwargs: as BertPreTrainedModel.from_pretrained's (config fields, dtype, device, hub
                options...). With config= (a bertlite.BertConfig), the checkpoint's config.json is not read.

        Returns:
            `<class>.from_pretrained(name_or_path, **kwargs)`.

        Raises:
            ValueError: the checkpoint is not a BERT model's.
            TypeError: config= is not a bertlite.BertConfig.
        """
        config, model_type = kwargs.get("config"), "bert"
        if config is None:
            hub_kwargs = pop_hub_kwargs(dict(kwargs))
            model_type, _ = checkpoint_model_type(name_or_path, cls.__name__, cls.model_types(), **hub_kwargs)
        elif not isinstance(config, (str, os.PathLike)):
            kwargs["config"] = config = as_family_config(config)  # transformers' config objects too
            model_type = config.model_type
        return cls.model_class(model_type).from_pretrained(name_or_path, *model_args, **kwargs)

    @classmethod
    def from_config(
        cls,
        config: BertConfig,
        *,
        dtype: Any = None,
        torch_dtype: Any = None,
        **kwargs: Any,
    ) -> BertPreTrainedModel:
        """Build a new model with transformers' initial weights (no checkpoint read).

        Args:
            config: a bertlite.BertConfig.
            dtype: casts the new model (a torch.dtype or its name); None: float32.
            torch_dtype: dtype's alias.
            **kwargs: go to the constructor (attn_implementation=, add_pooling_layer= for AutoModel).

        Returns:
            The new model.

        Raises:
            TypeError: config is not a bertlite.BertConfig.
        """
        config = as_family_config(config)
        if config.model_type not in cls.model_types():
            raise ValueError(
                f"model_type={config.model_type!r} has its base model in bertlite (bertlite.AutoModel), "
                f"not bertlite.{cls.__name__} yet"
            )
        return cls.model_class(config.model_type).from_config(config, dtype=dtype, torch_dtype=torch_dtype, **kwargs)


class AutoModel(_AutoModel):
    _model_class = "BertModel"


class AutoModelForPreTraining(_AutoModel):
    _model_class = "BertForPreTraining"


class AutoModelForMaskedLM(_AutoModel):
    _model_class = "BertForMaskedLM"


class AutoModelForCausalLM(_AutoModel):
    _model_class = "BertLMHeadModel"


class AutoModelForNextSentencePrediction(_AutoModel):
    _model_class = "BertForNextSentencePrediction"


class AutoModelForSequenceClassification(_AutoModel):
    _model_class = "BertForSequenceClassification"


class AutoModelForMultipleChoice(_AutoModel):
    _model_class = "BertForMultipleChoice"


class AutoModelForTokenClassification(_AutoModel):
    _model_class = "BertForTokenClassification"


class AutoModelForQuestionAnswering(_AutoModel):
    _model_class = "BertForQuestionAnswering"


class AutoTokenizer(_Auto):
    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, *args: Any, **kwargs: Any) -> BertTokenizer:
        """Load transformers' fast BERT tokenizer, without transformers.

        Args:
            name_or_path, *args, **kwargs: as bertlite.BertTokenizer.from_pretrained's.

        Returns:
            bertlite.BertTokenizer.from_pretrained(name_or_path, *args, **kwargs).
        """
        from bertlite.tokenization import BertTokenizer

        return BertTokenizer.from_pretrained(name_or_path, *args, **kwargs)

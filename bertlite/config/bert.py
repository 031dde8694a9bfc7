"""BertConfig: the fields and defaults of transformers' BertConfig, validated.

Importable without torch, so tools can read and check a config cheaply.
"""

from __future__ import annotations

import dataclasses
import json
import os
import weakref
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from bertlite.config.checks import (
    BERT_MODEL_TYPES,
    CONFIG_NAME,
    IGNORED_ATTENTION_KEYS,
    SUPPORTED_ACTIVATIONS,
    SUPPORTED_POSITION_EMBEDDINGS,
    TELEMETRY_KWARGS,
    WEIGHTS_ONLY_FILES,
    check_encoder,
    check_head_fields,
    check_name,
    check_own_code,
    check_ranges,
    check_sizes,
    check_types,
    read_json_object,
)
from bertlite.errors import CheckpointNotFoundError
from bertlite.hub import pop_hub_kwargs, resolve_file
from bertlite.utils.warn import warn_user


@dataclass
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0
    # transformers v5 dropped this field; v4 checkpoints still carry it.
    position_embedding_type: str = "absolute"
    use_cache: bool = True
    classifier_dropout: float | None = None
    is_decoder: bool = False
    add_cross_attention: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    tie_word_embeddings: bool = True
    model_type: str = "bert"
    # Task heads (transformers' PreTrainedConfig fields). The number of labels is
    # len(id2label), as there; num_labels=N makes LABEL_0..LABEL_{N-1}. id2label's
    # keys are ints here and strings in config.json.
    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    problem_type: str | None = None  # None: BertForSequenceClassification infers it from the labels
    num_labels: InitVar[int | None] = None
    # transformers' keyword (config.json may carry it too): becomes `_attn_implementation`, which is no field, so
    # to_dict() and config.json leave it out, as there.
    attn_implementation: InitVar[str | None] = None
    # forward() defaults, as in transformers' PreTrainedConfig.
    output_attentions: bool = False
    output_hidden_states: bool = False
    return_dict: bool = True
    # Keys of a transformers config.json that bertlite does not use (architectures,
    # transformers_version, id2label, ...): kept so to_dict() writes them back.
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    # The model_type values this class reads (a family's config class overrides it).
    model_types: ClassVar[tuple[str, ...]] = BERT_MODEL_TYPES
    # BERT's keys a family lacks: read into extra when config.json carries them, and written back only then.
    not_family_fields: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self, num_labels: int | None, attn_implementation: str | None) -> None:
        if attn_implementation is not None:
            self._attn_implementation = attn_implementation
        check_types(self)
        self._init_labels(num_labels)
        family = "BERT" if type(self) is BertConfig else type(self).__name__.removesuffix("Config")
        check_name(
            self, "model_type", self.model_types, f"is not a {family} config (expected one of {self.model_types})"
        )
        check_sizes(self)
        for name, supported in (
            ("hidden_act", SUPPORTED_ACTIVATIONS),
            ("position_embedding_type", SUPPORTED_POSITION_EMBEDDINGS),
        ):
            check_name(self, name, supported, f"is not implemented (supported: {', '.join(supported)})")
        check_ranges(self)
        check_head_fields(self)

    def _init_labels(self, num_labels: int | None) -> None:
        if self.id2label is None:
            # transformers' default is two labels, even for models without a classifier.
            self.num_labels = 2 if num_labels is None else num_labels
            return
        try:
            self.id2label = {int(key): value for key, value in self.id2label.items()}
        except (TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"id2label must map label ids (ints) to names, got {self.id2label!r}") from e
        if num_labels is not None and num_labels != len(self.id2label):
            # transformers warns and keeps id2label, so a config it loads loads here too.
            warn_user(f"num_labels={num_labels} disagrees with id2label ({len(self.id2label)} labels); using id2label")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def max_sequence_length(self) -> int:
        """The most tokens a sequence can have: the position table's rows (a family that skips some, less those)."""
        return self.max_position_embeddings

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> BertConfig:
        """Build from a transformers-style dict; unknown keys are kept in `extra`.

        Args:
            config_dict: config.json's keys and values.
            **kwargs: keys that override config_dict's, as in transformers.

        Returns:
            The validated config.
        """
        config_dict = {**config_dict, **kwargs}
        check_encoder(config_dict, cls.model_types)
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"} | {"num_labels", "attn_implementation"}
        kwargs = {k: v for k, v in config_dict.items() if k in known}
        extra = {k: v for k, v in config_dict.items() if k not in known and k not in IGNORED_ATTENTION_KEYS}
        if kwargs.get("position_embedding_type") is None:
            kwargs.pop("position_embedding_type", None)
        config = cls(**kwargs, extra=extra)
        config.extra.update({key: config_dict[key] for key in cls.not_family_fields if key in config_dict})
        return config

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> BertConfig:
        data = read_json_object(path)
        try:
            return cls.from_dict(data)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}: {e}") from e

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | os.PathLike, *, return_unused_kwargs: bool = False, **kwargs: Any
    ) -> BertConfig | tuple[BertConfig, dict[str, Any]]:
        """Read config.json from a local folder, a config file or a hub repo, as transformers does.

        kwargs: the hub options of bertlite.hub.resolve_file (revision, cache_dir, token, local_files_only,
        force_download, subfolder), and config fields that override the loaded values (num_labels=3,
        output_hidden_states=True, hidden_dropout_prob=0.0, ...). Any other keyword is a TypeError naming
        it, unless return_unused_kwargs=True: then (config, the keywords it did not use) is returned.
        """
        hub_kwargs = pop_hub_kwargs(kwargs)
        for key in TELEMETRY_KWARGS:
            kwargs.pop(key, None)
        if os.path.isfile(name_or_path):
            path = Path(name_or_path)
        else:
            path = resolve_file(name_or_path, CONFIG_NAME, **hub_kwargs)
        if path is None:
            folder = Path(name_or_path, hub_kwargs.get("subfolder") or "")
            if any((folder / name).is_file() for name in WEIGHTS_ONLY_FILES):
                raise CheckpointNotFoundError(
                    f"{folder}: weights without {CONFIG_NAME} (transformers.Trainer saves a non-transformers "
                    "model so): pass config= (the model's config) to from_pretrained, or write it first with "
                    "model.config.save_pretrained(folder); bertlite.integrations.Trainer saves complete folders"
                )
            raise CheckpointNotFoundError(
                f"{name_or_path}: no {CONFIG_NAME} found; check the folder or repo id, revision= and subfolder= "
                "(a BERT checkpoint has config.json next to its weights)"
            )
        config = cls.from_json_file(path)
        check_own_code(config.extra.get("auto_map"), path)
        unused = config.update_from_kwargs(kwargs)
        if return_unused_kwargs:
            return config, unused
        if unused:
            raise TypeError(
                f"BertConfig.from_pretrained() got unexpected keyword arguments {', '.join(map(repr, unused))} "
                "(neither a config field nor a hub option)"
            )
        return config

    def update_from_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Set the config fields named in kwargs (and keys config.json carried in `extra`), as transformers'
        from_pretrained does; return the other keywords. The result is validated like a new config."""
        names = {f.name for f in dataclasses.fields(self)} - {"extra"}
        fields = {key: value for key, value in kwargs.items() if key in names}
        extra = {key: value for key, value in kwargs.items() if key in self.extra}
        for key in ("dtype", "torch_dtype"):  # transformers' config field; dtype="auto" reads it back
            if kwargs.get(key) not in (None, "auto"):
                extra.pop("torch_dtype", None)
                extra["dtype"] = str(kwargs[key]).removeprefix("torch.")
        num_labels = kwargs.get("num_labels")
        updated = None
        if fields or extra:
            values = {name: getattr(self, name) for name in names}
            if "id2label" in fields and "label2id" not in fields:
                values["label2id"] = None  # derived from the new id2label below, not kept from the old one
            updated = type(self)(**{**values, **fields}, extra={**self.extra, **extra})
            if updated.label2id is None and updated.id2label is not None:
                updated.label2id = {name: i for i, name in updated.id2label.items()}
        attention = [kwargs[key] for key in ("attn_implementation", "_attn_implementation") if key in kwargs]
        if attention:
            self._attn_implementation = attention[-1]  # before the fields change: a bound model checks the name
        if updated is not None:
            self.__dict__.update(updated.__dict__)
        if num_labels is not None:
            self.num_labels = num_labels  # a new LABEL_0..LABEL_{n-1} map unless id2label already has n labels
        if "name_or_path" in kwargs:
            self.name_or_path = kwargs["name_or_path"]
        return {
            key: value
            for key, value in kwargs.items()
            if key not in fields
            and key not in extra
            and key not in ("num_labels", "name_or_path", "dtype", "torch_dtype", "attn_implementation")
            and key not in IGNORED_ATTENTION_KEYS
        }

    # --- transformers' PreTrainedConfig members ---------------------------------------

    is_encoder_decoder = False  # BERT is an encoder (or, with is_decoder, a decoder-only LM)

    @property
    def name_or_path(self) -> str:
        """The folder or hub id the config was loaded from (set by the models' from_pretrained)."""
        return self.__dict__.get("_name_or_path", "")

    @name_or_path.setter
    def name_or_path(self, value: str | os.PathLike) -> None:
        self.__dict__["_name_or_path"] = os.fspath(value)

    @property
    def _attn_implementation(self) -> str | None:
        """The attention implementation, as transformers' code reads it.

        The name the model this config is bound to runs (bind_attention: the last model built from it or
        switched with set_attn_implementation), else the one set here; None until either happens.
        """
        model = _bound_model(self)
        return model.attn_implementation if model is not None else self.__dict__.get("_attn_implementation_internal")

    @_attn_implementation.setter
    def _attn_implementation(self, value: str | None) -> None:
        # transformers' layers read this attribute at every forward; a bound bertlite model switches now instead.
        model = _bound_model(self)
        if model is not None:
            model.set_attn_implementation(value)  # checks the name, and binds (stores it) again
        else:
            self.__dict__["_attn_implementation_internal"] = value  # checked when a model is built, as there

    def __getstate__(self) -> dict[str, Any]:
        # A copy or a pickle keeps the name this config reads, not the weak reference to its model.
        state = {key: value for key, value in self.__dict__.items() if key != "_attn_model"}
        state["_attn_implementation_internal"] = self._attn_implementation
        return state

    def get_text_config(self, decoder: bool | None = None, encoder: bool | None = None) -> BertConfig:
        """The config of the text model: this one (transformers' multimodal configs hold several)."""
        return self

    @property
    def use_return_dict(self) -> bool:
        """transformers' deprecated alias of return_dict."""
        return self.return_dict

    def to_json_string(self, use_diff: bool = True) -> str:
        """config.json's text; use_diff=True leaves out the values equal to a default BertConfig's."""
        data = self.to_diff_dict() if use_diff else self.to_dict()
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    def to_diff_dict(self) -> dict[str, Any]:
        """to_dict() without the values equal to a default config's of its class (model_type is always kept), as
        transformers' to_diff_dict."""
        defaults = type(self)().to_dict()
        return {k: v for k, v in self.to_dict().items() if k == "model_type" or k not in defaults or defaults[k] != v}

    def update(self, config_dict: dict[str, Any]) -> None:
        """Set the attributes named in config_dict, as transformers' update().

        Config fields are validated together, like a new config: on a bad value nothing changes. Other
        keys become config keys (to_dict and config.json hold them), as in transformers.

        Args:
            config_dict: attribute names and values.

        Raises:
            ValueError: a field's new value is invalid (naming it).
        """
        unused = self.update_from_kwargs(dict(config_dict))
        self.extra.update(unused)

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs: Any) -> None:
        """Write config.json into a folder (created if needed), as transformers' save_pretrained.

        Args:
            save_directory: the folder.
            **kwargs: push_to_hub=True is not supported here (save the model with push_to_hub instead).

        Raises:
            ValueError: save_directory is a file.
            NotImplementedError: push_to_hub=True.
        """
        if kwargs.get("push_to_hub"):
            raise NotImplementedError("BertConfig.save_pretrained(push_to_hub=True): push the model with push_to_hub")
        folder = Path(save_directory)
        if folder.is_file():
            raise ValueError(f"{folder} is a file, not a folder")
        folder.mkdir(parents=True, exist_ok=True)
        self.to_json_file(folder / CONFIG_NAME)

    def __getattr__(self, name: str) -> Any:
        # Keys of config.json bertlite does not use (architectures, ...) read as attributes, as in transformers.
        extra = self.__dict__.get("extra")
        if extra is not None and name in extra:
            return extra[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        # As in transformers, an attribute that is no field is a config key: to_dict() and config.json hold it.
        if name.startswith("_") or name in self.__dataclass_fields__ or hasattr(type(self), name):
            object.__setattr__(self, name, value)
        elif "extra" in self.__dict__:
            self.extra[name] = value
        else:
            object.__setattr__(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        out.update(self.extra)
        for key in self.not_family_fields:
            if key not in self.extra:
                out.pop(key, None)
        return dict(sorted(out.items()))

    def to_json_file(self, path: str | os.PathLike) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")


def bind_attention(config: BertConfig, model: Any) -> None:
    """Tie `config._attn_implementation` to `model`, as a transformers model reads its attention from its config.

    The config then reads model.attn_implementation and switches the model with model.set_attn_implementation.
    It stays tied to the last model bound, by a weak reference, so models sharing a config keep their own
    attention (in transformers they would all run the last one set).

    Args:
        config: the model's config.
        model: a bertlite model: attn_implementation and set_attn_implementation.
    """
    config.__dict__["_attn_model"] = weakref.ref(model)
    config.__dict__["_attn_implementation_internal"] = model.attn_implementation


def _bound_model(config: BertConfig) -> Any:
    """The live model bind_attention tied `config` to, or None."""
    ref = config.__dict__.get("_attn_model")
    return None if ref is None else ref()


def as_bert_config(config: Any, config_class: type[BertConfig] | None = None) -> BertConfig:
    """A bertlite BertConfig for `config`: itself, or one made from another library's BERT config object
    (transformers' BertConfig, what its AutoConfig returns) through its to_dict().

    Args:
        config: a bertlite.BertConfig or an object with to_dict().
        config_class: the family's config class (RobertaConfig, ...); None: BertConfig.

    Returns:
        `config` itself when it is a bertlite.BertConfig, else a new one with its values.

    Raises:
        TypeError: `config` is neither.
        ValueError: its values are not a BERT config bertlite runs (naming the field).
    """
    config_class = config_class or BertConfig
    if isinstance(config, config_class):
        return config
    to_dict = getattr(config, "to_dict", None)
    if not callable(to_dict):
        raise TypeError(
            f"config must be a bertlite.BertConfig or a transformers BertConfig, got {type(config).__name__}"
        )
    data = dict(to_dict())
    name_or_path = data.pop("_name_or_path", None)  # transformers' private key, a property here
    # Set before building a model, as transformers' code does; its to_dict() leaves it out.
    data["attn_implementation"] = getattr(config, "_attn_implementation", None)
    converted = config_class.from_dict({key: value for key, value in data.items() if not key.startswith("_")})
    if name_or_path:
        converted.name_or_path = name_or_path
    return converted


def _get_num_labels(self: BertConfig) -> int:
    return len(self.id2label)


def _set_num_labels(self: BertConfig, num_labels: int) -> None:
    if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels <= 0:
        raise ValueError(f"num_labels must be a positive integer, got {num_labels!r}")
    if self.id2label is None or len(self.id2label) != num_labels:
        self.id2label = {i: f"LABEL_{i}" for i in range(num_labels)}
        self.label2id = {name: i for i, name in self.id2label.items()}


# num_labels is a constructor argument (an InitVar) and, like transformers' property,
# always len(id2label) afterwards; it is attached here because a dataclass body
# cannot hold both under one name.
BertConfig.num_labels = property(_get_num_labels, _set_num_labels)  # type: ignore[assignment]
# Likewise a constructor argument only: config.attn_implementation is no attribute, as in transformers.
del BertConfig.attn_implementation

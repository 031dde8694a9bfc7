"""Glue for the two libraries around transformers that need a hand with a bertlite model.

transformers' pipelines and PEFT take a bertlite model as they take a transformers one.
Two flows need something more:

- `Trainer`: transformers.Trainer saves a model that is not a transformers
  PreTrainedModel as a bare state_dict (no config.json, so from_pretrained needs
  config= to reload the folder). This subclass saves a bertlite model with its own
  save_pretrained instead, as transformers.Trainer does for its own models;
  everything else is transformers'.
- `use_bertlite`: a sentence-transformers model whose transformer module runs on
  bertlite (encode, predict, save and reload as before).

Importing this module imports transformers; `import bertlite` does not.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import torch

from bertlite.config import FAMILIES
from bertlite.models.auto import as_family_config
from bertlite.models.bert import DEFAULT_ATTENTION, BertModel, BertPreTrainedModel

try:
    import transformers
except ImportError as error:  # pragma: no cover - the test extra installs it
    raise ImportError(
        "bertlite.integrations needs transformers: pip install transformers (or 'bertlite[test]')"
    ) from error

TRAINING_ARGS_NAME = "training_args.bin"  # transformers.trainer's name for the saved TrainingArguments


class Trainer(transformers.Trainer):
    """transformers.Trainer that saves a bertlite model as a complete folder.

    Checkpoints and save_model() write config.json and model.safetensors through the
    model's save_pretrained (tied weights stored once), so `from_pretrained` of bertlite
    and of transformers both reload them, and load_best_model_at_end reads them back.
    Any other model (a transformers or PEFT one) is saved by transformers' own code.
    """

    def _save(self, output_dir: str | None = None, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
        if not isinstance(model, BertPreTrainedModel):
            super()._save(output_dir, state_dict)
            return
        if not self.args.should_save:
            return
        output_dir = self.args.output_dir if output_dir is None else output_dir
        os.makedirs(output_dir, exist_ok=True)
        # The rest follows transformers.Trainer._save for a PreTrainedModel.
        model.save_pretrained(output_dir, state_dict=state_dict)
        if self.processing_class is not None:
            self.processing_class.save_pretrained(output_dir)
        elif getattr(self.data_collator, "tokenizer", None) is not None:
            self.data_collator.tokenizer.save_pretrained(output_dir)
        torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))


def bertlite_class(name: str) -> type[BertPreTrainedModel] | None:
    """The bertlite class of a transformers class name: BERT's (MODEL_CLASSES) or a family's (FAMILIES: DistilBertModel,
    RobertaForSequenceClassification, ...); None for a class bertlite does not have."""
    from bertlite.models.heads import MODEL_CLASSES

    if name in MODEL_CLASSES:
        return MODEL_CLASSES[name]
    for family in FAMILIES.values():
        if family.prefix != "Bert" and name.startswith(family.prefix) and name[len(family.prefix) :] in family.heads:
            return getattr(importlib.import_module(family.module), name)
    return None


def to_bertlite(model: Any, attn_implementation: str = DEFAULT_ATTENTION) -> BertPreTrainedModel:
    """Build the bertlite twin of a transformers model of BERT's family (BertModel, DistilBertModel, a head).

    Args:
        model: a transformers model whose class bertlite has (bertlite_class).
        attn_implementation: the twin's attention (a name of bertlite.layers.attention's registry).

    Returns:
        The bertlite class of the same name, sharing the loaded tensors (no copy), on their device
        and dtype, in the same train/eval mode.

    Raises:
        TypeError: a class bertlite does not have.
    """
    name = type(model).__name__
    cls = bertlite_class(name)
    if cls is None:
        raise TypeError(f"{name} is not a BERT model class bertlite has (bertlite.BertModel or a Bert* head)")
    from bertlite.checkpoint.load import empty_init

    config = as_family_config(model.config)  # transformers' DistilBertConfig -> bertlite's, ...
    config.name_or_path = getattr(model, "name_or_path", "")  # what PEFT records as the base model
    with empty_init():
        if issubclass(cls, BertModel):  # a base model; transformers' DistilBertModel has no pooler
            pooler = getattr(model, "pooler", None) is not None
            twin = cls(config, add_pooling_layer=pooler, attn_implementation=attn_implementation)
        else:
            twin = cls(config, attn_implementation=attn_implementation)
    state = model.state_dict()
    if set(state) != set(twin.state_dict()):
        # transformers renames the checkpoint's parts (GTE's layers.N.self_attn): its state_dict as it saves it,
        # copied, with the Linears the checkpoint fuses split again as bertlite's load splits them.
        from transformers.core_model_loading import revert_weight_conversion

        from bertlite.checkpoint.plan import split_fused

        prefix = twin.base_model_prefix
        saved = revert_weight_conversion(model, state)
        state = {name: rows for key, tensor in saved.items() for name, rows in split_fused(key, tensor, prefix)}
    twin.load_state_dict(state, strict=True, assign=True)
    twin.tie_weights()
    return twin.train(model.training)


def use_bertlite(model: Any, attn_implementation: str = DEFAULT_ATTENTION) -> Any:
    """Run a sentence-transformers model (SentenceTransformer, CrossEncoder) on bertlite.

    Each Transformer module that holds a transformers model of BERT's family (bertlite_class: BERT, DistilBERT,
    RoBERTa, ...) gets its bertlite twin
    (same weights, same class name), in place; the model is returned. encode, predict and
    save work as before, and a saved folder loads in plain sentence-transformers too:

        model = use_bertlite(SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2"))

    Args:
        model: a sentence-transformers model (its children's `model` attributes are checked).
        attn_implementation: the twins' attention (see to_bertlite).

    Returns:
        `model`, changed in place.

    Raises:
        ValueError: no module holds a transformers BERT model.
    """
    replaced = []
    for name, module in model.named_children():
        inner = getattr(module, "model", None)
        if isinstance(inner, transformers.PreTrainedModel) and bertlite_class(type(inner).__name__) is not None:
            module.model = to_bertlite(inner, attn_implementation)
            replaced.append(name)
    if not replaced:
        kinds = ", ".join(f"{name}: {type(module).__name__}" for name, module in model.named_children())
        raise ValueError(f"no module of this model holds a transformers BERT model to replace ({kinds or 'none'})")
    return model

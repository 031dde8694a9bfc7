"""The forward outputs: transformers' ModelOutput (a dataclass that is also a dict) and every *Output class.

transformers' field names and order, so to_tuple() (return_dict=False) gives the same tuple: loss first
when there is one, then the logits (or hidden states). One module for every family's outputs, as
transformers' modeling_outputs.py.
"""

from __future__ import annotations

import functools
import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


class ModelOutput(OrderedDict):
    """A dataclass that is also a dict, as transformers' ModelOutput: attribute, key and index access,
    where keys and positions skip the fields that are None (so `out[1]` is the pooler output whether or
    not hidden states were asked for). Subclasses are @dataclass with every field defaulting to None.

    Once the program has imported transformers, each output is also an instance of transformers'
    ModelOutput (a subclass of the class named here with it as a second base): transformers' pipelines
    keep positional access only for those and turn any other dict into a plain one. bertlite itself
    never imports transformers.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> ModelOutput:
        if not torch.compiler.is_compiling():  # a graph records the class bertlite defines
            base = getattr(sys.modules.get(TRANSFORMERS_OUTPUTS_MODULE), "ModelOutput", None)
            if base is not None and not issubclass(cls, base):
                cls = _with_transformers_base(cls, base)
        return super().__new__(cls)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Not transformers' __init_subclass__ (a base of the classes _with_transformers_base makes): it would
        # register them as pytree nodes of its own, whose unflatten drops keys added after construction.
        OrderedDict.__init_subclass__(**kwargs)
        suffix = " (transformers)" if "_bertlite_class" in cls.__dict__ else ""
        # A pytree node, so torch.export, torch.compile and DDP(static_graph=True) see the tensors inside.
        torch.utils._pytree.register_pytree_node(
            cls,
            lambda out: (list(out.values()), list(out.keys())),
            lambda values, keys: cls._from_items(keys, values),
            serialized_type_name=f"{cls.__module__}.{cls.__qualname__}{suffix}",
        )

    @classmethod
    def _from_items(cls, keys: list[str], values: list[Any]) -> ModelOutput:
        out = cls()
        for key, value in zip(keys, values, strict=True):  # in their order, added ones (out["x"] = ...) included
            out[key] = value
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        # By the class bertlite defines (the one with transformers' base has no importable name); loading
        # picks the class as __new__ does then.
        plain = type(self).__dict__.get("_bertlite_class", type(self))
        return plain._from_items, (list(self.keys()), list(self.values()))

    def __setattr__(self, name: str, value: Any) -> None:
        # The dataclass __init__ sets each field through here: non-None fields become keys, in field order.
        if name in self.__dataclass_fields__ and value is not None:
            OrderedDict.__setitem__(self, name, value)
        object.__setattr__(self, name, value)

    def __setitem__(self, key: str, value: Any) -> None:
        OrderedDict.__setitem__(self, key, value)
        object.__setattr__(self, key, value)

    def __getitem__(self, key: str | int | slice) -> Any:
        if isinstance(key, str):
            return OrderedDict.__getitem__(self, key)
        return self.to_tuple()[key]

    def to_tuple(self) -> tuple[Any, ...]:
        """The values that are not None, in field order: what return_dict=False returns."""
        return tuple(self.values())

    def _immutable(self, *args: Any, **kwargs: Any) -> None:
        # Removing a key would leave the attribute behind (and the reverse): transformers forbids it too.
        raise TypeError(f"{type(self).__name__} does not support removing or bulk-updating keys")

    __delitem__ = pop = popitem = setdefault = update = clear = _immutable


# Where transformers defines its ModelOutput; looked up in sys.modules only, never imported.
TRANSFORMERS_OUTPUTS_MODULE = "transformers.utils.generic"


@functools.cache
def _with_transformers_base(cls: type[ModelOutput], base: type) -> type[ModelOutput]:
    """`cls` with transformers' ModelOutput as a second base: the same name, fields and methods (cls's
    come first), and an instance of transformers' class for the code that checks."""
    namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "_bertlite_class": cls}
    return type(cls.__name__, (cls, base), namespace)


@dataclass
class BaseModelOutputWithPooling(ModelOutput):
    last_hidden_state: Tensor | None = None
    pooler_output: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None  # embedding output, then one per layer
    attentions: tuple[Tensor, ...] | None = None  # (B, nh, T, T) per layer


@dataclass
class BertForPreTrainingOutput(ModelOutput):
    loss: Tensor | None = None  # masked-LM + next-sentence loss, when both label sets are given
    prediction_logits: Tensor | None = None  # (B, T, vocab)
    seq_relationship_logits: Tensor | None = None  # (B, 2)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class ElectraForPreTrainingOutput(ModelOutput):
    loss: Tensor | None = None  # replaced-token detection loss over the real tokens, when labels are given
    logits: Tensor | None = None  # (B, T): a token was replaced where > 0
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class _LogitsOutput(ModelOutput):
    loss: Tensor | None = None
    logits: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class MaskedLMOutput(_LogitsOutput):
    """logits: (B, T, vocab)."""


@dataclass
class CausalLMOutput(_LogitsOutput):
    """logits: (B, T, vocab); loss: next-token cross-entropy."""


@dataclass
class NextSentencePredictorOutput(_LogitsOutput):
    """logits: (B, 2); index 0 means sentence B follows sentence A."""


@dataclass
class SequenceClassifierOutput(_LogitsOutput):
    """logits: (B, num_labels)."""


@dataclass
class MultipleChoiceModelOutput(_LogitsOutput):
    """logits: (B, num_choices)."""


@dataclass
class TokenClassifierOutput(_LogitsOutput):
    """logits: (B, T, num_labels)."""


@dataclass
class QuestionAnsweringModelOutput(ModelOutput):
    loss: Tensor | None = None  # mean of the start and end losses
    start_logits: Tensor | None = None  # (B, T)
    end_logits: Tensor | None = None  # (B, T)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None

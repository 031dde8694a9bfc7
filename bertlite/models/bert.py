"""BERT as a module tree whose names and state_dict keys are transformers'.

Attribute names follow transformers/models/bert/modeling_bert.py so a Hugging Face
state_dict loads key for key. The eager attention keeps transformers' op order,
so in float32 it is bitwise equal to transformers' eager attention.
"""

from __future__ import annotations

import copy
import functools
import os
import sys
from collections import OrderedDict
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.graph import save_on_cpu
from torch.utils.checkpoint import checkpoint

from bertlite.checkpoint import save as checkpoint_save
from bertlite.config import BertConfig, as_bert_config, bind_attention
from bertlite.layers import onednn
from bertlite.layers.activations import ACT2FN
from bertlite.layers.attention import (
    DEFAULT_ATTENTION,
    PACKED_ATTENTION,
    check_attn_implementation,
    packed_first_token_attention,
    padded_attention,
)
from bertlite.layers.packing import PackedLayout
from bertlite.models.inputs import check_first_token_of, check_inputs, check_packed_inputs, recording_graph

# Relative position embeddings (transformers 4.x's position_embedding_type values).
RELATIVE_POSITION_EMBEDDINGS = ("relative_key", "relative_key_query")
# transformers' dummy_inputs ids (utils.DUMMY_INPUTS).
DUMMY_INPUTS = [[7, 6, 0, 0, 1], [1, 2, 3, 0, 0], [0, 0, 0, 4, 5]]


def supports_packed(config: BertConfig) -> bool:
    """Whether the layers can run this model on a packed batch.

    They know only padding masks and absolute positions: relative positions need each sequence's (T, T)
    distance grid, a decoder a causal mask. BertModel runs the others padded and re-packs the result.

    Args:
        config: the model's config.

    Returns:
        True for absolute positions in an encoder.
    """
    return config.position_embedding_type == "absolute" and not config.is_decoder


# --- forward keywords ----------------------------------------------------------
# transformers' forward takes any keyword (into **kwargs) and ignores those it has no use for; bertlite
# ignores only the ones that cannot change a result and names any other, so a typo is not silently dropped.
# Keys of a tokenizer's output that are not model inputs (`model(**tokenizer(...))` passes them), and the
# Trainer's token count, which only a causal-LM loss uses (BertLMHeadModel reads it).
IGNORED_FORWARD_KWARGS = frozenset(
    {
        "special_tokens_mask",
        "length",
        "offset_mapping",
        "overflow_to_sample_mapping",
        "num_truncated_tokens",
        "num_items_in_batch",
    }
)
# Accepted as None (transformers v4 and v5 callers pass them so); any other value would change the result.
NONE_ONLY_FORWARD_KWARGS = {
    "head_mask": "head_mask was removed in transformers v5 and is not supported; zero a head's slice of "
    "attention.self.value.weight and .bias for the same effect",
    "cross_attn_head_mask": "head masks were removed in transformers v5 and are not supported",
    "encoder_hidden_states": "encoder_hidden_states (cross-attention) is not supported by bertlite",
    "encoder_attention_mask": "encoder_attention_mask (cross-attention) is not supported by bertlite",
    "past_key_values": "past_key_values (a KV cache) is not supported by bertlite",
    "cache": "cache (a KV cache) is not supported by bertlite",
    "is_causal": "is_causal is not supported by bertlite; set config.is_decoder instead",
}


def check_forward_kwargs(owner: str, kwargs: dict[str, Any]) -> None:
    """Raise for a keyword `owner`.forward() cannot honour; the rest are ignored, as transformers ignores them.

    Args:
        owner: the class name, for the message.
        kwargs: forward()'s extra keywords.

    Raises:
        NotImplementedError: a keyword accepted only as None (head_mask, past_key_values...) given a value.
        TypeError: a keyword transformers' forward would not ignore either.
    """
    for name, value in kwargs.items():
        if name in IGNORED_FORWARD_KWARGS:
            continue
        if name in NONE_ONLY_FORWARD_KWARGS:
            if value is not None:
                raise NotImplementedError(f"{owner}.forward(): {NONE_ONLY_FORWARD_KWARGS[name]} (pass None)")
            continue
        raise TypeError(f"{owner}.forward() got an unexpected keyword argument {name!r}")


# --- outputs -----------------------------------------------------------------


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


# --- modules -----------------------------------------------------------------


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # With relative positions the table exists (checkpoints carry it) but is not added, as in transformers 4.x.
        self.position_embedding_type = config.position_embedding_type
        # transformers keeps position_ids/token_type_ids as non-persistent buffers;
        # they are made on the fly here so a meta-device build has nothing to re-fill.

    def forward(
        self,
        input_ids: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
    ) -> Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        seq_length, device = inputs_embeds.shape[1], inputs_embeds.device
        if position_ids is None:
            position_ids = torch.arange(seq_length, device=device).unsqueeze(0)  # (1, T)
        if token_type_ids is None:
            token_type_ids = torch.zeros(1, seq_length, dtype=torch.long, device=device)
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids)
        if self.position_embedding_type == "absolute":
            embeddings = embeddings + self.position_embeddings(position_ids)
        embeddings = self.LayerNorm(embeddings)
        return self.dropout(embeddings)


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.head_dim
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.scaling = self.attention_head_size**-0.5
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        # A module giving query|key|value in one call, installed by a module swap (layers.onednn.optimize
        # reads the three Linears above; quant.int8 replaces them); None: the three Linears, one by one.
        self.qkv: nn.Module | None = None
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.attn_implementation = check_attn_implementation(attn_implementation)
        self.position_embedding_type = config.position_embedding_type
        if self.position_embedding_type in RELATIVE_POSITION_EMBEDDINGS:
            # One vector per signed distance -(P-1)..P-1 between query and key (Shaw et al. 2018).
            self.max_position_embeddings = config.max_position_embeddings
            self.distance_embedding = nn.Embedding(2 * config.max_position_embeddings - 1, self.attention_head_size)

    def forward(
        self,
        hidden_states: Tensor,
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """hidden_states: (B, T, H) with an additive attention_bias, or packed (N, H) rows with their layout;
        first_token_of (packed): only these sequences' first-token queries, (R, H) context."""
        # Probabilities exist only on the eager path, so asking for them selects it.
        name = "eager" if output_attentions else self.attn_implementation
        dropout_p = self.dropout.p if self.training else 0.0
        if layout is not None:
            if self.position_embedding_type in RELATIVE_POSITION_EMBEDDINGS:
                raise ValueError("relative position embeddings need a padded batch (BertModel pads such models)")
            qkv = self.packed_qkv(hidden_states)  # (N, 3H)
            if first_token_of is not None:
                heads = self.num_attention_heads
                return packed_first_token_attention(qkv, layout, first_token_of, heads, self.scaling, dropout_p), None
            return PACKED_ATTENTION[name](qkv, layout, self.num_attention_heads, self.scaling, dropout_p)
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.attention_head_size)
        if self.qkv is None:
            projections = (self.query(hidden_states), self.key(hidden_states), self.value(hidden_states))
        else:
            projections = self.qkv(hidden_states).split(self.all_head_size, dim=-1)
        query, key, value = (p.view(hidden_shape).transpose(1, 2) for p in projections)  # (B, nh, T, hs)
        position_scores = self.relative_position_scores(query, key)
        context, probs = padded_attention(name)(
            query, key, value, attention_bias, self.scaling, dropout_p, position_scores
        )
        context = context.reshape(*input_shape, -1).contiguous()  # (B, T, H)
        return context, probs

    def packed_qkv(self, hidden_states: Tensor) -> Tensor:
        """query|key|value of every row, (N, 3H)."""
        if self.qkv is not None:
            return self.qkv(hidden_states)
        return torch.cat([self.query(hidden_states), self.key(hidden_states), self.value(hidden_states)], dim=-1)

    def relative_position_scores(self, query: Tensor, key: Tensor) -> tuple[Tensor, ...]:
        """The unscaled relative-position terms of the attention scores, as transformers 4.x computed
        them: query . d(l - r) for relative_key, plus key . d(l - r) for relative_key_query. Empty
        for absolute positions. The distance is l - r whatever position_ids say, as in 4.x."""
        if self.position_embedding_type not in RELATIVE_POSITION_EMBEDDINGS:
            return ()
        query_length, key_length = query.shape[2], key.shape[2]
        positions_l = torch.arange(query_length, dtype=torch.long, device=query.device).view(-1, 1)
        positions_r = torch.arange(key_length, dtype=torch.long, device=query.device).view(1, -1)
        distance = positions_l - positions_r  # (T, T)
        positional = self.distance_embedding(distance + self.max_position_embeddings - 1)  # (T, T, hs)
        positional = positional.to(dtype=query.dtype)  # a half-precision model with a float32 table
        scores = (torch.einsum("bhld,lrd->bhlr", query, positional),)  # (B, nh, T, T)
        if self.position_embedding_type == "relative_key_query":
            scores += (torch.einsum("bhrd,lrd->bhlr", key, positional),)
        return scores


class _DenseAddNorm(nn.Module):
    """LayerNorm(dropout(dense(x)) + residual): the two places a layer writes back to the residual stream."""

    def __init__(self, in_features: int, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # Set by the module swap that installs a dense taking forward(x, residual=) (layers.onednn.optimize,
        # quant.int8.quantize_int8): the residual is added inside its GEMM. Inference only: no dropout runs.
        self.fuses_residual = False

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        if self.fuses_residual and not self.training:
            return self.LayerNorm(self.dense(hidden_states, residual=input_tensor))
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertSelfOutput(_DenseAddNorm):
    def __init__(self, config: BertConfig) -> None:
        super().__init__(config.hidden_size, config)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.self = BertSelfAttention(config, attn_implementation)
        self.output = BertSelfOutput(config)

    def forward(
        self,
        hidden_states: Tensor,
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        context, probs = self.self(hidden_states, attention_bias, output_attentions, layout, first_token_of)
        if first_token_of is not None:
            hidden_states = hidden_states[layout.starts[first_token_of]]  # the residual of the rows kept
        return self.output(context, hidden_states), probs


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.hidden_act = config.hidden_act  # by name too, for the module swap that fuses it into the GEMM
        self.intermediate_act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(_DenseAddNorm):
    def __init__(self, config: BertConfig) -> None:
        super().__init__(config.intermediate_size, config)


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.attention = BertAttention(config, attn_implementation)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(
        self,
        hidden_states: Tensor,
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        attention_output, probs = self.attention(
            hidden_states, attention_bias, output_attentions, layout, first_token_of
        )
        layer_output = self.output(self.intermediate(attention_output), attention_output)
        return layer_output, probs


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(config, attn_implementation) for _ in range(config.num_hidden_layers)])
        # Set by BertPreTrainedModel.gradient_checkpointing_enable(), as in transformers.
        self.gradient_checkpointing = False
        self.checkpoint_kwargs: dict[str, Any] = {"use_reentrant": False}
        self.checkpoint_every_n_layers = 1  # layer i is recomputed when i % n == 0
        self.checkpoint_offload = False  # keep the saved layer inputs in host memory

    def forward(
        self,
        hidden_states: Tensor,
        attention_bias: Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
    ) -> tuple[Tensor, tuple[Tensor, ...] | None, tuple[Tensor, ...] | None]:
        """first_token_of (packed): the last layer computes only these sequences' first-token rows."""
        all_hidden_states = [hidden_states] if output_hidden_states else None
        all_attentions = [] if output_attentions else None
        last = len(self.layer) - 1
        for i, layer_module in enumerate(self.layer):
            rows = first_token_of if i == last else None
            if self.gradient_checkpointing and self.training and i % self.checkpoint_every_n_layers == 0:
                # Keep only each layer's input; backward re-runs the layer (with the same dropout masks).
                with save_on_cpu(pin_memory=torch.cuda.is_available()) if self.checkpoint_offload else nullcontext():
                    hidden_states, probs = checkpoint(
                        layer_module,
                        hidden_states,
                        attention_bias,
                        output_attentions,
                        layout,
                        rows,
                        **self.checkpoint_kwargs,
                    )
            else:
                hidden_states, probs = layer_module(hidden_states, attention_bias, output_attentions, layout, rows)
            if all_hidden_states is not None:
                all_hidden_states.append(hidden_states)
            if all_attentions is not None:
                all_attentions.append(probs)
        return (
            hidden_states,
            tuple(all_hidden_states) if all_hidden_states is not None else None,
            tuple(all_attentions) if all_attentions is not None else None,
        )


class BertPooler(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: Tensor, layout: PackedLayout | None = None) -> Tensor:
        first = hidden_states[:, 0] if layout is None else hidden_states[layout.starts]  # the [CLS] token
        return self.activation(self.dense(first))


# --- models ------------------------------------------------------------------


class BertPreTrainedModel(nn.Module):
    """The base of every bertlite model: transformers' PreTrainedModel members, loading and saving."""

    base_model_prefix = "bert"

    def __init__(self, config: BertConfig) -> None:
        """Keep the config; subclasses build the modules.

        Args:
            config: a bertlite.BertConfig, or a transformers BertConfig (its values are copied into a
                bertlite one); add_cross_attention is not supported.

        Raises:
            TypeError: `config` is neither.
            ValueError: config.add_cross_attention is set, or a value bertlite does not run.
        """
        super().__init__()
        config = as_bert_config(config)
        if config.add_cross_attention:
            raise ValueError("add_cross_attention=True (BERT as a seq2seq decoder) is not supported by bertlite")
        self.config = config
        # The folder or hub id from_pretrained loaded, "" for a new model: an instance attribute, as in
        # transformers, because PEFT reads model.__dict__["name_or_path"] for base_model_name_or_path.
        self.name_or_path = config.name_or_path

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> BertPreTrainedModel:
        # Layers that cannot move (int8's Int8Linear) refuse before anything moves, so a refused
        # .to() leaves the whole model where it was, not half on the new device.
        for module in self.modules():
            check = getattr(module, "check_apply", None)
            if module is not self and check is not None:
                check(fn)
        return super()._apply(fn, recurse)

    # transformers' class attributes that libraries read (Trainer, pipeline, PEFT).
    config_class = BertConfig
    main_input_name = "input_ids"
    input_modalities = "text"
    supports_gradient_checkpointing = True
    _keys_to_ignore_on_save: list[str] | None = None

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | os.PathLike, *, config: BertConfig | str | os.PathLike | None = None, **kwargs: Any
    ) -> BertPreTrainedModel:
        """Load a checkpoint from a folder or hub id, with transformers' keywords.

        Args:
            name_or_path: a local checkpoint folder or a hub id.
            config: a BertConfig used as given, or a path to load one from; None: the checkpoint's.
            **kwargs: config fields override the loaded config (num_labels=3, output_hidden_states=True,
                ...), dtype/torch_dtype, device/device_map, strict, attn_implementation,
                ignore_mismatched_sizes, allow_nonfinite, output_loading_info, the hub options (revision,
                cache_dir, token, ...), constructor arguments; see bertlite.checkpoint.load.from_pretrained.

        Returns:
            The model in eval mode; with output_loading_info=True, (model, loading_info).

        Raises:
            CheckpointError: the checkpoint is missing, corrupt or does not fit the model.
        """
        from bertlite.checkpoint.load import from_pretrained

        return from_pretrained(cls, name_or_path, config=config, **kwargs)

    @classmethod
    def from_config(cls, config: BertConfig, **kwargs: Any) -> BertPreTrainedModel:
        """Build a freshly initialised model, as transformers' from_config.

        Args:
            config: the config; the model gets a copy of it.
            **kwargs: dtype= (or torch_dtype=) casts the model (a torch.dtype or its name, not "auto");
                other keywords go to the constructor.

        Returns:
            The new model.
        """
        from bertlite.utils.dtypes import parse_dtype

        dtype, torch_dtype = kwargs.pop("dtype", None), kwargs.pop("torch_dtype", None)
        target = parse_dtype(dtype if dtype is not None else torch_dtype)
        if target == "auto":
            raise ValueError("dtype='auto' needs a checkpoint to read; from_config takes a torch.dtype or its name")
        model = cls(copy.deepcopy(as_bert_config(config)), **kwargs)
        return model.to(target) if target is not None else model

    _from_config = from_config  # the name transformers' own code calls

    # Checkpoint writing lives in checkpoint.save; these are its functions, as methods.
    save_pretrained = checkpoint_save.save_pretrained
    push_to_hub = checkpoint_save.push_to_hub

    # --- transformers' PreTrainedModel members ------------------------------------

    @property
    def device(self) -> torch.device:
        """The device of the first parameter (all are on one device)."""
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the first floating-point parameter."""
        return next(p.dtype for p in self.parameters() if p.is_floating_point())

    @property
    def base_model(self) -> nn.Module:
        """The BertModel inside a head class (its `bert` attribute), or the model itself."""
        return getattr(self, self.base_model_prefix, self)

    @classmethod
    def can_generate(cls) -> bool:
        """Whether the model has generate(): never, in bertlite."""
        # False for every class, BertLMHeadModel included (transformers says True there): bertlite has no generate().
        return False

    @property
    def dummy_inputs(self) -> dict[str, Tensor]:
        """A small batch of input_ids on the model's device, as transformers' dummy_inputs."""
        return {"input_ids": torch.tensor(DUMMY_INPUTS, device=self.device)}

    def get_output_embeddings(self) -> nn.Module | None:
        """The language-model decoder, for the heads that have one; None here."""
        return None  # the language-model heads return their decoder

    def num_parameters(self, only_trainable: bool = False, exclude_embeddings: bool = False) -> int:
        """Count the parameters once each (a tied decoder is the embedding matrix), as transformers does.

        Args:
            only_trainable: count only those with requires_grad.
            exclude_embeddings: leave out the nn.Embedding weights.

        Returns:
            The number of parameters.
        """
        embeddings = {f"{name}.weight" for name, m in self.named_modules() if isinstance(m, nn.Embedding)}
        return sum(
            p.numel()
            for name, p in self.named_parameters()
            if (p.requires_grad or not only_trainable) and not (exclude_embeddings and name in embeddings)
        )

    def get_memory_footprint(self, return_buffers: bool = True) -> int:
        """Bytes held by the parameters (and buffers).

        Args:
            return_buffers: count the buffers too (default True).

        Returns:
            The size in bytes.
        """
        tensors = [*self.parameters(), *(self.buffers() if return_buffers else ())]
        return sum(t.nelement() * t.element_size() for t in tensors)

    def enable_input_require_grads(self) -> None:
        """Make the input embeddings' output require grad, so adapters (LoRA) on a frozen model, and
        reentrant gradient checkpointing, still get gradients."""
        self.disable_input_require_grads()
        self._require_grads_hook = self.get_input_embeddings().register_forward_hook(
            lambda module, inputs, output: output.requires_grad_(True)
        )

    def disable_input_require_grads(self) -> None:
        """Undo enable_input_require_grads()."""
        hook = self.__dict__.pop("_require_grads_hook", None)
        if hook is not None:
            hook.remove()

    def post_init(self) -> None:
        """Initialise the weights (transformers' scheme) and tie the tied pairs; the constructors call it."""
        self.init_weights()
        self.tie_weights()

    def get_extended_attention_mask(self, *args: Any, **kwargs: Any) -> None:
        """Removed in transformers v5: pass attention_mask to forward.

        Raises:
            NotImplementedError: always, saying what to use instead.
        """
        raise NotImplementedError(
            "get_extended_attention_mask was removed in transformers v5; pass attention_mask (batch, seq_len) "
            "to forward, which builds the mask (bertlite's additive form: BertModel.get_attention_bias)"
        )

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """Grow or shrink the vocabulary, as transformers does.

        Kept rows are unchanged. An untied decoder is resized the same way; a tied one follows the
        embedding and its bias is padded with zeros. Updates config.vocab_size.

        Args:
            new_num_tokens: the new vocabulary size; None with pad_to_multiple_of None changes nothing.
            pad_to_multiple_of: round the size up to a multiple of this; None: no rounding.
            mean_resizing: new rows are drawn around the old rows' mean and covariance; False: initialised
                as new weights.

        Returns:
            The input embeddings (the same module, resized).

        Raises:
            ValueError: a size or multiple that is not a positive integer.
        """
        embeddings = self.get_input_embeddings()
        if new_num_tokens is None and pad_to_multiple_of is None:
            return embeddings
        if pad_to_multiple_of is not None:
            if (
                isinstance(pad_to_multiple_of, bool)
                or not isinstance(pad_to_multiple_of, int)
                or pad_to_multiple_of < 1
            ):
                raise ValueError(f"pad_to_multiple_of must be a positive integer, got {pad_to_multiple_of!r}")
            new_num_tokens = embeddings.num_embeddings if new_num_tokens is None else new_num_tokens
            new_num_tokens = -(-new_num_tokens // pad_to_multiple_of) * pad_to_multiple_of
        if isinstance(new_num_tokens, bool) or not isinstance(new_num_tokens, int) or new_num_tokens < 1:
            raise ValueError(f"new_num_tokens must be a positive integer, got {new_num_tokens!r}")
        decoder = self.get_output_embeddings()
        tied = decoder is not None and decoder.weight is embeddings.weight
        self._resize_rows(embeddings, new_num_tokens, mean_resizing)
        if decoder is not None and tied:
            decoder.out_features = new_num_tokens
            if decoder.bias is not None:
                padding = new_num_tokens - decoder.bias.shape[0]
                decoder.bias.data = F.pad(decoder.bias.data, (0, padding))
        elif decoder is not None:
            self.set_output_embeddings(self._resized_decoder(decoder, new_num_tokens, mean_resizing))
        self.config.vocab_size = new_num_tokens
        self.tie_weights()
        return self.get_input_embeddings()

    def _resize_rows(self, old: nn.Embedding, num_tokens: int, mean_resizing: bool) -> None:
        """Resize an embedding in place (same module and Parameter, so references and ties hold)."""
        old_num_tokens = old.weight.shape[0]
        if old_num_tokens == num_tokens:
            return
        new = nn.Embedding(num_tokens, old.embedding_dim, device=old.weight.device, dtype=old.weight.dtype)
        self._init_new_rows(old.weight, new.weight, mean_resizing, new)
        kept = min(old_num_tokens, num_tokens)
        new.weight.data[:kept] = old.weight.data[:kept]
        old.weight.data = new.weight.data
        old.num_embeddings = num_tokens
        if old.padding_idx is not None and old.padding_idx >= num_tokens:
            old.padding_idx = None

    def _resized_decoder(self, old: nn.Linear, num_tokens: int, mean_resizing: bool) -> nn.Linear:
        old_num_tokens = old.weight.shape[0]
        if old_num_tokens == num_tokens:
            return old
        has_bias = old.bias is not None
        new = nn.Linear(old.in_features, num_tokens, bias=has_bias, device=old.weight.device, dtype=old.weight.dtype)
        self._init_new_rows(old.weight, new.weight, mean_resizing, new)
        if has_bias and mean_resizing and num_tokens > old_num_tokens:
            # Around the old biases' mean, with a negligible spread.
            mean = torch.mean(old.bias.data, dim=0, dtype=torch.float32)
            std = torch.std(old.bias.data, dim=0).to(torch.float32)
            new.bias.data[old_num_tokens:].normal_(mean=mean, std=1e-9 * std)
        kept = min(old_num_tokens, num_tokens)
        new.weight.data[:kept] = old.weight.data[:kept]
        if has_bias:
            new.bias.data[:kept] = old.bias.data[:kept]
        new.requires_grad_(old.weight.requires_grad)
        return new

    @torch.no_grad()
    def _init_new_rows(self, old: Tensor, new: Tensor, mean_resizing: bool, module: nn.Module) -> None:
        added = new.shape[0] - old.shape[0]
        if added <= 0:
            return
        if not mean_resizing:
            self._init_weights(module)
            return
        # Hewitt (2021): new rows from a normal around the old rows' mean, with a tiny multiple of their
        # covariance, so the new tokens start with the average token's logits.
        rows = old.to(torch.float32)
        mean = rows.mean(dim=0)
        centered = rows - mean
        covariance = 1e-9 * (centered.T @ centered / old.shape[0])
        if torch.distributions.constraints.positive_definite.check(covariance).all():
            sample = torch.distributions.MultivariateNormal(mean, covariance_matrix=covariance).sample((added,))
        else:
            sample = mean[None, :].repeat(added, 1)
        new[-added:] = sample.to(old.dtype)

    # target -> source: parameters that are one tensor when config.tie_word_embeddings
    # (transformers' _tied_weights_keys); the language-model heads set it.
    _tied_weights_keys: dict[str, str] = {}

    def tied_weights_keys(self) -> dict[str, str]:
        """The tied pairs in effect: none unless config.tie_word_embeddings, as in transformers.

        Returns:
            target key -> source key.
        """
        return dict(self._tied_weights_keys) if self.config.tie_word_embeddings else {}

    def state_dict(
        self, *args: Any, destination: dict[str, Any] | None = None, prefix: str = "", keep_vars: bool = False
    ) -> dict[str, Any]:
        """torch's state_dict, with transformers' keys; a tied weight's second key holds a copy.

        safetensors.torch.save_file refuses two keys on one tensor, and transformers.Trainer saves a model
        that is not its own PreTrainedModel that way: with the copy its checkpoints write (and reload)
        instead of crashing. keep_vars=True returns the Parameters themselves, tie included.

        Args:
            *args, destination, prefix, keep_vars: as torch.nn.Module.state_dict.

        Returns:
            The state dict.
        """
        state = super().state_dict(*args, destination=destination, prefix=prefix, keep_vars=keep_vars)
        if not keep_vars:
            for target, source in self.tied_weights_keys().items():
                target, source = prefix + target, prefix + source
                if target in state and source in state and state[target].data_ptr() == state[source].data_ptr():
                    state[target] = state[target].clone()
        return state

    def tie_weights(self, pairs: dict[str, str] | None = None) -> None:
        """Make each target the very Parameter of its source.

        Args:
            pairs: target key -> source key; None: all the tied pairs in effect (tied_weights_keys()).
        """
        for target, source in (self.tied_weights_keys() if pairs is None else pairs).items():
            module_name, _, name = target.rpartition(".")
            setattr(self.get_submodule(module_name), name, self.get_parameter(source))

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # transformers' scheme, so a from-scratch model starts from the same distribution.
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            module.weight.normal_(mean=0.0, std=std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(mean=0.0, std=std)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()

    def init_weights(self) -> None:
        """Initialise every module's weights with transformers' scheme (nothing on the meta device)."""
        # Nothing to fill on the meta device (from_pretrained assigns real tensors
        # next), and skipping it avoids torch's slow first use of meta kernels.
        if any(not p.is_meta for p in self.parameters()):
            self.apply(self._init_weights)

    def gradient_checkpointing_enable(
        self,
        gradient_checkpointing_kwargs: dict[str, Any] | None = None,
        every_n_layers: int = 1,
        offload: bool = False,
    ) -> None:
        """Trade compute for memory in training, as transformers' method of the same name does.

        Each layer's activations are recomputed in backward instead of kept (about one more forward
        per step). Gradients are unchanged. Has no effect in eval mode.

        Args:
            gradient_checkpointing_kwargs: go to torch.utils.checkpoint.checkpoint (default
                use_reentrant=False).
            every_n_layers: recompute only layers 0, n, 2n, ... (default 1: every layer). As in
                transformers v5, whose Trainer passes it.
            offload: hold the layer inputs kept for the recompute in host memory
                (torch.autograd.graph.save_on_cpu). As in transformers v5.

        Raises:
            ValueError: every_n_layers is not an int >= 1.
        """
        if isinstance(every_n_layers, bool) or not isinstance(every_n_layers, int) or every_n_layers < 1:
            raise ValueError(f"every_n_layers must be an int >= 1, got {every_n_layers!r}")
        kwargs = {"use_reentrant": False, **(gradient_checkpointing_kwargs or {})}
        for module in self.modules():
            if isinstance(module, BertEncoder):
                module.gradient_checkpointing = True
                module.checkpoint_kwargs = kwargs
                module.checkpoint_every_n_layers = every_n_layers
                module.checkpoint_offload = offload

    def gradient_checkpointing_disable(self) -> None:
        """Keep every layer's activations again (undo gradient_checkpointing_enable)."""
        for module in self.modules():
            if isinstance(module, BertEncoder):
                module.gradient_checkpointing = False

    @property
    def is_gradient_checkpointing(self) -> bool:
        """Whether gradient checkpointing is on."""
        return any(isinstance(m, BertEncoder) and m.gradient_checkpointing for m in self.modules())

    # transformers v5's names for the three above (v5 keeps the old ones as deprecated aliases).
    def activation_checkpointing_enable(
        self,
        activation_checkpointing_kwargs: dict[str, Any] | None = None,
        every_n_layers: int = 1,
        offload: bool = False,
    ) -> None:
        """gradient_checkpointing_enable() under transformers v5's name; the same arguments."""
        self.gradient_checkpointing_enable(activation_checkpointing_kwargs, every_n_layers, offload)

    def activation_checkpointing_disable(self) -> None:
        """gradient_checkpointing_disable() under transformers v5's name."""
        self.gradient_checkpointing_disable()

    @property
    def is_activation_checkpointing(self) -> bool:
        """is_gradient_checkpointing under transformers v5's name."""
        return self.is_gradient_checkpointing

    def set_attn_implementation(self, name: str) -> None:
        """Run attention through another implementation; model.config._attn_implementation reads it after.

        Args:
            name: a name of bertlite.layers.attention's registry. "eager" selects the reference path
                whole: it also undoes layers.onednn.optimize, so the model computes transformers' eager ops.

        Raises:
            ValueError: an unknown name.
        """
        check_attn_implementation(name)
        if name == "eager":
            onednn.restore(self)
        for module in self.modules():
            if isinstance(module, BertSelfAttention):
                module.attn_implementation = name
        bind_attention(self.config, self)


class BertModel(BertPreTrainedModel):
    """The BERT encoder: embeddings, the layers and an optional pooler, with transformers' keys."""

    def __init__(
        self,
        config: BertConfig,
        add_pooling_layer: bool = True,
        attn_implementation: str | None = None,
    ) -> None:
        """Build the model with freshly initialised weights (from_pretrained loads a checkpoint instead).

        Args:
            config: the model's config; it stays bound to the model (config.bind_attention), so
                config._attn_implementation reads and sets the model's attention, as in transformers.
            add_pooling_layer: build the BertPooler (pooler_output); False leaves it out (pooler is None).
            attn_implementation: a name of bertlite.layers.attention's registry; None: the config's
                _attn_implementation (set before building, as transformers' code does), else "sdpa".

        Raises:
            ValueError: an unknown attention name.
        """
        super().__init__(config)
        config = self.config  # a bertlite.BertConfig, also when given transformers'
        if attn_implementation is None:
            attn_implementation = config._attn_implementation or DEFAULT_ATTENTION
        check_attn_implementation(attn_implementation)  # before any layer is built
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config, attn_implementation)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.init_weights()
        bind_attention(config, self)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        # A deep copy or an unpickled model has a copy of the config, which a weak reference does not reach.
        bind_attention(self.config, self)

    @property
    def attn_implementation(self) -> str:
        """The attention implementation the layers run ("eager" for a model without layers)."""
        return self.encoder.layer[0].attention.self.attn_implementation if len(self.encoder.layer) else "eager"

    def get_input_embeddings(self) -> nn.Embedding:
        """The word embeddings."""
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        """Replace the word embeddings with `value`."""
        self.embeddings.word_embeddings = value

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        use_cache: bool | None = None,
        lengths: Tensor | None = None,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPooling | tuple[Tensor, ...]:
        """Run a padded batch, as in transformers, or a packed one; both run the same modules.

        A packed batch: input_ids (N,) holding the sequences one after another, and their lengths (B,)
        or a PackedLayout; see bertlite.layers.packing.

        Args:
            input_ids: (B, T) token ids; packed: (N,).
            attention_mask: (B, T), 1 for real tokens, 0 for padding; None: nothing masked. Not with a
                packed batch.
            token_type_ids: (B, T), or (N,) packed; None: all 0.
            position_ids: (B, T); None: 0..T-1. Not with a packed batch.
            inputs_embeds: (B, T, H) instead of input_ids (padded only).
            output_attentions: also return each layer's attention probabilities; None: the config's.
            output_hidden_states: also return the embedding output and each layer's output; None: the
                config's.
            return_dict: return a BaseModelOutputWithPooling; False: a tuple of its non-None fields;
                None: the config's.
            use_cache: ignored by an encoder; True is refused for a decoder (no KV cache).
            lengths: (B,) lengths of a packed batch.
            layout: a PackedLayout of a packed batch, instead of lengths.
            first_token_of: packed only: (R,) sequence numbers; the last layer then computes only these
                sequences' first-token ([CLS]) rows, all a [CLS] or pooler head reads, so last_hidden_state
                and pooler_output are (R, H), row r of sequence first_token_of[r]. None: every row.
            **kwargs: what transformers' forward also takes and bertlite ignores (tokenizer extras such
                as special_tokens_mask, Trainer's num_items_in_batch; head_mask=None and other v4
                keywords as None); anything else is a TypeError naming it.

        Returns:
            last_hidden_state (B, T, H), pooler_output (B, H) (None without a pooler), hidden_states
            (num_hidden_layers + 1 tensors like last_hidden_state) and attentions ((B, nh, T, T) per
            layer) when asked. Packed: last_hidden_state and hidden_states are (N, H), one row per
            real token; pooler_output (B, H).

        Raises:
            ValueError: inputs of the wrong shape or out of range, or a keyword a packed batch does
                not take.
            TypeError: an unknown keyword.
            NotImplementedError: use_cache=True for a decoder, or a keyword accepted only as None given
                a value.
        """
        check_forward_kwargs(type(self).__name__, kwargs)
        if use_cache and self.config.is_decoder:
            raise NotImplementedError("use_cache=True (a KV cache for generation) is not supported by bertlite")
        cfg = self.config
        output_attentions = cfg.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        if lengths is not None or layout is not None:
            for name, value in (("attention_mask", attention_mask), ("position_ids", position_ids)):
                if value is not None:
                    raise ValueError(f"{name} is not taken with a packed batch: the layout (lengths=) says it")
            if inputs_embeds is not None:
                raise ValueError("a packed batch takes input_ids (total_tokens,), not inputs_embeds")
            out = self._forward_packed(
                input_ids, token_type_ids, lengths, layout, output_attentions, output_hidden_states, first_token_of
            )
        elif first_token_of is not None:
            raise ValueError("first_token_of takes a packed batch (lengths= or layout=)")
        else:
            inputs = (input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
            out = self._forward_padded(*inputs, output_attentions, output_hidden_states)
        return out if (cfg.return_dict if return_dict is None else return_dict) else out.to_tuple()

    def _forward_padded(
        self,
        input_ids: Tensor | None,
        attention_mask: Tensor | None,
        token_type_ids: Tensor | None,
        position_ids: Tensor | None,
        inputs_embeds: Tensor | None,
        output_attentions: bool,
        output_hidden_states: bool,
    ) -> BaseModelOutputWithPooling:
        check_inputs(self.config, input_ids, inputs_embeds, attention_mask, token_type_ids, position_ids)
        embedding_output = self.embeddings(
            input_ids=input_ids,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
        )
        attention_bias = self.get_attention_bias(attention_mask, embedding_output)
        sequence_output, hidden_states, attentions = self.encoder(
            embedding_output, attention_bias, output_attentions, output_hidden_states
        )
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None
        return BaseModelOutputWithPooling(sequence_output, pooled_output, hidden_states, attentions)

    def _forward_packed(
        self,
        input_ids: Tensor | None,
        token_type_ids: Tensor | None,
        lengths: Tensor | None,
        layout: PackedLayout | None,
        output_attentions: bool,
        output_hidden_states: bool,
        first_token_of: Tensor | None = None,
    ) -> BaseModelOutputWithPooling:
        if input_ids is None:
            raise ValueError("a packed batch needs input_ids of shape (total_tokens,)")
        if lengths is not None and layout is not None:
            raise ValueError("give lengths= or layout=, not both")
        lengths = layout.lengths if layout is not None else torch.as_tensor(lengths, device=input_ids.device)
        check_packed_inputs(self.config, input_ids, lengths, token_type_ids)
        if layout is None:
            layout = PackedLayout.from_lengths(lengths, self.embeddings.word_embeddings.weight.dtype)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if first_token_of is not None:
            check_first_token_of(first_token_of, layout.batch_size, output_attentions)
        if not supports_packed(self.config):
            out = self._forward_packed_as_padded(
                input_ids, token_type_ids, layout, output_attentions, output_hidden_states
            )
            if first_token_of is None:
                return out
            # The padded forward ran every row; keep those asked for.
            pooled = out.pooler_output[first_token_of] if out.pooler_output is not None else None
            sequence_output = out.last_hidden_state[layout.starts[first_token_of]]
            return BaseModelOutputWithPooling(sequence_output, pooled, out.hidden_states, out.attentions)
        embedding_output = self.embeddings(
            input_ids=input_ids, token_type_ids=token_type_ids, position_ids=layout.positions
        )
        sequence_output, hidden_states, attentions = self.encoder(
            embedding_output, None, output_attentions, output_hidden_states, layout, first_token_of
        )
        pooled_output = None
        if self.pooler is not None and first_token_of is not None:
            pooled_output = self.pooler(sequence_output[:, None])  # the rows left are first tokens: (R, 1, H)
        elif self.pooler is not None:
            pooled_output = self.pooler(sequence_output, layout)
        return BaseModelOutputWithPooling(sequence_output, pooled_output, hidden_states, attentions)

    def _forward_packed_as_padded(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor,
        layout: PackedLayout,
        output_attentions: bool,
        output_hidden_states: bool,
    ) -> BaseModelOutputWithPooling:
        """A packed batch through the padded forward, for models the layers cannot run packed
        (supports_packed): same result, without the speed-up."""
        out = self._forward_padded(
            layout.scatter_to_grid(input_ids),
            layout.key_mask.long(),
            layout.scatter_to_grid(token_type_ids),
            None,
            None,
            output_attentions,
            output_hidden_states,
        )
        hidden_states = None
        if out.hidden_states is not None:
            hidden_states = tuple(layout.gather_from_grid(h) for h in out.hidden_states)
        sequence_output = layout.gather_from_grid(out.last_hidden_state)
        return BaseModelOutputWithPooling(sequence_output, out.pooler_output, hidden_states, out.attentions)

    def get_attention_bias(self, attention_mask: Tensor | None, embeddings: Tensor) -> Tensor | None:
        """Build the additive attention bias: 0 where a key is attended, dtype-min where it is not.

        While a graph is recorded (jit.trace, export, compile) a given mask is always applied:
        whether it masks anything depends on its values, and the graph must hold for any mask.
        (check_inputs has checked the mask's shape.)

        Args:
            attention_mask: (B, T), 1 for real tokens; None: nothing masked (a decoder still gets its
                causal mask).
            embeddings: the embedding output (B, T, H), for the dtype, device and T.

        Returns:
            (B, 1, 1, T), or for a decoder (B, 1, T, T) ((1, 1, T, T) without a mask), in the
            embeddings' dtype. In eager mode None
            when nothing is masked, which lets SDPA pick its fastest kernel.
        """
        seq_length = embeddings.shape[1]
        keep = None
        if attention_mask is not None and (recording_graph() or not bool(attention_mask.all())):
            keep = attention_mask.to(device=embeddings.device, dtype=torch.bool)[:, None, None, :]  # (B, 1, 1, T)
        if self.config.is_decoder:
            causal = torch.ones(seq_length, seq_length, dtype=torch.bool, device=embeddings.device).tril()
            keep = causal[None, None] if keep is None else keep & causal  # (B, 1, T, T)
        if keep is None:
            return None
        bias = torch.zeros(keep.shape, dtype=embeddings.dtype, device=embeddings.device)
        return bias.masked_fill_(~keep, torch.finfo(embeddings.dtype).min)

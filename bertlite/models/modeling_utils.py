"""PreTrainedModel: the transformers-compatible surface every bertlite model shares.

What Trainer, PEFT, pipelines and users call on a transformers model, written once for every family:
from_pretrained / from_config / save_pretrained, device and dtype, the embeddings accessors,
resize_token_embeddings, weight tying, gradient checkpointing, num_parameters, the attention
implementation bound to the config. A family's base class (BertPreTrainedModel) subclasses it and adds
what is its own: config_class, base_model_prefix, _init_weights, the module types below.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
from abc import ABCMeta
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertlite.checkpoint import save as checkpoint_save
from bertlite.config import BertConfig, bind_attention
from bertlite.layers import onednn
from bertlite.layers.attention import check_attn_implementation
from bertlite.models.inputs import check_forward_kwargs

# transformers' dummy_inputs ids (utils.DUMMY_INPUTS).
DUMMY_INPUTS = [[7, 6, 0, 0, 1], [1, 2, 3, 0, 0], [0, 0, 0, 4, 5]]


class PreTrainedModel(nn.Module, metaclass=ABCMeta):
    """The base of every bertlite model: transformers' PreTrainedModel members, loading and saving.

    An ABC so that a family's classes can register as virtual subclasses of BERT's (isinstance(model,
    BertPreTrainedModel) and isinstance(model, BertForSequenceClassification) hold for every BERT-like family, as
    integrations.Trainer and CrossEncoder check), while each head's MRO stays its own family's.
    """

    # transformers' class attributes that libraries read (Trainer, pipeline, PEFT); a family sets the first two.
    config_class: ClassVar[type | None] = None
    base_model_prefix = ""  # the attribute holding the base model in a head class ("bert")
    main_input_name = "input_ids"
    input_modalities = "text"
    supports_gradient_checkpointing = True
    _keys_to_ignore_on_save: list[str] | None = None
    # What a family's module tree holds, for the members below that reach into it: the modules that run
    # the layers (gradient_checkpointing, checkpoint_kwargs, checkpoint_every_n_layers, checkpoint_offload),
    # and the attention modules (attn_implementation).
    _checkpointed_module_types: ClassVar[tuple[type[nn.Module], ...]] = ()
    _attention_module_types: ClassVar[tuple[type[nn.Module], ...]] = ()

    def __init__(self, config: BertConfig) -> None:
        """Keep the config (made the family's by _as_config); subclasses build the modules.

        Args:
            config: the model's config.
        """
        super().__init__()
        config = self._as_config(config)
        self.config = config
        # The folder or hub id from_pretrained loaded, "" for a new model: an instance attribute, as in
        # transformers, because PEFT reads model.__dict__["name_or_path"] for base_model_name_or_path.
        self.name_or_path = config.name_or_path

    @staticmethod
    def _as_config(config: Any) -> BertConfig:
        """The family's config for `config`; a family converts other libraries' configs here (as_bert_config).

        Args:
            config: what the constructor or from_config was given.

        Returns:
            `config` itself here.
        """
        return config

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> PreTrainedModel:
        # Layers that cannot move (int8's Int8Linear) refuse before anything moves, so a refused
        # .to() leaves the whole model where it was, not half on the new device.
        for module in self.modules():
            check = getattr(module, "check_apply", None)
            if module is not self and check is not None:
                check(fn)
        return super()._apply(fn, recurse)

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | os.PathLike, *, config: BertConfig | str | os.PathLike | None = None, **kwargs: Any
    ) -> PreTrainedModel:
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
    def from_config(cls, config: BertConfig, **kwargs: Any) -> PreTrainedModel:
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
        model = cls(copy.deepcopy(cls._as_config(config)), **kwargs)
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

    def _init_weights(self, module: nn.Module) -> None:
        """Initialise one module's weights: each family sets its scheme (BertPreTrainedModel: transformers').

        Args:
            module: one module of the model (init_weights applies this to every module).

        Raises:
            NotImplementedError: always here.
        """
        raise NotImplementedError(f"{type(self).__name__} has no _init_weights; its family's base class sets one")

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
            if isinstance(module, self._checkpointed_module_types):
                module.gradient_checkpointing = True
                module.checkpoint_kwargs = kwargs
                module.checkpoint_every_n_layers = every_n_layers
                module.checkpoint_offload = offload

    def gradient_checkpointing_disable(self) -> None:
        """Keep every layer's activations again (undo gradient_checkpointing_enable)."""
        for module in self.modules():
            if isinstance(module, self._checkpointed_module_types):
                module.gradient_checkpointing = False

    @property
    def is_gradient_checkpointing(self) -> bool:
        """Whether gradient checkpointing is on."""
        return any(isinstance(m, self._checkpointed_module_types) and m.gradient_checkpointing for m in self.modules())

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
            if isinstance(module, self._attention_module_types):
                module.attn_implementation = name
        bind_attention(self.config, self)


@functools.cache
def forward_keywords(model_class: type[nn.Module]) -> frozenset[str]:
    """The keywords a base model's forward takes by name, its own and those of the forwards it overrides (MPNetModel
    passes use_cache on to BertModel.forward): a head passes them to its base model unchecked.

    Args:
        model_class: a base model class (BertModel, MPNetModel, ...).

    Returns:
        The names, without self.
    """
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    forwards = [vars(cls)["forward"] for cls in model_class.__mro__ if "forward" in vars(cls)]
    return frozenset(
        name
        for forward in forwards
        for name, parameter in inspect.signature(forward).parameters.items()
        if parameter.kind in kinds and name != "self"
    )


class ModelWithHead(PreTrainedModel):
    """What every task head class shares, whatever its family: the base model under base_model_prefix, the head's
    init, the base model call and the output form.

    A head class subclasses its family's PreTrainedModel and this, as transformers writes `RobertaForMaskedLM(
    RobertaPreTrainedModel)`.
    """

    base_model_class: ClassVar[type[PreTrainedModel]]  # the family's base model, built under base_model_prefix
    output_embeddings: ClassVar[str | None] = None  # a language-model head's decoder ("cls.predictions.decoder")

    def _add_base_model(self, attn_implementation: str | None, add_pooling_layer: bool = False) -> None:
        """Build the base model under its prefix (`bert`, `roberta`, ...), as transformers names it."""
        base = self.base_model_class(
            self.config, add_pooling_layer=add_pooling_layer, attn_implementation=attn_implementation
        )
        setattr(self, self.base_model_prefix, base)

    def post_init(self) -> None:
        # The base model initialised itself; the head modules are the other children. On the meta device
        # (from_pretrained) there is nothing to fill. Tying comes last, so the decoder's init cannot overwrite the
        # embeddings it then shares.
        if any(not p.is_meta for p in self.parameters()):
            for name, child in self.named_children():
                if name != self.base_model_prefix:
                    child.apply(self._init_weights)
        self.tie_weights()

    @property
    def attn_implementation(self) -> str:
        """The attention implementation the base model's layers run."""
        return self.base_model.attn_implementation

    def get_input_embeddings(self) -> nn.Embedding:
        """The base model's word embeddings."""
        return self.base_model.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        """Replace the base model's word embeddings with `value`."""
        self.base_model.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Module | None:
        """The language-model decoder (output_embeddings), for the heads that have one; else None."""
        return None if self.output_embeddings is None else self.get_submodule(self.output_embeddings)

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        """Replace the language-model decoder with `new_embeddings`, and the bare bias beside it that it uses."""
        owner_name, _, name = self.output_embeddings.rpartition(".")
        owner = self.get_submodule(owner_name)
        setattr(owner, name, new_embeddings)
        if isinstance(owner._parameters.get("bias"), nn.Parameter):  # BERT's and RoBERTa's heads keep one
            owner.bias = new_embeddings.bias

    def _encode(self, **inputs: Any) -> Any:
        """The base model's outputs (return_dict=True) for a head's forward, which passes its inputs and **kwargs.

        A keyword the base model's forward names (output_attentions, output_hidden_states, and any it takes later)
        reaches it as given, so a new one needs no change in the heads. return_dict is the head's own (_finish).
        The others are checked here, so an error names the head; those the base model ignores (tokenizer extras,
        Trainer's num_items_in_batch, head_mask=None, ...) go on to it too.
        """
        inputs.pop("return_dict", None)
        named = forward_keywords(type(self.base_model))
        check_forward_kwargs(type(self).__name__, {k: v for k, v in inputs.items() if k not in named})
        return self.base_model(**inputs, return_dict=True)

    def _finish(self, output: Any, forward_kwargs: dict[str, Any]) -> Any:
        """`output`, or its tuple when the forward's return_dict (else config.return_dict) is False."""
        return_dict = forward_kwargs.get("return_dict")
        return output if (self.config.return_dict if return_dict is None else return_dict) else output.to_tuple()

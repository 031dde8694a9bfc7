"""jina-embeddings-v3: transformers' JinaEmbeddingsV3Model on the keys its checkpoints hold, padded and packed, with
its task adapters.

transformers writes jina-embeddings-v3 as GTE's post-norm rotary layer with a plain feed-forward (fc1, act, fc2)
and the embedding LayerNorm outside the embeddings; its checkpoints (the original hub layout, and transformers 5's
own saves) name the parts `emb_ln`, `encoder.layers.N.mixer.Wqkv` / `mixer.out_proj`, `norm1`, `mlp.fc1` /
`mlp.fc2`, `norm2`, and this module tree has those names, so keys load unchanged. The layer is GTE's
(models.gte: its attention, rotary positions and layer forward; the parts under GTE's names by property). With
config.json's lora_adaptations (the original layout), every Linear and Embedding is a task-adapter one
(layers.lora) and forward takes adapter_mask, each sequence's task, as the original's does. The heads are in
models.jina_embeddings_v3_heads.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from bertlite.config.bert import as_bert_config
from bertlite.config.jina_embeddings_v3 import JinaEmbeddingsV3Config
from bertlite.layers.activations import ACT2FN
from bertlite.layers.attention import DEFAULT_ATTENTION
from bertlite.layers.fused import fused_linear
from bertlite.layers.lora import NO_TASK, LoRAEmbedding, LoRALinear, with_tasks
from bertlite.layers.packing import PackedLayout
from bertlite.layers.roles import LayerRoles
from bertlite.models.encoder import EncoderPreTrainedModel
from bertlite.models.gte import GteAttention, GteLayer, GteRotaryEmbedding
from bertlite.models.inputs import check_forward_kwargs
from bertlite.models.outputs import BaseModelOutputWithPooling


def _as_config(config: Any) -> JinaEmbeddingsV3Config:
    """A bertlite JinaEmbeddingsV3Config for a bertlite or transformers config."""
    return as_bert_config(config, JinaEmbeddingsV3Config)


def _adapters(config: JinaEmbeddingsV3Config) -> dict[str, Any] | None:
    """The task-adapter layers' arguments (layers.lora), None for a config without lora_adaptations."""
    tasks = config.lora_adaptations
    return dict(num_tasks=len(tasks), rank=config.lora_rank, alpha=config.lora_alpha) if tasks else None


def linear(config: JinaEmbeddingsV3Config, in_features: int, out_features: int) -> nn.Linear:
    """An nn.Linear, or a LoRALinear when the config has task adapters."""
    adapters = _adapters(config)
    return (
        nn.Linear(in_features, out_features) if adapters is None else LoRALinear(in_features, out_features, **adapters)
    )


def embedding(config: JinaEmbeddingsV3Config, rows: int, padding_idx: int | None = None) -> nn.Embedding:
    """An nn.Embedding, or a LoRAEmbedding when the config has task adapters."""
    adapters = _adapters(config)
    if adapters is None:
        return nn.Embedding(rows, config.hidden_size, padding_idx=padding_idx)
    return LoRAEmbedding(rows, config.hidden_size, padding_idx, **adapters)


# --- modules -----------------------------------------------------------------


class JinaEmbeddingsV3Embeddings(nn.Module):
    """transformers' JinaEmbeddingsV3Embeddings: word and token type embeddings, summed (the LayerNorm is the
    model's emb_ln)."""

    def __init__(self, config: JinaEmbeddingsV3Config) -> None:
        super().__init__()
        self.word_embeddings = embedding(config, config.vocab_size, config.pad_token_id)
        self.token_type_embeddings = embedding(config, config.type_vocab_size)

    def forward(
        self,
        input_ids: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        adapter: Tensor | None = None,
    ) -> Tensor:
        """(B, T) or packed (N,) ids (or inputs_embeds) to (..., H); token_type_ids None: zeros; adapter: each
        row's task."""
        if inputs_embeds is None:
            embeddings = with_tasks(self.word_embeddings, input_ids, adapter)
        elif adapter is not None:
            raise ValueError("adapter_mask takes input_ids: the word embeddings' adapters read the ids")
        else:
            embeddings = inputs_embeds
        if token_type_ids is None:
            token_type_ids = torch.zeros(embeddings.shape[:-1], dtype=torch.long, device=embeddings.device)
        return embeddings + with_tasks(self.token_type_embeddings, token_type_ids, adapter)


class JinaEmbeddingsV3Attention(GteAttention):
    """GTE's attention under the original's names: one fused Wqkv (query|key|value), since a task adapter spans its
    three parts, and out_proj, each a task-adapter Linear where the config has adapters."""

    def _build_projections(self, config: JinaEmbeddingsV3Config) -> None:
        """Wqkv and out_proj (layers.lora's task-adapter Linears where the config has adapters)."""
        self.Wqkv = linear(config, config.hidden_size, 3 * config.hidden_size)
        self.out_proj = linear(config, config.hidden_size, config.hidden_size)

    def _qkv(self, hidden_states: Tensor, adapter: Tensor | None) -> Tensor:
        """(..., 3H) query|key|value; adapter: each row's task."""
        return fused_linear(self.Wqkv, hidden_states, 3, adapter)  # transformers' q_proj, k_proj, v_proj

    def _out(self, context: Tensor, residual: Tensor | None, adapter: Tensor | None = None) -> Tensor:
        """out_proj on the context, with the residual added in its GEMM when given (fuses_residual), or each row's
        task adapter."""
        if residual is not None:
            return self.out_proj(context, residual=residual)
        return with_tasks(self.out_proj, context, adapter)


class JinaEmbeddingsV3MLP(nn.Module):
    """transformers' JinaEmbeddingsV3MLP: fc2(act(fc1(x)))."""

    def __init__(self, config: JinaEmbeddingsV3Config) -> None:
        super().__init__()
        self.fc1 = linear(config, config.hidden_size, config.intermediate_size)
        self.hidden_act = config.hidden_act  # by name too, for the module swap that restores `activation_fn`
        self.activation_fn = ACT2FN[config.hidden_act]
        self.fc2 = linear(config, config.intermediate_size, config.hidden_size)
        # Set by the module swap that installs an fc2 taking forward(x, residual=) (as GteMLP's down_proj).
        self.fuses_residual = False

    def forward(self, hidden_states: Tensor, residual: Tensor | None = None, adapter: Tensor | None = None) -> Tensor:
        """(..., H) -> (..., H); residual (fuses_residual, inference): added inside fc2's GEMM; adapter: each
        row's task."""
        hidden_states = self.activation_fn(with_tasks(self.fc1, hidden_states, adapter))
        if residual is not None:
            return self.fc2(hidden_states, residual=residual)
        return with_tasks(self.fc2, hidden_states, adapter)


class JinaEmbeddingsV3Layer(GteLayer):
    """GTE's post-norm layer under the original's names: norm1(x + mixer(x)), then norm2(x + mlp(x))."""

    roles = LayerRoles(
        attention="mixer",
        query="",
        key="",
        value="",
        attention_output="mixer.out_proj",
        intermediate="mlp.fc1",
        activation="mlp.activation_fn",
        output="mlp.fc2",
        qkv="mixer.Wqkv",
        residual_owners={"attention_output": "mixer", "output": "mlp"},
    )

    def __init__(self, config: JinaEmbeddingsV3Config, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        nn.Module.__init__(self)  # GteLayer's forward, on this layer's own parts
        self.mixer = JinaEmbeddingsV3Attention(config, attn_implementation)
        self.norm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = JinaEmbeddingsV3MLP(config)
        self.norm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.hidden_dropout = nn.Dropout(config.hidden_dropout_prob)

    # GteLayer's forward reads its parts under GTE's names.
    attention = property(lambda self: self.mixer)
    attn_ln = property(lambda self: self.norm1)
    mlp_ln = property(lambda self: self.norm2)


class JinaEmbeddingsV3Encoder(nn.Module):
    """The layers under `encoder.layers`, as the checkpoints name them."""

    def __init__(self, config: JinaEmbeddingsV3Config, attn_implementation: str = DEFAULT_ATTENTION) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            JinaEmbeddingsV3Layer(config, attn_implementation) for _ in range(config.num_hidden_layers)
        )

    @property
    def layer(self) -> nn.ModuleList:
        """The layers under BERT's name, where the module swaps and parity look for them."""
        return self.layers


class JinaEmbeddingsV3Pooler(nn.Module):
    """transformers' JinaEmbeddingsV3Pooler: tanh(dense(x)) of each sequence's first token, given as (R, H) rows."""

    def __init__(self, config: JinaEmbeddingsV3Config) -> None:
        super().__init__()
        self.dense = linear(config, config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, first_tokens: Tensor, adapter: Tensor | None = None) -> Tensor:
        """(R, H) -> (R, H); adapter: each row's task."""
        return self.activation(with_tasks(self.dense, first_tokens, adapter))


# --- models --------------------------------------------------------------------


class JinaEmbeddingsV3PreTrainedModel(EncoderPreTrainedModel):
    """What every jina-embeddings-v3 class shares: its config class, base model prefix "roberta", transformers'
    init (and the original's for the task adapters)."""

    config_class = JinaEmbeddingsV3Config
    base_model_prefix = "roberta"
    _layers_path = "encoder.layers"
    _attention_path = "mixer"
    _as_config = staticmethod(_as_config)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """EncoderPreTrainedModel's init, and a task adapter's the original's (a new adapter changes nothing)."""
        super()._init_weights(module)
        if isinstance(module, (LoRALinear, LoRAEmbedding)):
            module.reset_adapters()


class JinaEmbeddingsV3Model(JinaEmbeddingsV3PreTrainedModel):
    """transformers' JinaEmbeddingsV3Model: embeddings, emb_ln, the layers, an optional pooler; padded or packed
    batches; the task adapters when the config has them."""

    def __init__(
        self,
        config: JinaEmbeddingsV3Config,
        add_pooling_layer: bool = True,
        attn_implementation: str | None = None,
    ) -> None:
        """Build the model with freshly initialised weights (from_pretrained loads a checkpoint instead).

        Args:
            config: the model's config; it stays bound to the model, as BertModel's.
            add_pooling_layer: build the pooler (pooler_output); True, as transformers' default.
            attn_implementation: a name of bertlite.layers.attention's registry; None: the config's
                _attn_implementation, else "sdpa".

        Raises:
            ValueError: an unknown attention name.
        """
        super().__init__(config)
        config = self.config
        attn_implementation = self._attention_name(attn_implementation)
        self.embeddings = JinaEmbeddingsV3Embeddings(config)
        self.emb_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.emb_drop = nn.Dropout(config.hidden_dropout_prob)
        self.encoder = JinaEmbeddingsV3Encoder(config, attn_implementation)
        self.pooler = JinaEmbeddingsV3Pooler(config) if add_pooling_layer else None
        self.rotary_emb = GteRotaryEmbedding(config)
        self._finish_base_model()

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
        lengths: Tensor | None = None,
        layout: PackedLayout | None = None,
        first_token_of: Tensor | None = None,
        adapter_mask: Tensor | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPooling | tuple[Tensor, ...]:
        """Run a padded batch, as transformers does, or a packed one (each sequence's own rotary positions); both
        run the same modules.

        Args:
            input_ids: (B, T) token ids; packed: (N,).
            attention_mask: (B, T), 1 for real tokens; None: nothing masked. Not packed.
            token_type_ids: (B, T) or packed (N,); None: zeros.
            position_ids: (B, T) rotary positions; None: 0..T-1. Not packed (each sequence counts from 0).
            inputs_embeds: (B, T, H) instead of input_ids (padded only, no adapter_mask).
            output_attentions: also return each layer's attention probabilities; None: the config's.
            output_hidden_states: also return the embedding output and each layer's; None: the config's.
            return_dict: a BaseModelOutputWithPooling; False: its tuple; None: the config's.
            lengths: (B,) lengths of a packed batch.
            layout: a PackedLayout of a packed batch, instead of lengths.
            first_token_of: packed only: (R,) sequence numbers; last_hidden_state and pooler_output are then
                those sequences' first-token rows (R, H).
            adapter_mask: (B,) each sequence's task adapter, its index in config.lora_adaptations (task_ids
                makes it from names), -1 for none, as the original's forward takes it; None: no adapter.
            **kwargs: what transformers' forward also takes and bertlite ignores; anything else is a TypeError.

        Returns:
            last_hidden_state (B, T, H) (packed: (N, H)), pooler_output (B, H) or None, hidden_states and
            attentions when asked.

        Raises:
            ValueError: inputs of the wrong shape or out of range, a keyword a packed batch does not take, or an
                adapter_mask this model has no adapters for.
        """
        check_forward_kwargs(type(self).__name__, kwargs)
        if adapter_mask is not None:
            adapter_mask = self._checked_adapter_mask(adapter_mask, input_ids, inputs_embeds, lengths, layout)
        output = self._rotary_forward(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            inputs_embeds,
            output_attentions,
            output_hidden_states,
            lengths,
            layout,
            first_token_of,
            adapter_mask=adapter_mask,
        )
        return self._returned(output, return_dict)

    def task_ids(self, tasks: str | list[str | None] | None, batch_size: int) -> Tensor | None:
        """The adapter_mask for a batch: one task for every sequence, or one per sequence (None: no adapter).

        Args:
            tasks: a task name of config.lora_adaptations, a list of them (None items: no adapter), or None.
            batch_size: the sequences.

        Returns:
            (batch_size,) task indices (-1: none), or None when no sequence has a task.

        Raises:
            ValueError: an unknown task (naming the tasks there are), or a list of another length.
        """
        if tasks is None:
            return None
        if isinstance(tasks, str):
            tasks = [tasks] * batch_size
        if len(tasks) != batch_size:
            raise ValueError(f"{len(tasks)} tasks for a batch of {batch_size} sequences")
        ids = [NO_TASK if task is None else self.config.task_id(task) for task in tasks]
        return torch.tensor(ids, device=self.emb_ln.weight.device)

    def _checked_adapter_mask(
        self,
        adapter_mask: Tensor,
        input_ids: Tensor | None,
        inputs_embeds: Tensor | None,
        lengths: Tensor | None,
        layout: PackedLayout | None,
    ) -> Tensor:
        """adapter_mask as (B,) long task indices, checked against the adapters and the batch."""
        tasks = self.config.lora_adaptations
        if not tasks:
            raise ValueError(
                "adapter_mask given, but this model has no task adapters (config.json has no lora_adaptations)"
            )
        adapter_mask = torch.as_tensor(adapter_mask, device=self.emb_ln.weight.device).long()
        if lengths is not None or layout is not None:
            batch = len(layout.lengths if layout is not None else lengths)
        else:
            batch = (input_ids if input_ids is not None else inputs_embeds).shape[0]
        if adapter_mask.shape != (batch,):
            raise ValueError(
                f"adapter_mask must have shape ({batch},), one task per sequence, got {tuple(adapter_mask.shape)}"
            )
        if bool(((adapter_mask < NO_TASK) | (adapter_mask >= len(tasks))).any()):
            raise ValueError(
                f"adapter_mask holds task indices outside -1..{len(tasks) - 1} (the tasks: {', '.join(tasks)})"
            )
        return adapter_mask

    def _embed(
        self,
        input_ids: Tensor | None,
        token_type_ids: Tensor | None,
        inputs_embeds: Tensor | None,
        adapter: Tensor | None = None,
    ) -> Tensor:
        """The embeddings (word, token type; each row's task adapter), emb_ln, emb_drop."""
        return self.emb_drop(self.emb_ln(self.embeddings(input_ids, token_type_ids, inputs_embeds, adapter)))


# Gradient checkpointing runs in JinaEmbeddingsV3Model; set_attn_implementation reaches each layer's attention.
JinaEmbeddingsV3PreTrainedModel._checkpointed_module_types = (JinaEmbeddingsV3Model,)
JinaEmbeddingsV3PreTrainedModel._attention_module_types = (JinaEmbeddingsV3Attention,)

"""jina-embeddings-v3's task heads under transformers' names, each on JinaEmbeddingsV3Model under `roberta`:
JinaEmbeddingsV3ForMaskedLM (RoBERTa's lm_head, decoder tied to the word embeddings), ...ForSequenceClassification
(RoBERTa's classifier on the first token), ...ForTokenClassification (dropout and classifier on every token) and
...ForQuestionAnswering (qa_outputs); transformers writes them as RoBERTa's heads, and so are they here.
"""

from __future__ import annotations

from torch import Tensor, nn

from bertlite.config.jina_embeddings_v3 import JinaEmbeddingsV3Config
from bertlite.models.encoder import DropoutTokenClassifier
from bertlite.models.heads import (
    check_span_labels,
    masked_lm_forward,
    question_answering_forward,
    sequence_classification_forward,
)
from bertlite.models.jina_embeddings_v3 import JinaEmbeddingsV3Model, JinaEmbeddingsV3PreTrainedModel
from bertlite.models.modeling_utils import ModelWithHead
from bertlite.models.roberta import (
    RobertaClassificationHead,
    RobertaForMaskedLM,
    RobertaForSequenceClassification,
    RobertaLMHead,
)

__all__ = [
    "JinaEmbeddingsV3ForMaskedLM",
    "JinaEmbeddingsV3ForQuestionAnswering",
    "JinaEmbeddingsV3ForSequenceClassification",
    "JinaEmbeddingsV3ForTokenClassification",
    "JinaEmbeddingsV3Model",
]


class JinaEmbeddingsV3ForMaskedLM(JinaEmbeddingsV3PreTrainedModel, ModelWithHead):
    """transformers' JinaEmbeddingsV3ForMaskedLM: the model (no pooler) and RoBERTa's lm_head."""

    base_model_class = JinaEmbeddingsV3Model
    output_embeddings = RobertaForMaskedLM.output_embeddings
    _tied_weights_keys = RobertaForMaskedLM._tied_weights_keys

    def __init__(self, config: JinaEmbeddingsV3Config, attn_implementation: str | None = None) -> None:
        """Build the model and its head, freshly initialised (from_pretrained loads the weights).

        Args:
            config: the model's config.
            attn_implementation: as JinaEmbeddingsV3Model's.
        """
        super().__init__(config)
        self._add_base_model(attn_implementation)
        self.lm_head = RobertaLMHead(self.config)
        self.post_init()

    forward = masked_lm_forward

    def _prediction_scores(self, sequence_output: Tensor) -> Tensor:
        """(..., vocab) logits from hidden states (..., H): the masked-LM head alone (SPLADE runs it on its rows)."""
        return self.lm_head(sequence_output)


class JinaEmbeddingsV3ForSequenceClassification(JinaEmbeddingsV3PreTrainedModel, ModelWithHead):
    """transformers' JinaEmbeddingsV3ForSequenceClassification: RoBERTa's classifier on each first token."""

    base_model_class = JinaEmbeddingsV3Model

    def __init__(self, config: JinaEmbeddingsV3Config, attn_implementation: str | None = None) -> None:
        """Build the model (no pooler) and its head, freshly initialised.

        Args:
            config: the model's config (num_labels: the classes).
            attn_implementation: as JinaEmbeddingsV3Model's.
        """
        super().__init__(config)
        self.num_labels = self.config.num_labels
        self._add_base_model(attn_implementation)
        self.classifier = RobertaClassificationHead(self.config)
        self.post_init()

    forward = sequence_classification_forward
    classify = RobertaForSequenceClassification.classify


class JinaEmbeddingsV3ForTokenClassification(JinaEmbeddingsV3PreTrainedModel, DropoutTokenClassifier):
    """transformers' JinaEmbeddingsV3ForTokenClassification: dropout and classifier on every token."""

    base_model_class = JinaEmbeddingsV3Model


class JinaEmbeddingsV3ForQuestionAnswering(JinaEmbeddingsV3PreTrainedModel, ModelWithHead):
    """transformers' JinaEmbeddingsV3ForQuestionAnswering: qa_outputs (start, end) on every token."""

    base_model_class = JinaEmbeddingsV3Model

    def __init__(self, config: JinaEmbeddingsV3Config, attn_implementation: str | None = None) -> None:
        """Build the model and its head.

        Args:
            config: the model's config (num_labels must be 2: start, end).
            attn_implementation: as JinaEmbeddingsV3Model's.

        Raises:
            ValueError: config.num_labels is not 2.
        """
        super().__init__(config)
        self.num_labels = check_span_labels(self)
        self._add_base_model(attn_implementation)
        self.qa_outputs = nn.Linear(self.config.hidden_size, self.config.num_labels)
        self.post_init()

    forward = question_answering_forward

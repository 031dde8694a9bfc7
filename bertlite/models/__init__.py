"""BertModel, its transformers-compatible base, the task heads and the Auto classes."""

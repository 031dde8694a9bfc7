"""BatchEncoding: what a tokenizer call returns, as transformers' (a dict of model inputs and the Encodings).

No torch import: convert_to_tensors imports torch only when asked for "pt" tensors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tokenizers import Encoding


class BatchEncoding(dict):
    """transformers' BatchEncoding: a dict of model inputs with attribute access, `.to(device)`
    and the `tokenizers` Encodings behind it (`tokens(i)`, `word_ids(i)`, `sequence_ids(i)`)."""

    def __init__(self, data: dict[str, Any], encodings: list[Encoding] | None = None) -> None:
        """Wrap model inputs.

        Args:
            data: the inputs by name (input_ids, attention_mask, ...).
            encodings: the `tokenizers` Encodings, one per row; None: none (tokens() etc. then fail).
        """
        super().__init__(data)
        self._encodings = encodings

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_") and name in self:
            return self[name]
        raise AttributeError(f"BatchEncoding has no attribute or key {name!r} (keys: {', '.join(self)})")

    def __getitem__(self, key: str | int) -> Any:
        if isinstance(key, int):
            if self._encodings is None:
                raise KeyError("this BatchEncoding holds no Encodings to index by position")
            return self._encodings[key]
        return super().__getitem__(key)

    def __getstate__(self) -> dict[str, Any]:
        return {"encodings": self._encodings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._encodings = state["encodings"]

    @property
    def encodings(self) -> list[Encoding] | None:
        """The `tokenizers` Encodings, one per row; None when built without them (pad())."""
        return self._encodings

    def tokens(self, batch_index: int = 0) -> list[str]:
        """The tokens of row `batch_index` (default the first), special tokens included."""
        return self[batch_index].tokens

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """The word index of each token of row `batch_index`; None for special tokens."""
        return self[batch_index].word_ids

    def sequence_ids(self, batch_index: int = 0) -> list[int | None]:
        """Which text of a pair (0 or 1) each token of row `batch_index` comes from; None for special tokens."""
        return self[batch_index].sequence_ids

    @property
    def is_fast(self) -> bool:
        """Whether Encodings back this BatchEncoding (as transformers' fast tokenizers give)."""
        return self._encodings is not None

    @property
    def n_sequences(self) -> int | None:
        """1 for single texts, 2 for pairs; None without Encodings."""
        return None if self._encodings is None else self._encodings[0].n_sequences

    def _row_and_index(self, batch_or_index: int, index: int | None) -> tuple[Encoding, int]:
        # transformers' convention: (i) is position i of row 0; (b, i) is position i of row b.
        if index is None:
            return self[0], batch_or_index
        return self[batch_or_index], index

    def token_to_word(self, batch_or_token_index: int, token_index: int | None = None) -> int | None:
        """The word of a token (None for special tokens); (token) for row 0 or (row, token)."""
        encoding, token = self._row_and_index(batch_or_token_index, token_index)
        return encoding.token_to_word(token)

    def token_to_sequence(self, batch_or_token_index: int, token_index: int | None = None) -> int | None:
        """Which text of a pair a token is from (None for special tokens); (token) or (row, token)."""
        encoding, token = self._row_and_index(batch_or_token_index, token_index)
        return encoding.token_to_sequence(token)

    def token_to_chars(self, batch_or_token_index: int, token_index: int | None = None) -> tuple[int, int] | None:
        """The (start, end) characters of a token in its text (None for special tokens)."""
        encoding, token = self._row_and_index(batch_or_token_index, token_index)
        return encoding.token_to_chars(token)

    def char_to_token(
        self, batch_or_char_index: int, char_index: int | None = None, sequence_index: int = 0
    ) -> int | None:
        """The token covering a character of text `sequence_index` (None for a space); (char) or (row, char)."""
        encoding, char = self._row_and_index(batch_or_char_index, char_index)
        return encoding.char_to_token(char, sequence_index)

    def char_to_word(
        self, batch_or_char_index: int, char_index: int | None = None, sequence_index: int = 0
    ) -> int | None:
        """The word covering a character of text `sequence_index`; (char) or (row, char)."""
        encoding, char = self._row_and_index(batch_or_char_index, char_index)
        return encoding.char_to_word(char, sequence_index)

    def word_to_tokens(
        self, batch_or_word_index: int, word_index: int | None = None, sequence_index: int = 0
    ) -> tuple[int, int] | None:
        """The (start, end) tokens of a word of text `sequence_index`; (word) or (row, word)."""
        encoding, word = self._row_and_index(batch_or_word_index, word_index)
        return encoding.word_to_tokens(word, sequence_index)

    def word_to_chars(
        self, batch_or_word_index: int, word_index: int | None = None, sequence_index: int = 0
    ) -> tuple[int, int] | None:
        """The (start, end) characters of a word of text `sequence_index`; (word) or (row, word)."""
        encoding, word = self._row_and_index(batch_or_word_index, word_index)
        return encoding.word_to_chars(word, sequence_index)

    def to(self, device: Any) -> BatchEncoding:
        """Move every torch tensor to `device`, in place, as transformers does.

        Args:
            device: a torch device or its name.

        Returns:
            self.
        """
        for key, value in self.items():
            if hasattr(value, "to") and not isinstance(value, np.ndarray):
                self[key] = value.to(device)
        return self

    def convert_to_tensors(self, tensor_type: str | None) -> BatchEncoding:
        """Turn the lists into tensors, in place (integers as int64).

        Args:
            tensor_type: "pt" (torch), "np" (numpy), or None (leave lists).

        Returns:
            self.

        Raises:
            ValueError: rows of different lengths (pad them first).
        """
        if tensor_type is None:
            return self
        for key, value in self.items():
            if isinstance(value, list) and value and isinstance(value[0], (list, tuple)):
                widths = {len(row) for row in value}
                if len(widths) > 1:
                    raise ValueError(
                        f"cannot make one {tensor_type} tensor of {key!r}: its rows have lengths {sorted(widths)}; "
                        "pass padding=True (or 'max_length') and truncation=True"
                    )
            array = np.asarray(value)
            if tensor_type == "pt":
                import torch

                # Integers through numpy (much faster than torch.tensor on lists); other values (float labels)
                # as torch.tensor makes them, like transformers.
                self[key] = (
                    torch.from_numpy(array.astype(np.int64)) if array.dtype.kind in "iu" else torch.tensor(value)
                )
            else:
                self[key] = array.astype(np.int64) if array.dtype.kind in "iu" else array
        return self


def padding_inputs(encoded_inputs: dict[str, Any] | Sequence[dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    """pad()'s inputs as one dict of Python lists, and the tensor type they came as.

    Args:
        encoded_inputs: as pad() takes them.

    Returns:
        (key -> one row's list or a list of rows, "pt" / "np" for torch / numpy input_ids, else None).

    Raises:
        ValueError: no input_ids.
    """
    if isinstance(encoded_inputs, (list, tuple)) and encoded_inputs and isinstance(encoded_inputs[0], Mapping):
        encoded_inputs = {key: [example[key] for example in encoded_inputs] for key in encoded_inputs[0]}
    if "input_ids" not in encoded_inputs:
        raise ValueError(f"pad() needs input_ids among the inputs, got keys {list(encoded_inputs)}")
    first = encoded_inputs["input_ids"]
    first = first[0] if isinstance(first, (list, tuple)) and first else first
    given_as = "pt" if type(first).__module__ == "torch" else "np" if isinstance(first, np.ndarray) else None
    inputs = {key: _py(value) for key, value in encoded_inputs.items()}
    return {
        key: [_py(v) for v in value] if isinstance(value, list) else value for key, value in inputs.items()
    }, given_as


def _py(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value

"""TokenizerBase: transformers' tokenizer members over any `tokenizers` backend, for every family.

The vocabulary, the special tokens (named and extra), adding tokens, converting between ids and tokens,
and decoding: what does not depend on how a family's pipeline splits and marks text. A family's tokenizer
(BertTokenizer) subclasses it with its pipeline, its __call__ and its files. No torch import.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tokenizers import AddedToken, Tokenizer

from bertlite.tokenization.pipeline import token_content

# In transformers' order (SPECIAL_TOKENS_ATTRIBUTES), which all_special_tokens follows.
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

# transformers tokenizer members bertlite leaves out, with what to do instead (the AttributeError says it).
UNSUPPORTED_METHODS = {
    "apply_chat_template": "BERT has no chat template; call the tokenizer on the text",
    "chat_template": "BERT has no chat template; call the tokenizer on the text",
    "train_new_from_iterator": "train a vocabulary with the tokenizers library (tokenizers.trainers.WordPieceTrainer "
    "and tokenizer.backend_tokenizer.train_from_iterator) or with transformers",
    "push_to_hub": "save_pretrained(folder), then huggingface_hub.upload_folder(folder_path=folder, repo_id=...)",
    "prepare_for_model": "removed in transformers v5; call the tokenizer (is_split_into_words=True for words)",
    "truncate_sequences": "removed in transformers v5; call the tokenizer with truncation= and max_length=",
}


class TokenizerBase:
    """The members of transformers' fast tokenizers that only read or extend the backend's vocabulary.

    A subclass's __init__ sets what they read: _tokenizer (the `tokenizers` backend), _lock (held while
    the backend changes), _special (SPECIAL_TOKENS name -> token or None), _extra_special (unnamed special
    tokens), model_max_length and clean_up_tokenization_spaces.
    """

    SPECIAL_TOKENS_ATTRIBUTES = list(SPECIAL_TOKENS)

    # --- decoding ----------------------------------------------------------------

    def decode(
        self,
        token_ids: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> str | list[str]:
        """Decode ids back to text.

        Args:
            token_ids: a sequence of ids (a list, tensor or array), or a batch of them.
            skip_special_tokens: leave the special tokens out.
            clean_up_tokenization_spaces: remove spaces before punctuation and contractions; None: the
                tokenizer's setting.

        Returns:
            The text, or for a batch a list of texts.
        """
        ids = to_list(token_ids)
        if isinstance(ids, int):
            ids = [ids]
        if ids and isinstance(ids[0], list):
            return self.batch_decode(ids, skip_special_tokens, clean_up_tokenization_spaces)
        text = self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
        clean = (
            self.clean_up_tokenization_spaces if clean_up_tokenization_spaces is None else clean_up_tokenization_spaces
        )
        return clean_up_tokenization(text) if clean else text

    def batch_decode(
        self,
        sequences: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> list[str]:
        """Decode a batch of id sequences; the arguments as in decode().

        Returns:
            One text per sequence.
        """
        return [self.decode(ids, skip_special_tokens, clean_up_tokenization_spaces) for ids in to_list(sequences)]

    def convert_ids_to_tokens(self, ids: int | Iterable[int], skip_special_tokens: bool = False) -> str | list[str]:
        """Look up the tokens of ids.

        Args:
            ids: one id, or several (a list, tensor or array).
            skip_special_tokens: leave the special tokens out (for several ids).

        Returns:
            The token of one id, or the list of tokens.
        """
        ids = to_list(ids)
        if isinstance(ids, int):
            return self._tokenizer.id_to_token(ids)
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._tokenizer.id_to_token(int(i)) for i in ids if int(i) not in skip]

    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> int | list[int]:
        """Look up the ids of tokens.

        Args:
            tokens: one token or several.

        Returns:
            The id of one token, or the list of ids; a token outside the vocabulary gives unk_token_id.
        """
        if isinstance(tokens, str):
            index = self._tokenizer.token_to_id(tokens)
            return self.unk_token_id if index is None else index
        return [self.convert_tokens_to_ids(token) for token in tokens]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        """Join tokens into text with the backend's decoder (WordPiece: "##" pieces joined)."""
        return self._tokenizer.decoder.decode(tokens) if self._tokenizer.decoder is not None else " ".join(tokens)

    # --- vocabulary and special tokens -------------------------------------------

    @property
    def backend_tokenizer(self) -> Tokenizer:
        """The `tokenizers` Tokenizer underneath."""
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        """Size of the base vocabulary, without added tokens (transformers' vocab_size)."""
        return self._tokenizer.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def get_vocab(self) -> dict[str, int]:
        """Every token, added ones included, with its id."""
        return self._tokenizer.get_vocab(with_added_tokens=True)

    @property
    def special_tokens_map(self) -> dict[str, str]:
        """The special tokens that are set, by name (cls_token: "[CLS]", ...)."""
        return {name: token for name, token in self._special.items() if token is not None}

    @property
    def all_special_tokens(self) -> list[str]:
        """The special tokens, each once: the named ones, then extra_special_tokens."""
        return list(dict.fromkeys([*self.special_tokens_map.values(), *self._extra_special]))

    @property
    def extra_special_tokens(self) -> list[str]:
        """The special tokens without a name (added with add_special_tokens({"extra_special_tokens": [...]}))."""
        return list(self._extra_special)

    additional_special_tokens = extra_special_tokens  # transformers v4's name

    @property
    def extra_special_tokens_ids(self) -> list[int]:
        """The ids of extra_special_tokens."""
        return self.convert_tokens_to_ids(self._extra_special)

    @property
    def added_tokens_decoder(self) -> dict[int, AddedToken]:
        """The added tokens (special ones included) by id, as `tokenizers` AddedTokens."""
        return self._tokenizer.get_added_tokens_decoder()

    @property
    def added_tokens_encoder(self) -> dict[str, int]:
        """The added tokens' ids by token, in id order."""
        return {token.content: i for i, token in sorted(self.added_tokens_decoder.items())}

    def get_added_vocab(self) -> dict[str, int]:
        """The added tokens' ids by token (added_tokens_encoder)."""
        return self.added_tokens_encoder

    @property
    def vocab(self) -> dict[str, int]:
        """get_vocab()."""
        return self.get_vocab()

    @property
    def decoder(self) -> Any:
        """The backend's decoder (WordPiece for BERT)."""
        return self._tokenizer.decoder

    def add_tokens(
        self, new_tokens: str | AddedToken | Sequence[str | AddedToken], special_tokens: bool = False
    ) -> int:
        """Add tokens to the vocabulary, at its end, as transformers' add_tokens.

        Call model.resize_token_embeddings(len(tokenizer)) afterwards so the model has a row for each.

        Args:
            new_tokens: a token or several (strings or `tokenizers` AddedTokens); those already in the
                vocabulary are skipped.
            special_tokens: add them as special tokens (never split, not normalised, skipped by
                decode(skip_special_tokens=True)).

        Returns:
            The number of tokens added.
        """
        if not new_tokens:
            return 0
        if not isinstance(new_tokens, (list, tuple)):
            new_tokens = [new_tokens]
        with self._lock:
            if special_tokens:
                return self._tokenizer.add_special_tokens(list(new_tokens))
            return self._tokenizer.add_tokens(list(new_tokens))

    def add_special_tokens(self, special_tokens_dict: dict[str, Any], replace_extra_special_tokens: bool = True) -> int:
        """Add special tokens and name them, as transformers' add_special_tokens.

        Args:
            special_tokens_dict: SPECIAL_TOKENS_ATTRIBUTES names (cls_token, ...) to a token, and/or
                "extra_special_tokens" (v4: "additional_special_tokens") to a list of tokens.
            replace_extra_special_tokens: the list replaces extra_special_tokens (the old ones stay in the
                vocabulary); False: it extends them.

        Returns:
            The number of tokens added to the vocabulary.

        Raises:
            ValueError: an unknown key, or a value of the wrong type.
        """
        if not special_tokens_dict:
            return 0
        special_tokens_dict = dict(special_tokens_dict)
        if "additional_special_tokens" in special_tokens_dict and not special_tokens_dict.get("extra_special_tokens"):
            special_tokens_dict["extra_special_tokens"] = special_tokens_dict.pop("additional_special_tokens")
        allowed = (*SPECIAL_TOKENS, "extra_special_tokens")
        to_add: list[AddedToken] = []
        for key, value in special_tokens_dict.items():
            if key not in allowed:
                raise ValueError(f"{key!r} is not a special token name; use one of {', '.join(allowed)}")
            if key == "extra_special_tokens":
                if not isinstance(value, (list, tuple)) or not all(isinstance(t, (str, AddedToken)) for t in value):
                    raise ValueError(f"extra_special_tokens must be a list of strings or AddedTokens, got {value!r}")
                new = [t for t in value if replace_extra_special_tokens or str(t) not in self._extra_special]
                names = [token_content(t) for t in new]
                self._extra_special = names if replace_extra_special_tokens and new else self._extra_special + names
                to_add.extend(_special_added_token(t) for t in new)
            else:
                if not isinstance(value, (str, AddedToken)):
                    raise ValueError(f"{key} must be a string or an AddedToken, got {value!r}")
                self._special[key] = token_content(value)
                to_add.append(_special_added_token(value))
        return self.add_tokens(to_add, special_tokens=True)

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        """How many special tokens a call adds to one text (or, pair=True, to a pair)."""
        return self._tokenizer.num_special_tokens_to_add(pair)

    @property
    def max_len_single_sentence(self) -> int:
        """model_max_length less the special tokens of one text."""
        return self.model_max_length - self.num_special_tokens_to_add(pair=False)

    @property
    def max_len_sentences_pair(self) -> int:
        """model_max_length less the special tokens of a pair."""
        return self.model_max_length - self.num_special_tokens_to_add(pair=True)

    def clean_up_tokenization(self, text: str) -> str:
        """Remove spaces before punctuation and contractions, as decode(clean_up_tokenization_spaces=True)."""
        return clean_up_tokenization(text)

    def __getattr__(self, name: str) -> Any:
        if name in UNSUPPORTED_METHODS:
            raise AttributeError(f"BertTokenizer.{name} is not available in bertlite: {UNSUPPORTED_METHODS[name]}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def all_special_ids(self) -> list[int]:
        """The ids of all_special_tokens."""
        return self.convert_tokens_to_ids(self.all_special_tokens)


def _special_token_properties(name: str) -> tuple[property, property]:
    def get_token(self: TokenizerBase) -> str | None:
        return self._special[name]

    def set_token(self: TokenizerBase, value: str | None) -> None:
        self._special[name] = value

    def get_id(self: TokenizerBase) -> int | None:
        token = self._special[name]
        return None if token is None else self.convert_tokens_to_ids(token)

    def set_id(self: TokenizerBase, value: int | None) -> None:
        self._special[name] = None if value is None else self.convert_ids_to_tokens(value)  # as transformers

    return property(get_token, set_token), property(get_id, set_id)


# cls_token / cls_token_id and the others, one pair per special token.
for _name in SPECIAL_TOKENS:
    _token, _id = _special_token_properties(_name)
    setattr(TokenizerBase, _name, _token)
    setattr(TokenizerBase, f"{_name}_id", _id)


def clean_up_tokenization(text: str) -> str:
    """Remove spaces before punctuation and English contractions, as transformers' clean_up_tokenization.

    Args:
        text: decoded text.

    Returns:
        The cleaned text.
    """
    return (
        text.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
    )


def to_list(ids: Any) -> Any:
    """Ids as Python values (lists, tensors and arrays alike).

    Args:
        ids: one id, or a sequence, tensor or array of them.

    Returns:
        The int, or the (nested) list.
    """
    return ids.tolist() if hasattr(ids, "tolist") else ids if isinstance(ids, int) else list(ids)


def _special_added_token(token: str | AddedToken) -> AddedToken:
    # As transformers' add_special_tokens makes them: matched as written, not normalised.
    if isinstance(token, AddedToken):
        return token
    return AddedToken(token, rstrip=False, lstrip=False, normalized=False, special=True)

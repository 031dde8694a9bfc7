"""The libraries around transformers, run on bertlite models: Trainer, pipeline, PEFT, sentence-transformers.

Every flow runs twice in the same test, on a transformers model and on the bertlite model
loaded from the same folder, and the outputs are compared. Tolerance 0.0 (exact) unless a
test says otherwise: fp32, eager attention on both sides, no dropout (TINY).
"""

from __future__ import annotations

import json
import random
import warnings

import pytest
import torch
import transformers

import bertlite
from tests.helpers import TINY

peft = pytest.importorskip("peft")  # a test extra
sentence_transformers = pytest.importorskip("sentence_transformers")  # a test extra
integrations = pytest.importorskip("bertlite.integrations")

WORDS = (
    "the a cat dog bird sat ran sang on to under near mat park tree house who what where is was red blue "
    "big small old new runs sits".split()
)
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?"]
VOCAB = SPECIAL + WORDS + [f"x{i}" for i in range(TINY["vocab_size"] - len(SPECIAL) - len(WORDS))]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run faster on one thread, and far faster when other jobs share the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer():
    """A transformers fast BERT tokenizer over TINY's 99-token vocabulary."""
    return transformers.BertTokenizerFast(vocab={token: i for i, token in enumerate(VOCAB)})


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) + "." for _ in range(n)]


def save_hf(cls, folder, seed: int = 0, std: float | None = None, **config) -> str:
    """A random transformers model of class `cls` saved to `folder`; std: redraw every weight
    from N(0, std), so the predictions are far apart (pipelines rank them)."""
    torch.manual_seed(seed)
    model = cls(transformers.BertConfig(**{**TINY, **config}))
    if std is not None:
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, std)
    model.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def classifier_path(tmp_path_factory) -> str:
    """A random transformers BertForSequenceClassification (2 labels) saved once for the Trainer and PEFT tests."""
    return save_hf(transformers.BertForSequenceClassification, tmp_path_factory.mktemp("classifier"), num_labels=2)


def twins(name: str, path: str):
    """The transformers model and the bertlite model of class `name`, both loaded from `path`."""
    hf = getattr(transformers, name).from_pretrained(path, attn_implementation="eager")
    ours = getattr(bertlite, name).from_pretrained(path, attn_implementation="eager")
    return hf, ours


def assert_same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sorted(sa) == sorted(sb)
    for key in sa:
        torch.testing.assert_close(sb[key], sa[key], atol=0.0, rtol=0.0, msg=key)


def classification_data(tokenizer, n: int, seed: int, flip: bool = False) -> list[dict]:
    """Unpadded examples of several lengths (the Trainer's collator pads them); label 1 when a cat is named."""
    texts = sentences(n, seed)
    encoded = tokenizer(texts)
    return [
        {**{k: v[i] for k, v in encoded.items()}, "labels": int(("cat" in text) != flip)}
        for i, text in enumerate(texts)
    ]


def training_args(output_dir, **overrides) -> transformers.TrainingArguments:
    settings = dict(
        output_dir=str(output_dir),
        max_steps=4,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        learning_rate=5e-3,
        seed=0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # gradient_checkpointing: v5 renamed it, tutorials keep it
        return transformers.TrainingArguments(**{**settings, **overrides})


def losses(trainer: transformers.Trainer) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def logits_of(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(**batch).logits


# --- transformers.Trainer ------------------------------------------------------------------


@pytest.mark.slow
def test_trainer_train_evaluate_predict(tokenizer, classifier_path, tmp_path):
    # Unchanged user code: transformers.Trainer itself, with the tokenizer (so its collator pads)
    # and gradient accumulation (so Trainer passes num_items_in_batch to forward).
    path = classifier_path
    train, evaluation = classification_data(tokenizer, 16, seed=1), classification_data(tokenizer, 10, seed=2)
    runs = {}
    for side, model in zip(("transformers", "bertlite"), twins("BertForSequenceClassification", path), strict=True):
        args = training_args(tmp_path / side, gradient_accumulation_steps=2)
        trainer = transformers.Trainer(
            model=model, args=args, train_dataset=train, eval_dataset=evaluation, processing_class=tokenizer
        )
        trainer.train()
        metrics = trainer.evaluate()
        prediction = trainer.predict(evaluation)
        runs[side] = (model, losses(trainer), metrics["eval_loss"], prediction)
    (hf, hf_losses, hf_eval, hf_pred), (ours, our_losses, our_eval, our_pred) = runs.values()
    assert len(our_losses) == 4 and our_losses == hf_losses
    assert our_eval == hf_eval
    assert our_pred.predictions.shape == (10, 2)
    torch.testing.assert_close(
        torch.from_numpy(our_pred.predictions), torch.from_numpy(hf_pred.predictions), atol=0.0, rtol=0.0
    )
    assert (our_pred.label_ids == hf_pred.label_ids).all()
    assert_same_state(hf, ours)


@pytest.mark.slow
def test_trainer_checkpointing_best_model_and_saved_folder(tokenizer, classifier_path, tmp_path):
    # Gradient checkpointing on; checkpoints every 2 steps; the eval labels are the training
    # labels flipped, so the eval loss grows and the best checkpoint is the first, not the last.
    path = classifier_path
    train = classification_data(tokenizer, 16, seed=1)
    evaluation = classification_data(tokenizer, 16, seed=1, flip=True)
    batch = tokenizer(sentences(5, seed=3), padding=True, return_tensors="pt")
    trainers = {}
    for side, model in zip(("transformers", "bertlite"), twins("BertForSequenceClassification", path), strict=True):
        trainer_cls = transformers.Trainer if side == "transformers" else integrations.Trainer
        args = training_args(
            tmp_path / side,
            max_steps=6,
            gradient_checkpointing=True,
            eval_strategy="steps",
            eval_steps=2,
            save_strategy="steps",
            save_steps=2,
            load_best_model_at_end=True,
            metric_for_best_model="eval_loss",
        )
        trainer = trainer_cls(
            model=model, args=args, train_dataset=train, eval_dataset=evaluation, processing_class=tokenizer
        )
        trainer.train()
        assert model.is_activation_checkpointing
        trainers[side] = trainer
    hf_trainer, our_trainer = trainers.values()
    assert losses(our_trainer) == losses(hf_trainer)
    assert our_trainer.state.best_metric == hf_trainer.state.best_metric
    best = tmp_path / "bertlite" / "checkpoint-2"
    assert our_trainer.state.best_model_checkpoint == str(best)
    # The model was set back to checkpoint-2, which both libraries reload from its own folder.
    assert (best / "config.json").is_file()
    assert_same_state(hf_trainer.model, our_trainer.model)
    expected = logits_of(hf_trainer.model, batch)
    for reloaded in twins("BertForSequenceClassification", str(best)):
        torch.testing.assert_close(logits_of(reloaded, batch), expected, atol=0.0, rtol=0.0)
    assert not torch.equal(
        logits_of(
            bertlite.BertForSequenceClassification.from_pretrained(tmp_path / "bertlite" / "checkpoint-6"), batch
        ),
        expected,
    )

    out = tmp_path / "saved"
    our_trainer.save_model(str(out))
    assert {"config.json", "model.safetensors", "tokenizer.json", "training_args.bin"} <= {
        p.name for p in out.iterdir()
    }
    for reloaded in twins("BertForSequenceClassification", str(out)):
        torch.testing.assert_close(logits_of(reloaded, batch), expected, atol=0.0, rtol=0.0)


@pytest.mark.slow
def test_trainer_resumes_from_a_checkpoint(tokenizer, classifier_path, tmp_path):
    # resume_from_checkpoint reads the weights bertlite's Trainer wrote back into a fresh model.
    train = classification_data(tokenizer, 16, seed=1)
    finished = {}
    for side, library, trainer_cls in (
        ("transformers", transformers, transformers.Trainer),
        ("bertlite", bertlite, integrations.Trainer),
    ):
        args = training_args(tmp_path / side, save_strategy="steps", save_steps=2)
        load = library.BertForSequenceClassification.from_pretrained
        straight, resumed = (load(classifier_path, attn_implementation="eager") for _ in range(2))
        trainer_cls(model=straight, args=args, train_dataset=train, processing_class=tokenizer).train()
        trainer = trainer_cls(model=resumed, args=args, train_dataset=train, processing_class=tokenizer)
        trainer.train(resume_from_checkpoint=str(tmp_path / side / "checkpoint-2"))
        assert trainer.state.global_step == 4
        assert_same_state(straight, resumed)
        finished[side] = resumed
    assert_same_state(*finished.values())


def masked_lm_rows(tokenizer) -> list[dict]:
    """Eight training rows for a masked-LM head: each sentence's ids, labelled with themselves."""
    encoded = tokenizer(sentences(8, seed=4), padding="max_length", max_length=14)
    return [{**{k: v[i] for k, v in encoded.items()}, "labels": encoded["input_ids"][i]} for i in range(8)]


@pytest.mark.slow
def test_trainer_saves_a_tied_head(tokenizer, tmp_path):
    # The masked-LM decoder is the embedding matrix: bertlite's Trainer stores it once, in a complete folder.
    path = save_hf(transformers.BertForMaskedLM, tmp_path / "base")
    train = masked_lm_rows(tokenizer)
    models = {}
    for side, model in zip(("transformers", "bertlite"), twins("BertForMaskedLM", path), strict=True):
        trainer_cls = transformers.Trainer if side == "transformers" else integrations.Trainer
        trainer = trainer_cls(model=model, args=training_args(tmp_path / side, max_steps=2), train_dataset=train)
        trainer.train()
        trainer.save_model(str(tmp_path / f"saved-{side}"))
        models[side] = model
    assert_same_state(*models.values())
    assert models["bertlite"].cls.predictions.decoder.weight is models["bertlite"].get_input_embeddings().weight
    batch = tokenizer(sentences(3, seed=5), padding=True, return_tensors="pt")
    expected = logits_of(models["transformers"], batch)
    for reloaded in twins("BertForMaskedLM", str(tmp_path / "saved-bertlite")):
        torch.testing.assert_close(logits_of(reloaded, batch), expected, atol=0.0, rtol=0.0)


@pytest.mark.slow
def test_plain_trainer_checkpoints_a_tied_head(tokenizer, tmp_path):
    # transformers.Trainer itself, as user code names it, on a masked-LM head (the decoder is the embedding
    # matrix): a checkpoint every step, the best one loaded at the end, then save_model.
    path = save_hf(transformers.BertForMaskedLM, tmp_path / "base")
    train = masked_lm_rows(tokenizer)
    trainers = {}
    for side, model in zip(("transformers", "bertlite"), twins("BertForMaskedLM", path), strict=True):
        args = training_args(
            tmp_path / side,
            max_steps=3,
            eval_strategy="steps",
            eval_steps=1,
            save_strategy="steps",
            save_steps=1,
            load_best_model_at_end=True,
            metric_for_best_model="eval_loss",
        )
        trainer = transformers.Trainer(model=model, args=args, train_dataset=train, eval_dataset=train[:4])
        trainer.train()
        trainer.save_model(str(tmp_path / f"saved-{side}"))
        trainers[side] = trainer
    hf_trainer, our_trainer = trainers.values()
    assert losses(our_trainer) == losses(hf_trainer) and len(losses(our_trainer)) == 3
    assert our_trainer.state.best_metric == hf_trainer.state.best_metric
    assert_same_state(hf_trainer.model, our_trainer.model)
    model = our_trainer.model
    assert model.cls.predictions.decoder.weight is model.get_input_embeddings().weight
    batch = tokenizer(sentences(3, seed=5), padding=True, return_tensors="pt")
    expected = logits_of(hf_trainer.model, batch)
    # transformers.Trainer writes weights without config.json for a model that is not its own: bertlite
    # says what to do, and loads the weights with config=.
    folder = tmp_path / "saved-bertlite"
    assert not (folder / "config.json").exists()
    with pytest.raises(
        bertlite.CheckpointNotFoundError, match=r"saved-bertlite: weights without config.json .*config="
    ):
        bertlite.BertForMaskedLM.from_pretrained(folder)
    reloaded = bertlite.BertForMaskedLM.from_pretrained(folder, config=model.config, attn_implementation="eager")
    torch.testing.assert_close(logits_of(reloaded, batch), expected, atol=0.0, rtol=0.0)
    model.config.save_pretrained(folder)  # what the message offers: then both libraries load the folder
    for loaded in twins("BertForMaskedLM", str(folder)):
        torch.testing.assert_close(logits_of(loaded, batch), expected, atol=0.0, rtol=0.0)


@pytest.mark.parametrize(
    "name, labels",
    [
        ("BertForSequenceClassification", lambda ids: torch.tensor([0, 1, 1])),
        ("BertForMaskedLM", lambda ids: ids.masked_fill(ids % 3 == 0, -100)),
        ("BertLMHeadModel", lambda ids: ids),  # transformers divides its summed loss by num_items_in_batch
    ],
)
def test_heads_take_num_items_in_batch(name, labels, tokenizer, tmp_path):
    config = {"is_decoder": True} if name == "BertLMHeadModel" else {"num_labels": 2}
    hf, ours = twins(name, save_hf(getattr(transformers, name), tmp_path, std=0.3, **config))
    batch = tokenizer(sentences(3, seed=6), padding=True, return_tensors="pt")
    batch["labels"] = labels(batch["input_ids"])
    extra = {"num_items_in_batch": torch.tensor(7)}
    expected = hf(**batch, **extra).loss
    torch.testing.assert_close(ours(**batch, **extra).loss, expected, atol=0.0, rtol=0.0)


# --- transformers.pipeline -----------------------------------------------------------------

PIPELINES = [
    ("feature-extraction", "BertModel", "the cat sat on the mat.", {}),
    ("feature-extraction", "BertModel", "the cat sat on the mat.", {"batch_size": 2}),
    ("fill-mask", "BertForMaskedLM", "the cat [MASK] on the mat.", {"top_k": 3, "batch_size": 2}),
    ("text-classification", "BertForSequenceClassification", "the cat sat on the mat.", {"top_k": None}),
    ("fill-mask", "BertForMaskedLM", "the cat [MASK] on the mat.", {"top_k": 5}),
    ("token-classification", "BertForTokenClassification", "the red bird sang near a tree.", {}),
    (
        "token-classification",
        "BertForTokenClassification",
        "the red bird sang near a tree.",
        {"aggregation_strategy": "simple"},
    ),
]


@pytest.mark.parametrize("task, name, text, call_kwargs", PIPELINES)
def test_pipeline(task, name, text, call_kwargs, tokenizer, tmp_path):
    config = {"num_labels": 3} if name in ("BertForSequenceClassification", "BertForTokenClassification") else {}
    hf, ours = twins(name, save_hf(getattr(transformers, name), tmp_path, std=0.3, **config))
    # The pipelines keep positional access (feature-extraction's output[0]) only for transformers' ModelOutput.
    assert isinstance(ours(**tokenizer(text, return_tensors="pt")), transformers.utils.ModelOutput)
    texts = [text, text[:-1] + " near a big tree."]
    results = [transformers.pipeline(task, model=m, tokenizer=tokenizer)(texts, **call_kwargs) for m in (hf, ours)]
    assert results[0]  # something was predicted
    assert results[1] == results[0]  # the same labels, tokens, spans and float scores, exactly


def test_extractive_question_answering(tokenizer, tmp_path):
    # transformers 5 removed the question-answering pipeline (REMOVED_TASKS in transformers.pipelines);
    # this is the manual inference of its question-answering task guide: argmax of start and end logits.
    hf, ours = twins("BertForQuestionAnswering", save_hf(transformers.BertForQuestionAnswering, tmp_path, std=0.3))
    inputs = tokenizer(["who sat on the mat?"], ["the old cat sat on the red mat."], return_tensors="pt")
    answers = []
    for model in (hf, ours):
        with torch.no_grad():
            out = model(**inputs)
        start, end = int(out.start_logits.argmax()), int(out.end_logits.argmax())
        answers.append((out.start_logits, out.end_logits, tokenizer.decode(inputs["input_ids"][0, start : end + 1])))
    torch.testing.assert_close(answers[1][0], answers[0][0], atol=0.0, rtol=0.0)
    torch.testing.assert_close(answers[1][1], answers[0][1], atol=0.0, rtol=0.0)
    assert answers[1][2] == answers[0][2]


# --- PEFT ----------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # PEFT asks it
@pytest.mark.slow
def test_peft_lora(tokenizer, classifier_path, tmp_path):
    # LoRA on query/value, trained by transformers.Trainer (which saves a PeftModel's adapter itself)
    # with gradient checkpointing (PEFT then makes the embedding output require grad).
    path = classifier_path
    train = classification_data(tokenizer, 12, seed=7)
    batch = tokenizer(sentences(4, seed=8), padding=True, return_tensors="pt")
    trained = {}
    for side, base in zip(("transformers", "bertlite"), twins("BertForSequenceClassification", path), strict=True):
        torch.manual_seed(0)  # LoRA's A matrices are drawn at random
        lora = peft.LoraConfig(task_type="SEQ_CLS", target_modules=["query", "value"], r=4, lora_alpha=8)
        model = peft.get_peft_model(base, lora)
        assert model.peft_config["default"].base_model_name_or_path == path
        args = training_args(tmp_path / side, max_steps=3, gradient_checkpointing=True)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
        trainer.train()
        trainer.save_model(str(tmp_path / f"adapter-{side}"))
        trained[side] = (model, losses(trainer))
    (hf_model, hf_losses), (our_model, our_losses) = trained.values()
    assert our_losses == hf_losses
    expected = logits_of(hf_model, batch)
    torch.testing.assert_close(logits_of(our_model, batch), expected, atol=0.0, rtol=0.0)

    adapter = tmp_path / "adapter-bertlite"
    saved = json.loads((adapter / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == path and sorted(saved["target_modules"]) == ["query", "value"]
    # The adapter bertlite trained loads onto either library's base model.
    for base in twins("BertForSequenceClassification", path):
        reloaded = peft.PeftModel.from_pretrained(base, str(adapter))
        torch.testing.assert_close(logits_of(reloaded, batch), expected, atol=0.0, rtol=0.0)


# --- sentence-transformers -----------------------------------------------------------------


@pytest.mark.slow
def test_sentence_transformers_backbone(real_model_path, corpus_texts, tmp_path):
    # The real checkpoint: plain sentence-transformers first, then the same object on bertlite.
    texts = corpus_texts[:32]

    def encode(model):
        return model.encode(texts, batch_size=16, convert_to_tensor=True)

    model = sentence_transformers.SentenceTransformer(str(real_model_path), device="cpu")
    expected = encode(model)
    assert integrations.use_bertlite(model) is model
    assert type(model[0].auto_model) is bertlite.BertModel
    torch.testing.assert_close(encode(model), expected, atol=0.0, rtol=0.0)

    # Saved through bertlite's save_pretrained; plain sentence-transformers reloads it.
    model.save(str(tmp_path / "saved"))
    reloaded = sentence_transformers.SentenceTransformer(str(tmp_path / "saved"), device="cpu")
    assert type(reloaded[0].auto_model) is transformers.BertModel
    torch.testing.assert_close(encode(reloaded), expected, atol=0.0, rtol=0.0)
    torch.testing.assert_close(encode(integrations.use_bertlite(reloaded)), expected, atol=0.0, rtol=0.0)


def test_cross_encoder_on_bertlite(tokenizer, tmp_path):
    # A cross-encoder is a sentence-transformers model around BertForSequenceClassification (num_labels=1).
    path = save_hf(transformers.BertForSequenceClassification, tmp_path, std=0.3, num_labels=1)
    tokenizer.save_pretrained(path)
    pairs = [("who sat on the mat?", "the cat sat on the mat."), ("where is the dog?", "the red bird sang.")]
    model = sentence_transformers.CrossEncoder(path, device="cpu")
    expected = model.predict(pairs, convert_to_tensor=True)
    integrations.use_bertlite(model)
    assert type(model[0].auto_model) is bertlite.BertForSequenceClassification
    torch.testing.assert_close(model.predict(pairs, convert_to_tensor=True), expected, atol=0.0, rtol=0.0)


def test_to_bertlite_converts_a_loaded_transformers_model(tokenizer, tmp_path):
    # What use_bertlite does per module: the class of the same name, the very same tensors, the tie kept.
    hf = transformers.BertForMaskedLM.from_pretrained(save_hf(transformers.BertForMaskedLM, tmp_path, std=0.3))
    ours = integrations.to_bertlite(hf)
    assert type(ours) is bertlite.BertForMaskedLM and ours.name_or_path == hf.name_or_path
    assert (
        ours.bert.embeddings.word_embeddings.weight.data_ptr() == hf.bert.embeddings.word_embeddings.weight.data_ptr()
    )
    assert ours.cls.predictions.decoder.weight is ours.get_input_embeddings().weight
    batch = tokenizer(sentences(3, seed=9), padding=True, return_tensors="pt")
    torch.testing.assert_close(logits_of(ours, batch), logits_of(hf, batch), atol=0.0, rtol=0.0)
    with pytest.raises(TypeError, match="Linear is not a BERT model class bertlite has"):
        integrations.to_bertlite(torch.nn.Linear(2, 2))


def test_use_bertlite_refuses_a_model_without_bert():
    with pytest.raises(ValueError, match=r"no module of this model holds a transformers BERT model.*0: Linear"):
        integrations.use_bertlite(torch.nn.Sequential(torch.nn.Linear(2, 2)))


@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta", "camembert", "electra", "mpnet", "distilbert"])
@pytest.mark.parametrize("head", ["Model", "ForSequenceClassification"])
def test_to_bertlite_converts_every_familys_model(model_type, head):
    # use_bertlite's twin for a family's model: the class of the same name, the same outputs.
    sizes = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
    config = transformers.AutoConfig.for_model(model_type, **sizes, attn_implementation="eager")
    torch.manual_seed(0)
    name = type(transformers.AutoModel.from_config(config)).__name__.removesuffix("Model") + head
    hf = getattr(transformers, name)(config).eval()
    ours = integrations.to_bertlite(hf, "eager").eval()
    assert type(ours).__name__ == name
    ids = torch.randint(3, 99, (2, 7))
    with torch.no_grad():
        expected, got = hf(input_ids=ids), ours(input_ids=ids)
    key = "last_hidden_state" if head == "Model" else "logits"
    torch.testing.assert_close(got[key], expected[key], atol=0.0, rtol=0.0)

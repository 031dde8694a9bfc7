"""The layers' role map: every family's layer declares where its parts are, and the module swaps find them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import bertlite
from bertlite.config import FAMILIES
from bertlite.layers.onednn import OneDNNLinear, optimize, restore
from bertlite.layers.roles import LINEAR_ROLES, RESIDUAL_ROLES, attention_of, part, roles_of
from bertlite.models.bert import BertSelfAttention

SIZES = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
# The families whose layers are BERT's post-LayerNorm layer under their own names.
BERT_LIKE = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "mpnet", "distilbert")


@pytest.mark.parametrize("model_type", BERT_LIKE)
def test_every_familys_layer_declares_parts_that_exist(model_type) -> None:
    model = bertlite.AutoModel.from_config(FAMILIES[model_type].config_class(**SIZES))
    layer = model.encoder.layer[0]
    roles = roles_of(layer)
    assert isinstance(attention_of(layer), BertSelfAttention) and attention_of(layer).qkv is None
    for role in ("query", "key", "value", "attention_output", "intermediate", "output"):
        assert type(part(layer, role)) is nn.Linear, role
    assert callable(part(layer, "activation"))
    assert layer.get_submodule(roles.activation.rpartition(".")[0]).hidden_act == model.config.hidden_act
    assert set(roles.residual_owners) == set(RESIDUAL_ROLES)
    assert all(layer.get_submodule(owner).fuses_residual is False for owner in roles.residual_owners.values())
    assert LINEAR_ROLES == ("qkv", "attention_output", "intermediate", "output")


@pytest.mark.parametrize("model_type", BERT_LIKE)
def test_the_swap_and_its_undoing_go_through_the_roles(model_type) -> None:
    model = bertlite.AutoModel.from_config(FAMILIES[model_type].config_class(**SIZES)).eval()
    ids = torch.randint(4, 99, (2, 7))
    with torch.no_grad():
        expected = model(input_ids=ids).last_hidden_state
        optimize(model, fuse_activation=False)
        fast = model(input_ids=ids).last_hidden_state
    layer = model.encoder.layer[0]
    assert attention_of(layer).qkv is not None and type(part(layer, "intermediate")) is OneDNNLinear
    torch.testing.assert_close(fast, expected, atol=1e-5, rtol=1e-5)
    restore(model)
    assert attention_of(layer).qkv is None and all(type(part(layer, r)) is nn.Linear for r in RESIDUAL_ROLES)


def test_a_layer_without_roles_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"Linear declares no layer roles \(a `roles = LayerRoles\(...\)` class attr"):
        roles_of(nn.Linear(2, 2))

"""The character CNN's kernels (`max_pooled_by_matmul`, `distinct_rows_by_packed_keys`) against the reference code of
`modeling_elmo` (`conv_max_pooled`, `distinct_rows_reference`: `torch.unique`), fp32 within `FLOAT32_TOLERANCE`."""

import pytest
import torch
from utils import assert_close, tiny_config, use_kernels

from hf_elmo import ElmoModel, kernels_char_cnn


@pytest.mark.parametrize(
    "shape, high",
    [((200, 20), 5), ((200, 50), 262), ((300, 21), 4000), ((1, 7), 3), ((0, 20), 1)],
    ids=["few-ids", "bytes", "learned-vocabulary", "one-row", "empty"],
)
def test_distinct_rows_by_packed_keys_equals_the_reference(shape, high):
    """Exactly `torch.unique(dim=0, return_inverse=True)`: the same rows in the same order, the same inverse."""
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(0, high, shape, generator=generator)
    if len(rows) > 10:
        rows[::3] = rows[1::3][: len(rows[::3])]  # many repeated rows
    distinct, inverse = kernels_char_cnn.distinct_rows_by_packed_keys(rows)
    expected_distinct, expected_inverse = torch.unique(rows, dim=0, return_inverse=True)
    assert torch.equal(distinct, expected_distinct) and torch.equal(inverse, expected_inverse)


@pytest.mark.parametrize(
    "config_overrides, words",
    [({}, 1), ({}, 150), ({"activation": "tanh", "filters": [[1, 3], [4, 5], [7, 6]]}, 70)],
    ids=["one-word", "several-chunks", "tanh-wide-filters"],
)
def test_fast_character_cnn_matches_conv1d(config_overrides, words, monkeypatch):
    """Windows times flattened filters, a chunk of words at a time, against `nn.Conv1d`."""
    torch.manual_seed(0)
    config = tiny_config(**config_overrides)
    encoder = ElmoModel(config).eval().char_encoder
    with torch.no_grad():
        for conv in encoder.convolutions:
            conv.bias.normal_()  # initialised to zero; the fast path adds it after the max
    char_ids = torch.randint(1, 262, (words, config.max_characters_per_token))
    char_ids[0, 5:] = 0  # a short word: the padding character fills the rest
    outputs = {}
    for fast in (True, False):
        use_kernels(config, fast, monkeypatch)
        with torch.inference_mode():
            outputs[fast] = encoder(char_ids)
    assert_close(outputs[True], outputs[False])

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


def assert_distinct_rows_equal_the_reference(rows: torch.Tensor):
    """`distinct_rows_by_packed_keys(rows)` exactly as `torch.unique(rows, dim=0, return_inverse=True)`."""
    distinct, inverse = kernels_char_cnn.distinct_rows_by_packed_keys(rows)
    expected_distinct, expected_inverse = torch.unique(rows, dim=0, return_inverse=True)
    assert torch.equal(distinct, expected_distinct) and torch.equal(inverse, expected_inverse)


def test_distinct_rows_differing_only_after_a_long_shared_prefix():
    """Words sharing their first 20 characters (byte ids, 9 bits: 7 columns a key) stay apart: every column is in a
    key, not only those of the first keys (a key loop over `range(per_key)` covers the first 13)."""
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 262, (1, 50), generator=generator).repeat(300, 1)
    rows[:, 20:] = torch.randint(0, 3, (300, 30), generator=generator)  # few values: repeats and near-repeats
    rows[:, 20:49] = rows[:1, 20:49]  # the last column alone tells most rows apart
    rows[::2, 20] = 261
    assert_distinct_rows_equal_the_reference(rows)


def test_distinct_rows_of_ids_below_256_fill_no_sign_bit():
    """Ids of 8 bits pack 7 to a key (63 bits), not 8: an id of 128 or more in a key's first column would set its
    sign bit and sort that row first."""
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 256, (200, 24), generator=generator)
    rows[0, 0] = 255
    assert_distinct_rows_equal_the_reference(rows)


def test_distinct_rows_sort_stably_on_every_key():
    """Rows sorted key by key from the least significant: each sort must keep the order the previous ones made, as
    it does not on the CPU for hundreds of equal keys unless asked to be stable."""
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 3, (1000, 14), generator=generator) * 100  # 8 bits: keys of columns 0-6 and 7-13
    rows[:, 1:7] = 5  # the first key takes 3 values, the second is all but distinct
    assert_distinct_rows_equal_the_reference(rows)


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

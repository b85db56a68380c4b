"""The linear-chain CRF: its algorithms against enumeration of every label sequence, masking, and label schemes."""

import itertools

import pytest
import torch
from torch.nn import functional as F
from utils import FLOAT32_TOLERANCE

from hf_elmo.crf_elmo import ConditionalRandomField, allowed_transitions, label_prefix_and_type

NUM_LABELS = 3
# Rows of different valid lengths (0 to 5), valid positions as a prefix, behind a first invalid one (as words behind
# <S>), and with invalid positions between them (labels of -100 inside a sentence).
MASKS = [
    [1, 1, 1, 1, 1, 0],
    [0, 1, 1, 1, 0, 0],
    [0, 1, 0, 0, 1, 1],
    [0, 0, 0, 1, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [1, 0, 1, 1, 0, 1],
]


def random_crf(num_labels: int = NUM_LABELS, allowed=None, seed: int = 0) -> ConditionalRandomField:
    """A CRF in float64 with random (not zero) transitions."""
    torch.manual_seed(seed)
    crf = ConditionalRandomField(num_labels, allowed).double()
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.normal_()
    return crf


def random_case(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    mask = torch.tensor(MASKS, dtype=torch.bool)
    return torch.randn(*mask.shape, NUM_LABELS, dtype=torch.float64), mask


def sequence_score(crf: ConditionalRandomField, emissions: torch.Tensor, labels: tuple[int, ...]) -> torch.Tensor:
    """The score of one label sequence over `emissions` `(n, num_labels)` (all valid), from the definition."""
    score = crf.start_transitions[labels[0]] + crf.end_transitions[labels[-1]]
    score = score + sum(emissions[i, label] for i, label in enumerate(labels))
    return score + sum(crf.transitions[a, b] for a, b in itertools.pairwise(labels))


def enumerated(crf, emissions, mask, allowed=None):
    """For each row: every label sequence over its valid positions with its score (legal ones only with `allowed`)."""
    rows = []
    for row_emissions, row_mask in zip(emissions, mask):
        valid = row_emissions[row_mask]
        sequences = [
            labels
            for labels in itertools.product(range(crf.num_labels), repeat=len(valid))
            if allowed is None or is_legal(labels, allowed, crf.num_labels)
        ]
        scores = torch.stack([sequence_score(crf, valid, labels) for labels in sequences]) if len(valid) else None
        rows.append((sequences, scores))
    return rows


def is_legal(labels, allowed, num_labels) -> bool:
    steps = zip((num_labels, *labels), (*labels, num_labels + 1))
    return all(step in set(allowed) for step in steps)


def test_log_partition_equals_enumeration_of_all_sequences():
    crf = random_crf()
    emissions, mask = random_case()
    log_partition = crf.log_partition(emissions, mask)
    for row, (_, scores) in enumerate(enumerated(crf, emissions, mask)):
        expected = torch.logsumexp(scores, dim=0) if scores is not None else torch.tensor(0.0, dtype=torch.float64)
        torch.testing.assert_close(log_partition[row], expected, atol=1e-12, rtol=0)


def test_path_score_and_loss_follow_the_definition():
    crf = random_crf()
    emissions, mask = random_case()
    torch.manual_seed(2)
    labels = torch.randint(0, NUM_LABELS, mask.shape).masked_fill(~mask, -100)
    scores = crf.path_score(emissions, labels, mask)
    for row in range(len(MASKS)):
        valid = labels[row][mask[row]]
        expected = sequence_score(crf, emissions[row][mask[row]], tuple(valid.tolist())) if len(valid) else 0.0
        torch.testing.assert_close(scores[row], torch.as_tensor(expected, dtype=torch.float64), atol=1e-12, rtol=0)
    # The loss: each row's negative log-likelihood, summed and divided by the labelled positions.
    expected_loss = (crf.log_partition(emissions, mask) - scores).sum() / mask.sum()
    torch.testing.assert_close(crf(emissions, labels), expected_loss, atol=1e-12, rtol=0)


def test_viterbi_path_is_the_best_of_all_sequences():
    crf = random_crf()
    emissions, mask = random_case()
    path = crf.decode(emissions, mask)
    assert path.dtype == torch.long and path.shape == mask.shape
    assert (path[~mask] == -100).all()
    for row, (sequences, scores) in enumerate(enumerated(crf, emissions, mask)):
        if scores is not None:
            assert tuple(path[row][mask[row]].tolist()) == sequences[scores.argmax()]


def test_marginals_equal_enumeration():
    crf = random_crf()
    emissions, mask = random_case()
    marginals = crf.marginals(emissions, mask)
    assert (marginals[~mask] == 0).all()
    for row, (sequences, scores) in enumerate(enumerated(crf, emissions, mask)):
        if scores is None:
            continue
        expected = torch.zeros(len(sequences[0]), NUM_LABELS, dtype=torch.float64)
        for labels, probability in zip(sequences, scores.softmax(dim=0)):
            expected[range(len(labels)), labels] += probability
        torch.testing.assert_close(marginals[row][mask[row]], expected, atol=1e-12, rtol=0)


def test_masked_positions_never_affect_loss_gradients_or_decoding():
    crf = random_crf()
    emissions, mask = random_case()
    torch.manual_seed(3)
    labels = torch.randint(0, NUM_LABELS, mask.shape).masked_fill(~mask, -100)
    garbage = emissions.clone()
    garbage[~mask] = 1e4 * torch.randn(int((~mask).sum()), NUM_LABELS, dtype=torch.float64)
    garbage[~mask & (torch.arange(mask.shape[1]) % 2 == 0)] = float("nan")  # padding may hold anything
    results = []
    for scores in (emissions, garbage):
        scores = scores.clone().requires_grad_()
        loss = crf(scores, labels)
        (gradient,) = torch.autograd.grad(loss, scores)
        results.append((loss, gradient, crf.decode(scores, mask), crf.marginals(scores, mask)))
    (loss, gradient, path, marginals), (garbage_loss, garbage_gradient, garbage_path, garbage_marginals) = results
    assert torch.equal(garbage_loss, loss) and torch.equal(garbage_gradient, gradient)
    assert (gradient[~mask] == 0).all() and gradient[mask].abs().sum() > 0
    assert torch.equal(garbage_path, path) and torch.equal(garbage_marginals, marginals)


def test_zero_transitions_make_the_loss_the_softmax_cross_entropy():
    crf = ConditionalRandomField(NUM_LABELS).double()
    assert all((parameter == 0).all() for parameter in crf.parameters())
    emissions, mask = random_case()
    torch.manual_seed(4)
    labels = torch.randint(0, NUM_LABELS, mask.shape).masked_fill(~mask, -100)
    expected = F.cross_entropy(emissions.reshape(-1, NUM_LABELS), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(crf(emissions, labels), expected, atol=1e-12, rtol=0)
    assert torch.equal(crf.decode(emissions, mask), emissions.argmax(dim=-1).masked_fill(~mask, -100))


def test_float32_loss_matches_float64():
    crf = random_crf()
    emissions, mask = random_case()
    labels = emissions.argmax(dim=-1).masked_fill(~mask, -100)
    single = ConditionalRandomField(NUM_LABELS)
    single.load_state_dict({name: value.float() for name, value in crf.state_dict().items()})
    loss = single(emissions.float(), labels)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss.double(), crf(emissions, labels), atol=1e-5, rtol=1e-5)


def test_the_mean_loss_over_a_single_token_is_its_negative_log_likelihood():
    """One labelled token, first in its row: the loss divides by one position, and its end transition is that of the
    token's own label (not of the position after it)."""
    crf = random_crf()
    torch.manual_seed(7)
    emissions = torch.randn(1, 4, NUM_LABELS, dtype=torch.float64)
    labels = torch.tensor([[2, -100, -100, -100]])
    scores = crf.start_transitions + emissions[0, 0] + crf.end_transitions
    torch.testing.assert_close(crf(emissions, labels), scores.logsumexp(dim=0) - scores[2], atol=1e-12, rtol=0)


def test_bfloat16_emissions_are_scored_in_float32():
    """bfloat16 emissions (a head under autocast) give the float32 loss of the same values, not one in bfloat16."""
    crf = random_crf().float()
    emissions, mask = random_case()
    labels = emissions.argmax(dim=-1).masked_fill(~mask, -100)
    emissions = emissions.to(torch.bfloat16)
    loss = crf(emissions, labels)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, crf(emissions.float(), labels), atol=FLOAT32_TOLERANCE, rtol=FLOAT32_TOLERANCE)


BIO_LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
BIOES_LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "E-PER", 4: "S-PER", 5: "S-LOC"}


def named_transitions(constraint_type, id2label):
    names = {**id2label, len(id2label): "START", len(id2label) + 1: "END"}
    return {(names[a], names[b]) for a, b in allowed_transitions(constraint_type, id2label)}


def test_bio_transitions():
    # I-X only after B-X or I-X (and never first); anything else goes anywhere, end included.
    others = ["O", "B-PER", "B-LOC"]
    expected = {("START", label) for label in others}
    expected |= {(a, b) for a in BIO_LABELS.values() for b in [*others, "END"]}
    expected |= {("B-PER", "I-PER"), ("I-PER", "I-PER"), ("B-LOC", "I-LOC"), ("I-LOC", "I-LOC")}
    assert named_transitions("BIO", BIO_LABELS) == expected
    assert ("O", "I-PER") not in expected and ("B-LOC", "I-PER") not in expected


def test_bioes_transitions():
    # An entity is S-X alone or B-X (I-X)* E-X: B-X and I-X must go on (same type), the rest must not be inside one.
    outside = ["O", "B-PER", "S-PER", "S-LOC"]
    expected = {("START", label) for label in outside}
    expected |= {(a, b) for a in ["O", "E-PER", "S-PER", "S-LOC"] for b in [*outside, "END"]}
    expected |= {(a, b) for a in ["B-PER", "I-PER"] for b in ["I-PER", "E-PER"]}
    assert named_transitions("BIOES", BIOES_LABELS) == expected


def test_labels_split_at_their_first_dash():
    """`O` alone is outside every entity; otherwise the prefix is what comes before the first dash, so that an entity
    type may hold dashes (`B-WORK-OF-ART`)."""
    assert label_prefix_and_type("O", "BIO") == ("O", "")
    assert label_prefix_and_type("B-WORK-OF-ART", "BIOES") == ("B", "WORK-OF-ART")
    assert label_prefix_and_type("I-PER", "BIO") == ("I", "PER")
    id2label = {0: "O", 1: "B-WORK-OF-ART", 2: "I-WORK-OF-ART"}
    assert named_transitions("BIO", id2label) >= {("B-WORK-OF-ART", "I-WORK-OF-ART"), ("O", "B-WORK-OF-ART")}


def test_the_loss_does_not_apply_the_constraint():
    """The loss scores every sequence, as without the constraint: a gold sequence the scheme forbids (I-PER after O,
    as IOB1 data has) costs a finite loss, that of the unconstrained CRF with the same parameters."""
    allowed = allowed_transitions("BIO", BIO_LABELS)
    constrained, free = random_crf(len(BIO_LABELS), allowed), random_crf(len(BIO_LABELS))
    torch.manual_seed(8)
    emissions = torch.randn(2, 4, len(BIO_LABELS), dtype=torch.float64)
    labels = torch.tensor([[0, 2, 2, 0], [1, 2, 0, -100]])  # the first row breaks BIO, the second does not
    loss = constrained(emissions, labels)
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss, free(emissions, labels), atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    "constraint_type, id2label, message",
    [
        ("IOB1", BIO_LABELS, "^crf_constraint must be one of \\('BIO', 'BIOES'\\) or None, got 'IOB1'$"),
        ("BIO", {0: "O", 1: "E-PER"}, "^crf_constraint 'BIO' needs labels named O or B/I-TYPE in id2label, got 'E-"),
        ("BIOES", {0: "O", 1: "PER"}, "got 'PER'$"),
        ("BIO", {0: "O", 1: "B-"}, "got 'B-'$"),
    ],
)
def test_unknown_schemes_and_labels_are_refused(constraint_type, id2label, message):
    with pytest.raises(ValueError, match=message):
        allowed_transitions(constraint_type, id2label)


@pytest.mark.parametrize("constraint_type, id2label", [("BIO", BIO_LABELS), ("BIOES", BIOES_LABELS)])
def test_constrained_decoding_takes_the_best_legal_sequence(constraint_type, id2label):
    allowed = allowed_transitions(constraint_type, id2label)
    num_labels = len(id2label)
    constrained = random_crf(num_labels, allowed)
    free = random_crf(num_labels)  # the same parameters, without the constraint
    torch.manual_seed(5)
    mask = torch.tensor([[0, 1, 1, 1, 0], [1, 1, 0, 1, 1], [0, 0, 1, 0, 0]], dtype=torch.bool)
    emissions = 3 * torch.randn(*mask.shape, num_labels, dtype=torch.float64)
    path = constrained.decode(emissions, mask)
    for row, (sequences, scores) in enumerate(enumerated(constrained, emissions, mask, allowed)):
        assert tuple(path[row][mask[row]].tolist()) == sequences[scores.argmax()]
    # Unconstrained, the same scores pick an illegal sequence in some row: the constraint did change the result.
    free_paths = free.decode(emissions, mask)
    assert not all(is_legal(tuple(row[keep].tolist()), allowed, num_labels) for row, keep in zip(free_paths, mask))
    # The marginals count legal sequences only.
    marginals = constrained.marginals(emissions, mask)
    for row, (sequences, scores) in enumerate(enumerated(constrained, emissions, mask, allowed)):
        expected = torch.zeros(len(sequences[0]), num_labels, dtype=torch.float64)
        for labels, probability in zip(sequences, scores.softmax(dim=0)):
            expected[range(len(labels)), labels] += probability
        torch.testing.assert_close(marginals[row][mask[row]], expected, atol=1e-12, rtol=0)


def test_bio_decoding_never_starts_an_entity_with_i():
    # Emissions that prefer O then I-PER: the unconstrained path is illegal BIO, the constrained one is not.
    allowed = allowed_transitions("BIO", BIO_LABELS)
    emissions = torch.full((1, 3, len(BIO_LABELS)), -5.0)
    emissions[0, 0, 0] = 5.0  # O
    emissions[0, 1, 2] = 5.0  # I-PER
    emissions[0, 1, 1] = 4.0  # B-PER, a close second
    emissions[0, 2, 2] = 5.0  # I-PER
    mask = torch.ones(1, 3, dtype=torch.bool)
    assert ConditionalRandomField(len(BIO_LABELS)).decode(emissions, mask).tolist() == [[0, 2, 2]]
    assert ConditionalRandomField(len(BIO_LABELS), allowed).decode(emissions, mask).tolist() == [[0, 1, 2]]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_results_match_cpu_and_half_precision_scores_compute_in_float32():
    allowed = allowed_transitions("BIO", BIO_LABELS)
    crf = random_crf(len(BIO_LABELS), allowed).float()
    torch.manual_seed(6)
    mask = torch.tensor(MASKS, dtype=torch.bool)
    emissions = torch.randn(*mask.shape, len(BIO_LABELS))
    labels = emissions.argmax(dim=-1).masked_fill(~mask, -100)
    on_gpu = crf.to("cuda")
    loss = on_gpu(emissions.cuda().half(), labels.cuda())
    assert loss.dtype == torch.float32 and loss.device.type == "cuda"
    cpu = random_crf(len(BIO_LABELS), allowed).float()
    torch.testing.assert_close(loss.cpu(), cpu(emissions.half().float(), labels), atol=1e-5, rtol=1e-5)
    assert torch.equal(on_gpu.decode(emissions.cuda(), mask.cuda()).cpu(), cpu.decode(emissions, mask))
    torch.testing.assert_close(on_gpu.marginals(emissions.cuda(), mask.cuda()).cpu(), cpu.marginals(emissions, mask))

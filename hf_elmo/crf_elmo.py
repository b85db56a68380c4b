"""
A linear-chain conditional random field over a tagger's per-position scores (Lafferty et al., 2001), as the ELMo
paper's NER model and AllenNLP's `crf_tagger` put over the task BiLSTM: the loss is the negative log-likelihood of the
gold label sequence, the prediction the Viterbi path, optionally restricted to the transitions that a BIO or BIOES
label scheme allows ([`allowed_transitions`]).

The chain runs over the valid positions of each row, wherever they are (not only a prefix: `<S>`, `</S>`, padding and
positions labelled -100 are left out, and the chain links the valid positions around them), so that the scores at the
other positions never enter a result. Every algorithm is batched, in log space (`logsumexp`), and in float32 or wider.
"""

import torch
from torch import nn

from .configuration_elmo import LABEL_SCHEMES


def label_prefix_and_type(label: str, constraint_type: str) -> tuple[str, str]:
    """`("O", "")` for `O`, `(prefix, entity type)` for a label such as `B-PER`; a label outside the scheme raises."""
    if label == "O":
        return "O", ""
    prefix, dash, entity_type = label.partition("-")
    if not dash or not entity_type or prefix not in LABEL_SCHEMES[constraint_type]:
        raise ValueError(
            f"crf_constraint {constraint_type!r} needs labels named O or "
            f"{'/'.join(LABEL_SCHEMES[constraint_type])}-TYPE in id2label, got {label!r}"
        )
    return prefix, entity_type


def is_transition_allowed(constraint_type: str, source: tuple[str, str], target: tuple[str, str]) -> bool:
    """Whether label `source` (or `("START", "")`) may be followed by `target` (or `("END", "")`) in the scheme."""
    (from_prefix, from_type), (to_prefix, to_type) = source, target
    if from_prefix == "START" and to_prefix == "END":
        return False  # a sentence holds at least one word
    if constraint_type == "BIO":
        # I-X continues an entity begun by B-X; anything may precede O, B-Y or the end.
        return to_prefix != "I" or (from_prefix in ("B", "I") and from_type == to_type)
    # BIOES: an entity is S-X alone or B-X (I-X)* E-X, so B-X and I-X must be continued and only they may be.
    continues = to_prefix in ("I", "E")
    if from_prefix in ("B", "I"):
        return continues and from_type == to_type
    return not continues


def allowed_transitions(constraint_type: str, id2label: dict[int, str]) -> list[tuple[int, int]]:
    """
    The `(from, to)` label-id pairs that the scheme `constraint_type` ("BIO" or "BIOES") allows between consecutive
    words, with AllenNLP's convention for the sentence boundaries: id `len(id2label)` stands for the start (a `from`)
    and `len(id2label) + 1` for the end (a `to`).
    """
    if constraint_type not in LABEL_SCHEMES:
        raise ValueError(f"crf_constraint must be one of {tuple(LABEL_SCHEMES)} or None, got {constraint_type!r}")
    num_labels = len(id2label)
    tags = [(index, label_prefix_and_type(id2label[index], constraint_type)) for index in range(num_labels)]
    sources = [(num_labels, ("START", ""))] + tags
    targets = tags + [(num_labels + 1, ("END", ""))]
    return [
        (from_id, to_id)
        for from_id, source in sources
        for to_id, target in targets
        if is_transition_allowed(constraint_type, source, target)
    ]


def forward_log_scores(
    emissions: torch.Tensor, mask: torch.Tensor, start: torch.Tensor, transitions: torch.Tensor
) -> torch.Tensor:
    """
    The forward algorithm: `emissions` `(batch, positions, num_labels)`, `mask` `(batch, positions)` bool ->
    `(batch, positions, num_labels)`, at `[b, t, j]` the log-sum-exp of the scores (start and emission scores and
    transitions) of every label sequence over the valid positions up to `t` whose last label is `j`. An invalid
    position carries the value before it; before the first valid position the value is `start`.
    """
    batch, positions, num_labels = emissions.shape
    alpha = start.expand(batch, num_labels)
    started = torch.zeros(batch, dtype=torch.bool, device=emissions.device)
    alphas = []
    for t in range(positions):
        through_transitions = torch.logsumexp(alpha.unsqueeze(2) + transitions, dim=1)
        stepped = torch.where(started.unsqueeze(1), through_transitions, alpha) + emissions[:, t]
        alpha = torch.where(mask[:, t].unsqueeze(1), stepped, alpha)
        started = started | mask[:, t]
        alphas.append(alpha)
    return torch.stack(alphas, dim=1)


class ConditionalRandomField(nn.Module):
    """
    Scores a label sequence `y_1 .. y_n` over the valid positions of a row as `start_transitions[y_1] + sum_t
    emissions[t, y_t] + sum_t transitions[y_(t-1), y_t] + end_transitions[y_n]`; its probability is the exponent of
    that score minus the log-partition, the log-sum-exp of the scores of all `num_labels ** n` sequences.

    The parameters start at zero, where the loss is the per-position softmax cross-entropy of the emissions.

    Args:
        num_labels: labels per position.
        allowed (`list[tuple[int, int]]`, *optional*): the pairs of [`allowed_transitions`]; `decode` and `marginals`
            never take another transition. The loss does not apply them (as AllenNLP's): a gold sequence that breaks
            the scheme (IOB1 data under BIO, an entity cut by truncation under BIOES) would cost an infinite loss.
    """

    def __init__(self, num_labels: int, allowed: list[tuple[int, int]] | None = None):
        super().__init__()
        self.num_labels = num_labels
        self.allowed = allowed
        self.transitions = nn.Parameter(torch.empty(num_labels, num_labels))  # [from, to]
        self.start_transitions = nn.Parameter(torch.empty(num_labels))
        self.end_transitions = nn.Parameter(torch.empty(num_labels))
        self.reset_parameters()

    def reset_parameters(self):
        for parameter in (self.transitions, self.start_transitions, self.end_transitions):
            nn.init.zeros_(parameter)

    def forward(self, emissions: torch.Tensor, labels: torch.LongTensor) -> torch.Tensor:
        """
        The loss: the negative log-likelihood of `labels` `(batch, positions)` given `emissions` `(batch, positions,
        num_labels)`, summed over the rows and divided by the number of labelled positions (as the softmax
        cross-entropy is averaged over them, so that the two take the same learning rates); -100 marks a position
        outside the chain.
        """
        mask = labels != -100
        negative_log_likelihood = self.log_partition(emissions, mask) - self.path_score(emissions, labels, mask)
        return negative_log_likelihood.sum() / mask.sum().clamp(min=1)

    def path_score(self, emissions: torch.Tensor, labels: torch.LongTensor, mask: torch.Tensor) -> torch.Tensor:
        """The score `(batch,)` of `labels` `(batch, positions)` over the positions where `mask` is set."""
        emissions = self._valid_emissions(emissions, mask)
        start, transitions, end = self._transition_scores(emissions, constrained=False)
        labels = labels.masked_fill(~mask, 0)
        positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
        # The index of the last valid position up to each position (-1 before the first), and the one before it.
        last_valid = torch.where(mask, positions, -1).cummax(dim=1).values
        previous = torch.cat([torch.full_like(last_valid[:, :1], -1), last_valid[:, :-1]], dim=1)
        previous_labels = labels.gather(1, previous.clamp(min=0))
        steps = emissions.gather(2, labels.unsqueeze(2)).squeeze(2) + torch.where(
            previous >= 0, transitions[previous_labels, labels], start[labels]
        )
        final_labels = labels.gather(1, last_valid[:, -1:].clamp(min=0)).squeeze(1)
        return torch.where(mask, steps, 0.0).sum(dim=1) + torch.where(mask.any(dim=1), end[final_labels], 0.0)

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The log-partition `(batch,)` over the positions where `mask` is set (0 for a row without any)."""
        emissions = self._valid_emissions(emissions, mask)
        start, transitions, end = self._transition_scores(emissions, constrained=False)
        alphas = forward_log_scores(emissions, mask, start, transitions)
        return torch.where(mask.any(dim=1), torch.logsumexp(alphas[:, -1] + end, dim=-1), 0.0)

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.LongTensor:
        """
        The Viterbi path: the label sequence of highest score over the positions where `mask` is set (within the
        allowed transitions), `(batch, positions)`, -100 elsewhere.
        """
        emissions = self._valid_emissions(emissions, mask)
        start, transitions, end = self._transition_scores(emissions, constrained=True)
        batch, positions, num_labels = emissions.shape
        score = start.expand(batch, num_labels)
        started = torch.zeros(batch, dtype=torch.bool, device=emissions.device)
        stay = torch.arange(num_labels, device=emissions.device).expand(batch, num_labels)
        # backpointers[t][b, j]: the label at the state before t of the best path in state j at t; an invalid
        # position (or the first valid one) keeps the label, so that backtracking walks through it unchanged.
        backpointers = []
        for t in range(positions):
            best, best_previous = (score.unsqueeze(2) + transitions).max(dim=1)
            stepped = torch.where(started.unsqueeze(1), best, score) + emissions[:, t]
            valid = mask[:, t].unsqueeze(1)
            score = torch.where(valid, stepped, score)
            backpointers.append(torch.where(valid & started.unsqueeze(1), best_previous, stay))
            started = started | mask[:, t]
        label = (score + end).argmax(dim=-1)
        path = [label]
        for pointers in reversed(backpointers[1:]):
            label = pointers.gather(1, label.unsqueeze(1)).squeeze(1)
            path.append(label)
        return torch.stack(path[::-1], dim=1).masked_fill(~mask, -100)

    @torch.no_grad()
    def marginals(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """
        The probability of each label at each position `(batch, positions, num_labels)` under the CRF (within the
        allowed transitions), by the forward-backward algorithm; 0 where `mask` is not set.
        """
        emissions = self._valid_emissions(emissions, mask)
        start, transitions, end = self._transition_scores(emissions, constrained=True)
        alphas = forward_log_scores(emissions, mask, start, transitions)
        # The backward scores are the forward ones of the reversed chain; both count the emission at t.
        betas = forward_log_scores(emissions.flip(1), mask.flip(1), end, transitions.T).flip(1)
        log_partition = torch.logsumexp(alphas[:, -1] + end, dim=-1)
        log_marginals = alphas + betas - emissions - log_partition[:, None, None]
        return torch.where(mask.unsqueeze(2), log_marginals.exp(), 0.0)

    @staticmethod
    def _valid_emissions(emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """`emissions` in float32 or wider, zero outside `mask` (whatever they held there: padding may hold NaN)."""
        dtype = torch.promote_types(emissions.dtype, torch.float32)
        return emissions.to(dtype).masked_fill(~mask.unsqueeze(2), 0.0)

    def _transition_scores(
        self, emissions: torch.Tensor, constrained: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Start, pairwise and end transitions on the device and in the dtype of `emissions`; -inf where forbidden."""
        start, transitions, end = (
            parameter.to(device=emissions.device, dtype=emissions.dtype)
            for parameter in (self.start_transitions, self.transitions, self.end_transitions)
        )
        if not constrained or self.allowed is None:
            return start, transitions, end
        n = self.num_labels
        allowed = torch.zeros(n + 2, n + 2, dtype=torch.bool, device=emissions.device)
        allowed[tuple(torch.tensor(self.allowed, device=emissions.device).T)] = True
        return (
            start.masked_fill(~allowed[n, :n], float("-inf")),
            transitions.masked_fill(~allowed[:n, :n], float("-inf")),
            end.masked_fill(~allowed[:n, n + 1], float("-inf")),
        )

"""
Sentence vectors from a biLM's layers: a mix of the layers averaged over each sentence's words, weighted per word
where weights are given, less what a reference text's vectors share ([`sentence_vectors`], which
`ElmoModel.sentence_embedding` returns; `sentence_weighting` estimates the weights and the reference statistics).
"""

import torch


def sentence_vectors(
    layers: tuple[torch.Tensor, ...],
    words: torch.Tensor,
    layer_weights: list[float] | torch.Tensor | None = None,
    word_weights: torch.Tensor | None = None,
    common_component: list[float] | list[list[float]] | torch.Tensor | None = None,
    reference_mean: list[float] | torch.Tensor | None = None,
) -> torch.Tensor:
    """
    `v = sum_i c_i x_i / n` per row, `(batch, dim)`, over the `n` positions `words` `(batch, positions)` (bool) marks,
    where `x_i = sum_j w_j h_ij` mixes `layers` (tensors `(batch, positions, dim)`) with `layer_weights` `w` (by
    default the plain average) and `c_i` is `word_weights` `(batch, positions)` (by default 1: the mean). A row
    without words gives zeros.

    Then, where given, what a reference text's sentence vectors share is taken out: `reference_mean` `m` `(dim,)` is
    subtracted (`v - m`), and each direction of `common_component`, `(dim,)` or `(k, dim)`, is projected out (its
    rows orthonormalised: `v - U^T U v`). One direction without the mean is Arora et al.'s (2017) common component,
    the first singular vector of a corpus's sentence vectors; the mean and the first `k` principal directions are Mu
    and Viswanath's (2018) "all-but-the-top" (`sentence_weighting.reference_directions` estimates both).
    """
    reference = layers[0]
    dim = reference.shape[-1]
    weights = torch.full((len(layers),), 1.0 / len(layers)) if layer_weights is None else layer_weights
    weights = torch.as_tensor(weights, dtype=reference.dtype, device=reference.device)
    if weights.shape != (len(layers),):
        raise ValueError(f"layer_weights needs {len(layers)} values, got shape {tuple(weights.shape)}")
    per_word = words.to(reference.dtype)
    if word_weights is not None:
        if word_weights.shape != words.shape:
            raise ValueError(
                f"word_weights must have shape {tuple(words.shape)}, (batch, positions), got "
                f"{tuple(word_weights.shape)}"
            )
        per_word = per_word * word_weights.to(reference.device, reference.dtype)
    mixed = sum(weight * layer for weight, layer in zip(weights, layers))
    vectors = (mixed * per_word.unsqueeze(-1)).sum(dim=1) / words.sum(dim=1, keepdim=True).clamp(min=1)
    if reference_mean is not None:
        mean = torch.as_tensor(reference_mean, dtype=reference.dtype, device=reference.device)
        if mean.shape != (dim,):
            raise ValueError(f"reference_mean must be a vector of {dim} values, got shape {tuple(mean.shape)}")
        vectors = vectors - mean
    if common_component is None:
        return vectors
    given = torch.as_tensor(common_component, dtype=reference.dtype, device=reference.device)
    directions = given.unsqueeze(0) if given.dim() == 1 else given
    if directions.dim() != 2 or directions.shape[1] != dim or not 0 < len(directions) <= dim:
        raise ValueError(
            f"common_component must be {dim} values or (k, {dim}) with 1 <= k <= {dim}, got shape {tuple(given.shape)}"
        )
    # Orthonormal rows spanning the same directions: R's diagonal is zero where a row depends on those before it.
    basis, triangle = torch.linalg.qr(directions.T.to(torch.float64))
    if bool((triangle.diagonal().abs() <= 1e-6 * directions.norm(dim=1).max()).any()):
        raise ValueError("common_component's directions must be non-zero and linearly independent")
    basis = basis.T.to(reference.dtype)
    return vectors - (vectors @ basis.T) @ basis

"""ELMo (Peters et al., 2018): a character CNN feeding two independent stacks of projected, clipped LSTMs."""

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch._higher_order_ops.scan import scan
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers import PreTrainedModel
from transformers.modeling_outputs import (
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils import ModelOutput

from .configuration_elmo import ElmoConfig
from .crf_elmo import ConditionalRandomField, allowed_transitions
from .errors import is_integer
from .folder_layout import (
    QUESTION_ANSWERING_PIPELINE_FILE,
    SENTENCE_TRANSFORMERS_MODULE,
    FolderExtra,
    auto_map,
)
from .kernels_elmo import (
    ALL_CHARACTER_CONVOLUTIONS,
    ALL_DISTINCT_ROWS,
    ALL_RECURRENCES,
    ALL_TASK_BILSTMS,
    ALL_VALUE_CHECKS,
    choose_path,
)
from .model_names import local_model_folder, original_checkpoint
from .sentence_vectors import sentence_vectors
from .weight_checks import refuse_unloaded_bilm_weights


@dataclass
class ElmoModelOutput(ModelOutput):
    """
    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch, positions, 2 * projection_dim)`):
            the top layer, `[forward ; backward]`, zero at padded positions.
        hidden_states (`tuple(torch.FloatTensor)`, *optional*): all `n_layers + 1` layers, each of the shape above;
            layer 0 is the character encoder's output twice, `[x ; x]`.
        final_state (`tuple(torch.FloatTensor, torch.FloatTensor)`, *optional*): `(hidden, memory)` of every LSTM
            after each row's last valid position, of shapes `(n_layers, 2, batch, projection_dim)` and
            `(n_layers, 2, batch, cell_dim)`; index 0 of the second axis is the forward direction.
    """

    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    final_state: tuple[torch.FloatTensor, torch.FloatTensor] | None = None


class ElmoHighway(nn.Module):
    """
    One highway layer with `gate = sigmoid(x W_g^T + b_g)` and `f = relu(x W_n^T + b_n)`: `gate * f + (1 - gate) * x`
    (bilm-tf, `config.highway_gate="transform"`) or `gate * x + (1 - gate) * f` (`"carry"`, ELMoForManyLangs). The
    two are not folded into one by negating the gate: `1 - sigmoid(z)` and `sigmoid(-z)` round differently.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__()
        dim = config.n_filters
        self.gate_on_carry = config.highway_gate == "carry"
        self.nonlinear_weight = nn.Parameter(torch.empty(dim, dim))
        self.nonlinear_bias = nn.Parameter(torch.empty(dim))
        self.gate_weight = nn.Parameter(torch.empty(dim, dim))
        self.gate_bias = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(F.linear(x, self.gate_weight, self.gate_bias))
        nonlinear = torch.relu(F.linear(x, self.nonlinear_weight, self.nonlinear_bias))
        if self.gate_on_carry:
            return gate * x + (1.0 - gate) * nonlinear
        return gate * nonlinear + (1.0 - gate) * x


def distinct_rows_reference(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct rows of `rows` `(n, columns)` in lexicographic order, and each row's index among them."""
    return torch.unique(rows, dim=0, return_inverse=True)


def conv_max_pooled(module: nn.Conv1d, chars: torch.Tensor) -> torch.Tensor:
    """The reference character convolution: `chars` `(words, chars, char_dim)` -> max over positions `(words, n)`."""
    return F.conv1d(chars.transpose(1, 2), module.weight, module.bias).amax(dim=-1)


class ElmoCharConvolution(nn.Conv1d):
    """One width of character filters and its max over positions, as one module call (see `kernels_elmo`)."""

    def __init__(self, config: ElmoConfig, width: int, n_filters: int):
        super().__init__(config.char_embedding_dim, n_filters, width)
        self.config = config

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        """`chars` `(words, max_characters_per_token, char_embedding_dim)` -> `(words, n_filters)`."""
        path = choose_path(self.config, [self], chars)
        return ALL_CHARACTER_CONVOLUTIONS.get_interface(path, chars.device, conv_max_pooled)(self, chars)


class ElmoCharacterEncoder(nn.Module):
    """
    Context-independent word representation from character ids: embedding, CNN, max-pool, highways, projection. With
    a word-embedding input (`config.word_input_vocab_size`), each word's vector comes before the highways' output,
    ahead of the projection.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.char_embedding = nn.Embedding(config.alphabet.table_rows, config.char_embedding_dim, padding_idx=0)
        self.convolutions = nn.ModuleList(
            ElmoCharConvolution(config, width, n_filters) for width, n_filters in config.filters
        )
        self.activation = torch.tanh if config.activation == "tanh" else torch.relu
        self.highways = nn.ModuleList(ElmoHighway(config) for _ in range(config.n_highway))
        self.word_embedding = (
            nn.Embedding(config.word_input_vocab_size, config.word_input_dim)
            if config.word_input_vocab_size is not None
            else None
        )
        width = config.n_filters + (config.word_input_dim or 0)
        # bilm-tf projects only when the widths differ; ELMoForManyLangs always does.
        self.projection = (
            nn.Linear(width, config.projection_dim)
            if config.always_project or width != config.projection_dim
            else None
        )

    def forward(self, char_ids: torch.LongTensor, word_ids: torch.LongTensor | None = None) -> torch.Tensor:
        """`char_ids` `(words, max_characters_per_token)` (and `word_ids` `(words,)`) -> `(words, projection_dim)`."""
        chars = self.char_embedding(char_ids)  # (words, chars, char_dim)
        x = self.activation(torch.cat([convolution(chars) for convolution in self.convolutions], dim=-1))
        for highway in self.highways:
            x = highway(x)
        if self.word_embedding is not None:
            x = torch.cat([self.word_embedding(word_ids), x], dim=-1)
        return self.projection(x) if self.projection is not None else x


def lstm_cell(
    input_gates: torch.Tensor,
    hidden: torch.Tensor,
    memory: torch.Tensor,
    recurrent_kernel: torch.Tensor,
    forget_bias: float = 0.0,
    cell_clip: float | None = None,
    projection_kernel: torch.Tensor | None = None,
    proj_clip: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """
    One step of an LSTM for every row: TensorFlow's `LSTMCell`, gates ordered input, forget, cell, output (as
    `nn.LSTM` orders them too), `forget_bias` added to the forget gate, the memory clipped to `cell_clip`, the output
    projected by `projection_kernel` and clipped to `proj_clip`. `input_gates` `(batch, 4 * cell_dim)` is the step's
    input times the input kernel plus the bias, `recurrent_kernel` `(hidden_dim, 4 * cell_dim)`; returns the state
    after the step, `(hidden, memory)`.
    """
    gates = input_gates + hidden @ recurrent_kernel
    in_gate, forget_gate, cell_input, out_gate = gates.chunk(4, dim=-1)
    forget = torch.sigmoid(forget_gate + forget_bias)
    new_memory = torch.sigmoid(in_gate) * torch.tanh(cell_input) + forget * memory
    if cell_clip is not None:
        new_memory = new_memory.clamp(-cell_clip, cell_clip)
    new_hidden = torch.sigmoid(out_gate) * torch.tanh(new_memory)
    if projection_kernel is not None:
        new_hidden = new_hidden @ projection_kernel
    if proj_clip is not None:
        new_hidden = new_hidden.clamp(-proj_clip, proj_clip)
    return new_hidden, new_memory


Step = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def masked_step(
    step: Step, state: tuple[torch.Tensor, torch.Tensor], step_inputs: tuple[torch.Tensor, torch.Tensor]
) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """
    `step(gates, hidden, memory) -> (new_hidden, new_memory)` on `state` `(hidden, memory)` and `step_inputs`
    `(gates, valid)`: where `valid` `(batch,)` is False a row keeps its state and outputs zeros. Returns the new state
    and the step's output.
    """
    (hidden, memory), (gates, valid) = state, step_inputs
    new_hidden, new_memory = step(gates, hidden, memory)
    valid = valid[:, None]
    state = torch.where(valid, new_hidden, hidden), torch.where(valid, new_memory, memory)
    return state, torch.where(valid, new_hidden, 0.0)


def loop_over_steps(
    step: Step, input_gates: torch.Tensor, mask: torch.Tensor, hidden: torch.Tensor, memory: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """
    The reference recurrence: [`masked_step`] over the steps of `input_gates` `(batch, steps, 4 * cell_dim)` and
    `mask` `(batch, steps)`, from `hidden`, `memory` `(batch, dim)`, one step at a time under autograd. Returns the
    outputs `(batch, steps, hidden_dim)` and the state after each row's last valid step.
    """
    # Steps are taken apart with unbind and put together with stack, one autograd node each: indexing a step
    # of a tensor (or writing one) costs a backward pass over the whole tensor at every step.
    outputs = []
    for step_inputs in zip(input_gates.unbind(1), mask.unbind(1)):
        (hidden, memory), output = masked_step(step, (hidden, memory), step_inputs)
        outputs.append(output)
    return torch.stack(outputs, dim=1), hidden, memory


def scan_over_steps(
    step: Step, input_gates: torch.Tensor, mask: torch.Tensor, hidden: torch.Tensor, memory: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """
    [`loop_over_steps`] as one scan over the steps, for a traced graph: it stays a loop there (an ONNX `Scan`)
    instead of being unrolled into a fixed number of steps.
    """
    (hidden, memory), outputs = scan(
        functools.partial(masked_step, step), (hidden, memory), (input_gates.transpose(0, 1), mask.T)
    )
    return outputs.transpose(0, 1), hidden, memory


def lstm_layers_reference(
    layers: Sequence["ElmoLstmLayer"],
    inputs: Sequence[torch.Tensor],
    mask: torch.Tensor,
    hidden: Sequence[torch.Tensor],
    memory: Sequence[torch.Tensor],
    over_steps: Callable = loop_over_steps,
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """
    The reference recurrence of each of `layers` (directions of one config) on its own `inputs`, `hidden` and
    `memory` ([`lstm_cell`] by [`loop_over_steps`], or `over_steps`; arguments and results of each as
    [`ElmoLstmLayer.forward`]).
    """
    results = []
    for layer, layer_inputs, layer_hidden, layer_memory in zip(layers, inputs, hidden, memory):
        step = functools.partial(
            lstm_cell,
            recurrent_kernel=layer.recurrent_kernel,
            forget_bias=layer.config.forget_bias,
            cell_clip=layer.cell_clip,
            projection_kernel=layer.projection_kernel,
            proj_clip=layer.proj_clip,
        )
        input_gates = layer_inputs @ layer.input_kernel + layer.bias  # every step in one product
        results.append(over_steps(step, input_gates, mask, layer_hidden, layer_memory))
    return results


def lstm_layers_scanned(
    layers: Sequence["ElmoLstmLayer"],
    inputs: Sequence[torch.Tensor],
    mask: torch.Tensor,
    hidden: Sequence[torch.Tensor],
    memory: Sequence[torch.Tensor],
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """[`lstm_layers_reference`] with the steps as one scan ([`scan_over_steps`]), for a traced graph."""
    return lstm_layers_reference(layers, inputs, mask, hidden, memory, over_steps=scan_over_steps)


def run_lstm_directions(
    layers: Sequence["ElmoLstmLayer"],
    inputs: Sequence[torch.Tensor],
    mask: torch.Tensor,
    hidden: Sequence[torch.Tensor],
    memory: Sequence[torch.Tensor],
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """
    The one call of `ALL_RECURRENCES`: the recurrence of the path `choose_path` gives for `layers` (directions of
    one biLM layer, one config) on their inputs, as [`lstm_layers_reference`] takes and returns them.
    """
    path = choose_path(layers[0].config, layers, *inputs, *hidden, *memory)
    recurrence = ALL_RECURRENCES.get_interface(path, inputs[0].device, lstm_layers_reference, lstm_layers_scanned)
    return recurrence(layers, inputs, mask, hidden, memory)


class ElmoLstmLayer(nn.Module):
    """
    One layer of one direction: an LSTM whose memory is clipped and whose output is projected and clipped, as
    TensorFlow's `LSTMCell(num_proj=..., cell_clip=..., proj_clip=...)`. Gates are ordered input, forget, cell, output.
    The kernels keep TensorFlow's `(in, out)` layout: a step multiplies `(batch, in) @ (in, out)`, which is faster
    from contiguous `(in, out)` memory than from a transposed `(out, in)` weight when the batch is small.
    """

    def __init__(self, config: ElmoConfig, input_is_context_free: bool = False):
        super().__init__()
        self.config = config
        cell_dim, projection_dim = config.cell_dim, config.projection_dim
        self.cell_dim = cell_dim
        self.cell_clip = config.cell_clip
        # The first layer reads the context-free token representations: a row repeats at every occurrence of its
        # word (the inference kernel projects each distinct row once).
        self.input_is_context_free = input_is_context_free
        # bilm-tf projects (and then clips) the output only when it is narrower than the memory.
        projected = projection_dim < cell_dim
        self.proj_clip = config.proj_clip if projected else None
        self.input_kernel = nn.Parameter(torch.empty(projection_dim, 4 * cell_dim))
        self.recurrent_kernel = nn.Parameter(torch.empty(projection_dim if projected else cell_dim, 4 * cell_dim))
        self.bias = nn.Parameter(torch.empty(4 * cell_dim))
        self.projection_kernel = nn.Parameter(torch.empty(cell_dim, projection_dim)) if projected else None

    def forward(
        self, inputs: torch.Tensor, mask: torch.Tensor, hidden: torch.Tensor, memory: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """
        Runs left to right. `inputs` `(batch, steps, projection_dim)`, `mask` `(batch, steps)` bool with each row's
        valid steps first, `hidden` `(batch, projection_dim)`, `memory` `(batch, cell_dim)`. Returns the outputs
        `(batch, steps, projection_dim)` (zero at invalid steps) and the state after each row's last valid step.
        Which recurrence runs, the reference or a kernel, [`run_lstm_directions`] asks on every call.
        """
        return run_lstm_directions([self], [inputs], mask, [hidden], [memory])[0]


def reverse_valid_steps(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverses the first `lengths[b]` steps of each row `b` of `x` `(batch, steps, ...)`; the rest stay in place."""
    batch_size, steps = x.shape[:2]
    step = torch.arange(steps, device=x.device)
    index = torch.where(step < lengths[:, None], lengths[:, None] - 1 - step, step)
    # One index per position rather than one per element (as `gather` takes): far less to read, either way.
    index = index + torch.arange(batch_size, device=x.device)[:, None] * steps
    return x.flatten(0, 1).index_select(0, index.flatten()).view_as(x)


def runs_only_its_forward(layer: nn.Module) -> bool:
    """
    Whether calling `layer` runs its `forward` and nothing else: no forward hooks of its own, and no `forward` of the
    instance's own (accelerate's `device_map` wraps it, to load the layer's weights around its call). Only then may
    the biLM run a layer's recurrence without calling the layer.
    """
    return not (layer._forward_hooks or layer._forward_pre_hooks or "forward" in vars(layer))


class ElmoBiLm(nn.Module):
    """Two independent stacks of `n_layers` LSTM layers: one reads each row forward, the other backward."""

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.config = config
        self.projection_dim = config.projection_dim
        self.use_skip_connections = config.use_skip_connections
        self.input_dropout = nn.Dropout(config.lstm_dropout)
        self.forward_layers = nn.ModuleList(
            ElmoLstmLayer(config, input_is_context_free=index == 0) for index in range(config.n_layers)
        )
        self.backward_layers = nn.ModuleList(
            ElmoLstmLayer(config, input_is_context_free=index == 0) for index in range(config.n_layers)
        )

    def forward(
        self,
        tokens: torch.Tensor,
        mask: torch.Tensor,
        hidden: torch.Tensor,
        memory: torch.Tensor,
        backward_tokens: torch.Tensor | None = None,
    ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """
        `tokens` `(batch, steps, projection_dim)`, `mask` `(batch, steps)` bool, right-padded; `hidden`, `memory` the
        initial state `(n_layers, 2, batch, dim)`; `backward_tokens`, in text order like `tokens`, what the backward
        stacks read instead (in [`ElmoModel.windowed_hidden_states`] the two stacks read different windows). Returns
        the `n_layers + 1` layers `[forward ; backward]` in text order (the first `[tokens ; backward_tokens]`) and
        the final state in the layout of the initial one. Each layer reads its input from the layer returned before
        it, so that the returned layers are the tensors of the autograd graph; while the biLM trains, through
        `config.lstm_dropout`, so that a layer's skip connection adds the input its LSTM read.
        """
        backward_tokens = tokens if backward_tokens is None else backward_tokens
        lengths = mask.sum(dim=1)
        layers = [torch.cat([tokens, backward_tokens], dim=-1)]
        final_hidden, final_memory = [], []
        # Pre-training dropout applies while the biLM's own weights train; a frozen biLM (the paper's setting for
        # task heads) is a fixed feature extractor even in training mode.
        drops = self.training and next(self.parameters()).requires_grad
        for index in range(len(self.forward_layers)):
            layer_input = self.input_dropout(layers[-1]) if drops else layers[-1]
            forward_input = layer_input[..., : self.projection_dim]
            backward_input = reverse_valid_steps(layer_input[..., self.projection_dim :], lengths)
            (forward_output, backward_output), layer_hidden, layer_memory = self.run_layer(
                index, forward_input, backward_input, mask, hidden[index], memory[index]
            )
            layers.append(torch.cat([forward_output, reverse_valid_steps(backward_output, lengths)], dim=-1))
            final_hidden.append(layer_hidden)
            final_memory.append(layer_memory)
        return layers, torch.stack(final_hidden), torch.stack(final_memory)

    def run_layer(
        self,
        index: int,
        forward_input: torch.Tensor,
        backward_input: torch.Tensor,
        mask: torch.Tensor,
        hidden: torch.Tensor,
        memory: torch.Tensor,
    ) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor, torch.Tensor]:
        """
        Layer `index` of both stacks, each on its input in its reading order, from the state `hidden`, `memory`
        `(2, batch, dim)`. Returns `(forward_output, backward_output)` (skip connection added) and the final state.
        """
        layers, inputs = (self.forward_layers[index], self.backward_layers[index]), (forward_input, backward_input)
        if all(runs_only_its_forward(layer) for layer in layers):
            # One call for both directions, so that a kernel may run them at once (the training recurrence does).
            results = run_lstm_directions(layers, inputs, mask, hidden, memory)
        else:
            # Each layer's own call, which asks the same function for its direction. Under a `device_map` each layer
            # runs and returns on its own device; the stacks go on from the mask's.
            results = [
                [result.to(mask.device) for result in layer(*arguments)]
                for layer, *arguments in zip(layers, inputs, (mask, mask), hidden, memory)
            ]
        directions = []
        for (output, layer_hidden, layer_memory), layer_inputs in zip(results, inputs):
            if self.use_skip_connections and index > 0:
                output = output + layer_inputs
            directions.append((output, layer_hidden, layer_memory))
        (forward_output, forward_h, forward_c), (backward_output, backward_h, backward_c) = directions
        final_hidden, final_memory = torch.stack([forward_h, backward_h]), torch.stack([forward_c, backward_c])
        return (forward_output, backward_output), final_hidden, final_memory


class ElmoScalarMix(nn.Module):
    """
    The ELMo layer of the paper (eq. 1): `gamma * sum_j softmax(s)_j * h_j` over the `n_layers + 1` layers, then
    dropout. With `layer_norm`, each layer is first normalised over the valid positions of its own sequence (all
    positions and features together). With `fixed_weights`, `s` is given and not trained (`gamma` still trains).
    `penalty()` is `l2_coefficient * ||s||^2`, the paper's lambda term, for the task loss.
    """

    def __init__(
        self,
        num_layers: int,
        layer_norm: bool = False,
        fixed_weights: list[float] | None = None,
        l2_coefficient: float = 0.0,
        dropout: float = 0.0,
    ):
        super().__init__()
        if fixed_weights is not None and len(fixed_weights) != num_layers:
            raise ValueError(f"fixed_weights needs {num_layers} values, got {len(fixed_weights)}")
        self.num_layers = num_layers
        self.layer_norm = layer_norm
        self.fixed_weights = fixed_weights
        self.l2_coefficient = l2_coefficient
        self.scalar_parameters = nn.Parameter(torch.empty(num_layers), requires_grad=fixed_weights is None)
        self.gamma = nn.Parameter(torch.empty(1))
        self.dropout = nn.Dropout(dropout)
        self.reset_parameters()

    @classmethod
    def from_config(cls, config: ElmoConfig) -> "ElmoScalarMix":
        return cls(
            config.num_representation_layers,
            config.mix_layer_norm,
            config.mix_weights,
            config.mix_l2_coefficient,
            config.mix_dropout,
        )

    @torch.no_grad()
    def reset_parameters(self):
        """`s` zero (equal weights) or the fixed values; `gamma` one."""
        if self.fixed_weights is None:
            self.scalar_parameters.zero_()
        else:
            self.scalar_parameters.copy_(torch.tensor(self.fixed_weights))
        self.gamma.fill_(1.0)

    def forward(
        self, layers: tuple[torch.Tensor, ...], mask: torch.Tensor, with_penalty: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """
        `layers`: `num_layers` tensors `(batch, positions, dim)`; `mask` `(batch, positions)`. Returns their mix, and
        with `with_penalty` also `penalty()`, taken within this call (where hooks such as accelerate's offloading
        have loaded the weights).
        """
        if len(layers) != self.num_layers:
            raise ValueError(f"ElmoScalarMix expects {self.num_layers} layers, got {len(layers)}")
        weights = torch.softmax(self.scalar_parameters, dim=0)
        valid = mask.unsqueeze(-1).to(layers[0].dtype)
        mixed = 0.0
        for weight, layer in zip(weights, layers):
            if self.layer_norm:
                layer = self._normalised(layer, valid)
            mixed = mixed + weight * layer
        mixed = self.dropout(self.gamma * mixed)
        return (mixed, self.penalty()) if with_penalty else mixed

    @staticmethod
    def _normalised(layer: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Per sequence: zero mean and unit variance over its valid positions and features; zero elsewhere."""
        count = (valid.sum(dim=(1, 2)) * layer.shape[-1]).clamp(min=1.0)[:, None, None]
        mean = (layer * valid).sum(dim=(1, 2), keepdim=True) / count
        variance = (((layer - mean) * valid) ** 2).sum(dim=(1, 2), keepdim=True) / count
        return (layer - mean) / torch.sqrt(variance + 1e-12) * valid

    def penalty(self) -> torch.Tensor:
        """The L2 term `l2_coefficient * ||s||^2` (zero for fixed weights)."""
        if self.fixed_weights is not None or self.l2_coefficient == 0.0:
            return self.scalar_parameters.new_zeros(())
        return self.l2_coefficient * (self.scalar_parameters**2).sum()


def refuse_attention_and_embeddings(inputs_embeds: torch.Tensor | None, output_attentions: bool | None):
    """
    Accepts the standard `inputs_embeds` and `output_attentions` keywords (PEFT's task wrappers pass them as None) and
    refuses any value, with the reason.
    """
    if inputs_embeds is not None:
        raise ValueError(
            "ELMo takes character ids, not inputs_embeds: each word's vector is computed from the "
            "embeddings of its characters by the CNN; pass input_ids"
        )
    if output_attentions:
        raise ValueError("ELMo has no attention to output: it is a character CNN and LSTMs; use output_hidden_states")


class ElmoPreTrainedModel(PreTrainedModel):
    """
    What every ELMo model shares. Each class declares once, as class attributes, what the rest of hf_elmo reads of it:

    - `description`: one line saying what it computes (`hf-elmo info`);
    - `graph_inputs`: the inputs of `forward` beyond `input_ids` and `attention_mask` that its traced graph takes
      (the ONNX export's), each `(batch, positions)` int64, by name, with the config field that must be set for the
      model to read it (`None`: always); a class adds its own to those of its bases ([`graph_input_names`]);
    - `graph_outputs`: the fields of its output that its graph returns (those it computes without labels);
    - `folder_extras`: what its folder holds beyond transformers' files (`folder_layout.FolderExtra`), written by
      the one [`save_pretrained`].
    """

    config_class = ElmoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    # A head's `**options` are transformers' output keywords, not loss keywords: its loss is a mean over its own
    # batch, so the Trainer passes no `num_items_in_batch` and scales the loss for gradient accumulation itself.
    accepts_loss_kwargs = False
    description: str = ""
    graph_inputs: dict[str, str | None] = {"word_input_ids": "word_input_vocab_size"}
    graph_outputs: tuple[str, ...] = ()
    folder_extras: tuple[FolderExtra, ...] = ()
    # Modules whose forward combines the results of their children (or, for a layer, its own weights): each must sit
    # on one device. Every kernel runs inside its own module's call, where accelerate's hooks have loaded the weights.
    _no_split_modules = ["ElmoCharacterEncoder", "ElmoLstmLayer", "ElmoTaskEncoder"]

    def resize_token_embeddings(self, *args, **kwargs):
        raise NotImplementedError(
            "ELMo reads a fixed alphabet of character ids (bytes: 262 ids, 256 bytes, 5 markers, a zero row for no "
            "character; or a learned vocabulary saved with its tokenizer): there are no word tokens to resize"
        )

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """
        As transformers' `from_pretrained`, where a bundled model's name (`"ko-nsmc"`) that no local folder holds
        loads the bundled folder (`model_names.local_model_folder`, the rule the command line reads names by),
        instead of asking the Hub for it, and a folder holding an original (bilm-tf) checkpoint is refused in one
        `OSError` line naming the `hf-elmo convert` that makes a model folder of it.
        """
        if isinstance(pretrained_model_name_or_path, str | os.PathLike) and (
            checkpoint := original_checkpoint(str(pretrained_model_name_or_path))
        ):
            raise OSError(checkpoint)
        if isinstance(pretrained_model_name_or_path, str):
            pretrained_model_name_or_path = str(
                local_model_folder(pretrained_model_name_or_path) or pretrained_model_name_or_path
            )
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    @classmethod
    def _finalize_model_loading(cls, model, load_config, loading_info):
        """
        transformers' step of `from_pretrained` (also with `state_dict=`) between reading the checkpoint into `model`
        and initialising what it did not load (then logging its load report): a biLM weight not loaded is refused
        here, before either (`refuse_unloaded_bilm_weights`).
        """
        refuse_unloaded_bilm_weights(model, loading_info, load_config.pretrained_model_name_or_path)
        return super()._finalize_model_loading(model, load_config, loading_info)

    @property
    def graph_input_names(self) -> list[str]:
        """
        The inputs of `forward` a traced graph of this model takes (the ONNX export's), each `(batch, positions)`
        after `input_ids`: the mask, then the `graph_inputs` of its classes, the bases' first, that its config reads
        (a field set, not `None`, `False` or 0).
        """
        names = ["input_ids", "attention_mask"]
        for model_class in reversed(type(self).__mro__):
            for name, field in vars(model_class).get("graph_inputs", {}).items():
                if name not in names and (field is None or getattr(self.config, field, None)):
                    names.append(name)
        return names

    def _wants_hidden_states(self, output_hidden_states: bool | None) -> bool:
        return self.config.output_hidden_states if output_hidden_states is None else output_hidden_states

    def _as_return_dict_or_tuple(self, output: ModelOutput, return_dict: bool | None) -> ModelOutput | tuple:
        """`output`, or its tuple when `return_dict` (by default `config.return_dict`) is False."""
        return output if (self.config.return_dict if return_dict is None else return_dict) else output.to_tuple()

    def save_pretrained(self, save_directory, *args, **kwargs):
        """
        As transformers' `save_pretrained`; a registered model also records every ELMo Auto class in `auto_map`, and
        the class's `folder_extras` set their config fields before the config is written and their files after the
        weights (by the main process alone), as `folder_layout` says. The one override of every ELMo model.
        """
        if self.is_remote_code():
            self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **auto_map(AUTO_CLASSES)}
        for extra in self.folder_extras:
            for name, value in extra.config_fields.items():
                setattr(self.config, name, value)
        saved = super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True):
            for extra in self.folder_extras:
                extra.write(save_directory)
        return saved

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """bilm-tf's initialisation: scaled normal weights, zero biases, highway gates biased to carry."""
        if isinstance(module, nn.Embedding):
            nn.init.uniform_(module.weight, -1.0, 1.0)
            if module.padding_idx is not None:  # the character table's "no character" row
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.Conv1d):
            nn.init.normal_(module.weight, std=(1.0 / (module.in_channels * module.kernel_size[0])) ** 0.5)
            nn.init.zeros_(module.bias)
        elif isinstance(module, ElmoHighway):
            for weight in (module.nonlinear_weight, module.gate_weight):
                nn.init.normal_(weight, std=(1.0 / weight.shape[1]) ** 0.5)
            nn.init.zeros_(module.nonlinear_bias)
            nn.init.constant_(module.gate_bias, -2.0)
        elif isinstance(module, ElmoLstmLayer):
            for weight in (module.input_kernel, module.recurrent_kernel, module.projection_kernel):
                if weight is not None:
                    bound = (6.0 / sum(weight.shape)) ** 0.5
                    nn.init.uniform_(weight, -bound, bound)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=(1.0 / module.in_features) ** 0.5)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, (ElmoScalarMix, nn.LSTM, ConditionalRandomField)):
            module.reset_parameters()


class ElmoModel(ElmoPreTrainedModel):
    r"""
    The ELMo biLM. Deterministic: no state is kept between calls. To carry the LSTM state across batches (as the
    original stateful code did), pass the `final_state` of one call as the `initial_state` of the next.
    """

    # A pre-training folder (`ElmoForPreTraining`) also holds the softmax, which the biLM alone does not use.
    _keys_to_ignore_on_load_unexpected = [r"^softmax\."]
    description = "the biLM: every representation layer of each position"
    graph_outputs = ("last_hidden_state", "hidden_states")
    folder_extras = (SENTENCE_TRANSFORMERS_MODULE,)

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        self.char_encoder = ElmoCharacterEncoder(config)
        self.bilm = ElmoBiLm(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        """The character table, `(alphabet rows, char_embedding_dim)` (262 rows for bytes): the lookup of input ids."""
        return self.char_encoder.char_embedding

    def set_input_embeddings(self, value: nn.Embedding):
        expected = (self.config.alphabet.table_rows, self.config.char_embedding_dim)
        if not isinstance(value, nn.Embedding) or tuple(value.weight.shape) != expected:
            raise ValueError(f"the character table must be an nn.Embedding of shape {expected} (a fixed alphabet)")
        self.char_encoder.char_embedding = value

    def embed_words(
        self, input_ids: torch.LongTensor, mask: torch.Tensor, word_input_ids: torch.LongTensor | None = None
    ) -> torch.Tensor:
        """
        Context-independent representation of every position: `input_ids` `(batch, positions, chars)` (and
        `word_input_ids` `(batch, positions)`) -> `(batch, positions, projection_dim)`, zero at padded positions.
        Each distinct word (character row and word id) is encoded once; in a traced graph, every position.
        """
        flat_ids = input_ids.reshape(-1, input_ids.shape[-1])
        if word_input_ids is not None:  # a word is its row and its word id: the id rides along as a last column
            flat_ids = torch.cat([flat_ids, word_input_ids.reshape(-1, 1).to(flat_ids.dtype)], dim=-1)

        def encode(ids: torch.Tensor) -> torch.Tensor:
            if word_input_ids is None:
                return self.char_encoder(ids)
            return self.char_encoder(ids[:, :-1], ids[:, -1])

        # A padded position's row is made the empty row (all zeros), so that padding is one more distinct word at most.
        valid = mask.reshape(-1, 1).bool()
        path = choose_path(self.config, [self.char_encoder], flat_ids)
        find_distinct = ALL_DISTINCT_ROWS.get_interface(path, flat_ids.device, distinct_rows_reference)
        distinct_ids, where = find_distinct(flat_ids.masked_fill(~valid, 0))
        # Under a `device_map` the encoder returns on its own device.
        embedded = encode(distinct_ids).to(where.device)[where]
        return torch.where(valid.to(where.device), embedded, 0.0).view(*input_ids.shape[:2], -1)

    def _validated_word_inputs(self, input_ids: torch.Tensor, word_input_ids: torch.Tensor | None):
        """`word_input_ids` checked against the config: needed exactly when the model reads a word embedding."""
        if self.config.word_input_vocab_size is None:
            if word_input_ids is not None:
                raise ValueError("word_input_ids were given, but this model reads no word embedding")
            return None
        if word_input_ids is None:
            raise ValueError("this model also reads word_input_ids (from its ElmoTokenizer); none were given")
        check_id_tensor("word_input_ids", word_input_ids)
        if word_input_ids.shape != input_ids.shape[:-1]:
            raise ValueError(
                f"word_input_ids shape {tuple(word_input_ids.shape)} does not match input_ids "
                f"{tuple(input_ids.shape[:-1])}"
            )
        check_values(
            self.config, check_ids_in_table, "word_input_ids", word_input_ids, self.config.word_input_vocab_size
        )
        return word_input_ids

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        initial_state: tuple[torch.Tensor, torch.Tensor] | None = None,
        return_final_state: bool = False,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: torch.Tensor | None = None,
        inputs_embeds: None = None,
        output_attentions: bool | None = None,
        word_input_ids: torch.LongTensor | None = None,
        word_vector_ids: torch.LongTensor | None = None,
    ) -> ElmoModelOutput | tuple:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, positions, max_characters_per_token)`): character ids
                from [`ElmoTokenizer`]; an all-zero row is padding.
            attention_mask (`torch.Tensor` of shape `(batch, positions)`, *optional*): 1 for valid positions, which
                must come first in each row. Derived from `input_ids` when absent.
            initial_state (`tuple(torch.Tensor, torch.Tensor)`, *optional*): `(hidden, memory)` to start every LSTM
                from, in the layout of `final_state`; zeros when absent.
            return_final_state (`bool`): also return `final_state`.
            output_hidden_states (`bool`, *optional*): also return all `n_layers + 1` representation layers.
            token_type_ids (`torch.Tensor`, *optional*): accepted for sentence-pair batches from the tokenizer; the
                biLM does not use it.
            inputs_embeds, output_attentions: transformers' standard keywords, accepted as `None` (every head takes
                them); ELMo has neither, so a value is refused.
            word_input_ids (`torch.LongTensor` of shape `(batch, positions)`, *optional*): the word id of every
                position, for models with a word-embedding input (`config.word_input_vocab_size`); from the tokenizer.
                Read exactly where the config has the input: given to a model without it (a tokenizer of another
                model), a one-line `ValueError`, since the vectors would not be the ones its tokenizer's model gives.
            word_vector_ids (`torch.LongTensor` of shape `(batch, positions)`, *optional*): accepted and ignored: the
                word vectors of a task head (`config.word_vector_dim`) sit beside the biLM's layers, not in them, so
                a head's folder loaded as its biLM (`ElmoModel.from_pretrained`, `pipeline("feature-extraction")`)
                takes what the folder's own tokenizer gives and returns the biLM's layers.
        """
        refuse_attention_and_embeddings(inputs_embeds, output_attentions)
        mask = self._validated_mask(input_ids, attention_mask)
        hidden, memory = self._validated_state(initial_state, input_ids.shape[0], input_ids.device)
        word_input_ids = self._validated_word_inputs(input_ids, word_input_ids)

        tokens = self.embed_words(input_ids, mask, word_input_ids)
        all_layers, final_hidden, final_memory = self.bilm(tokens, mask, hidden, memory)
        all_layers = tuple(all_layers)

        output = ElmoModelOutput(
            last_hidden_state=all_layers[-1],
            hidden_states=all_layers if self._wants_hidden_states(output_hidden_states) else None,
            final_state=(final_hidden, final_memory) if return_final_state else None,
        )
        return self._as_return_dict_or_tuple(output, return_dict)

    @torch.no_grad()
    def windowed_hidden_states(
        self, input_ids: torch.LongTensor, window: int, word_input_ids: torch.LongTensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        """
        All `n_layers + 1` layers of ONE unpadded sequence `input_ids` `(positions, chars)` (with its `<S>`/`</S>`
        rows), each `(positions, hidden_size)`, computed `window` positions at a time with the LSTM state carried:
        equal to one pass, with LSTM memory bounded by the window. The forward stacks run over the windows in order,
        the backward stacks over them in reverse order, since they read the sequence right to left. Models with a
        word-embedding input also take the sequence's `word_input_ids` `(positions,)`.
        """
        if input_ids.dim() != 2 or input_ids.shape[-1] != self.config.max_characters_per_token:
            raise ValueError(
                f"input_ids must have shape (positions, {self.config.max_characters_per_token}), "
                f"got {tuple(input_ids.shape)}"
            )
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        word_input_ids = self._validated_word_inputs(input_ids, word_input_ids)
        chunks = input_ids.split(window)
        word_chunks = word_input_ids.split(window) if word_input_ids is not None else [None] * len(chunks)
        tokens = torch.cat([self.char_encoder(chunk, words) for chunk, words in zip(chunks, word_chunks)])
        hidden, memory = self._validated_state(None, 1, tokens.device)
        # Window k of each direction in its reading order: both splits give windows of the same lengths. The backward
        # stacks' window is handed over in text order, so its layers come back in text order too.
        window_layers = []
        for forward_window, backward_window in zip(tokens.split(window), tokens.flip(0).split(window)):
            mask = torch.ones(1, len(forward_window), dtype=torch.bool, device=tokens.device)
            layers, hidden, memory = self.bilm(
                forward_window[None], mask, hidden, memory, backward_window.flip(0)[None]
            )
            window_layers.append([layer[0] for layer in layers])
        dim = self.config.projection_dim
        return tuple(
            torch.cat(
                [
                    torch.cat([layers[index][:, :dim] for layers in window_layers]),
                    torch.cat([layers[index][:, dim:] for layers in reversed(window_layers)]),
                ],
                dim=-1,
            )
            for index in range(self.config.num_representation_layers)
        )

    def sentence_embedding(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        layer_weights: list[float] | torch.Tensor | None = None,
        word_input_ids: torch.LongTensor | None = None,
        word_weights: torch.Tensor | None = None,
        common_component: list[float] | list[list[float]] | torch.Tensor | None = None,
        reference_mean: list[float] | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """
        One vector per sentence, `(batch, 2 * projection_dim)`: [`sentence_vectors`] of the biLM's `n_layers + 1`
        layers over each row's words (not `<S>`, `</S>` or padding). With the defaults, the mean over the words of the
        plain average of the layers, as TF-Hub ELMo's "default" output. Whatever weighs the words comes in as an
        argument: the same inputs give the same vectors. `SentenceTransformer(folder)`
        (`ElmoSentenceTransformerModule`) passes the SIF weights of the folder's word counts where it has them, and
        the reference statistics its config holds.

        Args:
            input_ids, attention_mask, word_input_ids: as for `forward`.
            layer_weights (`list[float]` or `torch.Tensor`, *optional*): one weight per layer, used as given; by
                default `1 / (n_layers + 1)` each.
            word_weights (`torch.Tensor` of shape `(batch, positions)`, *optional*): each position's weight; the
                weighted sum is divided by the number of words, so weights of 1 (the default) give the plain mean.
                SIF weights: `sentence_weighting.WordCounts.sif_weights` of the tokenizer's word labels.
            common_component (`torch.Tensor` of shape `(2 * projection_dim,)` or `(k, 2 * projection_dim)`, or
                nested lists, *optional*): directions projected out of every vector (see [`sentence_vectors`]);
                none by default.
            reference_mean (`torch.Tensor` of shape `(2 * projection_dim,)`, or a list, *optional*): a vector
                subtracted from every vector before, the mean sentence vector of a reference text; none by default.
        """
        layers = self(
            input_ids,
            attention_mask=attention_mask,
            output_hidden_states=True,
            return_dict=True,
            word_input_ids=word_input_ids,
        ).hidden_states
        words = word_positions(input_ids, valid_positions(input_ids, attention_mask), self.config)
        return sentence_vectors(layers, words, layer_weights, word_weights, common_component, reference_mean)

    def _validated_mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """The boolean `(batch, positions)` mask, checked to be right-padded, with `input_ids` checked to be
        character ids of this model's alphabet."""
        check_id_tensor("input_ids", input_ids)
        if input_ids.dim() != 3 or input_ids.shape[-1] != self.config.max_characters_per_token:
            raise ValueError(
                f"input_ids must have shape (batch, positions, {self.config.max_characters_per_token}), "
                f"got {tuple(input_ids.shape)}"
            )
        if input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
            raise ValueError(f"cannot run on an empty batch (input_ids of shape {tuple(input_ids.shape)})")
        if attention_mask is not None and attention_mask.shape != input_ids.shape[:2]:
            raise ValueError(
                f"attention_mask shape {tuple(attention_mask.shape)} does not match input_ids "
                f"{tuple(input_ids.shape[:2])}"
            )
        mask = valid_positions(input_ids, attention_mask)
        check_values(self.config, check_inputs, input_ids, mask, self.config.alphabet.table_rows)
        return mask

    def _validated_state(self, initial_state, batch_size: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        config = self.config
        hidden_shape = (config.n_layers, 2, batch_size, config.projection_dim)
        memory_shape = (config.n_layers, 2, batch_size, config.cell_dim)
        dtype = self.char_encoder.char_embedding.weight.dtype
        if initial_state is None:
            return torch.zeros(hidden_shape, dtype=dtype, device=device), torch.zeros(
                memory_shape, dtype=dtype, device=device
            )
        hidden, memory = initial_state
        if tuple(hidden.shape) != hidden_shape or tuple(memory.shape) != memory_shape:
            raise ValueError(
                f"initial_state must be (hidden {hidden_shape}, memory {memory_shape}), got "
                f"({tuple(hidden.shape)}, {tuple(memory.shape)})"
            )
        return hidden.to(dtype), memory.to(dtype)


def check_values(config: ElmoConfig, check: Callable, *values) -> None:
    """`check(*values)`, a check of input values, where the call runs eagerly; in a traced graph, which cannot raise
    on values, `ALL_VALUE_CHECKS`'s entry (nothing). The tensors among `values` give the path and the device."""
    tensors = [value for value in values if isinstance(value, torch.Tensor)]
    ALL_VALUE_CHECKS.get_interface(choose_path(config, [], *tensors), tensors[0].device, check)(*values)


def check_id_tensor(name: str, ids) -> None:
    """A one-line `TypeError` unless the input `name` is a tensor of integers (what the tokenizer gives with
    `return_tensors="pt"`)."""
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(ids).__name__}: tokenize with return_tensors='pt'")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer ids, got {ids.dtype}")


def check_ids_in_table(name: str, ids: torch.Tensor, rows: int) -> None:
    """
    A one-line `ValueError` where the ids `name` look up rows outside the `rows` of their table (ids of another
    tokenizer or alphabet), which the lookup would report as an `IndexError` (a device-side assert on CUDA).
    """
    if ((ids < 0) | (ids >= rows)).any():  # one value brought to the host, the min and max only when refused
        low, high = int(ids.min()), int(ids.max())
        raise ValueError(
            f"{name} holds ids from {low} to {high}, but this model's table has {rows} rows (ids 0 to {rows - 1}): "
            "ids of another tokenizer?"
        )


def check_inputs(input_ids: torch.Tensor, mask: torch.Tensor, character_rows: int) -> None:
    """A one-line `ValueError` unless `mask` `(batch, positions)` marks each row's valid positions first and the
    character ids `input_ids` are rows of the character table (`character_rows`)."""
    lengths = mask.sum(dim=1, keepdim=True)
    if not torch.equal(mask, torch.arange(mask.shape[1], device=mask.device) < lengths):
        raise ValueError("attention_mask must mark each row's valid positions first (right padding)")
    check_ids_in_table("input_ids", input_ids, character_rows)


def valid_positions(input_ids: torch.LongTensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """
    `(batch, positions)` bool: `attention_mask`, or where absent the positions whose row holds a character. Not
    checked: [`ElmoModel`] checks it on every call.
    """
    return (input_ids > 0).any(dim=-1) if attention_mask is None else attention_mask.bool()


def word_positions(input_ids: torch.LongTensor, mask: torch.Tensor, config: ElmoConfig) -> torch.Tensor:
    """`(batch, positions)` bool: valid positions that hold a word, not `<S>`, `</S>` or padding."""
    # Only boundary rows hold a sentence marker, right after the begin-of-word marker: a word's characters are never
    # markers. The alphabet (bytes or learned) says which ids those are.
    begin, end = config.alphabet.sentence_marker_row_ids()
    marker = input_ids[..., 1]
    return mask & (marker != begin) & (marker != end)


def second_sentence_positions(input_ids: torch.LongTensor, config: ElmoConfig) -> torch.LongTensor:
    """
    `(batch, positions)`: 1 at each position after the first `</S>` of its row, 0 before, as `ElmoTokenizer` sets
    `token_type_ids` for a pair (`<S> first </S> <S> second </S>`).
    """
    _, end = config.alphabet.sentence_marker_row_ids()
    ends = input_ids[..., 1] == end
    return (ends.cumsum(dim=1) - ends.long() > 0).long()


class ElmoTaskEncoder(nn.Module):
    """
    The task-specific part shared by the heads: the ELMo mix of the biLM layers, optionally beside context-independent
    vectors of each position (`[x_k ; ELMo_k]`): a learned word vector (`config.word_vector_dim`, looked up by
    `word_vector_ids`) and the character CNN's token representation (`config.concat_token_representation`), in that
    order; optionally read by a task BiLSTM.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.mix = ElmoScalarMix.from_config(config)
        self.concat_token_representation = config.concat_token_representation
        self.projection_dim = config.projection_dim
        self.word_vectors = (
            nn.Embedding(config.word_vector_vocab_size, config.word_vector_dim)
            if config.word_vector_vocab_size is not None
            else None
        )
        width = (
            config.word_vector_dim
            + (config.projection_dim if config.concat_token_representation else 0)
            + config.hidden_size
        )
        self.lstm = ElmoTaskBiLstm(config, width) if config.task_lstm_dim > 0 else None
        self.output_dim = 2 * config.task_lstm_dim if self.lstm is not None else width

    def forward(
        self, layers: tuple[torch.Tensor, ...], mask: torch.Tensor, word_vector_ids: torch.LongTensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """
        `layers` the biLM's `n_layers + 1` outputs, `mask` `(batch, positions)` and, with word vectors, the
        `word_vector_ids` `(batch, positions)` -> the features `(batch, positions, output_dim)` and the mix's L2
        penalty for the loss.
        """
        features, penalty = self.mix(layers, mask, with_penalty=True)
        if self.concat_token_representation:
            # Layer 0 is [x ; x]: its first half is the context-independent representation.
            features = torch.cat([layers[0][..., : self.projection_dim], features], dim=-1)
        if self.word_vectors is not None:
            # A padded position holds some word's id (an embedding has no -100): zeroed, as the biLM's layers are.
            word_vectors = self.word_vectors(word_vector_ids.to(self.word_vectors.weight.device))
            word_vectors = word_vectors.to(features) * mask.unsqueeze(-1).to(features)
            features = torch.cat([word_vectors, features], dim=-1)
        if self.lstm is not None:
            features = self.lstm(features, mask)
        return features, penalty


class ElmoTaskBiLstm(nn.LSTM):
    """
    A one-layer bidirectional, batch-first `nn.LSTM` (its weights, names and initialisation) whose call reads each
    row's valid positions alone, in each direction: `features` `(batch, positions, input_size)` and `mask`
    `(batch, positions)` -> `(batch, positions, 2 * hidden_size)`, zero at padded positions. Which code runs, `nn.LSTM`
    on the packed rows or a traced graph's scan, `kernels_elmo.choose_path` says on every call.
    """

    def __init__(self, config: ElmoConfig, input_size: int):
        super().__init__(input_size, config.task_lstm_dim, batch_first=True, bidirectional=True)
        self.config = config

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        path = choose_path(self.config, [self], features)
        task_bilstm = ALL_TASK_BILSTMS.get_interface(path, features.device, task_bilstm_packed, task_bilstm_scanned)
        return task_bilstm(self, features, mask)


def task_bilstm_packed(module: ElmoTaskBiLstm, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The reference [`ElmoTaskBiLstm`]: `nn.LSTM` on the rows packed by their lengths."""
    lengths = mask.sum(dim=1).clamp(min=1).cpu()
    packed = pack_padded_sequence(features, lengths, batch_first=True, enforce_sorted=False)
    output, _ = nn.LSTM.forward(module, packed)
    features, _ = pad_packed_sequence(output, batch_first=True, total_length=mask.shape[1])
    return features * mask.unsqueeze(-1).to(features.dtype)


def task_bilstm_scanned(module: ElmoTaskBiLstm, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """
    [`ElmoTaskBiLstm`] for a traced graph, which cannot depend on the rows' lengths: its weights step by step
    ([`lstm_cell`] by [`scan_over_steps`], one scan per direction, the backward one on the reversed valid steps).
    """
    lengths, outputs = mask.sum(dim=1), []
    for suffix in ("", "_reverse"):
        input_weight, recurrent_weight, *biases = (
            getattr(module, f"{name}_l0{suffix}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        )
        inputs = features if suffix == "" else reverse_valid_steps(features, lengths)
        hidden, memory = (inputs.new_zeros(inputs.shape[0], module.hidden_size) for _ in range(2))
        step = functools.partial(lstm_cell, recurrent_kernel=recurrent_weight.T)
        output, _, _ = scan_over_steps(step, inputs @ input_weight.T + sum(biases), mask, hidden, memory)
        outputs.append(output if suffix == "" else reverse_valid_steps(output, lengths))
    return torch.cat(outputs, dim=-1)


def masked_pool(features: torch.Tensor, positions: torch.Tensor, pooling: str) -> torch.Tensor:
    """Pools `features` `(batch, positions, dim)` over `positions` (bool); rows without any give zeros."""
    valid = positions.unsqueeze(-1)
    pooled = []
    if pooling in ("mean", "mean_max"):
        count = valid.sum(dim=1).clamp(min=1).to(features.dtype)
        pooled.append((features * valid.to(features.dtype)).sum(dim=1) / count)
    if pooling in ("max", "mean_max"):
        lowest = torch.finfo(features.dtype).min
        maximum = features.masked_fill(~valid, lowest).amax(dim=1)
        pooled.append(torch.where(valid.any(dim=1), maximum, 0.0))
    return torch.cat(pooled, dim=-1)


# transformers' standard keywords that every head's `forward` takes in `**options` (as transformers 5's models take
# them in `**kwargs`), so that a head's signature names only its data: what the tokenizer and the labels give.
HEAD_OPTIONS = ("output_hidden_states", "return_dict", "inputs_embeds", "output_attentions")


class ElmoHeadModel(ElmoPreTrainedModel):
    """
    The biLM plus the task encoder; with `config.freeze_bilm` the biLM's parameters do not train. A head's `forward`
    takes `input_ids, attention_mask`, its own inputs and labels, `word_input_ids, word_vector_ids` and `**options`
    (`HEAD_OPTIONS`), and runs [`_encode`] first; its `head_settings` say what `hf-elmo info` prints of it.
    """

    graph_inputs = {"word_vector_ids": "word_vector_vocab_size"}
    graph_outputs = ("logits",)

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.elmo = ElmoModel(config)
        self.task_encoder = ElmoTaskEncoder(config)

    def post_init(self):
        super().post_init()
        self.apply_trainability()

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        loaded = super().from_pretrained(*args, **kwargs)
        # Loading replaces the parameters with new ones that all require grad.
        (loaded[0] if isinstance(loaded, tuple) else loaded).apply_trainability()
        return loaded

    def apply_trainability(self):
        """
        Sets `requires_grad` from the config: the biLM trains unless `freeze_bilm`; fixed `mix_weights` never do. The
        head's own layers, its word vectors among them, always train.
        """
        self.elmo.requires_grad_(not self.config.freeze_bilm)
        self.task_encoder.mix.scalar_parameters.requires_grad_(self.config.mix_weights is None)

    def head_settings(self) -> dict[str, str]:
        """
        What `hf-elmo info` says of the head beyond its class and `description`, row name -> text: its layer mix,
        word vectors and task BiLSTM here; a head adds its own (labels first, its particular settings after).
        """
        config = self.config
        mix = f"fixed weights {config.mix_weights}" if config.mix_weights is not None else "learned (scalar mix)"
        rows = {"layer mix": mix + (", layer norm" if config.mix_layer_norm else "")}
        if config.word_vector_dim:
            rows["word vectors"] = (
                f"{config.word_vector_vocab_size:,} words x {config.word_vector_dim} (beside the mix)"
            )
        rows["task LSTM"] = f"{config.task_lstm_dim} per direction" if config.task_lstm_dim else "none"
        return rows

    def label_settings(self) -> dict[str, str]:
        """The `labels` row of `head_settings`, for a head that predicts `config.id2label`'s labels."""
        labels = [self.config.id2label[index] for index in sorted(self.config.id2label)]
        return {"labels": f"{len(labels)}: {', '.join(map(str, labels))}"}

    @torch.no_grad()
    def init_word_vectors(self, table: torch.Tensor):
        """
        Starts the word vectors (`config.word_vector_dim`) from `table` `(word_vector_vocab_size, word_vector_dim)`,
        whose row `i` is the vector of word id `i` of the tokenizer's word vocabulary: e.g. the pre-training softmax's
        rows ([`word_vectors_from_softmax`]). Another shape is a one-line `ValueError`.
        """
        word_vectors = self.task_encoder.word_vectors
        if word_vectors is None:
            raise ValueError(
                "this head has no word vectors to start: set config.word_vector_dim and word_vector_vocab_size"
            )
        if table.shape != word_vectors.weight.shape:
            raise ValueError(
                f"the word vectors are {tuple(word_vectors.weight.shape)} (word_vector_vocab_size, word_vector_dim); "
                f"the table given is {tuple(table.shape)}"
            )
        word_vectors.weight.copy_(table)

    def _validated_word_vector_ids(self, input_ids: torch.Tensor, word_vector_ids: torch.Tensor | None):
        """`word_vector_ids` checked against the config: needed exactly when the head has word vectors."""
        if self.config.word_vector_vocab_size is None:
            if word_vector_ids is not None:
                raise ValueError(
                    "word_vector_ids were given, but this head has no word vectors (config.word_vector_dim)"
                )
            return None
        if word_vector_ids is None:
            raise ValueError(
                "this head also reads word_vector_ids (config.word_vector_dim); none were given: create its "
                "ElmoTokenizer with word_vector_ids=True"
            )
        check_id_tensor("word_vector_ids", word_vector_ids)
        if word_vector_ids.shape != input_ids.shape[:2]:
            raise ValueError(
                f"word_vector_ids shape {tuple(word_vector_ids.shape)} does not match input_ids "
                f"{tuple(input_ids.shape[:2])}"
            )
        check_values(
            self.config, check_ids_in_table, "word_vector_ids", word_vector_ids, self.config.word_vector_vocab_size
        )
        return word_vector_ids

    def _encode(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None,
        word_input_ids: torch.LongTensor | None,
        word_vector_ids: torch.LongTensor | None,
        options: dict,
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...] | None, torch.Tensor]:
        """
        The part every head's `forward` shares (the arguments as there, `options` its `**options`): the task features
        `(batch, positions, dim)`, the valid mask, the biLM's layers when asked for, and the mix's L2 penalty. A
        keyword that is none of `HEAD_OPTIONS` is a `TypeError`, as Python's for an unknown argument.
        """
        unknown = sorted(set(options) - set(HEAD_OPTIONS))
        if unknown:
            raise TypeError(f"{type(self).__name__}.forward() got an unexpected keyword argument {unknown[0]!r}")
        word_vector_ids = self._validated_word_vector_ids(input_ids, word_vector_ids)
        elmo_output = self.elmo(
            input_ids,
            attention_mask,
            output_hidden_states=True,
            return_dict=True,
            inputs_embeds=options.get("inputs_embeds"),
            output_attentions=options.get("output_attentions"),
            word_input_ids=word_input_ids,
        )
        mask = valid_positions(input_ids, attention_mask)
        features, penalty = self.task_encoder(elmo_output.hidden_states, mask, word_vector_ids)
        wanted = self._wants_hidden_states(options.get("output_hidden_states"))
        return features.to(mask.device), mask, elmo_output.hidden_states if wanted else None, penalty


class ElmoForSequenceClassification(ElmoHeadModel):
    r"""
    ELMo with a sentence (or sentence pair) classifier: ELMo mix -> dropout -> optional task BiLSTM -> pooling over
    the words (`config.pooling`) -> linear. With `config.pair_classification`, the sentences marked by
    `token_type_ids` are pooled separately to `u`, `v` and `[u ; v ; |u - v| ; u * v]` is classified.
    """

    description = "a sentence (or sentence pair) classifier: the words pooled, then a linear layer"
    # The second sentence of a pair, where it classifies pairs.
    graph_inputs = {"token_type_ids": "pair_classification"}

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        pooled_dim = self.task_encoder.output_dim * (2 if config.pooling == "mean_max" else 1)
        self.classifier = nn.Linear(pooled_dim * (4 if config.pair_classification else 1), config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        labels: torch.Tensor | None = None,
        word_input_ids: torch.LongTensor | None = None,
        word_vector_ids: torch.LongTensor | None = None,
        **options,
    ) -> SequenceClassifierOutput | tuple:
        r"""
        Args:
            input_ids, attention_mask: as for [`ElmoModel`].
            token_type_ids (`torch.LongTensor` of shape `(batch, positions)`, *optional*): 0 for the first sentence,
                1 for the second; needed with `config.pair_classification`.
            labels (`torch.Tensor` of shape `(batch,)` or `(batch, num_labels)`, *optional*): class indices, or
                targets for regression / multi-label classification, following `config.problem_type`.
            word_input_ids: as for [`ElmoModel`], for models with a word-embedding input.
            word_vector_ids (`torch.LongTensor` of shape `(batch, positions)`, *optional*): the word-vocabulary id of
                every position, for a head with word vectors (`config.word_vector_dim`); from an `ElmoTokenizer` made
                with `word_vector_ids=True`.
            options: transformers' `output_hidden_states` and `return_dict`, and `inputs_embeds`, `output_attentions`
                (accepted as `None`), as for [`ElmoModel`] (`HEAD_OPTIONS`).
        """
        features, mask, hidden_states, penalty = self._encode(
            input_ids, attention_mask, word_input_ids, word_vector_ids, options
        )
        words = word_positions(input_ids, mask, self.config)
        if self.config.pair_classification:
            if token_type_ids is None:
                raise ValueError("config.pair_classification needs token_type_ids marking the second sentence")
            second = token_type_ids.bool()
            u = masked_pool(features, words & ~second, self.config.pooling)
            v = masked_pool(features, words & second, self.config.pooling)
            pooled = torch.cat([u, v, (u - v).abs(), u * v], dim=-1)
        else:
            pooled = masked_pool(features, words, self.config.pooling)
        logits = self.classifier(pooled)

        loss = None
        if labels is not None:
            loss = self._classification_loss(logits, labels.to(logits.device))
            loss = loss + penalty.to(loss.device)
        output = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=hidden_states)
        return self._as_return_dict_or_tuple(output, options.get("return_dict"))

    def head_settings(self) -> dict[str, str]:
        """Its labels, mix, word vectors and task BiLSTM, then its pooling."""
        pooling = self.config.pooling + (", sentence pairs" if self.config.pair_classification else "")
        return {**self.label_settings(), **super().head_settings(), "pooling": pooling}

    def _classification_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The loss of `config.problem_type`, inferred from `num_labels` and the labels' dtype when unset."""
        if self.config.problem_type is None:
            if self.num_labels == 1:
                self.config.problem_type = "regression"
            elif labels.dtype in (torch.long, torch.int):
                self.config.problem_type = "single_label_classification"
            else:
                self.config.problem_type = "multi_label_classification"
        if self.config.problem_type == "regression":
            if self.num_labels == 1:
                return F.mse_loss(logits.squeeze(-1), labels.squeeze(-1).to(logits.dtype))
            return F.mse_loss(logits, labels.to(logits.dtype))
        if self.config.problem_type == "single_label_classification":
            return F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        if self.config.problem_type == "multi_label_classification":
            return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
        raise ValueError(f"unknown problem_type {self.config.problem_type!r}")


class ElmoForTokenClassification(ElmoHeadModel):
    r"""
    ELMo with a per-word classifier: ELMo mix -> dropout -> optional task BiLSTM -> linear. `logits` has one row per
    position of `input_ids`; the loss never counts `<S>`, `</S>` or padding, nor positions labelled -100.

    With `config.use_crf`, a linear-chain CRF (`crf_elmo.py`) links the words' labels: the loss is its negative
    log-likelihood per labelled word, `logits` are its emission scores (their argmax is not the prediction), and
    [`decode`] gives the Viterbi path, within the transitions of `config.crf_constraint` when set.
    """

    description = "a label for each word: a linear layer on each position, optionally a CRF over them"

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        self.classifier = nn.Linear(self.task_encoder.output_dim, config.num_labels)
        self.crf = None
        if config.use_crf:
            allowed = allowed_transitions(config.crf_constraint, config.id2label) if config.crf_constraint else None
            self.crf = ConditionalRandomField(config.num_labels, allowed)
        self.post_init()

    def head_settings(self) -> dict[str, str]:
        """Its labels, mix, word vectors and task BiLSTM, then whether a CRF links the labels."""
        constraint = f", {self.config.crf_constraint} transitions only" if self.config.crf_constraint else ""
        return {
            **self.label_settings(),
            **super().head_settings(),
            "CRF": "no" if self.crf is None else f"yes{constraint}",
        }

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        word_input_ids: torch.LongTensor | None = None,
        word_vector_ids: torch.LongTensor | None = None,
        **options,
    ) -> TokenClassifierOutput | tuple:
        r"""
        Args:
            input_ids, attention_mask: as for [`ElmoModel`]; `token_type_ids` is accepted and unused.
            labels (`torch.LongTensor` of shape `(batch, positions)`, *optional*): the class of each position; -100
                (and any label at a boundary or padded position) is ignored.
            word_input_ids: as for [`ElmoModel`], for models with a word-embedding input.
            word_vector_ids (`torch.LongTensor` of shape `(batch, positions)`, *optional*): the word-vocabulary id of
                every position, for a head with word vectors (`config.word_vector_dim`); from an `ElmoTokenizer` made
                with `word_vector_ids=True`.
            options: transformers' `output_hidden_states` and `return_dict`, and `inputs_embeds`, `output_attentions`
                (accepted as `None`), as for [`ElmoModel`] (`HEAD_OPTIONS`).
        """
        features, mask, hidden_states, penalty = self._encode(
            input_ids, attention_mask, word_input_ids, word_vector_ids, options
        )
        logits = self.classifier(features)

        loss = None
        if labels is not None:
            if labels.shape != mask.shape:
                raise ValueError(
                    f"labels must have shape {tuple(mask.shape)} (batch, positions), got {tuple(labels.shape)}"
                )
            labels = labels.masked_fill(~word_positions(input_ids, mask, self.config), -100).to(logits.device)
            if self.crf is not None:
                loss = self.crf(logits, labels)
            else:
                loss = F.cross_entropy(logits.view(-1, self.num_labels), labels.reshape(-1), ignore_index=-100)
            loss = loss + penalty.to(loss.device)
        output = TokenClassifierOutput(loss=loss, logits=logits, hidden_states=hidden_states)
        return self._as_return_dict_or_tuple(output, options.get("return_dict"))

    @torch.no_grad()
    def decode(self, logits: torch.Tensor, word_mask: torch.Tensor) -> torch.LongTensor:
        """
        The predicted label ids `(batch, positions)` from `logits` `(batch, positions, num_labels)`: the CRF's Viterbi
        path over the positions where `word_mask` is set (with `config.use_crf`), else the argmax; -100 elsewhere.
        For the Trainer: `preprocess_logits_for_metrics=lambda logits, labels: model.decode(logits, labels != -100)`.
        """
        word_mask = word_mask.to(device=logits.device, dtype=torch.bool)
        if self.crf is not None:
            return self.crf.decode(logits, word_mask)
        return logits.argmax(dim=-1).masked_fill(~word_mask, -100)

    @torch.no_grad()
    def predict_word_labels(self, encoding) -> list[list[tuple[str, float]]]:
        """
        Word-level predictions (the `token-classification` pipeline cannot read character rows): for a tokenizer
        output (`ElmoBatchEncoding`, which knows where each word starts), one `(label, probability)` per word of
        each sentence, labels from `config.id2label`: a word of several positions (the morphemes of
        `korean_morphemes`) is read at its first, as a model trained with labels at first positions only (-100
        elsewhere) reads it. Batched pairs are not supported. With `config.use_crf`, the labels are the Viterbi path
        and each probability is the CRF's marginal probability of that label at that word.
        """
        inputs = {
            key: encoding[key].to(self.device)
            for key in ("input_ids", "attention_mask", "word_input_ids", "word_vector_ids")
            if key in encoding
        }
        logits = self(**inputs).logits
        firsts = [encoding.word_start_positions(row) for row in range(logits.shape[0])]
        word_mask = torch.zeros(logits.shape[:2], dtype=torch.bool, device=logits.device)
        for row, positions in enumerate(firsts):
            word_mask[row, positions] = True
        labels = self.decode(logits, word_mask)
        probabilities = self.crf.marginals(logits, word_mask) if self.crf is not None else logits.softmax(dim=-1)
        scores = probabilities.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return [
            [
                (self.config.id2label[labels[row, position].item()], scores[row, position].item())
                for position in positions
            ]
            for row, positions in enumerate(firsts)
        ]


class ElmoForQuestionAnswering(ElmoHeadModel):
    r"""
    ELMo for extractive question answering: a start and an end score at every position of a question and its context
    given as a pair (`ElmoTokenizer(question, context)`: `token_type_ids` 1 on the context). ELMo mix -> optional
    task BiLSTM over the pair -> with `config.question_attention`, each position attends over the question's words
    (bilinear scores `f_i W f_j`, in the manner of BiDAF's context-to-query attention) and reads `[f_i ; q_i ;
    f_i * q_i]`, through a second BiLSTM where the task BiLSTM is set -> a linear layer gives the two scores. With
    `config.question_match_feature`, each position also reads whether its word is one of the question's (its row of
    characters equal to a question position's: DrQA's exact-match feature), beside the attention's output. Only the
    context's words can be chosen: every other position's logits are the lowest value of their dtype.
    """

    description = "extractive question answering: a start and an end score at each word of the context"
    graph_inputs = {"token_type_ids": None}  # they mark the context
    graph_outputs = ("start_logits", "end_logits")
    folder_extras = (QUESTION_ANSWERING_PIPELINE_FILE,)

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        width = self.task_encoder.output_dim
        self.attention = nn.Linear(width, width, bias=False) if config.question_attention else None
        fused = (3 if config.question_attention else 1) * width + int(config.question_match_feature)
        self.modeling_lstm = (
            ElmoTaskBiLstm(config, fused) if config.question_attention and config.task_lstm_dim > 0 else None
        )
        self.qa_outputs = nn.Linear(2 * config.task_lstm_dim if self.modeling_lstm is not None else fused, 2)
        self.post_init()

    def head_settings(self) -> dict[str, str]:
        """Its mix, word vectors and task BiLSTM, then what it reads of the question."""
        reads = [
            ("attention over the question", self.config.question_attention),
            ("exact match", self.config.question_match_feature),
        ]
        question = ", ".join(name for name, chosen in reads if chosen) or "its words alone"
        return {**super().head_settings(), "question": question}

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        word_input_ids: torch.LongTensor | None = None,
        word_vector_ids: torch.LongTensor | None = None,
        **options,
    ) -> QuestionAnsweringModelOutput | tuple:
        r"""
        Args:
            input_ids, attention_mask: as for [`ElmoModel`]: a question and its context as a pair.
            token_type_ids (`torch.LongTensor` of shape `(batch, positions)`, *optional*): 0 on the question, 1 on
                the context; where absent, read from the pair's sentence markers as the tokenizer sets them.
            start_positions, end_positions (`torch.LongTensor` of shape `(batch,)`, *optional*): the positions of the
                answer's first and last unit. A label outside the context's words (a window without the answer, or
                a position past the row) is ignored, as transformers' heads ignore one past the sequence.
            word_input_ids: as for [`ElmoModel`], for models with a word-embedding input.
            word_vector_ids (`torch.LongTensor` of shape `(batch, positions)`, *optional*): the word-vocabulary id of
                every position, for a head with word vectors (`config.word_vector_dim`); from an `ElmoTokenizer` made
                with `word_vector_ids=True`.
            options: transformers' `output_hidden_states` and `return_dict`, and `inputs_embeds`, `output_attentions`
                (accepted as `None`), as for [`ElmoModel`] (`HEAD_OPTIONS`).
        Returns `start_logits` and `end_logits` `(batch, positions)`.
        """
        if token_type_ids is None:  # PEFT's question-answering model does not pass them on
            token_type_ids = second_sentence_positions(input_ids, self.config)
        features, mask, hidden_states, penalty = self._encode(
            input_ids, attention_mask, word_input_ids, word_vector_ids, options
        )
        words = word_positions(input_ids, mask, self.config)
        context = words & token_type_ids.to(words.device).bool()
        question = words & ~context
        if self.attention is not None:
            scores = self.attention(features) @ features.transpose(1, 2)  # (batch, positions, positions)
            scores = scores.masked_fill(~question[:, None, :], torch.finfo(scores.dtype).min)
            attended = scores.softmax(dim=-1) @ features
            features = torch.cat([features, attended, features * attended], dim=-1)
        if self.config.question_match_feature:
            # (batch, positions, positions): the same row of characters, the same word
            same_word = (input_ids[:, :, None, :] == input_ids[:, None, :, :]).all(dim=-1)
            in_question = (same_word & question[:, None, :]).any(dim=-1) & words
            features = torch.cat([features, in_question.to(features)[..., None]], dim=-1)
        if self.modeling_lstm is not None:
            features = self.modeling_lstm(features, mask)
        lowest = torch.finfo(features.dtype).min
        start_logits, end_logits = self.qa_outputs(features).masked_fill(~context[..., None], lowest).unbind(dim=-1)

        loss = None
        if start_positions is not None and end_positions is not None:
            positions = context.shape[1]

            def answer_labels(labels: torch.Tensor) -> torch.Tensor:
                # A label off the context's words is `positions`, ignored by the loss.
                labels = labels.to(context.device).clamp(0, positions)
                inside = context.gather(1, labels.clamp(max=positions - 1)[:, None])[:, 0] & (labels < positions)
                return labels.masked_fill(~inside, positions)

            loss = (
                F.cross_entropy(start_logits, answer_labels(start_positions), ignore_index=positions)
                + F.cross_entropy(end_logits, answer_labels(end_positions), ignore_index=positions)
            ) / 2 + penalty.to(start_logits.device)
        output = QuestionAnsweringModelOutput(
            loss=loss, start_logits=start_logits, end_logits=end_logits, hidden_states=hidden_states
        )
        return self._as_return_dict_or_tuple(output, options.get("return_dict"))


# ---------------------------------------------------------------------------------------------------------------------
# Pre-training: the biLM with a word softmax shared by both directions (stage 1 of the paper).
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class ElmoForPreTrainingOutput(ModelOutput):
    """
    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*): mean of `forward_loss` and `backward_loss`.
        forward_loss (`torch.FloatTensor` of shape `()`, *optional*): mean negative log-likelihood of each next word
            under the forward LM (sampled softmax in training mode, exact softmax in eval mode).
        backward_loss (`torch.FloatTensor` of shape `()`, *optional*): the same for each previous word under the
            backward LM.
        forward_logits (`torch.FloatTensor` of shape `(batch, positions, word_vocab_size)`, *optional*): the exact
            softmax's logits of the next word under the forward LM at every position; returned when no `labels` are
            given (`log_softmax(-1)` of them is [`ElmoForPreTraining.word_log_probs`]).
        backward_logits (`torch.FloatTensor` of shape `(batch, positions, word_vocab_size)`, *optional*): the same
            for the previous word under the backward LM.
        hidden_states (`tuple(torch.FloatTensor)`, *optional*): the biLM's layers, as in [`ElmoModelOutput`].
    """

    loss: torch.FloatTensor | None = None
    forward_loss: torch.FloatTensor | None = None
    backward_loss: torch.FloatTensor | None = None
    forward_logits: torch.FloatTensor | None = None
    backward_logits: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None


class ElmoWordSoftmax(nn.Linear):
    """
    The word softmax shared by both directions: states `(..., projection_dim)` -> logits `(..., word_vocab_size)`.
    Given `targets` `(rows,)` and `candidates` `(n,)` with states `(rows, projection_dim)`, it returns only the logit
    of each row's target `(rows,)` and the candidates' logits `(rows, n)`, for a sampled softmax.
    """

    def forward(
        self, states: torch.Tensor, targets: torch.Tensor | None = None, candidates: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if targets is None:
            return super().forward(states)
        # One lookup of all the rows used: its gradient is one dense `(vocab, dim)` tensor, not one per lookup.
        rows = torch.cat([targets, candidates])
        target_weights, candidate_weights = F.embedding(rows, self.weight).split([len(targets), len(candidates)])
        target_biases, candidate_biases = self.bias[rows].split([len(targets), len(candidates)])
        return (states * target_weights).sum(-1) + target_biases, F.linear(states, candidate_weights, candidate_biases)


def log_expected_counts(ids: torch.Tensor, vocab_size: int, num_sampled: int) -> torch.Tensor:
    """
    `log(num_sampled * P(k))` for each id `k`, where `P(k) = log((k + 2) / (k + 1)) / log(V + 1)` is the log-uniform
    (Zipfian) distribution the negatives are drawn from: the `log Q` correction of a sampled softmax.
    """
    ids = ids.double()
    log_prob = torch.log1p(1.0 / (ids + 1.0)).log() - torch.tensor(float(vocab_size + 1)).log().log()
    return (log_prob + torch.tensor(float(num_sampled)).log()).float()


def sample_log_uniform(num_samples: int, vocab_size: int, device) -> torch.Tensor:
    """`num_samples` ids drawn with replacement from the log-uniform distribution over `[0, vocab_size)`."""
    uniform = torch.rand(num_samples, dtype=torch.float64, device=device)
    ids = torch.exp(uniform * torch.log(torch.tensor(vocab_size + 1.0, dtype=torch.float64))).floor().long() - 1
    return ids.clamp_(0, vocab_size - 1)


class ElmoForPreTraining(ElmoPreTrainedModel):
    r"""
    The ELMo biLM with one word softmax shared by both directions, as pre-trained in the paper: the forward LM at
    position `t` predicts the word at `t + 1` from its top layer, the backward LM predicts the word at `t - 1`.

    In training mode the softmax is a sampled softmax: `config.n_negative_samples` candidates drawn with replacement
    from a log-uniform (Zipfian) distribution `Q`, shared by the whole batch and both directions; candidates equal to
    the true word are removed and the others' logits are corrected by `-log(n * Q(k))`, so that
    `exp(s_true) + sum(exp(corrected))` is an unbiased estimate of the full partition function and the sampled loss
    tends to the full loss as `n` grows. Word ids must be sorted by decreasing frequency, as the `tokenizers`
    `WordLevelTrainer` gives them. In eval mode the softmax is exact, so `exp(loss)` is the true perplexity. With
    `config.lstm_dropout`, training drops out the top layer before the softmax, as well as each LSTM layer's input.

    The config needs `word_vocab_size` (and `n_negative_samples` to train); `ElmoModel.from_pretrained` loads the
    biLM alone from a saved `ElmoForPreTraining`.
    """

    description = "the biLM with its word softmax, as pre-trained: the next word forward, the previous one backward"
    graph_outputs = ("forward_logits", "backward_logits")
    folder_extras = (SENTENCE_TRANSFORMERS_MODULE,)

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        if config.word_vocab_size is None:  # the config checks it where its `architectures` name this class
            raise ValueError("ElmoForPreTraining needs config.word_vocab_size (the words of its softmax)")
        self.elmo = ElmoModel(config)
        self.softmax = ElmoWordSoftmax(config.projection_dim, config.word_vocab_size)
        self.output_dropout = nn.Dropout(config.lstm_dropout)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        inputs_embeds: None = None,
        output_attentions: bool | None = None,
        word_input_ids: torch.LongTensor | None = None,
    ) -> ElmoForPreTrainingOutput | tuple:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, positions, max_characters_per_token)`): character ids.
            attention_mask (`torch.Tensor` of shape `(batch, positions)`, *optional*): 1 for valid positions.
            labels (`torch.LongTensor` of shape `(batch, positions)`, *optional*): the word id at every position,
                `<S>` and `</S>` included (from `ElmoTokenizer(..., return_word_labels=True)`); -100 is ignored.
                Without labels, the output holds the exact softmax's logits of both directions at every position
                (`batch * positions * word_vocab_size` floats each) instead of the losses.
            word_input_ids: as for [`ElmoModel`], for models with a word-embedding input.
        """
        outputs = self.elmo(
            input_ids,
            attention_mask,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            word_input_ids=word_input_ids,
        )
        forward_loss = backward_loss = loss = forward_logits = backward_logits = None
        top = self.output_dropout(outputs.last_hidden_state)
        if labels is None:
            dim = self.config.projection_dim
            forward_logits, backward_logits = self.softmax(top[..., :dim]), self.softmax(top[..., dim:])
        else:
            if labels.shape != input_ids.shape[:2]:
                raise ValueError(f"labels must have shape {tuple(input_ids.shape[:2])}, got {tuple(labels.shape)}")
            valid = valid_positions(input_ids, attention_mask)
            labels = labels.masked_fill(~valid, -100)
            forward_states, backward_states = self._direction_states(top)
            negatives = None
            if self.training:
                num_sampled = self.config.n_negative_samples
                if not is_integer(num_sampled) or num_sampled < 1:
                    raise ValueError("training ElmoForPreTraining needs config.n_negative_samples (an int >= 1)")
                negatives = sample_log_uniform(num_sampled, self.softmax.out_features, labels.device)
            # A padded position's backward state must not predict the last word of its row.
            backward_targets = labels[:, :-1].masked_fill(~valid[:, 1:], -100)
            forward_loss, backward_loss = self._direction_losses(
                (forward_states, backward_states), (labels[:, 1:], backward_targets), negatives
            )
            loss = (forward_loss + backward_loss) / 2
        output = ElmoForPreTrainingOutput(
            loss=loss,
            forward_loss=forward_loss,
            backward_loss=backward_loss,
            forward_logits=forward_logits,
            backward_logits=backward_logits,
            hidden_states=outputs.hidden_states,
        )
        return self._as_return_dict_or_tuple(output, return_dict)

    def _direction_states(self, top_layer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward LM's states at positions `0..T-2` and the backward LM's at `1..T-1`, each `(batch, T-1, P)`."""
        dim = self.config.projection_dim
        return top_layer[:, :-1, :dim], top_layer[:, 1:, dim:]

    def _direction_losses(
        self,
        states: tuple[torch.Tensor, torch.Tensor],
        targets: tuple[torch.Tensor, torch.Tensor],
        negatives: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """
        Mean NLL of each direction's `targets` `(batch, T-1)` given its `states` `(batch, T-1, P)`; sampled when
        `negatives` is given. Both directions go through the softmax together: one lookup of the rows they use.
        """
        keeps = [direction_targets != -100 for direction_targets in targets]
        states = torch.cat([direction_states[keep] for direction_states, keep in zip(states, keeps)])
        counts = [int(keep.sum()) for keep in keeps]
        targets = torch.cat([direction_targets[keep] for direction_targets, keep in zip(targets, keeps)])
        if min(counts) == 0:
            raise ValueError("labels leave no word to predict")
        if targets.min() < 0 or targets.max() >= self.softmax.out_features:
            raise ValueError(f"labels must be word ids in [0, {self.softmax.out_features}) or -100")
        if negatives is None:
            # The exact softmax's logits span the vocabulary: one direction at a time.
            return tuple(
                F.cross_entropy(self.softmax(part).float().to(targets.device), part_targets)
                for part, part_targets in zip(states.split(counts), targets.split(counts))
            )
        vocab_size, num_sampled = self.softmax.out_features, negatives.numel()
        true_logits, sampled_logits = (
            logits.float().to(targets.device) for logits in self.softmax(states, targets, negatives)
        )
        sampled_logits = sampled_logits - log_expected_counts(negatives, vocab_size, num_sampled)
        sampled_logits = sampled_logits.masked_fill(negatives[None, :] == targets[:, None], float("-inf"))
        logits = torch.cat([true_logits[:, None], sampled_logits], dim=1)
        losses = F.cross_entropy(logits, torch.zeros_like(targets), reduction="none")
        forward_losses, backward_losses = losses.split(counts)
        return forward_losses.mean(), backward_losses.mean()

    @torch.no_grad()
    def word_log_probs(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """
        Exact log-probabilities `(batch, positions, word_vocab_size)` of the next word (forward LM) and of the
        previous word (backward LM) at every position.
        """
        output = self(input_ids, attention_mask, return_dict=True)
        return output.forward_logits.float().log_softmax(-1), output.backward_logits.float().log_softmax(-1)


def word_vectors_from_softmax(state_dict: dict[str, torch.Tensor]) -> torch.Tensor:
    """
    The context-independent output vector of every word that [`ElmoForPreTraining`] learned: its softmax's weight
    `(word_vocab_size, projection_dim)`, row `i` the word of id `i` in its tokenizer's word vocabulary, copied from
    `state_dict` (the model's, or the `softmax.` weights of a folder `hf-elmo pretrain` saved); for
    [`ElmoHeadModel.init_word_vectors`]. A state dict without it (a biLM's alone) is a one-line `ValueError`.
    """
    if "softmax.weight" not in state_dict:
        raise ValueError(
            "no pre-training softmax (softmax.weight) among these weights: only a folder saved by hf-elmo pretrain "
            "(ElmoForPreTraining) holds one, a biLM-only folder does not"
        )
    return state_dict["softmax.weight"].detach().clone()


# The model class each Auto class gives for an ELMo config: `import hf_elmo` registers them.
AUTO_CLASSES = {
    "AutoModel": ElmoModel,
    "AutoModelForSequenceClassification": ElmoForSequenceClassification,
    "AutoModelForTokenClassification": ElmoForTokenClassification,
    "AutoModelForQuestionAnswering": ElmoForQuestionAnswering,
    "AutoModelForPreTraining": ElmoForPreTraining,
}
__all__ = [
    "ElmoModel",
    "ElmoPreTrainedModel",
    "ElmoModelOutput",
    "ElmoScalarMix",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
    "ElmoForQuestionAnswering",
    "ElmoForPreTraining",
    "ElmoForPreTrainingOutput",
]

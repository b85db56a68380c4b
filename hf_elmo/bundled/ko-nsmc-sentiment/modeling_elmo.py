"""ELMo (Peters et al., 2018): a character CNN feeding two independent stacks of projected, clipped LSTMs."""

import itertools
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers import PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput
from transformers.utils import ModelOutput

from .configuration_elmo import ElmoConfig
from .tokenization_elmo import BEGIN_OF_SENTENCE_CHAR, END_OF_SENTENCE_CHAR

# TensorFlow's LSTMCell adds this to the forget gate at run time; the original files store the bias without it.
FORGET_BIAS = 1.0
# Rows of the character table: 261 trained characters after a zero row for "no character".
CHAR_TABLE_ROWS = 262
# Tests and benchmarks set this to False to run the exact reference paths (`nn.Conv1d` for the character CNN,
# `ElmoLstmLayer.forward` for the recurrence) even when nothing needs gradients, and autograd through the reference
# loop instead of `ElmoLstmLayerFunction` when the biLM trains.
_FAST_PATHS = True
# Packed rows of input gates the fast recurrence computes at a time (16 MB at the original shapes).
GATE_CHUNK_ROWS = 256
# What a saved folder's `config.json` maps each Auto class to, so that any of them loads any ELMo folder with
# `trust_remote_code=True` from the code files saved beside the weights.
AUTO_MAP = {
    "AutoConfig": "configuration_elmo.ElmoConfig",
    "AutoModel": "modeling_elmo.ElmoModel",
    "AutoModelForSequenceClassification": "modeling_elmo.ElmoForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_elmo.ElmoForTokenClassification",
    "AutoModelForPreTraining": "modeling_elmo.ElmoForPreTraining",
}


def fast_path_allowed(module: nn.Module, *inputs: torch.Tensor) -> bool:
    """
    Fast paths run without autograd and in the parameters' dtype: only where nothing in `module` or `inputs` needs
    gradients and autocast is off (the reference paths follow autocast op by op).
    """
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (*inputs, *module.parameters()))
    return _FAST_PATHS and not needs_grad and not autocast_enabled(module)


def autocast_enabled(module: nn.Module) -> bool:
    """Whether autocast is on for the device of `module`'s parameters."""
    return torch.is_autocast_enabled(next(module.parameters()).device.type)


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
    """One highway layer: `gate * relu(x W_n^T + b_n) + (1 - gate) * x` with `gate = sigmoid(x W_g^T + b_g)`."""

    def __init__(self, dim: int):
        super().__init__()
        self.nonlinear_weight = nn.Parameter(torch.empty(dim, dim))
        self.nonlinear_bias = nn.Parameter(torch.empty(dim))
        self.gate_weight = nn.Parameter(torch.empty(dim, dim))
        self.gate_bias = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(F.linear(x, self.gate_weight, self.gate_bias))
        return gate * torch.relu(F.linear(x, self.nonlinear_weight, self.nonlinear_bias)) + (1.0 - gate) * x


class ElmoCharacterEncoder(nn.Module):
    """Context-independent word representation from character ids: embedding, CNN, max-pool, highways, projection."""

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.char_embedding = nn.Embedding(CHAR_TABLE_ROWS, config.char_embedding_dim, padding_idx=0)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(config.char_embedding_dim, n_filters, width) for width, n_filters in config.filters
        )
        self.activation = torch.tanh if config.activation == "tanh" else torch.relu
        self.highways = nn.ModuleList(ElmoHighway(config.n_filters) for _ in range(config.n_highway))
        # bilm-tf projects only when the widths differ.
        self.projection = (
            nn.Linear(config.n_filters, config.projection_dim) if config.n_filters != config.projection_dim else None
        )

    def forward(self, char_ids: torch.LongTensor) -> torch.Tensor:
        """`char_ids` `(words, max_characters_per_token)` -> `(words, projection_dim)`."""
        chars = self.char_embedding(char_ids)  # (words, chars, char_dim)
        if fast_path_allowed(self):
            pooled = self._max_pooled_by_matmul(chars)
        else:
            pooled = torch.cat([conv(chars.transpose(1, 2)).amax(dim=-1) for conv in self.convolutions], dim=-1)
        x = self.activation(pooled)
        for highway in self.highways:
            x = highway(x)
        return self.projection(x) if self.projection is not None else x

    @torch.no_grad()
    def _max_pooled_by_matmul(self, chars: torch.Tensor, words_per_chunk: int = 64) -> torch.Tensor:
        """
        The convolutions' max over positions, `(words, n_filters)`, as products of each word's character windows
        `(positions, char_dim * width)` with the flattened filters: equal to the `nn.Conv1d` path within fp32
        rounding, and ~3x faster on CPU when taken a few words at a time, so that each `(words, positions, filters)`
        product stays in cache. The bias is added after the max, which commutes with it.
        """
        kernels = [conv.weight.flatten(1).t() for conv in self.convolutions]  # (char_dim * width, filters)
        pooled = []
        for words in chars.split(words_per_chunk):
            pooled.append(torch.cat([
                (words.unfold(1, conv.kernel_size[0], 1).flatten(2) @ kernel).amax(dim=1)
                for conv, kernel in zip(self.convolutions, kernels)
            ], dim=-1))
        return torch.cat(pooled) + torch.cat([conv.bias for conv in self.convolutions])


class ElmoLstmLayer(nn.Module):
    """
    One layer of one direction: an LSTM whose memory is clipped and whose output is projected and clipped, as
    TensorFlow's `LSTMCell(num_proj=..., cell_clip=..., proj_clip=...)`. Gates are ordered input, forget, cell, output.
    The kernels keep TensorFlow's `(in, out)` layout: a step multiplies `(batch, in) @ (in, out)`, which is faster
    from contiguous `(in, out)` memory than from a transposed `(out, in)` weight when the batch is small.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__()
        cell_dim, projection_dim = config.cell_dim, config.projection_dim
        self.cell_dim = cell_dim
        self.cell_clip = config.cell_clip
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
        """
        input_gates = inputs @ self.input_kernel + self.bias  # every step in one product
        # Steps are taken apart with unbind and put together with stack, one autograd node each: indexing a step
        # of a tensor (or writing one) costs a backward pass over the whole tensor at every step.
        outputs = []
        for step, step_input_gates in enumerate(input_gates.unbind(1)):
            gates = step_input_gates + hidden @ self.recurrent_kernel
            in_gate, forget_gate, cell_input, out_gate = gates.split(self.cell_dim, dim=-1)
            new_memory = torch.sigmoid(in_gate) * torch.tanh(cell_input) + torch.sigmoid(
                forget_gate + FORGET_BIAS
            ) * memory
            if self.cell_clip is not None:
                new_memory = new_memory.clamp(-self.cell_clip, self.cell_clip)
            new_hidden = torch.sigmoid(out_gate) * torch.tanh(new_memory)
            if self.projection_kernel is not None:
                new_hidden = new_hidden @ self.projection_kernel
            if self.proj_clip is not None:
                new_hidden = new_hidden.clamp(-self.proj_clip, self.proj_clip)
            valid = mask[:, step, None]
            hidden = torch.where(valid, new_hidden, hidden)
            memory = torch.where(valid, new_memory, memory)
            outputs.append(torch.where(valid, new_hidden, 0.0))
        return torch.stack(outputs, dim=1), hidden, memory

    def forward_with_handwritten_backward(
        self, inputs: torch.Tensor, mask: torch.Tensor, hidden: torch.Tensor, memory: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The results of [`~ElmoLstmLayer.forward`] from [`ElmoLstmLayerFunction`], whose backward is faster."""
        return ElmoLstmLayerFunction.apply(
            inputs, mask, hidden, memory, self.input_kernel, self.recurrent_kernel, self.bias, self.projection_kernel,
            self.cell_clip, self.proj_clip,
        )


class ElmoLstmLayerFunction(torch.autograd.Function):
    """
    One layer of one direction, as [`ElmoLstmLayer.forward`], with a hand-written backward through time for training.

    The forward saves each step's gate activations, states and clip masks, time-major (two thirds of what autograd
    keeps from the reference loop at the original shapes, most of it the gates). The backward walks the steps
    in reverse for the gradients of the gates and of the state, then takes each weight's gradient as one product over
    all steps: autograd through the reference loop adds a `(in, 4 * cell_dim)` product into the gradient at every step.
    At invalid steps the gates get no gradient and the state's gradient passes through unchanged.
    """

    @staticmethod
    def forward(
        ctx,
        inputs: torch.Tensor,
        mask: torch.Tensor,
        hidden: torch.Tensor,
        memory: torch.Tensor,
        input_kernel: torch.Tensor,
        recurrent_kernel: torch.Tensor,
        bias: torch.Tensor,
        projection_kernel: torch.Tensor | None,
        cell_clip: float | None,
        proj_clip: float | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """
        Arguments as [`ElmoLstmLayer.forward`] takes them, then the layer's parameters and clips. Returns the outputs
        `(batch, steps, output_dim)`, zero at invalid steps, and the final `hidden` and `memory`.
        """
        batch_size, steps, _ = inputs.shape
        cell = memory.shape[-1]
        valid = mask.t()[..., None]  # (steps, batch, 1)
        # (steps, batch, 4 * cell): the input gates of every step in one product, activated in place step by step.
        gates = inputs.transpose(0, 1) @ input_kernel + bias
        hidden_states = hidden.new_empty(steps + 1, *hidden.shape)  # the state before each step and after the last
        memory_states = memory.new_empty(steps + 1, *memory.shape)
        hidden_states[0], memory_states[0] = hidden, memory
        output_dim = cell if projection_kernel is None else projection_kernel.shape[1]
        outputs = inputs.new_empty(batch_size, steps, output_dim)
        # Where each clamp passed its gradient (boundaries included), as `torch.clamp` does.
        in_clip = {"dtype": torch.bool, "device": inputs.device}
        memory_in_clip = torch.empty(steps, batch_size, cell, **in_clip) if cell_clip is not None else None
        hidden_in_clip = torch.empty(steps, batch_size, output_dim, **in_clip) if proj_clip is not None else None
        for step in range(steps):
            step_gates = gates[step].addmm_(hidden_states[step], recurrent_kernel)
            in_gate, forget_gate, cell_input, out_gate = step_gates.split(cell, dim=-1)
            forget_gate.add_(FORGET_BIAS)
            step_gates[:, : 2 * cell].sigmoid_()
            cell_input.tanh_()
            out_gate.sigmoid_()
            new_memory = in_gate * cell_input + forget_gate * memory_states[step]
            if cell_clip is not None:
                torch.le(new_memory.abs(), cell_clip, out=memory_in_clip[step])
                new_memory.clamp_(-cell_clip, cell_clip)
            new_hidden = out_gate * new_memory.tanh()
            if projection_kernel is not None:
                new_hidden = new_hidden @ projection_kernel
            if proj_clip is not None:
                torch.le(new_hidden.abs(), proj_clip, out=hidden_in_clip[step])
                new_hidden.clamp_(-proj_clip, proj_clip)
            step_valid = valid[step]
            torch.where(step_valid, new_hidden, hidden_states[step], out=hidden_states[step + 1])
            torch.where(step_valid, new_memory, memory_states[step], out=memory_states[step + 1])
            outputs[:, step] = torch.where(step_valid, new_hidden, 0.0)
        ctx.save_for_backward(
            inputs, mask, input_kernel, recurrent_kernel, projection_kernel, gates, hidden_states, memory_states,
            memory_in_clip, hidden_in_clip,
        )
        return outputs, hidden_states[steps].clone(), memory_states[steps].clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, outputs_grad: torch.Tensor, hidden_grad: torch.Tensor, memory_grad: torch.Tensor):
        """The gradients of the inputs, the initial state and the parameters; None for the mask and the clips."""
        (
            inputs, mask, input_kernel, recurrent_kernel, projection_kernel, gates, hidden_states, memory_states,
            memory_in_clip, hidden_in_clip,
        ) = ctx.saved_tensors
        steps, batch_size, _ = gates.shape
        cell = memory_states.shape[-1]
        valid = mask.t()[..., None]
        gates_grad = torch.empty_like(gates)  # (steps, batch, 4 * cell), zero at invalid steps
        if projection_kernel is not None:
            # The projection's inputs and its output's gradient at every step, for its gradient in one product.
            cell_outputs = memory_states.new_empty(steps, batch_size, cell)
            projected_grad = hidden_states.new_empty(steps, batch_size, projection_kernel.shape[1])
        for step in reversed(range(steps)):
            step_valid = valid[step]
            in_gate, forget_gate, cell_input, out_gate = gates[step].split(cell, dim=-1)
            in_grad, forget_grad, cell_input_grad, out_grad = gates_grad[step].split(cell, dim=-1)
            # `hidden_grad` and `memory_grad` hold the gradient of the state after this step.
            new_hidden_grad = torch.where(step_valid, hidden_grad + outputs_grad[:, step], 0.0)
            if hidden_in_clip is not None:
                new_hidden_grad.mul_(hidden_in_clip[step])
            memory_tanh = memory_states[step + 1].tanh()
            if projection_kernel is not None:
                projected_grad[step] = new_hidden_grad
                torch.mul(out_gate, memory_tanh, out=cell_outputs[step])
                # `kernel @ grad^T` rather than `grad @ kernel^T`, here and for the recurrent kernel: at a small
                # batch, CPU BLAS runs it two to three times faster.
                cell_output_grad = (projection_kernel @ new_hidden_grad.t()).t()
            else:
                cell_output_grad = new_hidden_grad
            torch.mul(cell_output_grad, memory_tanh, out=out_grad).mul_(out_gate).mul_(1.0 - out_gate)
            new_memory_grad = torch.where(step_valid, memory_grad, 0.0).addcmul_(
                cell_output_grad * out_gate, 1.0 - memory_tanh.square()
            )
            if memory_in_clip is not None:
                new_memory_grad.mul_(memory_in_clip[step])
            torch.mul(new_memory_grad, cell_input, out=in_grad).mul_(in_gate).mul_(1.0 - in_gate)
            torch.mul(new_memory_grad, memory_states[step], out=forget_grad).mul_(forget_gate).mul_(1.0 - forget_gate)
            torch.mul(new_memory_grad, in_gate, out=cell_input_grad).mul_(1.0 - cell_input.square())
            # Rows at invalid steps have no gate gradient: their state's gradient is carried to the earlier step.
            hidden_grad = torch.where(step_valid, (recurrent_kernel @ gates_grad[step].t()).t(), hidden_grad)
            memory_grad = torch.where(step_valid, new_memory_grad * forget_gate, memory_grad)

        needs_grad = ctx.needs_input_grad
        flat_gates_grad = gates_grad.view(steps * batch_size, -1)
        inputs_grad = input_kernel_grad = recurrent_kernel_grad = bias_grad = projection_kernel_grad = None
        if needs_grad[0]:
            inputs_grad = (flat_gates_grad @ input_kernel.t()).view(steps, batch_size, -1).transpose(0, 1)
        if needs_grad[4]:
            input_kernel_grad = inputs.transpose(0, 1).reshape(steps * batch_size, -1).t() @ flat_gates_grad
        if needs_grad[5]:
            recurrent_kernel_grad = hidden_states[:steps].view(steps * batch_size, -1).t() @ flat_gates_grad
        if needs_grad[6]:
            bias_grad = flat_gates_grad.sum(dim=0)
        if needs_grad[7]:
            projection_kernel_grad = cell_outputs.view(steps * batch_size, cell).t() @ projected_grad.flatten(0, 1)
        return (
            inputs_grad, None, hidden_grad, memory_grad, input_kernel_grad, recurrent_kernel_grad, bias_grad,
            projection_kernel_grad, None, None,
        )


def gate_chunks(step_starts: list[int], max_rows: int) -> list[tuple[int, int]]:
    """
    Consecutive steps grouped into `(first, end)` ranges of at most `max_rows` packed rows (a step with more rows is a
    range of its own). Step `s` owns rows `step_starts[s]:step_starts[s + 1]`.
    """
    chunks, first = [], 0
    steps = len(step_starts) - 1
    for step in range(steps):
        if step > first and step_starts[step + 1] - step_starts[first] > max_rows:
            chunks.append((first, step))
            first = step
    return chunks + [(first, steps)] if steps > 0 else []


def reverse_valid_steps(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverses the first `lengths[b]` steps of each row `b` of `x` `(batch, steps, ...)`; the rest stay in place."""
    steps = torch.arange(x.shape[1], device=x.device)
    index = torch.where(steps < lengths[:, None], lengths[:, None] - 1 - steps, steps)
    index = index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, index)


class ElmoBiLm(nn.Module):
    """Two independent stacks of `n_layers` LSTM layers: one reads each row forward, the other backward."""

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.use_skip_connections = config.use_skip_connections
        self.forward_layers = nn.ModuleList(ElmoLstmLayer(config) for _ in range(config.n_layers))
        self.backward_layers = nn.ModuleList(ElmoLstmLayer(config) for _ in range(config.n_layers))

    def forward(
        self, tokens: torch.Tensor, mask: torch.Tensor, hidden: torch.Tensor, memory: torch.Tensor
    ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """
        `tokens` `(batch, steps, projection_dim)`, `mask` `(batch, steps)` bool, right-padded; `hidden`, `memory` the
        initial state `(n_layers, 2, batch, dim)`. Returns each layer's `[forward ; backward]` output and the final
        state in the layout of the initial one.
        """
        lengths = mask.sum(dim=1)
        layer_outputs, final_hidden, final_memory = self.run_stacks(
            tokens, reverse_valid_steps(tokens, lengths), mask, hidden, memory
        )
        joined = [torch.cat([forward_output, reverse_valid_steps(backward_output, lengths)], dim=-1)
                  for forward_output, backward_output in layer_outputs]
        return joined, final_hidden, final_memory

    def run_stacks(
        self,
        forward_input: torch.Tensor,
        backward_input: torch.Tensor,
        mask: torch.Tensor,
        hidden: torch.Tensor,
        memory: torch.Tensor,
    ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor, torch.Tensor]:
        """
        The two stacks, each on its input in its own reading order `(batch, steps, projection_dim)` (the backward
        one reversed within each row's valid steps), under one `mask`. Returns each layer's `(forward_output,
        backward_output)` in those orders and the final state in the layout of the initial one.
        """
        fast = fast_path_allowed(self, forward_input, backward_input, hidden, memory)
        # Under autograd: the reference loop's results with a hand-written backward, or the reference loop itself
        # when the fast paths are off or autocast picks each operation's dtype.
        handwritten_backward = _FAST_PATHS and not autocast_enabled(self)
        final_hidden, final_memory = [], []
        layer_outputs = []
        for index, (forward_layer, backward_layer) in enumerate(zip(self.forward_layers, self.backward_layers)):
            if fast:
                (forward_output, backward_output), layer_hidden, layer_memory = self._run_layer_in_place(
                    index, forward_input, backward_input, mask, hidden[index], memory[index]
                )
            else:
                directions = []
                layers_and_inputs = ((forward_layer, forward_input), (backward_layer, backward_input))
                for direction, (layer, inputs) in enumerate(layers_and_inputs):
                    run = layer.forward_with_handwritten_backward if handwritten_backward else layer
                    directions.append(run(inputs, mask, hidden[index, direction], memory[index, direction]))
                (forward_output, forward_h, forward_c), (backward_output, backward_h, backward_c) = directions
                layer_hidden, layer_memory = torch.stack([forward_h, backward_h]), torch.stack([forward_c, backward_c])
            if self.use_skip_connections and index > 0:
                forward_output = forward_output + forward_input
                backward_output = backward_output + backward_input
            layer_outputs.append((forward_output, backward_output))
            final_hidden.append(layer_hidden)
            final_memory.append(layer_memory)
            forward_input, backward_input = forward_output, backward_output
        return layer_outputs, torch.stack(final_hidden), torch.stack(final_memory)

    @torch.no_grad()
    def _run_layer_in_place(
        self,
        index: int,
        forward_input: torch.Tensor,
        backward_input: torch.Tensor,
        mask: torch.Tensor,
        hidden: torch.Tensor,
        memory: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """
        Both directions of layer `index`, without autograd, for when nothing needs gradients: the results of each
        direction's [`ElmoLstmLayer.forward`] within fp32 rounding.

        Rows are sorted by length so that the rows still running at any step are a prefix of the batch: padded
        positions cost nothing, ended rows simply keep their final state, and no step needs a mask. The input gates
        of the valid positions come `GATE_CHUNK_ROWS` packed rows at a time, from one matrix product (in layer 0, a
        copy from the gates of the distinct words, each projected once); each step adds its recurrent product to its
        slice of those input gates and does the gate arithmetic there, in place.

        Inputs `(batch, steps, projection_dim)` each (the backward one already reversed), `mask` `(batch, steps)`,
        `hidden` `(2, batch, projection_dim)`, `memory` `(2, batch, cell_dim)`. Returns outputs
        `(2, batch, steps, projection_dim)`, zero at invalid steps, and the final `hidden` and `memory`.
        """
        layers = (self.forward_layers[index], self.backward_layers[index])
        batch_size, steps, input_dim = forward_input.shape
        cell, cell_clip, proj_clip = layers[0].cell_dim, layers[0].cell_clip, layers[0].proj_clip
        projected = layers[0].projection_kernel is not None
        lengths = mask.sum(dim=1)
        order = torch.argsort(lengths, descending=True, stable=True)
        packed_mask = mask[order].t()  # (steps, batch): the valid positions in time-major order
        running = [rows for rows in packed_mask.sum(dim=1).tolist() if rows > 0]  # rows still running at each step
        step_starts = [0, *itertools.accumulate(running)]  # step `s` owns rows `step_starts[s]:step_starts[s + 1]`
        chunks = gate_chunks(step_starts, GATE_CHUNK_ROWS)

        packed_inputs = [inputs[order].transpose(0, 1)[packed_mask] for inputs in (forward_input, backward_input)]
        if index == 0:
            # The first layer reads context-free word vectors, one row per occurrence of a word: project each
            # distinct row once and copy its gates to every position holding it.
            distinct, where = torch.unique(torch.cat(packed_inputs), dim=0, return_inverse=True)
            distinct_gates = [distinct @ layer.input_kernel for layer in layers]
            positions = where.chunk(2)

        hidden, memory = hidden[:, order], memory[:, order]  # indexing copies: the arguments stay untouched
        packed_outputs = forward_input.new_empty(2, step_starts[-1], hidden.shape[-1])
        cell_output = forward_input.new_empty(batch_size, cell) if projected else None
        # The input gates of a chunk of steps at a time, in one buffer: small enough to stay in cache between their
        # product and their steps, and to be reused rather than freshly mapped (page faults) for every chunk.
        largest_chunk = max((step_starts[end] - step_starts[first] for first, end in chunks), default=0)
        gate_buffer = forward_input.new_empty(largest_chunk, 4 * cell)
        # One direction after the other: interleaving them per step doubles the weights each step reads, which is
        # slower at small batches, where the recurrence is bound by memory traffic.
        for direction, layer in enumerate(layers):
            direction_hidden, direction_memory = hidden[direction], memory[direction]
            # Added to each step's gates while they are in cache rather than in a pass over all input gates.
            gate_bias = layer.bias.clone()
            gate_bias[cell : 2 * cell] += FORGET_BIAS
            for first_step, end_step in chunks:
                chunk = slice(step_starts[first_step], step_starts[end_step])
                chunk_gates = gate_buffer[: chunk.stop - chunk.start]
                if index == 0:
                    torch.index_select(distinct_gates[direction], 0, positions[direction][chunk], out=chunk_gates)
                else:
                    torch.mm(packed_inputs[direction][chunk], layer.input_kernel, out=chunk_gates)
                for step in range(first_step, end_step):
                    rows, start = running[step], step_starts[step] - chunk.start
                    step_gates = chunk_gates[start : start + rows]  # overwritten in place: each is read once
                    step_gates.addmm_(direction_hidden[:rows], layer.recurrent_kernel).add_(gate_bias)
                    in_gate, forget_gate, cell_input, out_gate = step_gates.split(cell, dim=-1)
                    step_gates[:, : 2 * cell].sigmoid_()
                    out_gate.sigmoid_()
                    step_memory = direction_memory[:rows]
                    step_memory.mul_(forget_gate).addcmul_(in_gate, cell_input.tanh_())
                    if cell_clip is not None:
                        step_memory.clamp_(-cell_clip, cell_clip)
                    step_hidden = direction_hidden[:rows]
                    if projected:
                        torch.tanh(step_memory, out=cell_output[:rows]).mul_(out_gate)
                        torch.mm(cell_output[:rows], layer.projection_kernel, out=step_hidden)
                    else:
                        torch.tanh(step_memory, out=step_hidden).mul_(out_gate)
                    if proj_clip is not None:
                        step_hidden.clamp_(-proj_clip, proj_clip)
                    packed_outputs[direction, step_starts[step] : step_starts[step + 1]] = step_hidden

        outputs = packed_outputs.new_zeros(2, steps, batch_size, hidden.shape[-1])
        outputs[:, packed_mask] = packed_outputs
        restore = torch.argsort(order)
        return outputs.transpose(1, 2)[:, restore], hidden[:, restore], memory[:, restore]


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
        return cls(config.num_hidden_layers, config.mix_layer_norm, config.mix_weights, config.mix_l2_coefficient,
                   config.mix_dropout)

    @torch.no_grad()
    def reset_parameters(self):
        """`s` zero (equal weights) or the fixed values; `gamma` one."""
        if self.fixed_weights is None:
            self.scalar_parameters.zero_()
        else:
            self.scalar_parameters.copy_(torch.tensor(self.fixed_weights))
        self.gamma.fill_(1.0)

    def forward(self, layers: tuple[torch.Tensor, ...], mask: torch.Tensor) -> torch.Tensor:
        """`layers`: `num_layers` tensors `(batch, positions, dim)`; `mask` `(batch, positions)`. Returns their mix."""
        if len(layers) != self.num_layers:
            raise ValueError(f"ElmoScalarMix expects {self.num_layers} layers, got {len(layers)}")
        weights = torch.softmax(self.scalar_parameters, dim=0)
        valid = mask.unsqueeze(-1).to(layers[0].dtype)
        mixed = 0.0
        for weight, layer in zip(weights, layers):
            if self.layer_norm:
                layer = self._normalised(layer, valid)
            mixed = mixed + weight * layer
        return self.dropout(self.gamma * mixed)

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


class ElmoPreTrainedModel(PreTrainedModel):
    config_class = ElmoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    _no_split_modules = ["ElmoLstmLayer"]

    def save_pretrained(self, save_directory, *args, **kwargs):
        """As transformers' `save_pretrained`; a registered model also records every ELMo Auto class in `auto_map`."""
        if self.is_remote_code():
            self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **AUTO_MAP}
        return super().save_pretrained(save_directory, *args, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """bilm-tf's initialisation: scaled normal weights, zero biases, highway gates biased to carry."""
        if isinstance(module, nn.Embedding):
            nn.init.uniform_(module.weight, -1.0, 1.0)
            module.weight[0].zero_()
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
            nn.init.zeros_(module.bias)
        elif isinstance(module, (ElmoScalarMix, nn.LSTM)):
            module.reset_parameters()


class ElmoModel(ElmoPreTrainedModel):
    r"""
    The ELMo biLM. Deterministic: no state is kept between calls. To carry the LSTM state across batches (as the
    original stateful code did), pass the `final_state` of one call as the `initial_state` of the next.
    """

    # A pre-training folder (`ElmoForPreTraining`) also holds the softmax, which the biLM alone does not use.
    _keys_to_ignore_on_load_unexpected = [r"^softmax\."]

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        self.char_encoder = ElmoCharacterEncoder(config)
        self.bilm = ElmoBiLm(config)
        self.post_init()

    def embed_words(self, input_ids: torch.LongTensor, mask: torch.Tensor) -> torch.Tensor:
        """
        Context-independent representation of every position: `input_ids` `(batch, positions, chars)` ->
        `(batch, positions, projection_dim)`, zero at padded positions. Each distinct word is encoded once.
        """
        flat_ids = input_ids.reshape(-1, input_ids.shape[-1])
        distinct_ids, where = torch.unique(flat_ids, dim=0, return_inverse=True)
        embedded = self.char_encoder(distinct_ids)[where]
        return embedded.view(*input_ids.shape[:2], -1) * mask.unsqueeze(-1)

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        initial_state: tuple[torch.Tensor, torch.Tensor] | None = None,
        return_final_state: bool = False,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: torch.Tensor | None = None,
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
        """
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        mask = self._validated_mask(input_ids, attention_mask)
        hidden, memory = self._validated_state(initial_state, input_ids.shape[0], input_ids.device)

        tokens = self.embed_words(input_ids, mask)
        layer_outputs, final_hidden, final_memory = self.bilm(tokens, mask, hidden, memory)
        token_layer = torch.cat([tokens, tokens], dim=-1)
        all_layers = (token_layer, *layer_outputs)

        output = ElmoModelOutput(
            last_hidden_state=all_layers[-1],
            hidden_states=all_layers if output_hidden_states else None,
            final_state=(final_hidden, final_memory) if return_final_state else None,
        )
        return output if return_dict else output.to_tuple()

    @torch.no_grad()
    def windowed_hidden_states(self, input_ids: torch.LongTensor, window: int) -> tuple[torch.Tensor, ...]:
        """
        All `n_layers + 1` layers of ONE unpadded sequence `input_ids` `(positions, chars)` (with its `<S>`/`</S>`
        rows), each `(positions, hidden_size)`, computed `window` positions at a time with the LSTM state carried:
        equal to one pass, with LSTM memory bounded by the window. The forward stacks run over the windows in order,
        the backward stacks over them in reverse order, since they read the sequence right to left.
        """
        if input_ids.dim() != 2 or input_ids.shape[-1] != self.config.max_characters_per_token:
            raise ValueError(f"input_ids must have shape (positions, {self.config.max_characters_per_token}), "
                             f"got {tuple(input_ids.shape)}")
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        tokens = torch.cat([self.char_encoder(chunk) for chunk in input_ids.split(window)])
        hidden, memory = self._validated_state(None, 1, tokens.device)
        # Window k of each direction in its reading order: both splits give windows of the same lengths.
        window_outputs = []
        for forward_window, backward_window in zip(tokens.split(window), tokens.flip(0).split(window)):
            mask = torch.ones(1, len(forward_window), dtype=torch.bool, device=tokens.device)
            layer_outputs, hidden, memory = self.bilm.run_stacks(
                forward_window[None], backward_window[None], mask, hidden, memory
            )
            window_outputs.append(layer_outputs)
        lstm_layers = []
        for index in range(self.config.n_layers):
            forward_output = torch.cat([outputs[index][0][0] for outputs in window_outputs])
            backward_output = torch.cat([outputs[index][1][0] for outputs in window_outputs]).flip(0)
            lstm_layers.append(torch.cat([forward_output, backward_output], dim=-1))
        return (torch.cat([tokens, tokens], dim=-1), *lstm_layers)

    def sentence_embedding(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        layer_weights: list[float] | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """
        One vector per sentence, like TF-Hub ELMo's "default" output: the mean over each row's words (not `<S>`,
        `</S>` or padding) of `sum_j w_j h_j`, with `layer_weights` `w` (one per layer, used as given) defaulting to
        the plain average of the `n_layers + 1` layers. Returns `(batch, 2 * projection_dim)`.
        """
        layers = self(input_ids, attention_mask=attention_mask, output_hidden_states=True, return_dict=True)
        layers = layers.hidden_states
        weights = torch.full((len(layers),), 1.0 / len(layers)) if layer_weights is None else layer_weights
        weights = torch.as_tensor(weights, dtype=layers[0].dtype, device=layers[0].device)
        if weights.shape != (len(layers),):
            raise ValueError(f"layer_weights needs {len(layers)} values, got shape {tuple(weights.shape)}")
        mixed = sum(weight * layer for weight, layer in zip(weights, layers))
        mask = self._validated_mask(input_ids, attention_mask)
        return masked_pool(mixed, word_positions(input_ids, mask), "mean")

    def _validated_mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """The boolean `(batch, positions)` mask, checked to be right-padded."""
        if input_ids.dim() != 3 or input_ids.shape[-1] != self.config.max_characters_per_token:
            raise ValueError(
                f"input_ids must have shape (batch, positions, {self.config.max_characters_per_token}), "
                f"got {tuple(input_ids.shape)}"
            )
        if input_ids.shape[0] == 0:
            raise ValueError("cannot run on an empty batch")
        if attention_mask is None:
            mask = (input_ids > 0).any(dim=-1)
        else:
            if attention_mask.shape != input_ids.shape[:2]:
                raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} does not match input_ids "
                                 f"{tuple(input_ids.shape[:2])}")
            mask = attention_mask.bool()
        lengths = mask.sum(dim=1, keepdim=True)
        if not torch.equal(mask, torch.arange(mask.shape[1], device=mask.device) < lengths):
            raise ValueError("attention_mask must mark each row's valid positions first (right padding)")
        return mask

    def _validated_state(self, initial_state, batch_size: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        config = self.config
        hidden_shape = (config.n_layers, 2, batch_size, config.projection_dim)
        memory_shape = (config.n_layers, 2, batch_size, config.cell_dim)
        dtype = self.char_encoder.char_embedding.weight.dtype
        if initial_state is None:
            return torch.zeros(hidden_shape, dtype=dtype, device=device), torch.zeros(memory_shape, dtype=dtype,
                                                                                      device=device)
        hidden, memory = initial_state
        if tuple(hidden.shape) != hidden_shape or tuple(memory.shape) != memory_shape:
            raise ValueError(f"initial_state must be (hidden {hidden_shape}, memory {memory_shape}), got "
                             f"({tuple(hidden.shape)}, {tuple(memory.shape)})")
        return hidden.to(dtype), memory.to(dtype)


def word_positions(input_ids: torch.LongTensor, mask: torch.Tensor) -> torch.Tensor:
    """`(batch, positions)` bool: valid positions that hold a word, not `<S>`, `</S>` or padding."""
    # Only boundary rows hold the sentence markers (bytes are 0-255); ids are shifted by one.
    marker = input_ids[..., 1]
    boundary = (marker == BEGIN_OF_SENTENCE_CHAR + 1) | (marker == END_OF_SENTENCE_CHAR + 1)
    return mask & ~boundary


class ElmoTaskEncoder(nn.Module):
    """
    The task-specific part shared by the heads: the ELMo mix of the biLM layers, optionally beside the
    context-independent token representation (`[x_k ; ELMo_k]`), optionally read by a task BiLSTM.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.mix = ElmoScalarMix.from_config(config)
        self.concat_token_representation = config.concat_token_representation
        self.projection_dim = config.projection_dim
        width = config.hidden_size + (config.projection_dim if config.concat_token_representation else 0)
        self.lstm = (
            nn.LSTM(width, config.task_lstm_dim, batch_first=True, bidirectional=True)
            if config.task_lstm_dim > 0
            else None
        )
        self.output_dim = 2 * config.task_lstm_dim if self.lstm is not None else width

    def forward(self, layers: tuple[torch.Tensor, ...], mask: torch.Tensor) -> torch.Tensor:
        """
        `layers` the biLM's `n_layers + 1` outputs, `mask` `(batch, positions)` -> `(batch, positions, output_dim)`.
        """
        features = self.mix(layers, mask)
        if self.concat_token_representation:
            # Layer 0 is [x ; x]: its first half is the context-independent representation.
            features = torch.cat([layers[0][..., : self.projection_dim], features], dim=-1)
        if self.lstm is not None:
            lengths = mask.sum(dim=1).clamp(min=1).cpu()
            packed = pack_padded_sequence(features, lengths, batch_first=True, enforce_sorted=False)
            output, _ = self.lstm(packed)
            features, _ = pad_packed_sequence(output, batch_first=True, total_length=mask.shape[1])
            features = features * mask.unsqueeze(-1).to(features.dtype)
        return features


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


class ElmoHeadModel(ElmoPreTrainedModel):
    """The biLM plus the task encoder; with `config.freeze_bilm` the biLM's parameters do not train."""

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
        """Sets `requires_grad` from the config: the biLM trains unless `freeze_bilm`; fixed `mix_weights` never do."""
        self.elmo.requires_grad_(not self.config.freeze_bilm)
        self.task_encoder.mix.scalar_parameters.requires_grad_(self.config.mix_weights is None)

    def _encode(self, input_ids, attention_mask, output_hidden_states):
        """The task features `(batch, positions, dim)`, the valid mask, and the biLM output."""
        mask = self.elmo._validated_mask(input_ids, attention_mask)
        elmo_output = self.elmo(input_ids, attention_mask=mask, output_hidden_states=True, return_dict=True)
        features = self.task_encoder(elmo_output.hidden_states, mask)
        hidden_states = elmo_output.hidden_states if output_hidden_states else None
        return features, mask, hidden_states


class ElmoForSequenceClassification(ElmoHeadModel):
    r"""
    ELMo with a sentence (or sentence pair) classifier: ELMo mix -> dropout -> optional task BiLSTM -> pooling over
    the words (`config.pooling`) -> linear. With `config.pair_classification`, the sentences marked by
    `token_type_ids` are pooled separately to `u`, `v` and `[u ; v ; |u - v| ; u * v]` is classified.
    """

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
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> SequenceClassifierOutput | tuple:
        r"""
        Args:
            input_ids, attention_mask: as for [`ElmoModel`].
            token_type_ids (`torch.LongTensor` of shape `(batch, positions)`, *optional*): 0 for the first sentence,
                1 for the second; needed with `config.pair_classification`.
            labels (`torch.Tensor` of shape `(batch,)` or `(batch, num_labels)`, *optional*): class indices, or
                targets for regression / multi-label classification, following `config.problem_type`.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        features, mask, hidden_states = self._encode(input_ids, attention_mask, output_hidden_states)
        words = word_positions(input_ids, mask)
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
            loss = self._classification_loss(logits, labels) + self.task_encoder.mix.penalty()
        output = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=hidden_states)
        return output if return_dict else output.to_tuple()

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
    """

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        self.classifier = nn.Linear(self.task_encoder.output_dim, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> TokenClassifierOutput | tuple:
        r"""
        Args:
            input_ids, attention_mask: as for [`ElmoModel`]; `token_type_ids` is accepted and unused.
            labels (`torch.LongTensor` of shape `(batch, positions)`, *optional*): the class of each position; -100
                (and any label at a boundary or padded position) is ignored.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        features, mask, hidden_states = self._encode(input_ids, attention_mask, output_hidden_states)
        logits = self.classifier(features)

        loss = None
        if labels is not None:
            if labels.shape != mask.shape:
                raise ValueError(f"labels must have shape {tuple(mask.shape)} (batch, positions), got "
                                 f"{tuple(labels.shape)}")
            labels = labels.masked_fill(~word_positions(input_ids, mask), -100)
            loss = F.cross_entropy(logits.view(-1, self.num_labels), labels.reshape(-1), ignore_index=-100)
            loss = loss + self.task_encoder.mix.penalty()
        output = TokenClassifierOutput(loss=loss, logits=logits, hidden_states=hidden_states)
        return output if return_dict else output.to_tuple()

    @torch.no_grad()
    def predict_word_labels(self, encoding) -> list[list[tuple[str, float]]]:
        """
        Word-level predictions (the `token-classification` pipeline cannot read character rows): for a tokenizer
        output that has `word_ids()`, one `(label, probability)` per word of each sentence, labels from
        `config.id2label`. Batched pairs are not supported.
        """
        inputs = {key: encoding[key].to(self.device) for key in ("input_ids", "attention_mask") if key in encoding}
        probabilities = self(**inputs).logits.softmax(dim=-1)
        scores, labels = probabilities.max(dim=-1)
        sentences = []
        for row in range(labels.shape[0]):
            words = [(position, word) for position, word in enumerate(encoding.word_ids(row)) if word is not None]
            sentences.append([(self.config.id2label[labels[row, position].item()], scores[row, position].item())
                              for position, _ in words])
        return sentences


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
        hidden_states (`tuple(torch.FloatTensor)`, *optional*): the biLM's layers, as in [`ElmoModelOutput`].
    """

    loss: torch.FloatTensor | None = None
    forward_loss: torch.FloatTensor | None = None
    backward_loss: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None


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
    `WordLevelTrainer` gives them. In eval mode the softmax is exact, so `exp(loss)` is the true perplexity.

    The config needs `word_vocab_size` (and `n_negative_samples` to train); `ElmoModel.from_pretrained` loads the
    biLM alone from a saved `ElmoForPreTraining`.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        vocab_size = config.word_vocab_size
        if not isinstance(vocab_size, int) or vocab_size < 2:
            raise ValueError(f"ElmoForPreTraining needs config.word_vocab_size (an int >= 2), got {vocab_size!r}")
        self.elmo = ElmoModel(config)
        self.softmax = nn.Linear(config.projection_dim, vocab_size)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> ElmoForPreTrainingOutput | tuple:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, positions, max_characters_per_token)`): character ids.
            attention_mask (`torch.Tensor` of shape `(batch, positions)`, *optional*): 1 for valid positions.
            labels (`torch.LongTensor` of shape `(batch, positions)`, *optional*): the word id at every position,
                `<S>` and `</S>` included (from `ElmoTokenizer(..., return_word_labels=True)`); -100 is ignored.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.elmo(input_ids, attention_mask, output_hidden_states=output_hidden_states, return_dict=True)
        forward_loss = backward_loss = loss = None
        if labels is not None:
            if labels.shape != input_ids.shape[:2]:
                raise ValueError(f"labels must have shape {tuple(input_ids.shape[:2])}, got {tuple(labels.shape)}")
            valid = self.elmo._validated_mask(input_ids, attention_mask)
            labels = labels.masked_fill(~valid, -100)
            forward_states, backward_states = self._direction_states(outputs.last_hidden_state)
            negatives = None
            if self.training:
                num_sampled = self.config.n_negative_samples
                if not isinstance(num_sampled, int) or num_sampled < 1:
                    raise ValueError("training ElmoForPreTraining needs config.n_negative_samples (an int >= 1)")
                negatives = sample_log_uniform(num_sampled, self.softmax.out_features, labels.device)
            forward_loss = self._direction_loss(forward_states, labels[:, 1:], negatives)
            # A padded position's backward state must not predict the last word of its row.
            backward_targets = labels[:, :-1].masked_fill(~valid[:, 1:], -100)
            backward_loss = self._direction_loss(backward_states, backward_targets, negatives)
            loss = (forward_loss + backward_loss) / 2
        output = ElmoForPreTrainingOutput(
            loss=loss, forward_loss=forward_loss, backward_loss=backward_loss, hidden_states=outputs.hidden_states
        )
        return output if return_dict else output.to_tuple()

    def _direction_states(self, top_layer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward LM's states at positions `0..T-2` and the backward LM's at `1..T-1`, each `(batch, T-1, P)`."""
        dim = self.config.projection_dim
        return top_layer[:, :-1, :dim], top_layer[:, 1:, dim:]

    def _direction_loss(self, states: torch.Tensor, targets: torch.Tensor, negatives: torch.Tensor | None):
        """Mean NLL of `targets` `(batch, T-1)` given `states` `(batch, T-1, P)`; sampled when `negatives` is given."""
        keep = targets != -100
        states, targets = states[keep], targets[keep]
        if targets.numel() == 0:
            raise ValueError("labels leave no word to predict")
        if targets.min() < 0 or targets.max() >= self.softmax.out_features:
            raise ValueError(f"labels must be word ids in [0, {self.softmax.out_features}) or -100")
        if negatives is None:
            return F.cross_entropy(self.softmax(states).float(), targets)
        vocab_size, num_sampled = self.softmax.out_features, negatives.numel()
        weight, bias = self.softmax.weight, self.softmax.bias
        true_logits = ((states * weight[targets]).sum(-1) + bias[targets]).float()
        sampled_logits = F.linear(states, weight[negatives], bias[negatives]).float()
        sampled_logits = sampled_logits - log_expected_counts(negatives, vocab_size, num_sampled)
        sampled_logits = sampled_logits.masked_fill(negatives[None, :] == targets[:, None], float("-inf"))
        logits = torch.cat([true_logits[:, None], sampled_logits], dim=1)
        return F.cross_entropy(logits, torch.zeros_like(targets))

    @torch.no_grad()
    def word_log_probs(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """
        Exact log-probabilities `(batch, positions, word_vocab_size)` of the next word (forward LM) and of the
        previous word (backward LM) at every position.
        """
        top = self.elmo(input_ids, attention_mask, return_dict=True).last_hidden_state
        dim = self.config.projection_dim
        forward_logits, backward_logits = self.softmax(top[..., :dim]), self.softmax(top[..., dim:])
        return forward_logits.float().log_softmax(-1), backward_logits.float().log_softmax(-1)


__all__ = [
    "ElmoModel",
    "ElmoPreTrainedModel",
    "ElmoModelOutput",
    "ElmoScalarMix",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
    "ElmoForPreTraining",
    "ElmoForPreTrainingOutput",
]

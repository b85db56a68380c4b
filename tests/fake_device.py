"""
A device that is not the CPU, on a machine that has nothing else: tensors that hold CPU data but report PyTorch's
`meta` device, so that a model's forward and backward run as on an accelerator, and a tensor made on the CPU by
mistake (a factory call without `device=`) fails the first operation that mixes it with the model's tensors, as it
would on CUDA. Every transfer of values to the host, and every operation that waits for the device to know the size
of its result, is recorded with the function of `hf_elmo` that asked for it.

    with FakeDevice() as device:
        model.to(FAKE_DEVICE)
        loss = model(**{name: tensor.to(FAKE_DEVICE) for name, tensor in batch.items()}).loss
        forward_syncs = device.take_syncs()

`meta` rather than a fake `cuda`: on a CPU-only build, naming `cuda` in a factory call initialises CUDA and fails
before any dispatch mode sees the call, and the autograd engine has no device threads for it; `meta` has neither
problem, and the model's code takes the same branches for it as for CUDA (it asks only whether a device is the CPU).
Autocast has no `meta` kernels: mixed precision is not covered here.
"""

import collections
import sys
from pathlib import Path

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, return_and_correct_aliasing

import hf_elmo

FAKE_DEVICE = torch.device("meta")

aten = torch.ops.aten

# Arguments that stay on the host by contract on any device: the lengths and batch sizes of packed sequences, which
# the packing and the packed LSTM read on the CPU (PyTorch documents that `lengths` must be a CPU tensor).
HOST_ARGUMENT_OPS = {aten._pack_padded_sequence.default, aten._pad_packed_sequence.default}
# The results that these operations return on the CPU, by position: the batch sizes, and the lengths.
HOST_RESULTS = {aten._pack_padded_sequence.default: 1, aten._pad_packed_sequence.default: 1}

# Operations that bring values to the host: the value itself, or a copy on the CPU.
VALUE_OPS = {aten._local_scalar_dense.default, aten.equal.default, aten.is_nonzero.default}

# Operations whose result's size depends on the values: on an accelerator the host waits for the device to know it.
DATA_DEPENDENT_OPS = {
    aten.nonzero.default,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
    aten.repeat_interleave.Tensor,
}

PACKAGE_DIR = str(Path(hf_elmo.__file__).parent)


class DeviceTensor(torch.Tensor):
    """A tensor on `FAKE_DEVICE` whose values are `elem`, a CPU tensor of the same shape, strides and dtype."""

    elem: torch.Tensor
    __slots__ = ["elem"]

    @staticmethod
    def __new__(cls, elem: torch.Tensor, requires_grad: bool = False):
        wrapper = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.shape,
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=FAKE_DEVICE,
            requires_grad=requires_grad,
        )
        wrapper.elem = elem
        return wrapper

    def __repr__(self):
        return f"DeviceTensor({self.elem!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # Outside a `FakeDevice` (pytest showing a value, a test reading a result): run the operation unrecorded.
        return run_on_host(func, args, kwargs or {}, None)


def caller() -> str:
    """
    The innermost function of `hf_elmo` on the stack, as `module.qualified_name`; in a backward without one, the
    autograd node that runs (`backward of IndexPutBackward0`); else `test`.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.startswith(PACKAGE_DIR):
            # A comprehension or a nested function counts as the function that holds it.
            function = frame.f_code.co_qualname.split(".<locals>")[0]
            return f"{Path(frame.f_code.co_filename).stem}.{function}"
        frame = frame.f_back
    node = torch._C._current_autograd_node()
    return f"backward of {node.name()}" if node is not None else "test"


def is_boolean_index(func, args) -> bool:
    """Whether `func` indexes with a boolean mask, which it turns into the positions it holds (a `nonzero`)."""
    if func not in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default):
        return False
    return any(index is not None and index.dtype in (torch.bool, torch.uint8) for index in args[1])


def run_on_host(func, args, kwargs, syncs: list | None):
    """
    `func` on the CPU values of its arguments, its tensor results on `FAKE_DEVICE` where an argument was, or where
    it was asked to make them there. Raises where a CPU tensor of one or more dimensions meets a device tensor;
    appends `(caller, operation)` to `syncs` (when given) for each transfer to the host.
    """
    tensors = [leaf for leaf in pytree.tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]
    on_device = any(isinstance(tensor, DeviceTensor) for tensor in tensors)
    if any(tensor.device.type == FAKE_DEVICE.type and not isinstance(tensor, DeviceTensor) for tensor in tensors):
        raise RuntimeError(f"{func} got a {FAKE_DEVICE.type} tensor without values (in {caller()})")
    target = kwargs.get("device")
    to_device = target is not None and torch.device(target).type == FAKE_DEVICE.type
    to_host = target is not None and torch.device(target).type == "cpu"
    copy_between = func in (aten.copy_.default, aten._to_copy.default)
    if on_device and not copy_between and func not in HOST_ARGUMENT_OPS:
        host = [tensor for tensor in tensors if not isinstance(tensor, DeviceTensor) and tensor.dim() > 0]
        if host:
            shapes = ", ".join(str(tuple(tensor.shape)) for tensor in host)
            raise RuntimeError(
                f"{func} mixes tensors on {FAKE_DEVICE.type} with CPU tensors of shape {shapes} (in {caller()}): "
                "a tensor made without device="
            )
    if syncs is not None and on_device:
        copies_to_host = to_host or (func is aten.copy_.default and not isinstance(args[0], DeviceTensor))
        if func in VALUE_OPS or func in DATA_DEPENDENT_OPS or copies_to_host or is_boolean_index(func, args):
            syncs.append((caller(), func.__name__))
    if to_device or to_host:
        kwargs = {**kwargs, "device": torch.device("cpu")}
    unwrapped_args, unwrapped_kwargs = pytree.tree_map_only(DeviceTensor, lambda tensor: tensor.elem, (args, kwargs))
    out = func(*unwrapped_args, **unwrapped_kwargs)
    if func is aten.copy_.default:
        return args[0]  # in place into the destination, wherever it is
    if to_host or not (on_device or to_device):
        return out
    wrapped = pytree.tree_map_only(torch.Tensor, DeviceTensor, out)
    if func in HOST_RESULTS:
        index = HOST_RESULTS[func]
        wrapped = (*wrapped[:index], out[index], *wrapped[index + 1 :])
    return return_and_correct_aliasing(func, args, kwargs, wrapped)


# Constructors from data that make a `meta` tensor below every dispatch mode, where `meta` holds no values.
DATA_CONSTRUCTORS = {torch.tensor, torch.as_tensor, torch.asarray, torch.Tensor.new_tensor}


class ValuesToFakeDevice(TorchFunctionMode):
    """
    What PyTorch does below every dispatch mode, done above them: constructors from data that name `FAKE_DEVICE` (or,
    for `new_tensor`, hold a tensor there) build their tensor on the CPU and move it to `FAKE_DEVICE`; `tolist()`
    copies the tensor to the CPU first (as it does on any device), where it would refuse a tensor subclass.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.tolist and isinstance(args[0], DeviceTensor):
            return args[0].to("cpu").tolist()
        if func in DATA_CONSTRUCTORS:
            device = kwargs.get("device", args[0].device if func is torch.Tensor.new_tensor else None)
            if device is not None and torch.device(device).type == FAKE_DEVICE.type:
                return func(*args, **{**kwargs, "device": "cpu"}).to(FAKE_DEVICE)
        return func(*args, **kwargs)


class FakeDevice(TorchDispatchMode):
    """
    While active, every operation runs through [`run_on_host`]: factory calls that name `FAKE_DEVICE` make device
    tensors (`tensor.to(FAKE_DEVICE)`, `model.to(FAKE_DEVICE)` move values there), those that name none make CPU
    tensors. `syncs` lists the transfers to the host since the last [`take_syncs`].
    """

    def __init__(self):
        super().__init__()
        self.syncs: list[tuple[str, str]] = []
        self._constructors = ValuesToFakeDevice()

    def __enter__(self):
        self._constructors.__enter__()
        return super().__enter__()

    def __exit__(self, *exc_info):
        super().__exit__(*exc_info)
        return self._constructors.__exit__(*exc_info)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return run_on_host(func, args, kwargs or {}, self.syncs)

    def take_syncs(self) -> collections.Counter:
        """The transfers since the last call, as a count of `(caller, operation)`; the list starts anew."""
        taken, self.syncs = collections.Counter(self.syncs), []
        return taken

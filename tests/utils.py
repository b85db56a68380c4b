"""Helpers the tests share: tolerances, tiny configs and checkpoints, runs of the model, comparisons.

Fixtures are in `conftest.py`; import these with `from utils import ...`.
"""

import ast
import contextlib
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer, kernels_elmo, modeling_elmo
from hf_elmo.modeling_elmo import ElmoBiLm
from hf_elmo.weight_mapping import parameter_groups

# "The same result up to float32 rounding": GEMM rounding differs with the CPU model and the batch composition,
# so every comparison of float32 outputs across paths or batches uses this one tolerance.
FLOAT32_TOLERANCE = 1e-5

# ../shared beside the project; HF_ELMO_SHARED points elsewhere (a missing folder shows how the suite runs without it).
SHARED_DIR = Path(os.environ.get("HF_ELMO_SHARED", Path(__file__).resolve().parents[1].parent / "shared"))

FIXTURE_DIR = SHARED_DIR / "fixtures" / "allennlp-elmo"


@contextlib.contextmanager
def torch_threads(count: int):
    """torch's intra-op threads set to `count` inside the block, and set back after it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def min_cosine(vectors: torch.Tensor, reference: torch.Tensor, mask: torch.Tensor) -> float:
    """The smallest cosine similarity between `vectors` and `reference` `(batch, positions, dim)` where `mask` is set;
    `vectors` in any precision, compared in float32."""
    valid = mask.bool()
    return torch.nn.functional.cosine_similarity(vectors[valid].float(), reference[valid], dim=-1).min().item()


# Gradients of the hand-written backward against autograd through the reference loop: `atol` is per unit of each
# gradient's largest magnitude (see `assert_gradients_match`).
GRADIENT_TOLERANCE = {"atol": 1e-5, "rtol": 1e-4}


def assert_gradients_match(handwritten, reference, atol, rtol):
    """
    Each gradient within `atol` times its largest magnitude (at least 1) plus `rtol` times itself. In float32 either
    path's sums over steps, rows and layers are off by about 1e-6 of the largest magnitude: against float64, the
    reference's own gradients at magnitudes near 10 are off by up to 1.2e-5.
    """
    assert handwritten.keys() == reference.keys()
    for name in reference:
        scale = max(reference[name].abs().max().item(), 1.0)
        torch.testing.assert_close(
            handwritten[name],
            reference[name],
            atol=atol * scale,
            rtol=rtol,
            msg=lambda message, name=name: f"{name}: {message}",
        )


# Runs in a fresh interpreter where any import of hf_elmo fails, as on a machine without the package. Loads each
# (folder or Hub id, Auto class name) with AutoConfig, that Auto class and AutoTokenizer, and saves what it computed
# (sentences pre-split or raw strings).
REMOTE_LOAD_SCRIPT = textwrap.dedent(
    """
    import sys

    class BlockHfElmo:
        def find_spec(self, name, path=None, target=None):
            if name == "hf_elmo" or name.startswith("hf_elmo."):
                raise ImportError(name + " is blocked in this test")
            return None

    sys.meta_path.insert(0, BlockHfElmo())
    import json
    import torch
    import transformers

    jobs, sentences, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
    results = {}
    for folder, auto_name in jobs:
        model = getattr(transformers, auto_name).from_pretrained(folder, trust_remote_code=True).eval()
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        split = isinstance(sentences[0], list)
        batch = tokenizer(sentences, is_split_into_words=split, padding=True, return_tensors="pt")
        reference = getattr(transformers, auto_name).from_pretrained(
            folder, trust_remote_code=True, recurrence_implementation="reference"
        ).eval()
        with torch.no_grad():
            output, reference_output = model(**batch), reference(**batch)
        config = transformers.AutoConfig.from_pretrained(folder, trust_remote_code=True)
        results[folder] = {"config_class": type(config).__module__ + "." + type(config).__name__,
                           "model_class": type(model).__module__ + "." + type(model).__name__,
                           "tokenizer_class": type(tokenizer).__module__ + "." + type(tokenizer).__name__,
                           "input_ids": batch["input_ids"], "output": output[0],
                           "recurrence_implementation": reference.config.recurrence_implementation,
                           "reference_output": reference_output[0]}
    # A pipeline on a saved folder, from the folder's code alone, on the first sentence.
    extractor = transformers.pipeline("feature-extraction", model=jobs[0][0], trust_remote_code=True)
    results["pipeline"] = torch.tensor(extractor(" ".join(sentences[0]) if split else sentences[0]))
    assert not any(name.startswith("hf_elmo") for name in sys.modules), "hf_elmo was imported"
    torch.save(results, out)
    """
)


def hiding_packages(*packages: str) -> str:
    """
    Python source that, run first in a fresh interpreter, makes `packages` unfindable there, as where they are not
    installed: `importlib.util.find_spec` gives None for them and importing them fails.
    """
    return textwrap.dedent(f"""
        import importlib.machinery
        import sys

        class HidePackages(importlib.machinery.PathFinder):
            @classmethod
            def find_spec(cls, name, path=None, target=None):
                hidden = name.split(".")[0] in {set(packages)!r}
                return None if hidden else super().find_spec(name, path, target)

        sys.meta_path = [HidePackages if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
    """)


def load_without_hf_elmo(jobs: list[list[str]], sentences: list, folder: Path, offline: bool = True) -> dict:
    """What `REMOTE_LOAD_SCRIPT` computes from `jobs`, `[folder or Hub id, Auto class name]` pairs, on `sentences`,
    in a fresh interpreter without hf_elmo (the first job's model also runs a feature-extraction pipeline), which
    works in `folder` (its code modules in `folder/modules_cache`), with `HF_HUB_OFFLINE=1` where `offline`."""
    env = {**os.environ, "HF_MODULES_CACHE": str(folder / "modules_cache")}
    env.pop("PYTHONPATH", None)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    else:
        env.pop("HF_HUB_OFFLINE", None)
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_LOAD_SCRIPT, json.dumps(jobs), json.dumps(sentences), str(folder / "out.pt")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=folder,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(folder / "out.pt")


def running_in_ci() -> bool:
    """`CI=true` (or 1), as CI sets it: there what `.ci/run` installs must be present, and a test missing it fails."""
    return os.environ.get("CI", "").lower() in ("true", "1")


def require(module_name: str, reason: str | None = None):
    """
    The module `module_name` imported, for a test (or, at module level, a test module) that needs a package of the
    test extra: where it does not import, the test is skipped as `pytest.importorskip` skips it, except under CI
    (`running_in_ci`), where `.ci/run` installed it: there a missing or broken install fails instead of skipping.
    """
    if not running_in_ci():
        return pytest.importorskip(module_name, reason=reason)
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        needed = f": {reason}" if reason else ""
        pytest.fail(f"CI=true and {module_name} does not import ({error}){needed}", pytrace=False)


def has_fixture() -> bool:
    return (FIXTURE_DIR / "lm_weights.hdf5").is_file()


def tiny_config(**overrides) -> ElmoConfig:
    """A config small enough for fast tests; keyword arguments override any option."""
    options = dict(
        char_embedding_dim=4,
        filters=[[1, 4], [2, 8], [3, 8]],
        n_highway=1,
        projection_dim=8,
        cell_dim=16,
        n_layers=2,
        cell_clip=3.0,
        proj_clip=3.0,
        use_skip_connections=True,
        max_characters_per_token=20,
    )
    options.update(overrides)
    return ElmoConfig(**options)


def word_vocab_tokenizer(folder: Path, words: list[str], **options) -> ElmoTokenizer:
    """
    A tokenizer of 20 characters per token whose word vocabulary (written to `folder/word_vocab.json`) holds `<S>`,
    `</S>`, `<UNK>` and `words`; `options` are the tokenizer's (`word_vector_ids=True`).
    """
    from hf_elmo.pretraining import build_word_vocab

    folder.mkdir(parents=True, exist_ok=True)
    build_word_vocab([words]).save(str(folder / "word_vocab.json"))
    return ElmoTokenizer(max_characters_per_token=20, vocab_file=str(folder / "word_vocab.json"), **options)


def save_with_word_counts(folder: Path, model, texts: list[str]) -> Path:
    """
    `model` saved in `folder` with a tokenizer of 20 characters per token whose word vocabulary holds the words of
    `texts`, and those texts' word counts (`word_counts.json`, each text counted three times): a biLM folder whose
    sentence vectors are SIF-weighted.
    """
    from hf_elmo.sentence_weighting import WordCounts

    tokenizer = word_vocab_tokenizer(folder, [word for text in texts for word in text.split()])
    (folder / "text.txt").write_text("\n".join(texts * 3) + "\n", encoding="utf-8")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    WordCounts.of_text(tokenizer, [folder / "text.txt"]).save_pretrained(folder)
    (folder / "text.txt").unlink()
    return folder


def random_original_arrays(config: ElmoConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 datasets in the original layout for `config`, by dataset name."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for group in parameter_groups(config):
        for name, shape in zip(group.original_names, group.original_shapes):
            arrays[name] = rng.normal(scale=0.5, size=shape).astype(np.float32)
    return arrays


def write_original_checkpoint(folder: Path, config: ElmoConfig, seed: int = 0, arrays=None) -> tuple[Path, Path]:
    """Writes `options.json` and `weights.hdf5` in the original layout; returns their paths."""
    import h5py

    folder.mkdir(parents=True, exist_ok=True)
    arrays = random_original_arrays(config, seed) if arrays is None else arrays
    options_file, weight_file = folder / "options.json", folder / "weights.hdf5"
    options_file.write_text(json.dumps(config.to_original_options()), encoding="utf-8")
    with h5py.File(weight_file, "w") as handle:
        for name, array in arrays.items():
            handle.create_dataset(name, data=array)
    return options_file, weight_file


PROJECT_ROOT = Path(__file__).resolve().parents[1]


def package_calls(matches) -> list[tuple[str, str | None]]:
    """Each call in the package's code that `matches(call)` (an `ast.Call`) takes, as the module's path from the
    project root and the name of the innermost function holding it (None at module level): for tests that hold a
    kind of call to the one function that may make it."""
    found = []
    for module in sorted((PROJECT_ROOT / "hf_elmo").rglob("*.py")):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        owner = {
            node: function.name
            for function in ast.walk(tree)
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            for node in ast.walk(function)
        }
        found += [
            (module.relative_to(PROJECT_ROOT).as_posix(), owner.get(node))
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and matches(node)
        ]
    return found


def convert_args(options, weights, output_dir) -> list[str]:
    """The options of `hf-elmo convert` for an original checkpoint: `options.json`, `weights.hdf5`, output folder."""
    return ["--options-file", str(options), "--weight-file", str(weights), "--output-dir", str(output_dir)]


def converted_tiny_model(folder: Path) -> Path:
    """A tiny original checkpoint (seed 3) converted with `hf-elmo convert`, in process, into `folder/model`."""
    from hf_elmo.cli import main

    options, weights = write_original_checkpoint(folder / "original", tiny_config(), seed=3)
    assert (
        main(
            [
                "convert",
                *convert_args(options, weights, folder / "model"),
            ]
        )
        == 0
    )
    return folder / "model"


def run_cli(*args, cwd=None, preexec_fn=None, timeout=120) -> subprocess.CompletedProcess:
    """`python -m hf_elmo.cli ARGS` in a subprocess of this checkout, offline; output captured as text."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "hf_elmo.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        preexec_fn=preexec_fn,
        timeout=timeout,
    )


def reference_layers(model, words: list[str]) -> np.ndarray:
    """`(n_layers + 1, words, dim)` from one unbatched `ElmoModel` pass, boundaries removed."""
    tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
    encoding = tokenizer([words], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        layers = model(encoding["input_ids"], output_hidden_states=True).hidden_states
    return torch.stack(layers)[:, 0, 1:-1].numpy()


def read_hdf5(path: Path) -> dict[str, np.ndarray]:
    """The top-level datasets of an `hf-elmo embed` HDF5 file, by name."""
    import h5py

    with h5py.File(path, "r") as handle:
        return {name: handle[name][()] for name in handle}


def random_batch(config, lengths, seed=0):
    """Random character ids `(batch, max(lengths), chars)`, right-padded with all-zero rows, and its mask."""
    generator = torch.Generator().manual_seed(seed)
    positions = max(lengths)
    input_ids = torch.randint(1, 262, (len(lengths), positions, config.max_characters_per_token), generator=generator)
    mask = torch.arange(positions) < torch.tensor(lengths)[:, None]
    return input_ids * mask[..., None], mask.long()


def random_state(config, batch_size, seed=1):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(config.n_layers, 2, batch_size, config.projection_dim, generator=generator)
    memory = torch.randn(config.n_layers, 2, batch_size, config.cell_dim, generator=generator)
    return hidden, memory


def use_kernels(config, fast, monkeypatch):
    """Sets `config.recurrence_implementation` for the rest of the test: "auto" when `fast`, else "reference"."""
    monkeypatch.setattr(config, "recurrence_implementation", "auto" if fast else "reference")


def spy_on_kernels(monkeypatch) -> list[str]:
    """The names of the functions `kernels_elmo`'s registries give the model from now on, in order (the
    reference code's where a registry has no kernel for the chosen name)."""
    calls, get_interface = [], kernels_elmo.Kernels.get_interface

    def spy(registry, *arguments, **keywords):
        chosen = get_interface(registry, *arguments, **keywords)
        calls.append(chosen.__name__)
        return chosen

    monkeypatch.setattr(kernels_elmo.Kernels, "get_interface", spy)
    return calls


def scan_compiled_afresh() -> None:
    """Forgets the steps compiled before: run eagerly, the "exported" path's scan compiles its step, and a step
    compiled before for other clip values would make the clips symbolic floats, which the scan refuses (a traced
    export compiles nothing: it is not affected). Call it before running that path eagerly."""
    torch.compiler.reset()


def run_on_path(model, path, monkeypatch, **inputs):
    """
    `model(**inputs)` with every choice of the call on `path`, one of `kernels_elmo.PATHS`, taken as on a CPU:
    "reference" by the config, "exported" and "compiled" by `torch.compiler`'s flags, which `choose_path` reads (the
    code those graphs trace, run eagerly), "inference" without autograd, "training" with it. Asserts that
    `choose_path` named `path` for each computation of the call (under autograd, one with nothing that needs a
    gradient, as the check of the mask, is on "inference").
    """
    named, choose_path = [], modeling_elmo.choose_path
    with monkeypatch.context() as patch:
        patch.setattr(modeling_elmo, "choose_path", lambda *args: named.append(choose_path(*args)) or named[-1])
        patch.setattr(model.config, "recurrence_implementation", "reference" if path == "reference" else "auto")
        patch.setattr(torch.compiler, "is_exporting", lambda: path == "exported")
        patch.setattr(torch.compiler, "is_compiling", lambda: path in ("exported", "compiled"))
        if path == "exported" and getattr(run_on_path, "compiled_in", None) is not monkeypatch:
            # Once per test (its `monkeypatch`), whose calls share a model: every batch need not compile again.
            scan_compiled_afresh()
            run_on_path.compiled_in = monkeypatch
        with torch.set_grad_enabled(path == "training"):
            output = model(**inputs)
    assert path in named and set(named) <= {path, "inference" if path == "training" else path}, named
    return output


def run_model(model, input_ids, mask, fast, monkeypatch, initial_state=None):
    use_kernels(model.config, fast, monkeypatch)
    with torch.inference_mode():
        return model(
            input_ids,
            attention_mask=mask,
            initial_state=initial_state,
            return_final_state=True,
            output_hidden_states=True,
        )


def assert_close(fast, exact):
    assert fast.shape == exact.shape
    assert (fast - exact).abs().max().item() <= FLOAT32_TOLERANCE


# Mixed precision (autocast to bfloat16) keeps 8 significant bits of each product: two paths that round the same
# products after summing in another order differ by a few units in the last place, and the recurrence carries them.
# They are compared within this fraction of each tensor's largest magnitude (a bfloat16 unit is 1/128 to 1/256).
BFLOAT16_TOLERANCE = 1 / 64


def assert_close_in_bfloat16(fast, reference, name=""):
    assert fast.shape == reference.shape, name
    difference = (fast.float() - reference.float()).abs().max().item()
    assert difference <= BFLOAT16_TOLERANCE * reference.float().abs().max().item(), (name, difference)


def assert_outputs_match(fast, exact):
    for fast_layer, exact_layer in zip(fast.hidden_states, exact.hidden_states, strict=True):
        assert_close(fast_layer, exact_layer)
    for fast_state, exact_state in zip(fast.final_state, exact.final_state, strict=True):
        assert_close(fast_state, exact_state)


def bilm_leaves(config, lengths, initial_state, dtype=torch.float32, seed=1):
    """Random tokens (padded positions too), the mask, and a zero or random initial state, all requiring grad."""
    generator = torch.Generator().manual_seed(seed)
    batch_size, steps = len(lengths), max(lengths)
    mask = torch.arange(steps) < torch.tensor(lengths)[:, None]
    tokens = torch.randn(batch_size, steps, config.projection_dim, generator=generator, dtype=dtype)
    state_shape = (config.n_layers, 2, batch_size)
    hidden = torch.zeros(*state_shape, config.projection_dim, dtype=dtype)
    memory = torch.zeros(*state_shape, config.cell_dim, dtype=dtype)
    if initial_state == "random":
        hidden, memory = torch.randn_like(hidden), 3 * torch.randn_like(memory)
    return mask, *(leaf.requires_grad_() for leaf in (tokens, hidden, memory))


def redraw_weights(module, scale):
    """Every parameter of `module` redrawn in place, normal with std `scale`, from torch's generator as it stands;
    returns `module`. With the default initialisation the memories and outputs of a tiny biLM stay far from the clips
    (below 2.5 against 3.0 on random words), so that clipped and unclipped code run the same arithmetic."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(std=scale)
    return module


def bilm_with_weights_of_scale(config, scale, dtype=torch.float32, seed=0):
    """An `ElmoBiLm` whose parameters are normal with std `scale`: large enough for memories and outputs to reach the
    clips (at 1.0 the gates saturate, and float32 rounding grows too much for tight gradient comparisons)."""
    torch.manual_seed(seed)
    return redraw_weights(ElmoBiLm(config).to(dtype), scale)


def model_reaching_the_clips(config, scale=0.3, seed=0):
    """
    An `ElmoModel` in eval mode whose biLM parameters are redrawn with std `scale` (`redraw_weights`): with
    `cell_clip=1.0` and `proj_clip=0.5`, about a seventh of the final memories and an eighth of the first layer's
    outputs of random words are at a clip (`assert_clips_reached` checks that some are).
    """
    torch.manual_seed(seed)
    model = ElmoModel(config).eval()
    redraw_weights(model.bilm, scale)
    return model


def assert_clips_reached(layer, final_memory, outputs):
    """
    Where `layer` (an `ElmoLstmLayer`) clips, some of `final_memory` is at its `cell_clip` and some of `outputs` (of
    a first layer, which has no skip connection) at its `proj_clip`: the clipped arithmetic ran, and was compared.
    """
    if layer.cell_clip is not None:
        assert (final_memory.abs() == layer.cell_clip).any(), f"no memory reached cell_clip={layer.cell_clip}"
    if layer.proj_clip is not None:
        assert (outputs.abs() == layer.proj_clip).any(), f"no output reached proj_clip={layer.proj_clip}"


def refuse_to_open(monkeypatch, path: Path):
    """
    `os.open` refusing `path` as the system refuses a file without read permission (EACCES), where these tests run as
    root, whom no permission keeps out: a stand-in for the real refusal, which `unreadable` makes where they do not.
    """
    import errno

    real_open = os.open

    def refusing(name, *args, **kwargs):
        if Path(name) == path:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(name))
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)


def unreadable(monkeypatch, path: Path):
    """Takes the read permission of `path` away: `chmod 0`, or `refuse_to_open` where the tests run as root."""
    if os.geteuid() != 0:
        path.chmod(0)
    else:
        refuse_to_open(monkeypatch, path)

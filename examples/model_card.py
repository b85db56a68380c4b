"""The model card (README.md with YAML front matter) that the fine-tuning examples save with their model folder: the
package's `fine_tuned_elmo.md` template, filled with the run's task, data and results."""

from pathlib import Path

from hf_elmo.bundled import BUNDLED_MODELS
from hf_elmo.model_card import is_hub_id, packaged_template, write_model_card


def base_model_text(model_name_or_path: str) -> str:
    """What the card's text calls the model the run started from: a Hub id, a bundled model or a local folder."""
    if is_hub_id(model_name_or_path):
        return f"the Hub model `{model_name_or_path}`"
    if model_name_or_path in BUNDLED_MODELS and not Path(model_name_or_path).exists():
        path = f'hf_elmo.bundled_model_path("{model_name_or_path}")'
        return f"`{model_name_or_path}`, a model shipped inside the hf_elmo package (`{path}`)"
    return f"the local folder `{model_name_or_path}`"


def results_text(results: dict[str, dict[str, float]]) -> str:
    """A table of `results` (metrics by split), or a sentence saying that the run evaluated nothing."""
    metric_names = sorted({name for metrics in results.values() for name in metrics})
    if not metric_names:
        return "This run evaluated the model on no split (neither `--do_eval` nor a labelled `--do_predict`)."
    rows = [
        f"| {split} | " + " | ".join(f"{metrics[name]:.4f}" if name in metrics else "" for name in metric_names) + " |"
        for split, metrics in results.items()
    ]
    return "\n".join(
        [f"| split | {' | '.join(metric_names)} |", f"| --- | {' | '.join('---' for _ in metric_names)} |", *rows]
    )


def write_fine_tuned_card(
    output_dir: str,
    *,
    script: str,
    model_name_or_path: str,
    pipeline_tag: str,
    tags: list[str],
    license: str,
    head: str,
    freeze_bilm: bool,
    results: dict[str, dict[str, float]],
    data_files: list[str],
    auto_class: str,
    usage: str,
) -> Path:
    """Writes `output_dir/README.md`; `results` maps a split name to its metrics (names without the split prefix)."""
    lines = ["library_name: hf_elmo", f"license: {license}", f"pipeline_tag: {pipeline_tag}", "tags:"]
    lines += [f"- {tag}" for tag in ["elmo", *tags]]
    if is_hub_id(model_name_or_path):
        lines.append(f"base_model: {model_name_or_path}")
    metric_names = sorted({name for metrics in results.values() for name in metrics})
    if metric_names:
        lines.append("metrics:")
        lines += [f"- {name}" for name in metric_names]
    return write_model_card(
        output_dir,
        packaged_template("fine_tuned_elmo.md"),
        front_matter="\n".join(lines),
        title=f"ELMo for {pipeline_tag.replace('-', ' ')}",
        script=script,
        base_model=base_model_text(model_name_or_path),
        head=head,
        bilm="frozen (only the layer mix and the head trained)" if freeze_bilm else "fine-tuned with the head",
        results=results_text(results),
        data_files=", ".join(f"`{Path(name).name}`" for name in data_files) or "none",
        auto_class=auto_class,
        usage=usage,
    )

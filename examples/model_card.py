"""The model card (README.md with YAML front matter) that the fine-tuning examples save with their model folder: the
package's `fine_tuned_elmo.md` template, filled with the run's task, data and results."""

import tempfile
from pathlib import Path

from hf_elmo.model_card import packaged_template, write_model_card


def is_temporary_path(name: str) -> bool:
    """Whether `name` is a local path inside the system's temporary folder (not worth naming as a base model)."""
    path = Path(name)
    return path.exists() and Path(tempfile.gettempdir()).resolve() in path.resolve().parents


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
    if not is_temporary_path(model_name_or_path):
        lines.append(f"base_model: {model_name_or_path}")
    metric_names = sorted({name for metrics in results.values() for name in metrics})
    if metric_names:
        lines.append("metrics:")
        lines += [f"- {name}" for name in metric_names]
    rows = [
        f"| {split} | " + " | ".join(f"{metrics[name]:.4f}" if name in metrics else "" for name in metric_names) + " |"
        for split, metrics in results.items()
    ]
    return write_model_card(
        output_dir,
        packaged_template("fine_tuned_elmo.md"),
        front_matter="\n".join(lines),
        title=f"ELMo for {pipeline_tag.replace('-', ' ')}",
        script=script,
        model_name_or_path=model_name_or_path,
        head=head,
        bilm="frozen (only the layer mix and the head trained)" if freeze_bilm else "fine-tuned with the head",
        metric_names=" | ".join(metric_names),
        metric_rule=" | ".join("---" for _ in metric_names),
        metric_rows="\n".join(rows),
        data_files=", ".join(f"`{Path(name).name}`" for name in data_files) or "none",
        auto_class=auto_class,
        usage=usage,
    )

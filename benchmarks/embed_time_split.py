"""Where the time of an `hf-elmo embed` run goes, from a cProfile of that run: loading, tokenizing, model, writing.

    PYTHONPATH=$PWD python -m cProfile -o embed.prof -m hf_elmo.cli embed MODEL corpus.txt out.h5 --top --device cuda
    PYTHONPATH=$PWD python benchmarks/embed_time_split.py embed.prof

The model's share includes copying its outputs to the CPU: CUDA runs asynchronously and that copy is where the
process waits for the GPU. cProfile adds a cost per Python call, mostly to the model's share; the wall time of the
same run without the profiler is the figure to quote, this split says which part bounds it.
"""

import argparse
import pstats


def cumulative(stats: dict, file_part: str, name: str) -> float:
    """The largest cumulative seconds of a function `name` defined in a file whose path holds `file_part`."""
    return max(
        (row[3] for (path, _, function), row in stats.items() if file_part in path and function == name), default=0.0
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", help="the file written by python -m cProfile -o")
    args = parser.parse_args()
    profile = pstats.Stats(args.profile)
    stats, total = profile.stats, profile.total_tt
    loading = cumulative(stats, "hf_elmo/cli.py", "load_bilm")
    tokenizing = cumulative(stats, "hf_elmo/tokenization_elmo.py", "__call__")
    pipeline = "hf_elmo/embedding_files.py"
    model = cumulative(stats, pipeline, "embed_batch") + cumulative(stats, pipeline, "embed_long") - tokenizing
    writing = sum(cumulative(stats, pipeline, name) for name in ("select_layers", "write", "commit", "finish"))
    parts = {
        "loading the model": loading,
        "tokenizing": tokenizing,
        "model (and copy to CPU)": model,
        "writing (layer choice, parts, final file)": writing,
    }
    parts["other (reading and sorting lines, imports)"] = total - sum(parts.values())
    print("| part of the run | seconds | share |")
    print("|---|---:|---:|")
    for name, seconds in parts.items():
        print(f"| {name} | {seconds:.2f} | {seconds / total:.0%} |")
    print(f"| total (profiled) | {total:.2f} | 100% |")


if __name__ == "__main__":
    main()

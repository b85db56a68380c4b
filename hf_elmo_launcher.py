"""The `hf-elmo` console script: the parser of `hf_elmo/command_line.py`, run without importing the package.

This module stands outside the `hf_elmo` package because `import hf_elmo` registers ELMo with transformers' Auto
classes, which imports transformers: seconds before anything is printed (benchmarks/RESULTS.md, "Command start-up").
`hf_elmo/command_line.py` (the parser) imports nothing from the package but `hf_elmo/model_names.py`, which imports
nothing, so both are executed here from their files, found where `import hf_elmo` finds the package, without running
the package's `__init__`: `--help`, a subcommand's `--help`, an argument error and a path that does not exist are
answered without torch or transformers. Nothing in the package imports this module.
"""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_package_module(name: str) -> ModuleType:
    """`hf_elmo/{name}.py`, executed as the module `hf_elmo.{name}` without running the package's `__init__`, and
    entered in `sys.modules`, where a module loaded after it finds it (`from .model_names import ...`) and so does
    the package, once imported."""
    package = importlib.util.find_spec("hf_elmo")  # a top-level name: found, not imported
    path = Path(package.submodule_search_locations[0]) / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"hf_elmo.{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# The command line imports the name rules, which import nothing.
load_package_module("model_names")
command_line = load_package_module("command_line")


def main(argv=None, prog: str = "hf-elmo") -> int:
    """
    Runs `hf-elmo ARGV`: parsed by `command_line.parse_command`, run by `hf_elmo.cli.run`, imported only then. The
    scripts in conversion/ run one subcommand under their own name, `prog`.
    """
    parsed = command_line.parse_command(argv, prog)
    if isinstance(parsed, int):
        return parsed
    try:
        from hf_elmo.cli import run
    except KeyboardInterrupt:  # importing torch and transformers takes seconds: a Ctrl-C often lands here
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    return run(*parsed, prog)


if __name__ == "__main__":
    sys.exit(main())

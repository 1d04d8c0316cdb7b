"""``onnxsat zoo build [NAMES...] --out DIR [--list]``: write zoo models into a folder.

Every name is checked before anything is built, so a typo stops the command before it writes half a
zoo. The package's zoo needs no optional dependency (:mod:`onnxsat.zoo.catalogue`). The repository's
``python -m tools.zoo build`` runs :func:`build_models` on a larger catalogue (PyTorch exports): there a
model whose packages are missing is skipped with a warning when no names are given, and refused in
one line when it is named.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import onnx

from onnxsat.errors import OutputPathError, SettingsError
from onnxsat.profile.counting import parameter_count
from onnxsat.zoo.catalogue import ZooModel, zoo_models

ORDER = 90


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("zoo", help="build the model zoo: real architectures with seeded weights")
    which = parser.add_subparsers(dest="zoo", required=True)
    build = which.add_parser("build", help="write zoo models as OUT/<name>.onnx (all of them if no name is given)")
    add_build_arguments(build)
    build.set_defaults(handler=run_zoo_build)


def add_build_arguments(build: argparse.ArgumentParser) -> None:
    """The options of ``zoo build`` (shared with ``python -m tools.zoo build``)."""
    build.add_argument("names", nargs="*", metavar="NAME", help="models to build (see --list)")
    build.add_argument("--out", help="folder to write into (created if missing; needed unless --list)")
    build.add_argument("--list", action="store_true", help="list the models and where each comes from, build nothing")
    build.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")


UNKNOWN_HINT = "PyTorch exports are built from a checkout of the repository: python -m tools.zoo build"


def run_zoo_build(args: argparse.Namespace) -> int:

    return build_models(args, zoo_models(), unknown_hint=UNKNOWN_HINT)


def build_models(
    args: argparse.Namespace,
    models: dict[str, ZooModel],
    *,
    unknown_hint: str = "",
    install_hint: str = "",
    optional_kind: str = "",
) -> int:
    """Check every name of ``args`` against ``models``, then list or build them (see the module's docstring).

    ``unknown_hint`` ends the error for an unknown name; ``install_hint`` says how to get missing packages;
    ``optional_kind`` ("PyTorch") names the models skipped for want of them.
    """

    unknown = [name for name in args.names if name not in models]
    if unknown:
        hint = f" ({unknown_hint})" if unknown_hint else ""
        raise SettingsError(
            f"unknown zoo model {', '.join(map(repr, unknown))}; known models: {', '.join(models)}{hint}"
        )
    wanted = [models[name] for name in args.names] if args.names else list(models.values())
    missing = {m.name: m.missing_packages() for m in wanted}
    if args.list:
        for model in wanted:
            note = f"  [needs {' and '.join(missing[model.name])}, not installed]" if missing[model.name] else ""
            print(f"{model.name:24} {model.source:16} {model.description}{note}")
        return 0
    if args.out is None:
        raise SettingsError("zoo build needs --out DIR (or --list)")
    unbuildable = [name for name, packages in missing.items() if packages]
    if unbuildable and args.names:
        needed = sorted({p for name in unbuildable for p in missing[name]})
        raise SettingsError(f"cannot build {', '.join(unbuildable)} without {' and '.join(needed)}: {install_hint}")
    if unbuildable:
        kind = f"{optional_kind} models" if optional_kind else "models"
        print(f"onnxsat: warning: skipping {len(unbuildable)} {kind}; {install_hint}", file=sys.stderr)
        wanted = [m for m in wanted if not missing[m.name]]
    out = writable_folder(args.out)
    for model in wanted:
        path = model.write(out, args.seed)
        size = path.stat().st_size
        params = parameter_count(onnx.load(str(path), load_external_data=False))
        print(f"{model.name:24} {size / 2**20:9.2f} MiB {params:>13,} params  {path}")
    return 0


def writable_folder(text: str) -> Path:
    """``text`` as a folder that exists (created if needed) and can be written, or an OutputPathError."""

    folder = Path(text)
    if folder.exists() and not folder.is_dir():
        raise OutputPathError(f"--out is not a folder: {folder}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputPathError(f"cannot create --out folder {folder}: {error.strerror or error}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputPathError(f"--out folder is not writable: {folder}")
    return folder

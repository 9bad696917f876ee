"""`trlvr recipes`: the run configs and studies shipped in the package, by name, with their paths.

    trlvr recipes                                   # every shipped config, recipe and study
    trlvr recipes --path accelerate-zero2-2gpu      # one file's path, e.g. for accelerate's --config_file
    cp "$(trlvr recipes --path qwen3-4b-deepscaler)" my-run.yaml      # a recipe to edit

A name works wherever a file does: `trlvr train --config qwen3-4b-deepscaler`, `trlvr study plan
paper-table2`. In a clone, `recipes/NAME.yaml` and `studies/NAME.yaml` are the same files; where
there is no clone, those paths name the shipped copies.
"""

from __future__ import annotations

import argparse


def make_parser(subparsers) -> argparse.ArgumentParser:
    from trlvr.kinds import TEXT

    p = subparsers.add_parser(
        "recipes",
        help="list the shipped run configs, GPU recipes and studies (names and paths)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--path", type=TEXT, default=None, metavar="NAME", help="print only this shipped file's path"
    )
    return p


def shipped() -> dict[str, tuple[str, object]]:
    """name -> (kind, path) for every shipped config, recipe (accelerate configs included) and study."""
    from trlvr.config import CONFIGS_DIR, RECIPES_DIR
    from trlvr.experiments.study_spec import STUDIES_DIR

    found = {}
    for kind, folder in (("recipe", RECIPES_DIR), ("config", CONFIGS_DIR), ("study", STUDIES_DIR)):
        for path in sorted(folder.glob("*.yaml")):
            kind_here = "accelerate" if path.stem.startswith("accelerate-") else kind
            found.setdefault(path.stem, (kind_here, path))
    return found


def main(args) -> int:
    from trlvr.errors import UserError

    found = shipped()
    if args.path is not None:
        name = args.path.removesuffix(".yaml").split("/")[-1]
        if name not in found:
            raise UserError(
                f"--path {args.path}: no shipped file of that name (shipped: {', '.join(sorted(found))})"
            )
        print(found[name][1])
        return 0
    width = max(map(len, found))
    for name, (kind, path) in sorted(found.items(), key=lambda kv: (kv[1][0], kv[0])):
        print(f"{kind:<10} {name:<{width}}  {path}")
    return 0

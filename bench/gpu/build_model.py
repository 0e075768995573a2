"""Build the GPU script's checkpoint (``build_tiny_model``) and print its path. With a GPU the random
weights are drawn there: initialising 4 billion parameters takes seconds on the device and minutes on
its host's cores, which the script's ten minutes cannot spare."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import torch

from services.common.tiny_models import build_tiny_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--family", default="qwen2_5_vl")
    parser.add_argument("--size", default="3b")
    args = parser.parse_args()
    where = torch.device("cuda") if torch.cuda.is_available() else contextlib.nullcontext()
    with where:
        print(build_tiny_model(args.family, args.out, size=args.size))


if __name__ == "__main__":
    main()

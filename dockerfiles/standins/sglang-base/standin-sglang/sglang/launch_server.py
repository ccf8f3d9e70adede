"""STAND-IN `python3 -m sglang.launch_server`: argument parsing like the pinned SGLang.

`--help` prints usage and exits 0 (the record: "the CLI could output help"). Actually serving
is refused: this is not SGLang.
"""

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m sglang.launch_server",
                                     description="SGLang server (imagekit stand-in).")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--tp-size", "--tp", type=int, default=1)
    parser.add_argument("--context-length", type=int)
    parser.add_argument("--max-running-requests", type=int)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--cuda-graph-backend-prefill", choices=["enabled", "disabled"],
                        default="enabled")
    parser.add_argument("--disable-piecewise-cuda-graph", action="store_true",
                        help="Deprecated: maps to --cuda-graph-backend-prefill=disabled.")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.disable_piecewise_cuda_graph:
        print("warning: --disable-piecewise-cuda-graph is deprecated; use "
              "--cuda-graph-backend-prefill=disabled", file=sys.stderr)
    print("imagekit stand-in: this image carries no real SGLang; refusing to serve",
          file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())

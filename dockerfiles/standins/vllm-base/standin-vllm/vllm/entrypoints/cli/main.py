"""STAND-IN `vllm` CLI: like the pinned vLLM, building `serve`'s arguments reads device-related
defaults, so even `--help=all` fails in a zero-GPU container with "Failed to infer device type"."""

import argparse
import sys


def _device_default() -> str:
    import vllm.platforms as platforms

    device_type = platforms.current_platform.device_type
    if not device_type:
        raise RuntimeError("Failed to infer device type, please set the environment variable "
                           "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help "
                           "debug the issue.")
    return device_type


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm", description="vLLM CLI (imagekit stand-in).")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", add_help=False, help="Start the OpenAI-compatible server.")
    serve.add_argument("--help", nargs="?", const="default", metavar="all|GROUP",
                       help="Show help; --help=all lists every argument group.")
    serve.add_argument("model_tag", nargs="?")
    serve.add_argument("--device", default=_device_default(), choices=["cuda", "cpu"])
    serve.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    serve.add_argument("--max-model-len", type=int)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    bench = sub.add_parser("bench", help="Benchmark client (HTTP only).")
    bench.add_argument("--base-url")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve" and args.help:
        serve = parser._subparsers._group_actions[0].choices["serve"]
        serve.print_help()
        return 0
    print("imagekit stand-in: this image carries no real vLLM; refusing to run", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())

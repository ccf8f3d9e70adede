"""Docker engine transport (python-on-whales): build with BuildKit secrets, run, inspect, push,
save, and import a root filesystem as a base image."""

from imagekit.engine.client import DOCKER_ENV, docker_client, find_docker_binary
from imagekit.engine.engine import BuildOutcome, Engine, ImageInfo, RunOutcome

__all__ = ["DOCKER_ENV", "BuildOutcome", "Engine", "ImageInfo", "RunOutcome", "docker_client",
           "find_docker_binary"]

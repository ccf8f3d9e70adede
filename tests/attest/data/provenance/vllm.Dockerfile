# Fixed vLLM image (field record, section 3): remove the system GI / software-properties packages
# the server never uses (pygobject's missing pycairo broke `pip check`) WITHOUT a global
# autoremove, and add a pinned PyAV for the video path.
#
# BASE_IMAGE defaults to the official vLLM OpenAI image (linux/amd64), pinned by digest. The
# digest below is the production lock's value (dockerfiles/images.lock, profile "production");
# `imagekit build` always passes the lock's digest explicitly.
# PLACEHOLDER: this machine cannot reach Docker Hub; `imagekit pin --profile production` on a
# host that can replaces it in the lock, and this default must be updated to match.
ARG BASE_IMAGE=docker.io/vllm/vllm-openai:v0.11.0@sha256:9a8b7c6d5e4f30211f2e3d4c5b6a79808f7e6d5c4b3a29181a2b3c4d5e6f7a8b
FROM ${BASE_IMAGE}
ARG PIP_INDEX_URL
# 16.1.0 in production (the record). The local stand-in passes the pin its Python can take; the
# value used is recorded with every build.
ARG AV_VERSION=16.1.0
RUN apt-get remove -y python3-gi python3-software-properties software-properties-common
RUN --mount=type=secret,id=pip_cert \
    export PIP_CERT=/run/secrets/pip_cert PIP_BREAK_SYSTEM_PACKAGES=1 \
 && python3 -m pip install --no-cache-dir ${PIP_INDEX_URL:+--index-url "$PIP_INDEX_URL"} "av==${AV_VERSION}" \
 && python3 -m pip check

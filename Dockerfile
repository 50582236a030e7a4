# toolwire container image. Two ways to build the same runtime image:
#
#   docker build -t toolwire .
#       The normal path: compiles toolwire in `rust:1.95-slim-bookworm` (stage `build`) and copies
#       the binary into the runtime stage (the default, last target `runtime`).
#
#   cargo build --release --locked --bin toolwire
#   docker build --target runtime-prebuilt -t toolwire .
#       Packages a binary built on the host (target/release/toolwire, glibc of Debian 12 or
#       older) without the Rust image, for machines that cannot pull it. `make compose-test`
#       uses this path.
#
# Both paths start FROM the same `base` stage, so user, paths, working directory, healthcheck
# and entrypoint are identical. Stage order matters for the classic builder (DOCKER_BUILDKIT=0,
# Debian's docker.io, docker-compose v1), which runs every stage before the target:
# `runtime-prebuilt` comes before `build`, so building it never needs the Rust image.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

# ---------------------------------------------------------------------------------------------
# base: everything of the runtime image except the binary.
FROM debian:${DEBIAN_RELEASE}-slim AS base

# python3: the shipped exec tool (tools.d/units.yaml) runs `python3 examples/tools/…`.
# ca-certificates: for exec tools that make HTTPS calls themselves. toolwire's own HTTPS tools do
# not use it: they trust the public roots bundled in the binary plus `ca_file` (docs/security.md).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 toolwire \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin toolwire

# Relative paths in the config and the tool files (tools_dir = "tools.d", exec commands such as
# `python3 examples/tools/convert_units.py`) resolve against the working directory.
WORKDIR /etc/toolwire
# The container config: listen on 0.0.0.0:8080 and require the bearer token from TOOLWIRE_TOKEN.
COPY docker/toolwire.toml /etc/toolwire/toolwire.toml
COPY tools.d/ /etc/toolwire/tools.d/
COPY examples/tools/ /etc/toolwire/examples/tools/

# The embedded default listens on 127.0.0.1; in a container it must be reachable from outside.
ENV TOOLWIRE_LISTEN=0.0.0.0:8080
EXPOSE 8080

ARG DEBIAN_RELEASE
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="toolwire" \
      org.opencontainers.image.description="Sidecar server that executes LLM tool calls (OpenAI, Anthropic, Gemini, Bedrock, Mistral, Cohere, Ollama) against HTTP and subprocess backends" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="docker.io/library/debian:${DEBIAN_RELEASE}-slim"

USER 10001:10001

# `toolwire health` probes GET /readyz on 127.0.0.1:8080 (TOOLWIRE_HEALTH_ADDR overrides it when
# the listen port changes) and needs nothing but the binary.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["toolwire", "health"]

ENTRYPOINT ["toolwire"]
CMD ["serve", "--config", "/etc/toolwire/toolwire.toml"]

# ---------------------------------------------------------------------------------------------
# runtime-prebuilt: the runtime image with a binary built on the host.
FROM base AS runtime-prebuilt
USER root
# The classic builder also runs this stage when it builds the default `runtime` target, where
# the host binary may be absent: Cargo.toml only keeps the wildcard from matching nothing (an
# error there). Without the binary this stage installs a stub that fails with instructions.
COPY Cargo.toml target/release/toolwir[e] /usr/local/bin/
RUN rm /usr/local/bin/Cargo.toml \
 && if [ -e /usr/local/bin/toolwire ]; then toolwire --version; \
    else echo 'runtime-prebuilt: no target/release/toolwire in the build context (fine when building the default target with DOCKER_BUILDKIT=0)' >&2 \
      && printf '#!/bin/sh\necho "toolwire: image built with --target runtime-prebuilt but without target/release/toolwire; run cargo build --release --locked first" >&2\nexit 1\n' > /usr/local/bin/toolwire \
      && chmod 0755 /usr/local/bin/toolwire; \
    fi
USER 10001:10001

# ---------------------------------------------------------------------------------------------
# build: compile toolwire with the `dist` profile (whole-program optimisation; Cargo.toml says
# why). Dependencies are built first against a dummy source tree, so editing
# src/ does not rebuild them (the layer is cached while Cargo.toml and Cargo.lock don't change).
FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && cargo build --profile dist --locked --bin toolwire \
 && rm -rf src
COPY config/ config/
COPY src/ src/
# COPY keeps the files' modification times, which may be older than the dummy build: touch so
# cargo rebuilds the crate itself. The smoke test fails if the dummy binary slipped through.
RUN touch src/main.rs src/lib.rs \
 && cargo build --profile dist --locked --bin toolwire \
 && ./target/dist/toolwire --version | grep -q '^toolwire ' \
 && cp target/dist/toolwire /usr/local/bin/toolwire

# ---------------------------------------------------------------------------------------------
# runtime (default target): the runtime image with the binary compiled in `build`.
FROM base AS runtime
COPY --from=build /usr/local/bin/toolwire /usr/local/bin/toolwire
RUN ["toolwire", "--version"]

# toolwire: the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
EXAMPLE_APP_PORT ?= 8081

.PHONY: run build test ci fmt fmt-check lint check-config

## Build and serve the shipped example config (tools.d/) on 127.0.0.1:8080, with the example
## app that backs the HTTP tool on 127.0.0.1:$(EXAMPLE_APP_PORT). Ctrl-C stops both.
run: build
	@PORT=$(EXAMPLE_APP_PORT) python3 docker/example-app/app.py & app=$$!; \
	trap 'kill $$app 2>/dev/null' EXIT; \
	$(CARGO) run --locked --quiet --bin toolwire -- serve --config config/toolwire.toml --tools-dir tools.d

build:
	$(CARGO) build --locked

## Run the whole test suite (unit, integration, golden, property tests). Integration tests are
## one binary, tests/it/ (one module per area: `cargo nextest run --test it -E 'test(/^reload::/)'`).
## Snapshots are checked, never written (INSTA_UPDATE=no): a changed snapshot fails the run; review
## and accept a change on purpose (`cargo insta review`, or INSTA_UPDATE=always and a diff).
## Without nextest, the integration tests run one at a time: nextest gives each test a process
## of its own, while `cargo test` runs them as threads of one process, where the checks on the
## process's own children, fds and peak memory would see the other tests' (tests/it/common).
test: sdk-venv test-deps
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		INSTA_UPDATE=no $(CARGO) nextest run --locked --no-fail-fast; \
	else \
		rc=0; \
		INSTA_UPDATE=no $(CARGO) test --locked --no-fail-fast --lib --bins || rc=1; \
		INSTA_UPDATE=no $(CARGO) test --locked --no-fail-fast --doc || rc=1; \
		INSTA_UPDATE=no $(CARGO) test --locked --no-fail-fast --test it -- --test-threads=1 || rc=1; \
		exit $$rc; \
	fi

## The official openai/anthropic SDKs the stream assembly is compared with (a venv in .cache/).
.PHONY: sdk-venv
sdk-venv:
	scripts/sdk-venv.sh

## System programs the tests run for real (redis-server), installed from Debian's packages
## when missing (scripts/test-deps.sh).
.PHONY: test-deps
test-deps:
	scripts/test-deps.sh

## tests/bin/ (the fixture program faultproc) is a package of its own: formatted and linted too.
FAULTPROC_MANIFEST = --manifest-path tests/bin/Cargo.toml

fmt:
	$(CARGO) fmt --all
	$(CARGO) fmt $(FAULTPROC_MANIFEST)
	$(CARGO) fmt $(BACKEND_MANIFEST)

fmt-check:
	$(CARGO) fmt --all -- --check
	$(CARGO) fmt $(FAULTPROC_MANIFEST) -- --check
	$(CARGO) fmt $(BACKEND_MANIFEST) -- --check

lint:
	$(CARGO) clippy --locked --all-targets -- -D warnings
	$(CARGO) clippy --locked $(FAULTPROC_MANIFEST) --target-dir "$${CARGO_TARGET_DIR:-target}/faultproc" -- -D warnings
	$(CARGO) clippy --locked $(BACKEND_MANIFEST) --target-dir "$${CARGO_TARGET_DIR:-target}/bench-backend" -- -D warnings

## Validate config/toolwire.toml and tools.d/ (exits 1 on any error).
check-config: build
	$(CARGO) run --locked --quiet --bin toolwire -- check --config config/toolwire.toml --tools-dir tools.d

## Validate deploy/kubernetes/ offline: render every kustomization, check it against the
## Kubernetes API schemas (kubernetes-validate --strict, pinned in
## deploy/kubernetes/requirements.txt, installed into .cache/k8s/), check the deployment policy
## (non-root, read-only root, probes, grace period, resources, ...) and run `toolwire check` on
## the config and tools the pods will read. See deploy/kubernetes/README.md.
.PHONY: k8s-check
k8s-check: build
	scripts/k8s-check.sh

## What CI runs.
ci: fmt-check lint module-graph test check-config k8s-check

## The module dependency graph of src/ (fails on an import cycle).
.PHONY: module-graph
module-graph:
	python3 scripts/module-graph.py

## Run the agent-loop examples (examples/python, examples/typescript) for openai_chat, anthropic
## and gemini against a fresh server and example app on free 127.0.0.1 ports; all torn down after.
.PHONY: examples-test
examples-test: build
	scripts/examples-test.sh

.PHONY: bench bench-oop bench-mcp bench-inprocess bench-profile
## toolwire's cost over a direct backend call, as users see it (docs/bench.md): first measured
## out of process (bench-oop), an MCP-backed tool against the same MCP server called directly
## (bench-mcp), then the in-process cells (bench-inprocess). ~6 min + builds.
bench: bench-oop bench-mcp bench-inprocess

## Out of process: the backend (bench/backend), toolwire (the `dist` profile, as the image ships
## it; BENCH_PROFILE=release for a quicker build) and the load generator oha
## as separate processes on 127.0.0.1; prints the table with ratios and goals and writes
## $(BENCH_TARGET)/bench/out-of-process.json. Quick: make bench-oop BENCH_SECS=2 BENCH_RUNS=1.
## oha is installed into .cache/oha/ from crates.io when it is not on PATH.
BENCH_TARGET = $${CARGO_TARGET_DIR:-target}
BENCH_PROFILE ?= dist
OHA_VERSION ?= 1.16.0
OHA_ROOT ?= $(CURDIR)/.cache/oha
BACKEND_MANIFEST = --manifest-path bench/backend/Cargo.toml
bench-oop:
	$(CARGO) build --profile $(BENCH_PROFILE) --locked --bin toolwire
	$(CARGO) build --release --locked $(BACKEND_MANIFEST) --target-dir "$(BENCH_TARGET)/bench-backend"
	@oha=$$(command -v oha || echo "$(OHA_ROOT)/bin/oha"); \
	if [ ! -x "$$oha" ]; then \
		echo "bench: installing oha $(OHA_VERSION) into $(OHA_ROOT) (once)"; \
		$(CARGO) install --locked oha --version $(OHA_VERSION) --root "$(OHA_ROOT)" \
			--target-dir "$(BENCH_TARGET)/oha-build" || exit 2; \
		rm -rf "$(BENCH_TARGET)/oha-build"; \
	fi; \
	TOOLWIRE_BIN="$(BENCH_TARGET)/$(BENCH_PROFILE)/toolwire" \
	BACKEND_BIN="$(BENCH_TARGET)/bench-backend/release/bench-backend" \
	OHA_BIN="$$oha" python3 bench/run.py

## An MCP tool through toolwire (/v1/execute -> [[mcp]] stdio server) against the same server
## called directly with the official Python client (bench/mcp_cell.py); per-call p50, overhead, ratio.
bench-mcp: sdk-venv
	$(CARGO) build --profile $(BENCH_PROFILE) --locked --bin toolwire
	TOOLWIRE_BIN="$(BENCH_TARGET)/$(BENCH_PROFILE)/toolwire" BENCH_MCP_OUT="$(BENCH_TARGET)/bench/mcp.json" \
	.cache/sdk-venv/bin/python bench/mcp_cell.py

## Noise-immune cost of one /v1/execute (bench/profile.py): instructions and heap allocations
## per request under callgrind, system calls per request under strace. PROFILE_ARGS=--calls 8 …
PROFILE_ARGS ?=
bench-profile:
	$(CARGO) build --profile $(BENCH_PROFILE) --locked --bin toolwire
	$(CARGO) build --release --locked $(BACKEND_MANIFEST) --target-dir "$(BENCH_TARGET)/bench-backend"
	TOOLWIRE_BIN="$(BENCH_TARGET)/$(BENCH_PROFILE)/toolwire" \
	BACKEND_BIN="$(BENCH_TARGET)/bench-backend/release/bench-backend" \
	python3 bench/profile.py both $(PROFILE_ARGS)

## In process: toolwire's overhead over a direct backend call and a direct spawn (release
## build, a few minutes at most). Options: make bench-inprocess BENCH_REQUESTS=5000 …
bench-inprocess:
	$(CARGO) bench --locked --bench overhead

## Fuzz a running server against openapi.yaml with schemathesis (installed into .cache/; not in CI).
## The contract test tests/it/openapi_contract.rs (part of `make test`) keeps openapi.yaml true.
.PHONY: api-test
api-test: build
	scripts/api-test.sh

## Container image and the compose end-to-end test (docs/deploy.md).
IMAGE ?= toolwire:local
DOCKER ?= docker
DOCKER_BUILD_FLAGS ?=
IMAGE_VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
IMAGE_REVISION = $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)

.PHONY: docker docker-prebuilt compose-test compose-scale-test

## Build the image with the multi-stage Dockerfile (compiles in rust:*-slim-bookworm; needs
## access to Docker Hub and crates.io).
docker:
	$(DOCKER) build $(DOCKER_BUILD_FLAGS) --build-arg VERSION=$(IMAGE_VERSION) \
		--build-arg REVISION=$(IMAGE_REVISION) -t $(IMAGE) .

## Build the same image from a binary built on the host (no Rust image needed).
docker-prebuilt:
	$(CARGO) build --release --locked --bin toolwire
	@bin="$${CARGO_TARGET_DIR:-target}/release/toolwire"; \
	if [ ! "$$bin" -ef target/release/toolwire ]; then install -D -m 0755 "$$bin" target/release/toolwire; fi
	$(DOCKER) build $(DOCKER_BUILD_FLAGS) --target runtime-prebuilt --build-arg VERSION=$(IMAGE_VERSION) \
		--build-arg REVISION=$(IMAGE_REVISION) -t $(IMAGE) .

## End-to-end test of docker/compose.yaml with real requests (not part of CI; < 15 min).
compose-test:
	scripts/compose-test.sh

## End-to-end test of docker/compose.scale.yaml: two replicas on one Redis replay each other's
## results on the real engine (docs/scale.md; not part of CI; < 15 min).
compose-scale-test:
	COMPOSE_TEST_VARIANT=scale scripts/compose-test.sh

## Fuzz every target for FUZZ_SECONDS each with cargo-fuzz/libFuzzer (docs/fuzzing.md). The
## stable toolchain needs RUSTC_BOOTSTRAP=1 for cargo-fuzz's -Z flags. New inputs go to
## fuzz/work/<target>/ (git-ignored); the committed fuzz/corpus/<target>/ is read, never written.
## Crashers land in fuzz/artifacts/<target>/. `make test` replays the committed corpora.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= parse_completion validate_args load_tools_config parse_retry_after parse_request_body
FUZZ_FLAGS ?=
FUZZ_ENV ?= RUSTC_BOOTSTRAP=1
.PHONY: fuzz
fuzz:
	@if ! $(CARGO) fuzz --version >/dev/null 2>&1; then \
		echo "fuzz: cargo-fuzz not found; installing it from crates.io"; \
		$(CARGO) install cargo-fuzz --locked || { \
			echo "fuzz: cargo-fuzz is unavailable, so nothing was fuzzed. The committed corpora are"; \
			echo "fuzz: still replayed by 'make test' (tests/it/fuzz_corpus.rs); running that instead."; \
			$(CARGO) test --locked --test it fuzz_corpus::; exit $$?; }; \
	fi; \
	if ! $(FUZZ_ENV) $(CARGO) fuzz build $(FUZZ_FLAGS); then \
		echo "fuzz: 'cargo fuzz build' failed with $(FUZZ_ENV) on $$(rustc --version)."; \
		echo "fuzz: cargo-fuzz needs nightly -Z flags (try FUZZ_ENV=RUSTUP_TOOLCHAIN=nightly)."; \
		echo "fuzz: nothing was fuzzed; replaying the committed corpora instead."; \
		$(CARGO) test --locked --test it fuzz_corpus::; exit $$?; \
	fi; \
	for t in $(FUZZ_TARGETS); do \
		echo "fuzz: $$t for $(FUZZ_SECONDS)s"; \
		mkdir -p fuzz/work/$$t; \
		$(FUZZ_ENV) $(CARGO) fuzz run $(FUZZ_FLAGS) $$t fuzz/work/$$t fuzz/corpus/$$t -- \
			-max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 || exit 1; \
	done

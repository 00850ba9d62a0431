# trdata developer loop. `make help` lists the targets.
#
# Every target that needs the extension runs scripts/setup.sh first; it is idempotent (apt only
# for missing packages, hwloc and pip cached, cargo incremental), so `make test` twice is cheap.

comma        := ,
SHELL        := /bin/bash
.SHELLFLAGS  := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV         ?= .venv
PY           := $(VENV)/bin/python
# Cargo features of the extension besides `python`; FEATURES= builds the sysfs-only variant.
FEATURES     ?= hwloc
HWLOC_PREFIX := $(CURDIR)/.deps/hwloc
BENCH_ARGS   ?=
# REFS=0: `make test` without torch/torchvision/timm/webdataset and the record-file references (pyarrow,
# datasets, mosaicml-streaming, litdata, tfrecord): their comparison tests then skip.
REFS         ?= 1
WHEEL_DIR    ?= dist

# hwlocality-sys finds the static hwloc through pkg-config.
export PKG_CONFIG_PATH := $(HWLOC_PREFIX)/lib/pkgconfig$(if $(PKG_CONFIG_PATH),:$(PKG_CONFIG_PATH))
export PATH := $(HOME)/.cargo/bin:$(PATH)

# --features replaces [tool.maturin] features, so `python` is always named here.
FEATURE_ARGS := --features python$(if $(strip $(FEATURES)),$(comma)$(strip $(FEATURES)))
HWLOC_ON     := $(findstring hwloc,$(FEATURES))

.PHONY: help setup deps build bench bench-peers bench-throughput test test-rust test-loom test-py wheel wheel-check lint fmt info clean distclean

help: ## Show this help
	@echo "trdata — make targets (variables: FEATURES=$(FEATURES) BENCH_ARGS=... VENV=$(VENV))"
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

setup: ## Install build deps, hwloc, .venv and build the extension (release) into .venv
	FEATURES="$(FEATURES)" scripts/setup.sh

deps: ## Like setup, without building the extension
	FEATURES="$(FEATURES)" scripts/setup.sh --no-build

build: ## Rebuild the extension into .venv (maturin develop --release) after code changes
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(VENV)/bin/maturin develop --release $(FEATURE_ARGS)

bench: setup ## Setup, then `trdata bench` (BENCH_ARGS=... to pass options)
	$(VENV)/bin/trdata bench $(BENCH_ARGS)

bench-peers: ## Setup with torch/torchvision/DALI (~5.6 GB), then benches/peers/peers.py (`trdata bench` + the peers)
	FEATURES="$(FEATURES)" scripts/setup.sh --peers
	$(VENV)/bin/python benches/peers/peers.py $(BENCH_ARGS)

bench-throughput: ## Setup with the peers, then benches/peers/throughput.py on ../shared/data/imagenet-sample (JSON in bench-results/)
	FEATURES="$(FEATURES)" scripts/setup.sh --peers
	$(VENV)/bin/python benches/peers/throughput.py --rounds 3 $(BENCH_ARGS)

test: ## Setup with the references the tests compare against (torch, torchvision, timm, webdataset; REFS=0 skips them), then cargo test, loom and pytest
	TIMEFORMAT='[make test] setup: %0R s'; time FEATURES="$(FEATURES)" scripts/setup.sh $(if $(filter 0,$(REFS)),,--refs)
	TIMEFORMAT='[make test] cargo test: %0R s'; time $(MAKE) --no-print-directory test-rust
	TIMEFORMAT='[make test] loom: %0R s'; time $(MAKE) --no-print-directory test-loom
	TIMEFORMAT='[make test] pytest: %0R s'; time $(MAKE) --no-print-directory test-py

test-rust: ## cargo test (no python feature; with hwloc when enabled: its topology tests compare with sysfs's, which run in every build)
	cargo test $(if $(HWLOC_ON),--features hwloc)

test-loom: ## Model-check the host station, the device-slot ring and the decode queue with loom (the `loom` feature: this crate rebuilt, its dependencies' test builds reused)
	cargo test --lib --features loom$(if $(HWLOC_ON),$(comma)hwloc) _loom

test-py: ## pytest -q tests (needs the extension: make setup / make build)
	$(VENV)/bin/pytest -q tests

wheel: deps ## Build ONE abi3 manylinux wheel into dist/ (native: manylinux_2_34, fine on the GPU box)
	rm -f $(WHEEL_DIR)/trdata-*.whl
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(VENV)/bin/maturin build --release $(FEATURE_ARGS) \
	  --auditwheel check -i $(PY) -o $(WHEEL_DIR)
	$(MAKE) --no-print-directory wheel-check

wheel-check: ## Show the newest wheel's tags, NEEDED (only libc/libm/libgcc_s/ld-linux + glibc's own sonames) and max GLIBC
	@PYTHON=$(PY) scripts/check-wheel.sh $(if $(MAX_GLIBC),--max-glibc $(MAX_GLIBC)) \
	  "$(or $(WHEEL),$$(ls -t $(WHEEL_DIR)/trdata-*.whl | head -1))"

# Release wheels (what .github/workflows/release.yml builds in manylinux containers), built here
# without docker: zig links against glibc 2.28 symbols, hwloc is rebuilt with the same zig target.
WHEEL_ARCH   ?= x86_64
ZIG_GLIBC    ?= 2.28
RELEASE_DIR  ?= dist-release
ZIG_TARGET   := $(WHEEL_ARCH)-linux-gnu.$(ZIG_GLIBC)
RUST_TARGET  := $(WHEEL_ARCH)-unknown-linux-gnu
ZIG_BIN      := $(CURDIR)/.deps/zig-$(ZIG_TARGET)
HWLOC_ZIG    := $(CURDIR)/.deps/hwloc-$(ZIG_TARGET)

.PHONY: wheel-manylinux wheel-release sdist test-wheel

wheel-manylinux: ## abi3 manylinux_2_28 wheel via zig into dist-release/ (WHEEL_ARCH=x86_64|aarch64), checked
	FEATURES= scripts/setup.sh --no-build
	$(PY) -c 'import ziglang' 2>/dev/null || $(PY) -m pip install -q ziglang
	rustup target list --installed | grep -qx $(RUST_TARGET) || rustup target add $(RUST_TARGET)
	mkdir -p $(ZIG_BIN) $(RELEASE_DIR)
	for tool in cc ar ranlib; do \
	  args=$$tool; [[ $$tool == cc ]] && args="cc -target $(ZIG_TARGET)"; \
	  printf '#!/bin/sh\nexec "%s" -m ziglang %s "$$@"\n' "$(abspath $(PY))" "$$args" > $(ZIG_BIN)/$$tool; \
	  chmod +x $(ZIG_BIN)/$$tool; done
ifneq ($(HWLOC_ON),)
	CC=$(ZIG_BIN)/cc AR=$(ZIG_BIN)/ar RANLIB=$(ZIG_BIN)/ranlib \
	  $(if $(filter-out $(shell uname -m),$(WHEEL_ARCH)),HWLOC_HOST=$(WHEEL_ARCH)-linux-gnu) \
	  scripts/build-hwloc.sh $(HWLOC_ZIG)
endif
	rm -f $(RELEASE_DIR)/trdata-*$(WHEEL_ARCH).whl
	PKG_CONFIG_PATH=$(HWLOC_ZIG)/lib/pkgconfig PKG_CONFIG_ALLOW_CROSS=1 \
	  VIRTUAL_ENV=$(CURDIR)/$(VENV) PATH=$(CURDIR)/$(VENV)/bin:$$PATH \
	  $(VENV)/bin/maturin build --release $(FEATURE_ARGS) --zig --target $(RUST_TARGET) \
	  --compatibility manylinux_$(subst .,_,$(ZIG_GLIBC)) --auditwheel check -o $(RELEASE_DIR)
	$(MAKE) --no-print-directory wheel-check WHEEL_DIR=$(RELEASE_DIR) MAX_GLIBC=$(ZIG_GLIBC) \
	  WHEEL="$$(ls -t $(RELEASE_DIR)/trdata-*$(WHEEL_ARCH).whl | head -1)"

wheel-release: ## wheel-manylinux for x86_64 and aarch64, then sdist (all into dist-release/)
	$(MAKE) --no-print-directory wheel-manylinux WHEEL_ARCH=x86_64
	$(MAKE) --no-print-directory wheel-manylinux WHEEL_ARCH=aarch64
	$(MAKE) --no-print-directory sdist

sdist: ## Source distribution into dist-release/ (builds with cmake + nasm; hwloc not needed)
	FEATURES= scripts/setup.sh --no-build
	mkdir -p $(RELEASE_DIR)
	rm -f $(RELEASE_DIR)/trdata-*.tar.gz
	$(VENV)/bin/maturin sdist -o $(RELEASE_DIR)

test-wheel: ## Install the newest wheel of this machine's arch from dist-release/ into fresh venvs and run pytest (PYTHONS="python3.9 ...")
	scripts/test-wheel.sh "$$(ls -t $(RELEASE_DIR)/trdata-*$(shell uname -m).whl | head -1)" $(or $(PYTHONS),$(PY))

lint: setup ## clippy (core; python+hwloc), fmt --check, ruff, stubtest (_core.pyi vs the built module), mypy --strict, one validation site per parameter
	cargo clippy --all-targets -- -D warnings
	cargo clippy --all-targets --features python$(if $(HWLOC_ON),$(comma)hwloc) -- -D warnings
	cargo fmt --check
	$(VENV)/bin/ruff check python tests benches
	$(VENV)/bin/ruff format --check python tests benches
	$(PY) -m mypy.stubtest trdata._core
	$(PY) -m mypy
	$(PY) scripts/validation_sites.py

fmt: ## cargo fmt + ruff format
	cargo fmt
	$(VENV)/bin/ruff format python tests benches

.PHONY: docs
docs: deps ## The documentation site into site/ (mkdocs-material; mkdocs build --strict)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -d site

info: ## `trdata info`: CPUs, NUMA, JPEG SIMD, CUDA, binding as this build sees them
	$(PY) -c 'from trdata._info import format_info; print(format_info())'

clean: ## Remove build outputs (target/, dist/, dist-release/, the in-tree .so)
	cargo clean
	rm -rf $(WHEEL_DIR) $(RELEASE_DIR) python/trdata/_core*.so

distclean: clean ## Also remove .venv and .deps (next setup starts from scratch)
	rm -rf $(VENV) .deps


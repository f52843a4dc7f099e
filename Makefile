# bload: the two commands a new user runs are `make demo` and `make test`; each does its own
# set-up (cargo fetches the crates, and a venv in .venv gets torch, CMake and ninja from PyPI).

CARGO ?= cargo
PYTHON ?= python3
BLOAD := target/release/bload
AG := examples/data/action_genome_like.lengths

# No path of this machine in the Rust side of the binaries (panics' file names): the registry's
# crates and this clone are named from their roots. Every cargo run of the Makefile (CMake's and
# pip's included) gets the same flags, so none rebuilds what another built.
# (Added once: a make started by this one inherits them.)
CARGO_HOME ?= $(HOME)/.cargo
REMAP_PATHS := --remap-path-prefix=$(CARGO_HOME)=/cargo --remap-path-prefix=$(abspath .)=/bload
export RUSTFLAGS := $(strip $(filter-out $(REMAP_PATHS),$(RUSTFLAGS)) $(REMAP_PATHS))
# The C++ the cc crate compiles for cxx (cxx.cc's __FILE__) is named from the registry's root too.
REMAP_CXX := -ffile-prefix-map=$(CARGO_HOME)=/cargo
export CXXFLAGS := $(strip $(filter-out $(REMAP_CXX),$(CXXFLAGS)) $(REMAP_CXX))

VENV := .venv
VPY := $(VENV)/bin/python
CMAKE := $(VENV)/bin/cmake
BUILD := build
INSTALL := $(BUILD)/install

.PHONY: all build rust-tests plugin python wheel demo demo-rust demo-ready test lint format test-rust test-cpp test-python \
	test-downstream test-prebuilt test-wheel test-gpu test-tch bench bench-ddp clean

all: build plugin python

build:
	$(CARGO) build --release --locked

# The Rust tests' binaries, which `make test` builds with the library, while the venv downloads.
# After `build`, so that under make -j2 cargo's two builds take one job, not both (they wait on
# cargo's lock of target/ anyway), and the other job starts pip's download.
rust-tests: build
	$(CARGO) test --release --locked --workspace --no-run

# pip byte-compiles every module it installs (about 20,000, 90 s of CPU here), most of which no
# test imports. Kept: where PYTHONDONTWRITEBYTECODE is set (as on this project's CI machines),
# Python would otherwise compile each module again in every process that imports it.
PIP_INSTALL := $(VPY) -m pip install --quiet --disable-pip-version-check --no-cache-dir

$(VENV)/installed: requirements-dev.txt requirements-demo.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -r requirements-dev.txt
	touch $@

# What the demo alone needs (requirements-demo.txt: torch, numpy, CMake, ninja); a venv that has
# the test stack has it already.
$(VENV)/demo-installed: requirements-demo.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -r requirements-demo.txt
	touch $@

# gloo's headers, which the DDP trainer's c10d includes need and PyPI's torch lacks: the system's,
# or else Debian's libgloo-dev unpacked under build/gloo (see CMakeLists.txt, BLOAD_GLOO_INCLUDE_DIR).
GLOO_INCLUDE := $(if $(wildcard /usr/include/gloo/context.h),/usr/include,$(abspath $(BUILD))/gloo/usr/include)

$(abspath $(BUILD))/gloo/usr/include/gloo/context.h:
	mkdir -p $(BUILD)/gloo
	cd $(BUILD)/gloo && (apt-get download libgloo-dev || (apt-get update -qq && apt-get download libgloo-dev)) \
		&& dpkg -x libgloo-dev_*.deb .
	touch $@

# GoogleTest for the C++ tests: the system's, or else Debian's libgtest-dev (static libraries and
# a CMake package) unpacked under build/gtest, passed as GTest_ROOT (see tests/cpp/CMakeLists.txt).
GTEST_ROOT := $(if $(wildcard /usr/include/gtest/gtest.h),/usr,$(abspath $(BUILD))/gtest/usr)

$(abspath $(BUILD))/gtest/usr/include/gtest/gtest.h:
	mkdir -p $(BUILD)/gtest
	cd $(BUILD)/gtest && (apt-get download libgtest-dev || (apt-get update -qq && apt-get download libgtest-dev)) \
		&& dpkg -x libgtest-dev_*.deb .
	touch $@

# CMakePresets.json's `dev` preset holds the configuration (cmake --preset dev); CMake drives cargo
# for the Rust side, sharing cargo's target/ with `make build`.
$(BUILD)/build.ninja: $(VENV)/installed $(GLOO_INCLUDE)/gloo/context.h $(GTEST_ROOT)/include/gtest/gtest.h
	$(CMAKE) --preset dev -DBLOAD_GLOO_INCLUDE_DIR=$(GLOO_INCLUDE) -DGTest_ROOT=$(GTEST_ROOT)

# libbload.so, the C++ tests, and the installed package under build/install.
plugin: $(BUILD)/build.ninja
	$(CMAKE) --build $(BUILD)
	$(CMAKE) --install $(BUILD) > /dev/null

# The Python package `bload` installed into .venv as a user installs it (`pip install .`; here
# without build isolation, with the venv's scikit-build-core), its build kept under build/python
# and the Rust bridge shared with cargo's target/.
python: $(VENV)/installed
	$(VPY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
		-C cmake.define.BLOAD_CARGO_TARGET_DIR=$(abspath target) .

# dist/bload-VERSION-py3-none-PLATFORM.whl: the package with libbload.so and the `bload` command,
# requiring the torch series it was built against (docs/release.md). It shares build/python/ and
# cargo's target/ with `make python` and `make build`, so after them it only packs.
wheel: $(VENV)/installed
	rm -f dist/bload-*.whl
	$(VPY) -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
		-C cmake.define.BLOAD_CARGO_TARGET_DIR=$(abspath target) -w dist .

# The BLoad paper's Table I on the Action-Genome-shaped data, then DDP training on it with the
# short trainers of examples/, each on 2 ranks under torchrun (gloo on CPU): the C++ one with the
# C++ model and with the TorchScript one, then the Python one. The demo installs only
# requirements-demo.txt and builds no tests: one libbload.so (CMake's `demo` preset, build/demo)
# serves the C++ trainer and, through BLOAD_LIBRARY, the Python package read from python/.
MODEL := $(BUILD)/packed_gru.pt
TORCHRUN := env OMP_NUM_THREADS=1 $(VENV)/bin/torchrun --nproc-per-node 2
# The DDP trainer the tests and `make bench-ddp` drive (tests/harness/).
TRAINER := $(BUILD)/tests/harness/cpp/ddp_trainer
DEMO_BUILD := $(BUILD)/demo
DEMO_MODEL := $(DEMO_BUILD)/packed_gru.pt
DEMO_PYTHON := env PYTHONPATH=$(abspath python) BLOAD_LIBRARY=$(abspath $(DEMO_BUILD))/libbload.so

$(MODEL): examples/packed_gru.py python
	$(VPY) examples/packed_gru.py $@

$(DEMO_BUILD)/build.ninja: $(VENV)/demo-installed $(GLOO_INCLUDE)/gloo/context.h
	$(CMAKE) --preset demo -DBLOAD_GLOO_INCLUDE_DIR=$(GLOO_INCLUDE)

# The Rust side as CMake's build asks cargo for it (cmake/BloadRust.cmake: the bridge and the
# command, in target/), started beside the venv's download so that CMake finds it built.
demo-rust:
	$(CARGO) build --release --locked -p bload-cxx -p bload --lib --bin bload

demo-ready: $(DEMO_BUILD)/build.ninja demo-rust

demo:
	$(MAKE) -j2 demo-ready
	$(CMAKE) --build $(DEMO_BUILD)
	$(DEMO_PYTHON) $(VPY) examples/packed_gru.py $(DEMO_MODEL)
	$(DEMO_BUILD)/rust/bin/bload stats --lengths $(AG) --t-max 94 --truncate-to 10 --mix-to 22 --world-size 2
	@echo
	$(TORCHRUN) --no-python $(DEMO_BUILD)/examples/cpp/train --epochs 2
	@echo
	$(TORCHRUN) --no-python $(DEMO_BUILD)/examples/cpp/train --epochs 2 --model $(DEMO_MODEL)
	@echo
	$(DEMO_PYTHON) $(TORCHRUN) examples/train.py --epochs 2 --model $(DEMO_MODEL)

PYTHON_SOURCES := python tests examples benches
# The C++ that clang-format keeps to .clang-format's style: every source of these folders (the
# cxx bridge's generated headers live under target/ and build/, outside them).
CPP_SOURCES = $(shell find cpp tests/cpp tests/harness/cpp tests/support tests/downstream examples \
	benches -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cc' \) | sort)

lint: $(VENV)/installed
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --locked --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff check $(PYTHON_SOURCES)
	$(VENV)/bin/ruff format --check $(PYTHON_SOURCES)
	$(VENV)/bin/clang-format --dry-run --Werror $(CPP_SOURCES)

# Rewrites the Rust, the Python (applying ruff's safe fixes) and the C++ to their formats.
format: $(VENV)/installed
	$(CARGO) fmt --all
	$(VENV)/bin/ruff check --fix $(PYTHON_SOURCES)
	$(VENV)/bin/ruff format $(PYTHON_SOURCES)
	$(VENV)/bin/clang-format -i $(CPP_SOURCES)

# Every test the project has: Rust (unit, property, golden, data-set, command line, bridge),
# C++ (GoogleTest, in one process), Python (pytest on the ops and the TorchScript model), and a
# downstream CMake project built against the installed package. Each step runs as its own make, after the builds
# they share (made two at a time: cargo's while pip downloads the venv, the library's C++ beside
# the package's), and its wall and CPU time is printed as it ends and in a table at the end
# (tests/timed_steps.sh); a failing step stops the run and fails make. The two steps that are
# mostly builds (the prebuilt library, tch's C++, each in its own build directory) run beside
# the others, at a lower priority, on the CPU those leave idle (most of a core while the
# Python tests' ranks wait on each other).
TEST_STEPS := lint test-rust test-cpp test-python test-downstream test-wheel
BESIDE := test-prebuilt test-tch
test:
	MAKE='$(MAKE)' tests/timed_steps.sh --built "build rust-tests plugin python $(MODEL)" --built-jobs 2 \
		--beside lint "$(BESIDE)" $(TEST_STEPS)

test-rust:
	$(CARGO) test --release --locked --workspace
	$(CARGO) run --release --locked --example plan_epoch > /dev/null

# The C++ tests in one process: ctest starts one per case, each loading libtorch again (86 s of
# CPU against 5 s here); `ctest --test-dir build` still runs them case by case. The timeout makes
# a hang a failure, and the last `[ RUN ]` line names its case.
CPP_TESTS := $(BUILD)/tests/cpp/bload_tests
test-cpp: plugin
	@test -x $(CPP_TESTS) || { echo "test-cpp: no $(CPP_TESTS) (GoogleTest not found when configured)"; exit 1; }
	timeout 600 $(CPP_TESTS)

# One test process: two (pytest-xdist, -n 2) took as long in CI on 2 cores (312 s against 319 s
# serial; each test ran about twice as long beside another), and doubled every test's time
# against its timeouts (BENCHMARKS.md, "Test suite time").
test-python: build plugin python
	$(VPY) -m pytest -q -W ignore::DeprecationWarning --durations=15 tests/python
	$(VPY) examples/python_loop.py > /dev/null
	rm -rf $(BUILD)/python_loop_store
	$(VPY) examples/python_loop.py --store $(BUILD)/python_loop_store > /dev/null

# A consumer configured with CMAKE_PREFIX_PATH alone: the package finds torch through the Python
# bload was built with.
test-downstream: plugin
	$(CMAKE) -S tests/downstream -B $(BUILD)/downstream -G Ninja \
		-DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) -DCMAKE_PREFIX_PATH=$(abspath $(INSTALL))
	$(CMAKE) --build $(BUILD)/downstream
	$(BUILD)/downstream/readme_loop
	$(BUILD)/downstream/packed_gru

# As on a machine with libtorch but no Rust toolchain (the GPU machine): `make test-gpu`'s script
# on the CPU, with cargo out of reach. It builds the library and the C++ trainer from the Rust
# bridge of $(BUILD)/rust and runs each of its steps on the CPU, so that the script cannot rot
# where no GPU is (docs/gpu.md).
NO_RUST_ENV := env HOME=$(abspath $(BUILD))/no-rust-home PATH=$(abspath $(VENV))/bin:/usr/bin:/bin
test-prebuilt: plugin python
	$(NO_RUST_ENV) PYTHON=$(abspath $(VPY)) BLOAD_GLOO_INCLUDE_DIR=$(GLOO_INCLUDE) \
		tests/gpu/run.sh --cpu --build-dir $(BUILD)/prebuilt

# The CUDA paths in one command, on a machine with a CUDA torch, CMake and nvcc and no Rust: the
# plugin from a carried Rust prebuilt (BLOAD_RUST_PREBUILT, default build/rust), the operator
# tests on cuda, the loader with pinned memory, a one-rank NCCL epoch of the C++ trainer, and pack
# beside torch.cat on the GPU, then the report's benchmarks (BENCHES; docs/gpu.md). Where the
# Makefile's venv is absent, PYTHON names the Python with torch.
test-gpu:
	tests/gpu/run.sh

# The wheel in a fresh venv with torch and no cargo, CMake or compiler on PATH: import, the
# README's loop and the command (tests/wheel/test_wheel.py).
test-wheel: wheel
	$(VPY) -m pytest -q -W ignore::DeprecationWarning tests/wheel

# The cargo feature `tch` (Rust trainers), built against the venv's torch: torch-sys runs the
# `python` of VIRTUAL_ENV when LIBTORCH_USE_PYTORCH is set. Its tests compare bload::tch's packed
# batches with the plugin's operators, through a TorchScript reference written here.
# Its own target directory: a build with the feature relinks the crate's binaries against
# libtorch, and would replace target/release/bload, which the other tests run, while they run.
# clippy lints the feature's code as it is built (clippy-driver as the workspace's compiler, its
# warnings errors), not in a `cargo clippy` of its own: that checked every dependency, tch's
# included, a second time (about 280 s of CPU from a fresh target/tch, against about 250 s for
# the build itself). The registry's crates are built as before: cargo caps their lints.
TCH_ENV := env LIBTORCH_USE_PYTORCH=1 VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH \
	CARGO_TARGET_DIR=$(abspath target)/tch RUSTC_WORKSPACE_WRAPPER=clippy-driver RUSTFLAGS='$(RUSTFLAGS) -D warnings'
TCH_REFERENCE := $(BUILD)/tch_reference.pt

test-tch: plugin python $(MODEL)
	$(VPY) tests/tch_reference.py $(TCH_REFERENCE)
	$(TCH_ENV) $(CARGO) test --release --locked --features tch --lib --test tch_pack --examples
	$(TCH_ENV) $(CARGO) run --release --locked --features tch --example tch_trainer -- --sequences 1500
	$(TCH_ENV) $(CARGO) run --release --locked --features tch --example tch_trainer -- \
		--sequences 1500 --model $(MODEL)
	$(TCH_ENV) $(CARGO) run --release --locked --features tch --example tch_trainer -- \
		--policy lanes --sequences 600 --t-max 32
	$(TCH_ENV) $(CARGO) run --release --locked --features tch --example tch_trainer -- \
		--policy lanes --sequences 600 --t-max 32 --model $(MODEL)

# Timings belong here, not in tests: see BENCHMARKS.md. Planning (Rust), packing (C++: pack,
# pack_into and get_batch beside torch.cat and memcpy), Python's lengths ingestion beside the
# Rust constructor, a DataLoader of bload's batches beside the padded loader, lengths read from a
# Parquet list column beside a loop and datasets' map, and an epoch packed from the sequence store
# beside .npy files and memory, and flex_attention BlockMasks from bload beside create_block_mask.
bench: plugin python
	$(CARGO) bench --locked --bench plan
	$(CARGO) bench --locked --bench cost
	$(CARGO) bench --locked --bench records
	$(BUILD)/pack_bench examples/data
	$(BUILD)/slow_items_bench
	$(BUILD)/slow_items_bench --uniform
	$(VPY) benches/ingest.py
	$(VPY) benches/loader.py
	$(VPY) benches/lengths_formats.py
	$(VPY) benches/store_epoch.py
	$(VPY) benches/store_verify.py
	$(VPY) benches/block_mask.py
	$(VPY) benches/slow_items.py
	$(VPY) benches/slow_items.py --uniform

# Epoch time of DDP training for pad_to_max, random_fill and best_fit (BENCHMARKS.md).
bench-ddp: plugin python $(MODEL)
	$(VPY) benches/ddp_epoch.py --trainer $(TRAINER) --model $(MODEL)

clean:
	$(CARGO) clean
	rm -rf $(BUILD)

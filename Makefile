# bload: the two commands a new user runs are `make demo` and `make test`; each does its own
# set-up (cargo fetches the crates on first use).

CARGO ?= cargo
BLOAD := target/release/bload
AG := examples/data/action_genome_like.lengths

.PHONY: all build demo test lint bench clean

all: build

build:
	$(CARGO) build --release --locked

# The BLoad paper's Table I on the Action-Genome-shaped data, then the same on 8 DDP ranks.
demo: build
	$(BLOAD) stats --lengths $(AG) --t-max 94 --truncate-to 10 --mix-to 22
	@echo
	$(BLOAD) stats --lengths $(AG) --t-max 94 --truncate-to 10 --mix-to 22 --world-size 8

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --locked --all-targets -- -D warnings

# Every test the project has: unit, property, golden, data-set and command-line tests.
test: lint
	$(CARGO) test --release --locked
	$(CARGO) run --release --locked --example plan_epoch > /dev/null

# Timings belong here, not in tests: see BENCHMARKS.md.
bench:
	$(CARGO) bench --locked --bench plan

clean:
	$(CARGO) clean

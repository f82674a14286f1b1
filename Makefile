# epstack: `make image` renders and builds the default target; `make test` runs every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TARGET ?=
# A folder of `git archive` tarballs (DeepEP, fmt, GDRCopy) and installers, for builds without GitHub.
SOURCES ?=
# The serving engine's image to build (epstack build --engine: sglang, vllm or all; default sglang).
ENGINE ?=
# pip extras of the venv: CodeBuild's install phase needs only aws (make .venv/bin/epstack EXTRAS=aws);
# `make image` only what building needs, epstack and the lint tools (IMAGE_EXTRAS), not the test ones.
EXTRAS ?= test,aws
IMAGE_EXTRAS := lint
RENDER := build/render

NPROC ?= 2
DEEPEP ?=

.PHONY: image render lock lint test unit docs reference mutation schema constraints bench smoke smoke-upstream sglang-parser clean

# The venv with EXTRAS installed (a stamp per set of extras: a venv made for `make image` gains the
# test tools when `make test` asks for them).
$(BIN)/epstack: $(VENV)/extras.$(EXTRAS)
	touch $@

$(VENV)/extras.$(EXTRAS): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[$(EXTRAS)]'
	touch $@

render: $(BIN)/epstack
	$(BIN)/epstack pins check
	$(BIN)/epstack pins lock --check
	$(BIN)/epstack render --out-dir $(RENDER)

# Resolve the stale or missing locks in locks/ (needs PyPI); commit what it writes.
lock: $(BIN)/epstack
	$(BIN)/epstack pins lock

lint: render
	$(BIN)/hadolint $(RENDER)/targets/*/*.Dockerfile
	$(BIN)/shellcheck scripts/*/*.sh benchmarks/*/*.sh .ci/run

image:
	$(MAKE) lint EXTRAS=$(IMAGE_EXTRAS)
	-scripts/dev/docker-engine.sh start
	$(BIN)/epstack build $(TARGET) --out-dir $(RENDER) $(if $(SOURCES),--sources $(SOURCES)) $(if $(ENGINE),--engine $(ENGINE))

test: $(BIN)/epstack
	scripts/dev/docker-engine.sh start
	$(BIN)/ruff check epstack tests benchmarks
	$(BIN)/mypy
	$(BIN)/pytest -m ""

# The docs site (docs/, mkdocs.yml) into build/site; `make test` builds it too (tests/test_docs.py).
docs: $(BIN)/epstack
	$(BIN)/mkdocs build --strict

# The reference pages written from the code: command line, option names, exit codes, and the README's
# commands table (tests/test_docs.py fails when one drifts).
reference: $(BIN)/epstack
	$(BIN)/python -m epstack.commands.clireference docs/reference README.md

# The quick loop: pytest's default selection (pyproject.toml), no Docker, PyPI or GPU.
unit: $(BIN)/epstack
	$(BIN)/pytest

# Mutation testing of the check modules (benchmarks/mutation/modules.toml), each by its own tests;
# writes benchmarks/results/mutation.json. Not part of `make test`: see the README for its cost.
MODULES ?=
mutation: $(BIN)/epstack
	$(BIN)/python benchmarks/mutation.py $(MODULES)

schema: $(BIN)/epstack
	$(BIN)/python -c "from epstack.pins.load import SCHEMA_PATH, pins_json_schema; SCHEMA_PATH.write_text(pins_json_schema())"
	$(BIN)/python -c "from epstack.cluster.values import SCHEMA_PATH, values_schema; \
	  from epstack.commands.cluster import flags_of, render_parser; \
	  SCHEMA_PATH.write_text(values_schema(flags_of(render_parser())))"

constraints: $(BIN)/epstack
	{ sed -n 1,2p constraints.txt; $(BIN)/pip freeze --exclude-editable | grep -v '^epstack' \
	  | sed 's/+cpu$$//'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

smoke:
	python3 -m epstack smoke elastic --gpus-per-node $(NPROC) --json build/smoke-elastic.json

smoke-upstream:
	python3 -m epstack smoke elastic --gpus-per-node $(NPROC) --upstream-only --upstream-tests $(DEEPEP)

# SGLang's own argument parser, installed as lightly as it runs (tests/cluster/sglang-parser.txt),
# under .cache/; the parser test installs it too when missing. --fresh measures a new install.
sglang-parser: $(BIN)/epstack
	$(BIN)/python -m tests.cluster.sglang_env --fresh

bench: $(BIN)/epstack
	$(BIN)/python benchmarks/render_time.py

clean:
	rm -rf build $(VENV)

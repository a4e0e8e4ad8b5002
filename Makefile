# symbi — see README.md. Every target works on a fresh clone with only Go installed.
GO        ?= go
BIN       ?= bin/symbi
FUZZTIME  ?= 20s
FUZZMINIMIZE ?= 5s
BENCHTIME ?= 1s
BENCHCOUNT ?= 1
BENCHOUT  ?= bench.out
PKGS      ?= ./...
NPM       ?= npm
CONFORMANCE := testdata/conformance

.PHONY: all build test test-short bench fuzz lint demo stress loopback-model clean conformance-deps

all: lint test build

build:
	$(GO) build -o $(BIN) ./cmd/symbi

# The main job, end to end, with no credentials and no network: starts a loopback model,
# serves this repository's example project with symbi mcp, invokes an agent through a
# real MCP client, verifies the run's journal, and shows a policy denial and a refusal;
# then a delegated run, with the scripted ACP agent (built here) as the coding agent.
demo: build
	$(GO) build -o $(dir $(BIN))fake-acp-agent ./cmd/fake-acp-agent
	$(GO) run ./cmd/symbi-demo -symbi $(BIN) -fake-agent $(dir $(BIN))fake-acp-agent -project .

# The reliability harnesses at full size (crash, storage, hostile model and client, load,
# shutdown, delegated runs over ACP with the scripted fake agent built next to $(BIN));
# see docs/reliability.md. "make test" runs them at short size.
stress: build
	$(GO) build -o $(dir $(BIN))fake-acp-agent ./cmd/fake-acp-agent
	$(GO) run ./cmd/symbi-stress -symbi $(BIN) -fake-agent $(dir $(BIN))fake-acp-agent

# A loopback OpenAI-compatible model for trying symbi mcp by hand (prints its base URL).
# MODEL_ARGS passes flags: -reply TEXT, -when SUBSTRING=TEXT, -delay 5s, -hang,
# -hang-when SUBSTRING (see cmd/loopback-model).
MODEL_ARGS ?=
loopback-model:
	$(GO) run ./cmd/loopback-model $(MODEL_ARGS)

# The tests CI runs (.ci/run calls this target). Fuzz seed corpora run as ordinary tests.
# With npm on PATH it first installs the client conformance suite's pinned packages;
# without node the suite is skipped with a message (and fails when CI=true).
# -timeout: a package's tests under -race on a busy two-core machine (cmd/symbi's, with the
# conformance suite's node clients) can near go test's default of 10 minutes.
test: $(if $(shell command -v $(NPM) 2>/dev/null),conformance-deps)
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 13m $(PKGS)

# The pinned npm packages of the client conformance suite (the TypeScript MCP SDK and the
# MCP Inspector), reinstalled only when the lock file changes.
conformance-deps: $(CONFORMANCE)/node_modules/.package-lock.json

$(CONFORMANCE)/node_modules/.package-lock.json: $(CONFORMANCE)/package.json $(CONFORMANCE)/package-lock.json
	cd $(CONFORMANCE) && $(NPM) ci --no-audit --no-fund --loglevel=error

test-short:
	$(GO) test -short -count=1 $(PKGS)

# Benchmarks, BENCHCOUNT runs, side by side. Ratios are reported as custom metrics. The
# output is kept in BENCHOUT and shown when the run ends, then cmd/symbi-bench prints one
# table of every tracked ratio against its target (medians and ranges over the runs). A
# missed target is a measurement, not a failure; a failing benchmark still fails make, after
# the table. See docs/performance.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(BENCHCOUNT) $(PKGS) > $(BENCHOUT) 2>&1; \
	  status=$$?; cat $(BENCHOUT); $(GO) run ./cmd/symbi-bench $(BENCHOUT) && exit $$status

# Runs every fuzz target of the module for FUZZTIME each. An input that finds new coverage
# is minimised for at most FUZZMINIMIZE: the default (60 s) would spend a slow target's
# whole FUZZTIME minimising one input.
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$pkg; \
	  done; \
	done

lint:
	@files=$$(git ls-files '*.go' && git ls-files --others --exclude-standard '*.go') || { echo "lint: git cannot list the files to check"; exit 1; }; \
	  [ -n "$$files" ] || { echo "lint: no Go files listed"; exit 1; }; \
	  out=$$(gofmt -l $$files) || exit 1; \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

clean:
	rm -rf bin

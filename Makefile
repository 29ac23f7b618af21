# Thin wrappers: the work is in hack/.
.PHONY: build test fuzz demo bench deps

build:
	hack/build.sh

test:
	hack/test.sh

# FUZZTIME=5m by default, per target; FUZZ=FuzzCompile for one.
fuzz:
	hack/fuzz.sh

demo:
	hack/demo.sh

bench:
	hack/bench.sh

deps:
	hack/deps.sh

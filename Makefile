# Thin wrappers: the work is in hack/.
.PHONY: build test demo bench deps

build:
	hack/build.sh

test:
	hack/test.sh

demo:
	hack/demo.sh

bench:
	hack/bench.sh

deps:
	hack/deps.sh

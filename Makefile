# Two commands for a newcomer (see README.md):
#   make run    set up, build, run the main example on the default model
#   make test   set up, build, run the whole test suite
PRESET ?= default
MODEL  ?= models/SmolLM2-135M-Instruct.Q4_1.gguf

.PHONY: run test setup build model fuzz asan tsan clean

run: build
	./build/bin/hetero-agent -m $(MODEL)

test: build
	ctest --preset $(PRESET)

setup:
	bash scripts/setup.sh

model:
	bash scripts/setup.sh --model

build: setup
	cmake --preset $(PRESET)
	cmake --build --preset $(PRESET)

# libFuzzer targets (clang). FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 60
fuzz: setup
	cmake --preset fuzz
	cmake --build --preset fuzz
	bash scripts/run-fuzzers.sh $(FUZZ_SECONDS)

# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (clang).
asan: setup
	cmake --preset asan
	cmake --build --preset asan
	ctest --preset asan

# The engine's concurrency tests under ThreadSanitizer (clang).
tsan: setup
	cmake --preset tsan
	cmake --build --preset tsan
	ctest --preset tsan

clean:
	rm -rf build build-fuzz build-asan build-tsan

# llmux: one non-recursive Makefile.  Objects go to build/$(MODE)/ so flags
# never mix: MODE=release (default), debug, asan (ASan+UBSan), tsan.
#
#   make            build build/release/llmux
#   make run        build, then serve (local engine + any cloud keys)
#   make test       build and run the whole test suite
#   make check      ASan+UBSan build of the whole test suite, run
#   make bench      benchmarks -> bench/BENCHMARKS.md
#                   (bench-ledger, bench-multi: one part of it)
#   make fuzz       libFuzzer targets (clang), short runs
#   make valgrind   the gateway's main paths under valgrind memcheck
#   make install    PREFIX=/usr/local

MODE ?= release
BUILD := build/$(MODE)
CC ?= cc
PREFIX ?= /usr/local
LLMUX_TEST_DATA ?= $(abspath ../shared/data)
export LLMUX_TEST_DATA

PKGS := libevent libevent_pthreads libevent_openssl libcurl jansson openssl sqlite3 libpq
APT_PKGS := build-essential pkg-config libevent-dev libcurl4-openssl-dev \
            libjansson-dev libssl-dev libsqlite3-dev libhttp-parser-dev \
            libpq-dev postgresql curl

# Recursive (=) so pkg-config runs only after the deps check has installed
# what was missing.
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS))
PKG_LIBS = $(shell pkg-config --libs $(PKGS))

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Werror
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -MMD -MP -pthread
ifeq ($(MODE),release)
  MODE_CFLAGS := -O2 -g
else ifeq ($(MODE),debug)
  MODE_CFLAGS := -O0 -g
else ifeq ($(MODE),asan)
  MODE_CFLAGS := -O1 -g -fno-omit-frame-pointer \
                 -fsanitize=address,undefined -fno-sanitize-recover=all
  MODE_LDFLAGS := -fsanitize=address,undefined
else ifeq ($(MODE),tsan)
  MODE_CFLAGS := -O1 -g -fsanitize=thread
  MODE_LDFLAGS := -fsanitize=thread
else
  $(error MODE must be release, debug, asan or tsan)
endif
CFLAGS_ALL = $(BASE_CFLAGS) $(MODE_CFLAGS) $(PKG_CFLAGS) $(CFLAGS)
# http-parser has no pkg-config file in Debian (libhttp-parser-dev).
LDLIBS_ALL = $(PKG_LIBS) -lhttp_parser -lm -pthread $(MODE_LDFLAGS) $(LDFLAGS)

# SIMD kernels: ISA flags on their own files only (chosen at run time),
# on x86-64 only (elsewhere the files compile to nothing or to a stub that
# is never called).  AMX-INT8 tiles use AVX-512 for packing and scaling
# (local_engine/*_amx.c only).
ARCH := $(shell uname -m)
ifeq ($(ARCH),x86_64)
  AVX2_FLAGS := -mavx2 -mfma -mf16c
  AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni \
                  -mfma -mf16c
  AVXVNNI_FLAGS := -mavx2 -mfma -mf16c -mavxvnni
  AMX_FLAGS := -mamx-tile -mamx-int8 -mavx512f -mavx512bw -mavx512vl \
               -mavx512vnni -mavx2 -mfma -mf16c
endif
isa_flags = $(if $(findstring _avx2,$(1)),$(AVX2_FLAGS)) \
            $(if $(findstring _avx512,$(1)),$(AVX512_FLAGS)) \
            $(if $(findstring _avxvnni,$(1)),$(AVXVNNI_FLAGS)) \
            $(if $(filter local_engine/%_amx.c,$(1)),$(AMX_FLAGS))

LIB_SRC := $(sort $(wildcard common/*.c config/*.c pricing/*.c \
             providers/*.c router/*.c local_engine/*.c) \
             $(filter-out gateway/main.c,$(wildcard gateway/*.c)))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
MAIN_OBJ := $(BUILD)/gateway/main.o
TESTLIB_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/lib/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TOOL_SRC := tests/fake_provider.c $(wildcard tests/tool_*.c)
TOOL_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard $(TOOL_SRC)))
LIBA := $(BUILD)/libllmux.a
DEPS_OK := build/.deps-ok

.SECONDARY:
.PHONY: all run test check bench fuzz install clean deps clients format valgrind
all: $(BUILD)/llmux

# --- dependencies: install when root, else print the exact command -------
deps: $(DEPS_OK)
$(DEPS_OK):
	@libs=1; { pkg-config --exists $(PKGS) 2>/dev/null && command -v cc >/dev/null && [ -f /usr/include/http_parser.h ]; } || libs=0; \
	server=1; ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || server=0; \
	if [ $$libs = 0 ] || [ $$server = 0 ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "llmux: installing build dependencies with apt-get"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PKGS)) >/dev/null || exit 1; \
	  elif [ $$libs = 0 ]; then \
	    echo "llmux: missing libraries; run as root:"; \
	    echo "  apt-get install -y $(APT_PKGS)"; exit 1; \
	  else \
	    echo "llmux: no PostgreSQL server (apt-get install -y postgresql): its tests will say so and be skipped"; \
	  fi; \
	fi
	@mkdir -p build && touch $@

# --- real clients for the end-to-end tests (official SDKs, playwright-core
# with Debian's chromium; promtool from Debian's prometheus checks /metrics): installed when possible, else those tests say so
# and skip (CI sets LLMUX_REQUIRE_CLIENTS=1, which makes that a failure).
CLIENTS_OK := tests/clients/node_modules/.package-lock.json
clients: $(CLIENTS_OK)
$(CLIENTS_OK): tests/clients/package-lock.json
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  need=""; command -v npm >/dev/null || need="nodejs npm"; \
	  [ -x /usr/bin/chromium ] || need="$$need chromium"; \
	  [ -x /usr/bin/promtool ] || need="$$need prometheus"; \
	  if [ -n "$$need" ]; then echo "llmux: installing$$need for the client tests"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need) >/dev/null || true; fi; \
	fi; \
	if command -v npm >/dev/null; then \
	  (cd tests/clients && npm ci --no-audit --no-fund --loglevel=error) || \
	    echo "llmux: npm ci in tests/clients failed: the SDK and browser tests will skip"; \
	else echo "llmux: no npm: the SDK and browser tests will skip (apt-get install -y nodejs npm)"; fi

# --- build ----------------------------------------------------------------
$(BUILD)/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(call isa_flags,$<) -c $< -o $@

$(LIBA): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/llmux: $(MAIN_OBJ) $(LIBA)
	$(CC) $(MODE_CFLAGS) -o $@ $^ $(LDLIBS_ALL)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TESTLIB_OBJ) $(LIBA)
	$(CC) $(MODE_CFLAGS) -o $@ $^ $(LDLIBS_ALL)

-include $(shell find build -name '*.d' 2>/dev/null)

# --- run: serve with built-in defaults so a first curl answers -----------
run: $(BUILD)/llmux
	@model="$${LLMUX_MODEL:-$$(ls models/*.gguf 2>/dev/null | head -n 1)}"; \
	[ -n "$$model" ] || model="$(LLMUX_TEST_DATA)/models/stories260K.gguf"; \
	[ -f "$$model" ] || { echo "llmux: no model at $$model: put a .gguf file in models/, or set LLMUX_MODEL=FILE.gguf, or LLMUX_TEST_DATA=DIR (the project's shared data, default ../shared/data beside this clone)" >&2; exit 1; }; \
	echo "llmux: local model $$model"; \
	LLMUX_MODEL="$$model" exec $(BUILD)/llmux serve $(RUN_ARGS)

# --- tests ----------------------------------------------------------------
test: $(BUILD)/llmux $(TEST_BIN) $(TOOL_BIN) | clients
	@sh tests/run.sh $(BUILD)

check:
	@$(MAKE) --no-print-directory MODE=asan test

bench: $(BUILD)/llmux $(TOOL_BIN)
	@sh bench/run.sh $(BUILD)

# Parts of make bench alone: the ledger on SQLite and PostgreSQL (10M
# rows, ~5 min), 1 vs 2 instances behind nginx over PostgreSQL (~1 min).
.PHONY: bench-ledger bench-multi
bench-ledger: $(BUILD)/llmux $(TOOL_BIN)
	@sh bench/ledger.sh $(BUILD)
bench-multi: $(BUILD)/llmux $(TOOL_BIN)
	@sh bench/multi.sh $(BUILD)

fuzz:
	@sh tests/fuzz/run.sh

valgrind: $(BUILD)/llmux $(TOOL_BIN)
	@sh tests/valgrind.sh $(BUILD)

install: $(BUILD)/llmux
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BUILD)/llmux $(DESTDIR)$(PREFIX)/bin/llmux

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build

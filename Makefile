# qwisp — build, test, sanitizers, fuzzing, benchmarks.
#
#   make            build/qwisp (optimised, -g)
#   make test       all tests (C unit tests, peers, a short fuzz run); ends with "N passed, N failed"
#   make asan       the same binaries under AddressSanitizer + UBSan in build-asan/
#   make fuzz       libFuzzer targets in build-fuzz/ (clang)
#   make bench      bench/vs_llamacpp.sh
#   make install    build/qwisp to $(DESTDIR)$(PREFIX)/bin, the default model and LICENSE to
#                   $(DESTDIR)$(PREFIX)/share/qwisp/ (PREFIX=/usr/local); make uninstall
#   make models/synthetic.gguf a generated synthetic model (real Qwen3 tokenizer); models/default.gguf is committed
#   make NVCC=     a CPU-only build even where nvcc is installed (docs/cuda.md)
#
# Sources are found by wildcard: add a .c under src/ and it is built.  Files
# named *_avx2.c / *_avx512.c get their ISA flags; the rest is baseline x86-64,
# and kernels choose a SIMD variant at run time.

CC      ?= gcc
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
PKGS    := libpcre2-8 libcjson libmicrohttpd
DEPCFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
DEPLIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lpcre2-8 -lcjson -lmicrohttpd)
# libedit: line editing for `qwisp chat`, linked into the binary only (the
# library and the tests do not use it).  Included as <editline/readline.h>.
CLI_PKGS  := libedit
CLI_LIBS  := $(shell pkg-config --libs $(CLI_PKGS) 2>/dev/null || echo -ledit)
# liburing: asynchronous expert reads (src/experts/aio.c).  Without it the
# build still works and the streaming tier reads with pread threads.
URING_LIBS := $(shell pkg-config --libs liburing 2>/dev/null)
URING_DEF  := $(if $(URING_LIBS),,-DQW_NO_URING)
CFLAGS  ?= $(OPT) -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Iinclude -Isrc -pthread $(DEPCFLAGS) $(URING_DEF) $(SAN)
LDFLAGS += -pthread $(SAN)
LDLIBS  += $(DEPLIBS) $(URING_LIBS) -lm -ldl

ISA_AVX2   := -mavx2 -mfma -mf16c
ISA_AVX512 := -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16
# VBMI (byte permutes) is missing on some AVX-512 VNNI CPUs (Cascade Lake): its
# own files, used only when the CPU has it (quant.c).
ISA_AVX512VBMI := $(ISA_AVX512) -mavx512vbmi

# `qwisp --version`: the release number and the commit built.  The stamp file
# changes only when they do, so main.o is rebuilt after a commit, not always.
VERSION   := 0.1.0
GIT_REV   := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
VERSION_STAMP := $(BUILD)/version.txt
$(shell mkdir -p $(BUILD) && (echo '$(VERSION) $(GIT_REV)' | cmp -s - $(VERSION_STAMP) || echo '$(VERSION) $(GIT_REV)' >$(VERSION_STAMP)))

LIB_SRC  := $(shell find src -name '*.c' ! -path 'src/cli/*' | sort)
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(shell find tests -name node_modules -prune -o -name 'test_*.c' -print | sort)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))

.PHONY: all test asan fuzz bench clean tests-bin check-deps install uninstall cuda
all: $(BUILD)/qwisp

# The CUDA backend (src/cuda/*.cu, docs/cuda.md): built when nvcc is found, as
# a shared object the binary dlopen()s only when QWISP_BACKEND chooses it; the
# CUDA runtime is linked into it statically, so it needs only the driver
# (libcuda.so.1) at run time and CPU users get no new dependency.  NVCC= (or
# NVCC=false) skips it.  sm_90 code (H100/H200) + PTX for newer GPUs; set
# CUDA_ARCH for others, e.g. CUDA_ARCH="-gencode arch=compute_89,code=sm_89".
NVCC      ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
# NVDEFS: build-time constants for a variant object (tests/gpu/t_gpu_attn_tiles.sh)
NVFLAGS   ?= -O3 -std=c++17 -Xcompiler -fPIC,-Wall,-Wno-unused-parameter -Iinclude -Isrc $(CUDA_ARCH)
CU_SRC    := $(sort $(wildcard src/cuda/*.cu))
CU_OBJ    := $(CU_SRC:%.cu=$(BUILD)/obj/%.o)
CUDA_LIB  := $(BUILD)/libqwisp_cuda.so
ifneq ($(filter-out false,$(NVCC)),)
all: $(CUDA_LIB)
endif
cuda: $(CUDA_LIB)

$(BUILD)/obj/src/cuda/%.o: src/cuda/%.cu $(wildcard src/cuda/*.h src/cuda/*.cuh) include/qwisp/backend.h include/qwisp/model.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(NVDEFS) -c $< -o $@

$(CUDA_LIB): $(CU_OBJ)
	$(NVCC) -shared -cudart static $(CUDA_ARCH) -Xlinker --no-undefined $^ -o $@

$(BUILD)/obj/%_avx2.o: ISA := $(ISA_AVX2)
$(BUILD)/obj/%_avx512.o: ISA := $(ISA_AVX512)
$(BUILD)/obj/%_avx512vbmi.o: ISA := $(ISA_AVX512VBMI)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ISA) -MMD -MP -c $< -o $@

$(BUILD)/obj/src/serve/chat_page.o: src/serve/chat.html   # .incbin'd: the page's bytes
$(BUILD)/obj/src/cli/main.o: $(VERSION_STAMP)
$(BUILD)/obj/src/cli/main.o: CFLAGS += -DQW_VERSION='"$(VERSION)"' -DQW_GIT_REV='"$(GIT_REV)"'

$(BUILD)/libqwisp.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/qwisp: $(CLI_OBJ) $(BUILD)/libqwisp.a
	$(CC) $(LDFLAGS) $(CLI_OBJ) $(BUILD)/libqwisp.a $(CLI_LIBS) $(LDLIBS) -o $@

# Each tests/<dir>/test_x.c is one cmocka program.
$(BUILD)/tests/%: tests/%.c $(BUILD)/libqwisp.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP $< $(BUILD)/libqwisp.a $(LDFLAGS) $(LDLIBS) -lcmocka -o $@

tests-bin: $(BUILD)/qwisp $(TEST_BIN)

test: tests-bin
	$(MAKE) --no-print-directory BUILD=build-fuzz fuzz
	tests/run.sh $(BUILD)

asan:
	$(MAKE) --no-print-directory BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" tests-bin

# libFuzzer: the library is rebuilt with clang and coverage instrumentation.
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))
fuzz:
	$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang OPT=-O1 \
	    SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" build-fuzz/libqwisp.a
	@mkdir -p build-fuzz/bin
	@for f in $(FUZZ_SRC); do \
	    n=$$(basename $$f .c); \
	    clang $(OPT) -g -std=c11 -D_GNU_SOURCE -Iinclude -Isrc $(DEPCFLAGS) \
	        -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer $$f build-fuzz/libqwisp.a \
	        $(DEPLIBS) $(URING_LIBS) -lm -pthread -o build-fuzz/bin/$$n || exit 1; \
	done

bench: $(BUILD)/qwisp
	bench/vs_llamacpp.sh

# The kernel micro-benchmarks that link the library, rebuilt when it changes
# (bench/micro_isa.c and micro_mapread.c build alone: their headers say how).
$(BUILD)/micro_gemm $(BUILD)/micro_dot $(BUILD)/micro_rows: $(BUILD)/%: bench/%.c $(BUILD)/libqwisp.a
	$(CC) $(CFLAGS) $< $(BUILD)/libqwisp.a $(LDFLAGS) $(LDLIBS) -o $@

# models/default.gguf is the trained model, committed (models/README.md); this
# rule never rebuilds it, it only complains when the file is missing.
# The synthetic model that used to sit there: make models/synthetic.gguf
models/default.gguf:
	@echo "models/default.gguf is missing: it is committed in git (git checkout -- models/default.gguf)" >&2; exit 1

models/synthetic.gguf: $(BUILD)/qwisp
	$(BUILD)/qwisp gen-model --preset default --tokenizer qwen3 -o $@

# The installed binary finds the model at <bin>/../share/qwisp/default.gguf
# (cli_common.c), so `qwisp run -p ...` works from any directory.
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share/qwisp
install: $(BUILD)/qwisp models/default.gguf
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(DATADIR)
	install -m 755 $(BUILD)/qwisp $(DESTDIR)$(BINDIR)/qwisp
	if [ -f $(CUDA_LIB) ]; then install -d $(DESTDIR)$(PREFIX)/lib/qwisp && install -m 755 $(CUDA_LIB) $(DESTDIR)$(PREFIX)/lib/qwisp/; fi
	install -m 644 models/default.gguf LICENSE $(DESTDIR)$(DATADIR)/

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/qwisp $(DESTDIR)$(DATADIR)/default.gguf $(DESTDIR)$(DATADIR)/LICENSE
	rm -f $(DESTDIR)$(PREFIX)/lib/qwisp/libqwisp_cuda.so
	-rmdir $(DESTDIR)$(PREFIX)/lib/qwisp 2>/dev/null
	-rmdir $(DESTDIR)$(DATADIR) 2>/dev/null

clean:
	rm -rf build build-asan build-fuzz

# the test programs' header dependencies too (-MMD writes build/tests/X.d beside each), so
# a changed header rebuilds the tests that include it
-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_BIN:=.d)

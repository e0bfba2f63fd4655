# deltad — one plain Makefile, out-of-tree objects under build/<flavour>/.
#
#   make              build deltad, the tools and the tests (CPU)
#   make run          build, then run the default model
#   make test         dependency check (+ nginx, npm packages), build, run every CPU test
#   make bench        benchmark suite (never part of test)
#   make asan         tests under AddressSanitizer + UBSan (build/cpu-asan)
#   make CUDA=1       also compile kernels/cuda with nvcc (NCCL=1 adds NCCL)
#   make cuda-check   compile every .cu with nvcc -c, no GPU needed
#   make KCPU=1       CUDA-on-CPU emulation (build/kcpu): kernels/cuda compiled by g++ with
#                     tools/kcpu (fibers per CUDA thread, a fake runtime, cuBLAS and NCCL);
#                     with SANITIZE=address+undefined or thread: build/kcpu-address-undefined,
#                     build/kcpu-thread (tests/cuda/test_kcpu.sh runs both)
#   make fuzz         libFuzzer targets (clang, build/fuzz), each run FUZZ_TIME seconds (60)
#   make FAULT=1      fault-injection build (build/cpu-fault): DELTAD_FAIL_ALLOC / _FAIL_STEP
#   make fault        FAULT=1 + ASan/UBSan build, then the fault-injection test on it
#   make format       clang-format the sources in place (make format-check: CI's diff check)

CC       ?= cc
NVCC     ?= /usr/local/cuda/bin/nvcc
CUDA     ?= 0
NCCL     ?= 0
SANITIZE ?=
FAULT    ?= 0
FUZZ     ?= 0
KCPU     ?= 0
MPI      ?= auto
CXX      ?= g++

ifeq ($(NCCL),1)
ifneq ($(CUDA),1)
$(error NCCL=1 needs CUDA=1)
endif
endif
ifeq ($(KCPU),1)
ifeq ($(CUDA),1)
$(error KCPU=1 emulates CUDA on the CPU; it does not combine with CUDA=1)
endif
endif
ifneq ($(SANITIZE),)
ifeq ($(filter $(SANITIZE),address undefined thread address+undefined),)
$(error SANITIZE must be address, undefined, thread or address+undefined)
endif
endif

FLAVOUR := cpu
ifeq ($(CUDA),1)
FLAVOUR := cuda
ifeq ($(NCCL),1)
FLAVOUR := cuda-nccl
endif
endif
ifeq ($(KCPU),1)
FLAVOUR := kcpu
endif
ifeq ($(FAULT),1)
FLAVOUR := $(FLAVOUR)-fault
endif
ifneq ($(SANITIZE),)
FLAVOUR := $(FLAVOUR)-$(subst +,-,$(SANITIZE))
endif
ifeq ($(FUZZ),1)
FLAVOUR := fuzz
CC      := clang
endif
B := build/$(FLAVOUR)
comma := ,

PKGS     := libmicrohttpd libcjson hwloc
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -Wall -Wextra -Wshadow -Wno-unused-parameter -pthread -MMD -MP \
            -D_GNU_SOURCE -I. $(PKG_CFLAGS)
LDLIBS   += $(PKG_LIBS) -lm -pthread

ifeq ($(FAULT),1)
CFLAGS  += -DDELTAD_FAULT_INJECTION=1
endif
ifeq ($(FUZZ),1)
CFLAGS  := -std=c11 -g -O1 -D_GNU_SOURCE -I. $(PKG_CFLAGS) -pthread \
           -MMD -MP -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
           -fno-omit-frame-pointer
endif
ifneq ($(SANITIZE),)
CFLAGS  += -fsanitize=$(subst +,$(comma),$(SANITIZE)) -fno-sanitize-recover=all -fno-omit-frame-pointer
LDFLAGS += -fsanitize=$(subst +,$(comma),$(SANITIZE))
endif

AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVXVNNI_FLAGS := $(AVX2_FLAGS) -mavxvnni
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mfma -mf16c

LIB_SRC    := $(sort $(wildcard engine/*.c engine/*/*.c kernels/cpu/*.c))
ifeq ($(filter 1,$(NCCL) $(KCPU)),)
LIB_SRC    := $(filter-out engine/compute/comm_nccl.c,$(LIB_SRC))
endif
ifeq ($(filter 1,$(CUDA) $(KCPU)),)
LIB_SRC    := $(filter-out engine/compute/dev_cuda.c,$(LIB_SRC))
endif
# MPI (one model across hosts: engine/compute/dist_mpi.c, runs under mpirun): MPI=auto turns it
# on when pkg-config knows Open MPI (ompi-c, Debian's libopenmpi-dev); MPI=0 builds without it
# (objects in build/<flavour>-nompi); a deltad without MPI refuses to start under mpirun.
HAVE_MPI := $(shell pkg-config --exists ompi-c 2>/dev/null && echo 1)
ifeq ($(FUZZ),1)
MPI := 0
else ifeq ($(MPI),auto)
MPI := $(if $(HAVE_MPI),1,0)
else ifeq ($(MPI)$(HAVE_MPI),01)
B := $(B)-nompi
endif
ifneq ($(MPI)$(NCCL)$(CUDA),111)
LIB_SRC    := $(filter-out engine/compute/comm_nccl_dist.c,$(LIB_SRC))
else
CFLAGS     += -DDELTAD_NCCL_DIST=1
endif
ifeq ($(MPI),1)
ifneq ($(HAVE_MPI),1)
$(error MPI=1 needs Open MPI (pkg-config ompi-c): apt-get install libopenmpi-dev openmpi-bin)
endif
CFLAGS     += -DDELTAD_MPI=1 $(shell pkg-config --cflags ompi-c)
LDLIBS     += $(shell pkg-config --libs ompi-c)
else
LIB_SRC    := $(filter-out engine/compute/dist_mpi.c,$(LIB_SRC))
endif
JINJA_SRC  := $(sort $(wildcard server/jinja/*.c))
SERVER_SRC := $(filter-out server/cli/main.c,$(sort $(wildcard server/*/*.c)))
SERVER_SRC := $(filter-out $(JINJA_SRC),$(SERVER_SRC))
TOOL_SRC   := $(sort $(wildcard tools/*.c))
TEST_SRC   := $(sort $(wildcard tests/unit/test_*.c tests/golden/test_*.c))
# the tests' shared helpers: every tests/unit/*.c that is not a test_*.c program
HELP_SRC   := $(filter-out tests/unit/test_%.c,$(sort $(wildcard tests/unit/*.c)))
CU_SRC     := $(sort $(wildcard kernels/cuda/*.cu))

LIB_OBJ    := $(LIB_SRC:%.c=$(B)/obj/%.o)
SERVER_OBJ := $(SERVER_SRC:%.c=$(B)/obj/%.o)
JINJA_OBJ  := $(JINJA_SRC:%.c=$(B)/obj/%.o)
HELP_OBJ   := $(HELP_SRC:%.c=$(B)/obj/%.o)
CU_OBJ     :=
ifeq ($(CUDA),1)
CU_OBJ     := $(CU_SRC:%.cu=$(B)/obj/%.o)
CFLAGS     += -I/usr/local/cuda/include -DDELTAD_CUDA=1
LDLIBS     += -L/usr/local/cuda/lib64 -lcudart -lcublas -lstdc++
ifeq ($(NCCL),1)
CFLAGS     += -DDELTAD_NCCL=1
LDLIBS     += -lnccl
endif
endif
# kcpu: each .cu is rewritten (tools/kcpu/rewrite.py: launches -> kcpu::launch) into
# $(B)/gen/*.cpp and compiled by g++ with tools/kcpu/kcpu.h force-included; the headers of
# tools/kcpu/include stand in for the toolkit's (the C sources include them too), and the
# emulated runtime (tools/kcpu/*.cpp) goes into libdeltad.a in place of cudart/cuBLAS/NCCL.
KCPU_SRC   := $(sort $(wildcard tools/kcpu/*.cpp))
ifeq ($(KCPU),1)
CU_OBJ     := $(CU_SRC:%.cu=$(B)/obj/%.o) $(KCPU_SRC:%.cpp=$(B)/obj/%.o)
CFLAGS     += -Itools/kcpu/include -DDELTAD_CUDA=1 -DDELTAD_NCCL=1
LDLIBS     += -lstdc++
endif
KCPU_CXXFLAGS := -O2 -g -std=c++17 -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas \
                 -pthread -MMD -MP -I. -Itools/kcpu/include -Itools/kcpu
# kcpu under a sanitizer (make KCPU=1 SANITIZE=address+undefined -> build/kcpu-address-undefined,
# SANITIZE=thread -> build/kcpu-thread): the kernels and the emulated runtime are instrumented
# like the C code, except that under TSan the fiber scheduler (sched.cpp) is compiled without
# it (-DKCPU_TSAN=1 keeps its fiber and happens-before annotations): its bookkeeping is shared
# by the fibers of one OS thread by design, and only the kernels' accesses are to be judged.
KCPU_SCHED_CXXFLAGS := $(KCPU_CXXFLAGS)
ifneq ($(SANITIZE),)
KCPU_SANFLAGS := -fsanitize=$(subst +,$(comma),$(SANITIZE)) -fno-sanitize-recover=all \
                 -fno-omit-frame-pointer
KCPU_CXXFLAGS += $(KCPU_SANFLAGS)
KCPU_SCHED_CXXFLAGS += $(if $(filter thread,$(SANITIZE)),-DKCPU_TSAN=1,$(KCPU_SANFLAGS))
endif
NVCCFLAGS  ?= -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 \
              -I. -Xcompiler -Wall

LIB        := $(B)/libdeltad.a
JINJA_LIB  := $(B)/libdeltad_jinja.a
SERVER_LIB := $(B)/libdeltad_server.a
# what a program that uses the server modules links, in link order (server -> jinja -> engine)
ALL_LIBS   := $(SERVER_LIB) $(JINJA_LIB) $(LIB)
HELP_LIB   := $(B)/libdeltad_testhelp.a
DELTAD     := $(B)/deltad
# The test-hook binary (tests only, never installed): the files with DELTAD_TEST_HOOKS code
# compiled again with it into *.testhooks.o, linked in front of the libraries so they stand in
# for their production twins; every other object is shared with deltad.
HOOK_SRC   := server/api/api_chat.c server/http/job.c
HOOK_OBJ   := $(HOOK_SRC:%.c=$(B)/obj/%.testhooks.o)
DELTAD_HOOKS := $(B)/tests/deltad-testhooks
TOOLS      := $(TOOL_SRC:tools/%.c=$(B)/tools/%)
TESTS      := $(foreach t,$(TEST_SRC),$(B)/tests/$(basename $(notdir $(t))))
ifneq ($(filter 1,$(CUDA) $(KCPU)),)
TESTS      += $(patsubst tests/cuda/%.c,$(B)/tests/%,$(wildcard tests/cuda/test_*.c))
endif
ifeq ($(KCPU),1)
TOOLS      += $(B)/tools/kcpu_selftest
endif

.PHONY: all run test bench asan ubsan tsan check fault cuda-check fuzz deps deps-test clean format \
        format-check

all: $(DELTAD) $(DELTAD_HOOKS) $(TOOLS) $(TESTS)

deps:
	@tools/deps.sh

# deps plus what some e2e tests need (nginx-light, the openai npm package); see tools/deps.sh
deps-test:
	@tools/deps.sh test

$(B)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX2_FLAGS) -c $< -o $@

$(B)/obj/%_vnni.o: %_vnni.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVXVNNI_FLAGS) -c $< -o $@

$(B)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -c $< -o $@

$(B)/obj/%_avx512_k.o: %_avx512_k.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -c $< -o $@

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/obj/%.testhooks.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DDELTAD_TEST_HOOKS -c $< -o $@

ifeq ($(KCPU),1)
.PRECIOUS: $(B)/gen/%.cpp
$(B)/gen/%.cpp: %.cu tools/kcpu/rewrite.py
	@mkdir -p $(dir $@)
	python3 tools/kcpu/rewrite.py $< $@

# the .cuh headers too (their __shared__ declarations): a rewritten .cpp in $(B)/gen includes
# the rewritten header beside it before the -iquote original
CUH_GEN := $(patsubst %,$(B)/gen/%,$(wildcard kernels/cuda/*.cuh))
.PRECIOUS: $(B)/gen/%.cuh
$(B)/gen/%.cuh: %.cuh tools/kcpu/rewrite.py
	@mkdir -p $(dir $@)
	python3 tools/kcpu/rewrite.py $< $@

$(CU_SRC:%.cu=$(B)/obj/%.o): $(CUH_GEN)

$(B)/obj/%.o: $(B)/gen/%.cpp tools/kcpu/kcpu.h
	@mkdir -p $(dir $@)
	$(CXX) $(KCPU_CXXFLAGS) -iquote $(dir $*) -include tools/kcpu/kcpu.h -c $< -o $@

$(B)/obj/tools/kcpu/%.o: tools/kcpu/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(KCPU_CXXFLAGS) -c $< -o $@

$(B)/obj/tools/kcpu/sched.o: tools/kcpu/sched.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(KCPU_SCHED_CXXFLAGS) -c $< -o $@

# The kernels alone (kernels/cuda over the emulation, and their CPU reference kernels/cpu):
# what the selftest and test_cuda_kernels link, so that the sanitizer flavours, which
# tests/cuda/test_kcpu.sh builds for test_cuda_kernels only, compile no engine code.
KCPU_KLIB := $(B)/libdeltad_kernels.a
$(KCPU_KLIB): $(CU_OBJ) $(filter $(B)/obj/kernels/%,$(LIB_OBJ))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# Under a sanitizer the CPU reference kernels are compiled without it: they are the yardstick
# here, not under test (make asan and make tsan check them), and kq_avx2/kq_avx512 take minutes
# to compile instrumented.
ifneq ($(SANITIZE),)
$(filter $(B)/obj/kernels/cpu/%,$(LIB_OBJ)): CFLAGS := $(filter-out -fsanitize=%,$(CFLAGS))
endif

$(B)/tests/test_cuda_kernels: $(B)/obj/tests/cuda/test_cuda_kernels.o $(HELP_LIB) $(KCPU_KLIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $< $(HELP_LIB) $(KCPU_KLIB) $(LDLIBS) -o $@

# the emulator's own checks (tools/kcpu/selftest.cu, run by tests/cuda/test_kcpu.sh)
$(B)/tools/kcpu_selftest: $(B)/obj/tools/kcpu/selftest.o $(KCPU_KLIB)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $< $(KCPU_KLIB) $(LDLIBS) -o $@
else
$(B)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@
endif

# three libraries: libdeltad.a (engine + CPU kernels, + CUDA kernels with CUDA=1),
# libdeltad_jinja.a (the template interpreter, server/jinja) and libdeltad_server.a (the rest of
# server/ but main.c); the binary and the tests link the ones they need
$(LIB): $(LIB_OBJ) $(CU_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(JINJA_LIB): $(JINJA_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(SERVER_LIB): $(SERVER_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# the test programs' helpers (tests/unit/testutil.c, gguf_raw.c), linked before the libraries
# they use
$(HELP_LIB): $(HELP_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(DELTAD): $(B)/obj/server/cli/main.o $(ALL_LIBS)
	$(CC) $(LDFLAGS) $< $(ALL_LIBS) $(LDLIBS) -o $@

$(DELTAD_HOOKS): $(B)/obj/server/cli/main.o $(HOOK_OBJ) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $< $(HOOK_OBJ) $(ALL_LIBS) $(LDLIBS) -o $@

# test_chat checks the test hook's request field, so it links the hook's parser
$(B)/tests/test_chat: $(B)/obj/tests/unit/test_chat.o $(B)/obj/server/api/api_chat.testhooks.o \
                      $(HELP_LIB) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $< $(B)/obj/server/api/api_chat.testhooks.o $(HELP_LIB) $(ALL_LIBS) $(LDLIBS) \
	  -o $@

$(B)/tools/%: $(B)/obj/tools/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

$(B)/tests/%: $(B)/obj/tests/unit/%.o $(HELP_LIB) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $< $(HELP_LIB) $(ALL_LIBS) $(LDLIBS) -o $@

$(B)/tests/%: $(B)/obj/tests/golden/%.o $(HELP_LIB) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $< $(HELP_LIB) $(ALL_LIBS) $(LDLIBS) -o $@

$(B)/tests/%: $(B)/obj/tests/cuda/%.o $(HELP_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $< $(HELP_LIB) $(LIB) $(LDLIBS) -o $@

run: deps
	@$(MAKE) --no-print-directory all
	@tools/run-default.sh $(B)

test: deps-test
	@$(MAKE) --no-print-directory all
	@tests/run.sh $(B)

bench: deps
	@$(MAKE) --no-print-directory all
	@tools/bench.sh $(B)
	@tools/bench_busy.sh $(B)
	@tools/bench_spec.sh $(B)
	@tools/bench_memory.sh $(B)
	@tools/bench_gram.sh $(B)
	@tools/bench_mpi.sh $(B)

# Retrain models/demo.gguf and models/demo-q8_0.gguf from scratch (seeded, ~26 min on two
# cores, /usr/bin/python3 with torch + numpy), regenerate tests/fixtures/demo and print the
# quality figures. Never part of test.
.PHONY: demo-model
demo-model: deps
	@$(MAKE) --no-print-directory all
	@tools/train/make-demo-model.sh $(B)

asan:
	@$(MAKE) --no-print-directory SANITIZE=address+undefined all
	@tests/run.sh build/$(FLAVOUR)-address-undefined

ubsan:
	@$(MAKE) --no-print-directory SANITIZE=undefined all
	@tests/run.sh build/$(FLAVOUR)-undefined

tsan:
	@$(MAKE) --no-print-directory SANITIZE=thread all
	@tests/run.sh build/$(FLAVOUR)-thread

check: asan

fault:
	@$(MAKE) --no-print-directory FAULT=1 SANITIZE=address+undefined all
	@tests/e2e/test_fault_injection.sh build/$(FLAVOUR)-fault-address-undefined

cuda-check:
	@if [ -x $(NVCC) ]; then echo "✓ nvcc $(NVCC)"; else echo "✗ nvcc not found at $(NVCC)"; exit 1; fi
	@if [ -f /usr/local/cuda/include/nccl.h ]; then echo "✓ NCCL"; \
	  $(MAKE) --no-print-directory CUDA=1 NCCL=1 all; \
	else echo "✗ NCCL (nccl.h not found): CUDA only"; $(MAKE) --no-print-directory CUDA=1 all; fi
	@tools/ptxas_check.sh $(NVCC)

# ---- fuzzing (FUZZ=1 is the flavour: clang, coverage + ASan + UBSan, objects in build/fuzz) -----
# Each tests/fuzz/fuzz_NAME.c links the objects of FUZZ_DEPS_NAME (default: engine/util.c).
# `make fuzz` builds every target and runs each for FUZZ_TIME seconds on its committed corpus
# (tests/fuzz/run.sh); `make fuzz-build` only builds. tests/fuzz/smoke.sh is the short form that make test runs.
FUZZ_SRC   := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_NAMES := $(basename $(notdir $(FUZZ_SRC)))
FUZZ_TIME  ?= 60
FUZZ_TOK   := engine/util.c engine/model/gguf.c engine/model/tok.c engine/model/pretok.c engine/model/uni.c \
              tests/fuzz/fz_model.c
FUZZ_DEPS_fuzz_gguf := engine/util.c engine/model/gguf.c
FUZZ_DEPS_fuzz_tok  := $(FUZZ_TOK)
FUZZ_GRAM  := engine/sched/gram.c engine/sched/gram_match.c server/api/schema.c server/api/schema_re.c \
              server/api/json.c
FUZZ_DEPS_fuzz_api  := $(FUZZ_TOK) engine/model/tok_cache.c server/api/api.c server/api/api_chat.c \
                       server/api/chat.c \
                       server/api/chat_tmpl.c server/api/resp.c server/api/api_responses.c \
                       server/api/api_messages.c server/api/resp_responses.c \
                       server/api/resp_messages.c server/api/store.c server/api/api_format.c \
                       engine/sched/spec.c \
                       $(FUZZ_GRAM) $(JINJA_SRC)
FUZZ_DEPS_fuzz_gram := $(FUZZ_TOK) $(FUZZ_GRAM)
FUZZ_DEPS_fuzz_cfg  := engine/util.c engine/compute/dev_spec.c server/config/cfg.c server/config/cfg_check.c
FUZZ_DEPS_fuzz_jinja := engine/util.c $(JINJA_SRC)

.PHONY: fuzz-build
ifeq ($(FUZZ),1)
define FUZZ_RULE
$(B)/$(1): $(B)/obj/tests/fuzz/$(1).o $(patsubst %.c,$(B)/obj/%.o,$(or $(FUZZ_DEPS_$(1)),engine/util.c))
	$$(CC) -fsanitize=fuzzer,address,undefined $$^ $$(PKG_LIBS) -lm -pthread -o $$@
endef
$(foreach t,$(FUZZ_NAMES),$(eval $(call FUZZ_RULE,$(t))))
fuzz-build: $(FUZZ_NAMES:%=$(B)/%) $(B)/gguf_seeds
$(B)/gguf_seeds: tests/fuzz/gguf_seeds.c tests/unit/gguf_raw.c engine/model/gguf_writer.c \
                 engine/model/gguf.c engine/util.c
	clang -std=c11 -O1 -g -D_GNU_SOURCE -I. $^ -lm -pthread -o $@
else
fuzz-build:
	@$(MAKE) --no-print-directory FUZZ=1 fuzz-build
endif

fuzz: fuzz-build
	@FUZZ_TIME=$(FUZZ_TIME) tests/fuzz/run.sh build/cpu

# Formatting (STYLE.md rule 38, the root .clang-format). The SIMD kernel files are left out:
# their loops carry a pragma macro in front (`UNROLL for (...)`), and clang-format 14 (Debian 12)
# can only treat such a macro as an identifier or a statement, which mangles nested loops; the
# `Macros:` option that fixes this needs clang-format 17.
FORMAT_SKIP := $(wildcard kernels/cpu/*_avx2.c kernels/cpu/*_avx512.c kernels/cpu/*_avx512_k.c \
                 kernels/cpu/simd*.h)
FORMAT_SRC  := $(filter-out $(FORMAT_SKIP),$(sort $(wildcard engine/*.[ch] engine/*/*.[ch] \
               kernels/*.h kernels/cpu/*.[ch] kernels/cuda/*.cu kernels/cuda/*.h kernels/cuda/*.cuh \
               server/*/*.[ch] tools/*.c tests/unit/*.[ch] tests/fuzz/*.c \
               tools/kcpu/*.cpp tools/kcpu/*.h tools/kcpu/*.cu tools/kcpu/include/*.h)))

format:
	clang-format -i $(FORMAT_SRC)

format-check:
	clang-format --dry-run --Werror $(FORMAT_SRC)

# ---- install (deltad serve under systemd) ---------------------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=...]: the binary, the systemd units (paths rewritten
# to PREFIX), the example config and env file under PREFIX/share/deltad, the demo model when it
# exists, and /etc/deltad/deltad.conf from the example unless that file is already there.
PREFIX   ?= /usr/local
UNITDIR  ?= $(PREFIX)/lib/systemd/system
SHAREDIR := $(PREFIX)/share/deltad

.PHONY: install uninstall
install: $(DELTAD)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SHAREDIR)/models \
	  $(DESTDIR)/etc/deltad
	install -m 755 $(DELTAD) $(DESTDIR)$(PREFIX)/bin/deltad
	for u in deltad.service deltad@.service; do \
	  sed 's|/usr/local|$(PREFIX)|g' systemd/$$u >$(DESTDIR)$(UNITDIR)/$$u && \
	  chmod 644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; done
	install -m 644 config/deltad.conf.example config/nginx-deltad.conf systemd/deltad.env.example \
	  $(DESTDIR)$(SHAREDIR)/
	if [ -f models/demo.gguf ]; then install -m 644 models/demo.gguf $(DESTDIR)$(SHAREDIR)/models/; fi
	if [ -e $(DESTDIR)/etc/deltad/deltad.conf ]; then \
	  echo "kept existing $(DESTDIR)/etc/deltad/deltad.conf"; \
	else install -m 644 config/deltad.conf.example $(DESTDIR)/etc/deltad/deltad.conf; fi

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/deltad $(DESTDIR)$(UNITDIR)/deltad.service \
	  $(DESTDIR)$(UNITDIR)/deltad@.service
	rm -rf $(DESTDIR)$(SHAREDIR)
	@echo "kept /etc/deltad (your configuration)"

clean:
	rm -rf build

# the header dependencies of every build under build/, and of $(B) where it lies elsewhere
-include $(shell find $(sort build $(B)) -name '*.d' 2>/dev/null)

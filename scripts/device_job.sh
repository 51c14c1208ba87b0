#!/bin/bash
# Developer script: the job a lent GPU machine runs (docs/cuda.md, "Building
# and testing on a GPU").  Prepare here, then run it there from the
# repository root with the device tool's carry [".devjob"]:
#   scripts/device_kit.sh                  # the libraries, tokenizer data, llama.cpp source
#   scripts/device_kit.sh base REV...      # src/cuda of earlier revisions, to time against
#   scripts/device_kit.sh slim             # (put back with `unslim` before any commit)
#   LIMIT=<seconds> [GPU=0] [STEPS="..."] [ALT="..."] bash scripts/device_job.sh   # on the device
# GPU=0: the CPU steps only.  STEPS: the steps to run, by name (default all):
#   amxtests suite step0 gputime ncu ncudec nsysdec nsyslanes lanes llamalanes llamacuda layout hostexp amx amxq8 smt profile olds vsllama spread bigvsllama big16
# PROFFILES: the profile step's files (default "a3b-q8_0 a3b-q4_K a3b-q4_0").
# olds: this tree's CPU kernels against earlier revisions' (scripts/device_kit.sh old REV...,
#   .devjob/old-REV.tar, each built in /tmp/old-REV): micro_gemm's matmul per MICROS entry
#   (TYPE:K, default "q8_0:768 q8_0:2048 q4_0:768 q4_K:768") on one core, then QWISP_PROFILE=1
#   pp512 / tg32 of each OLDFILES file (default the three A3B-width ones), the trees alternated,
#   two rounds.  The profile's shares steady where a loaded host makes tok/s swing (session 30).
# ALT: space-separated settings (e.g. "QWISP_DEVICE_PDL=0 QWISP_DEVICE_PDL=1"; commas join
#   several into one, e.g. "QWISP_DEVICE_VRAM=8,QWISP_DEVICE_HOST_EXPERTS=2"), each timed by
#   gputime and lanes with this tree's object, alternated with the bases (and by llamalanes).
# GPUFILES: the files gputime times (default big: the full-size qwen36-a3b Q4_K; bigq: the
#   same with the Qwen3 tokenizer), ROUNDS of them (default 3).
# LLAMA8: with llamacuda, settings timed under QWISP_DEVICE_VRAM=8 against llama.cpp's
#   --n-cpu-moe 26: a number is a QWISP_DEVICE_HOST_EXPERTS value, else NAME=VALUE[,NAME=VALUE]
#   (e.g. "0 4 QWISP_DEVICE_MISSES=host"; unset = not timed).
# LANESFILES: the lanes and llamalanes steps' files (default "bigq a3b-q8_0"); VSFILES: vsllama's (default
#   "bench-q4_K a3b-q4_K bench-q8_0"; also bench-q4_0, a3b-q4_0, a3b-q6_K, a3b-q8_0).
# AMXQ8FILES: the amxq8 step's files (default "a3b-q4_0 a3b-q8_0").
# NCUFILE: the files ncudec profiles (default l4: the qwen36-a3b Q4_K at 4 layers; e.g. "l4 a3b-q8_0").
# NVVAR: space-separated build-time defines (e.g. "QW_MV_KQ_LANES=16"), each
#   built into its own object from this tree (make NVDEFS=-D...) and timed too.
# In order, each step skipped when the time left (LIMIT) is short: build; the
# Xeon host's AMX kernel tests; generated models in /dev/shm; the GPU suite;
# pp512/tg128 of the full-size qwen36-a3b Q4_K with this tree's CUDA object
# and each base revision's, alternated; ncu per-kernel times of a 4-layer
# prefill; lanes with QWISP_DEVICE_BATCH 1/0/1; then on the host CPU AMX vs
# AVX-512 prefill and decode (QWISP_AMX_KQUANT 0 and 1) and the tiles' and row
# loops' speed (micro_gemm), and bench/speed_vs_llamabench.sh.  Output also in $OUT/log.txt.
# (Background steps are waited for by pid: a bare `wait` would also wait for
# the log's `tee`, which never ends — a job of 2026-12-05 hung on it.)
set -u
. .devjob/env.sh
LIMIT=${LIMIT:-570}
GPU=${GPU:-1}    # GPU=0: the CPU measurements only (no GPU suite, timings, ncu or lanes)
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
need() { [ "$(left)" -ge "$1" ] || { ts "SKIP (needs $1 s, $(left) left): $2"; return 1; }; }
gpu_need() { [ "$GPU" = 1 ] || { ts "SKIP (GPU=0): $2"; return 1; }; need "$@"; }
STEPS=${STEPS:-amxtests suite step0 gputime ncu ncudec nsysdec nsyslanes lanes llamalanes llamacuda layout hostexp amx amxq8 smt profile olds vsllama spread bigvsllama big16}
ALT=${ALT:-}
LANESFILES=${LANESFILES:-bigq a3b-q8_0}
NCUFILE=${NCUFILE:-l4}    # ncudec's files (/dev/shm, from the gen step)
GPUFILES=${GPUFILES:-big}  # gputime's files (in /dev/shm, from the gen step: big a3b-q8_0 a3b-q4_K bench-q8_0 ...)
step() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
ts "host: $(grep -m1 'model name' /proc/cpuinfo) $(nproc) cores; $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)"
grep -o 'amx[a-z0-9_]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
# the code that runs: the copy's .git may be older than its files, so a digest of the sources too
git log --oneline -1 2>/dev/null || true
echo "sources: $(find src include Makefile -type f | sort | xargs cat | sha1sum | cut -c1-12)"
# llama-bench (CPU) built in the background, niced, on 8 cores (kept in /tmp/qc while the machine stays warm)
# (only for the steps that run it)
LLB=0
if step amx || step vsllama || step bigvsllama || step spread; then
    mkdir -p /tmp/llsrc && tar xJf .devjob/llama-src.tar.xz -C /tmp/llsrc
    ( JOBS=8 LLAMA_SRC=/tmp/llsrc QWISP_CACHE=/tmp/qc bench/llama_bench_build.sh > /tmp/llb.log 2>&1; echo "llb rc=$?" >> /tmp/llb.log ) &
    LLB=$!
fi
# waits for the background steps other than the llama-bench build; with none left it
# returns at once (a bare `wait` would wait for the log's tee too, which never ends:
# a job of 2026-12-06 hung there for its whole limit)
wait_bg() { local p; p=$(jobs -p | grep -v "^$LLB$"); [ -z "$p" ] || wait $p 2>/dev/null; }
# one `qwisp bench` of pp512 / tg128 on /dev/shm's file $1, reps $2, its two result lines
# on one (the environment picks the object and settings)
qbench() { $Q bench -m $S/$1.gguf -p 512 -n 128 -r $2 --bw-mb 0 2>&1 | grep -E '^(pp|tg)' | tr '\n' ' '; }
# one `qwisp bench --lanes 1,2,4,8` of /dev/shm's file $1, $2 tokens a sequence: each B's aggregate tok/s on one line
qlanes() { $Q bench -m $S/$1.gguf -p 0 -n $2 -r 2 --lanes 1,2,4,8 --bw-mb 0 2>&1 | awk '/^tg/ { printf "%s %s  ", $1, $3 }'; }
# the CUDA object of `this`, a base (base-REV) or an NVVAR build (nv-DEFINE)
lib_of() { case $1 in base-*) echo /tmp/$1/build/libqwisp_cuda.so ;; nv-*) echo /tmp/$1/libqwisp_cuda.so ;; *) echo build/libqwisp_cuda.so ;; esac; }
# the settings that run variant $1 (this, base-REV, nv-DEFINE or an ALT setting): its object, and an ALT's knobs
set_of() { local set=QWISP_CUDA_LIB=$(lib_of $1); case $1 in nv-*) ;; *=*) set="$set ${1//,/ }" ;; esac; echo "$set"; }
ts "build"
make -s -j12 all tests-bin > /tmp/make.log 2>&1 || { tail -30 /tmp/make.log; exit 1; }
ts "built"; ls -la build/libqwisp_cuda.so
Q=build/qwisp
# the base revisions' CUDA objects (scripts/device_kit.sh base), built aside in the background
BASES=$(cd .devjob 2>/dev/null && ls -d base-* 2>/dev/null); [ "$GPU" = 1 ] || BASES=
for v in $BASES; do
  ( mkdir -p /tmp/$v && cp -r src include Makefile /tmp/$v/ && rm -rf /tmp/$v/src/cuda && cp -r .devjob/$v/src/cuda /tmp/$v/src/ &&
    make -s -C /tmp/$v -j4 build/libqwisp_cuda.so > /tmp/$v.log 2>&1; echo "$v object rc=$?" >> /tmp/$v.log ) &
done
# the earlier revisions' CPU trees (scripts/device_kit.sh old), built aside in the background
OLDS=$(cd .devjob 2>/dev/null && ls old-*.tar 2>/dev/null | sed 's/^old-//; s/[.]tar$//'); step olds || OLDS=
for v in $OLDS; do
  ( mkdir -p /tmp/old-$v && tar xf .devjob/old-$v.tar -C /tmp/old-$v &&
    make -s -C /tmp/old-$v -j4 build/qwisp build/micro_gemm > /tmp/old-$v.log 2>&1; echo "old-$v rc=$?" >> /tmp/old-$v.log ) &
done
NVVAR=${NVVAR:-}; [ "$GPU" = 1 ] || NVVAR=
for v in $NVVAR; do
  ( make -s BUILD=/tmp/nv-$v NVDEFS=-D$v -j4 /tmp/nv-$v/libqwisp_cuda.so > /tmp/nv-$v.log 2>&1; echo "nv-$v object rc=$?" >> /tmp/nv-$v.log ) &
done
build/qwisp config 2>&1 | grep -i -E 'kernels|simd|amx' | head -5
step amxtests && ts "AMX tests on the Xeon"
step amxtests && for t in test_amx test_kquant test_gemm; do
    timeout 120 build/tests/kernels/$t > /tmp/$t.log 2>&1; echo "$t rc=$?"; grep -E 'PASSED|FAILED|SKIP|INFO|ERROR|error' /tmp/$t.log | head -20
done
ts "gen models"
S=/dev/shm
A3B="--n-embd 2048 --n-layer 4 --n-head 32 --n-head-kv 4 --head-dim 128 --n-expert 128 --n-expert-used 8 --n-ff-exp 768"
# gen NAME ARGS...: /dev/shm/NAME.gguf in the background, kept when a warm machine already has it
# (written under another name first, so a job cut mid-write leaves no partial file to keep)
# (GEN: the names to make, default all of them; e.g. GEN="a3b-q8_0" for a short job)
gen() { local n=$1; shift; case " ${GEN:-$n} " in *" $n "*) ;; *) return 0 ;; esac; [ -s $S/$n.gguf ] || { $Q gen-model "$@" --fast-weights --progress 0 -o $S/$n.part.gguf > /dev/null &&
    mv $S/$n.part.gguf $S/$n.gguf; } & }
gen a3b-q4_K --preset bench --type q4_K --embd-type q8_0 $A3B
gen a3b-q6_K --preset bench --type q6_K --embd-type q8_0 $A3B
gen a3b-q8_0 --preset bench --type q8_0 --embd-type q8_0 $A3B
gen bench-q4_K --preset bench --type q4_K --embd-type q8_0
gen bench-q8_0 --preset bench --type q8_0 --embd-type q8_0
gen bench-q4_0 --preset bench --type q4_0 --embd-type q8_0
gen a3b-q4_0 --preset bench --type q4_0 --embd-type q8_0 $A3B
gen big --preset qwen36-a3b --type q4_K --tokenizer bytes
gen l4 --preset qwen36-a3b --type q4_K --tokenizer bytes --n-layer 4
# the full-size file with the Qwen3 tokenizer (llama.cpp cannot read the bytes one), where wanted
case " $GPUFILES $LANESFILES $STEPS " in *" bigq "*|*" llamacuda "*|*" llamalanes "*) gen bigq --preset qwen36-a3b --type q4_K ;; esac
wait_bg
ls -la $S/*.gguf; ts "models ready"
# ---- GPU (the CPU build of llama-bench may still run, niced) ----
export QWISP_BACKEND=cuda
if step suite && gpu_need 100 "GPU suite"; then
    ts "GPU suite"; timeout 260 env -u QWISP_BACKEND tests/gpu/run.sh build 2>&1 | tee $O/gpu_suite.txt | grep -E 'FAIL|passed' | tail -15
fi
if step step0 && gpu_need 300 "Step 0 on the VRAM tier"; then
    # the seed's experiment on the GPU's streaming tier, classes, six footprint rounds four at a
    # time (bench/step0/README.md); reports in $O/step0/vram-classes/.  A file in /dev/shm counts
    # in every footprint (docs/memory.md): STEP0_MODEL=<a file on disk> for the host side alone
    ts "Step 0, VRAM tier, classes"
    BACKEND=cuda MODEL=${STEP0_MODEL:-$S/big.gguf} N_PROMPT=${STEP0_PROMPT:-16384} N_GEN=257 FITS=classes TIERS=vram FP_REPS=6 FP_JOBS=4 \
        OUT=$O/step0 timeout $(( $(left) - 30 )) bench/step0/run.sh build 2>&1 | tail -25
    tail -n 5 $O/step0/vram-classes/trials/speed-worker.stderr 2>/dev/null
    # the report on top, the rest as one archive: the device tool brings back a limited count of
    # files, and a job of 2026-12-06 lost its report.md behind two dozen trial logs
    cp $O/step0/vram-classes/report.md $O/step0-report.md 2>/dev/null
    cp $O/step0/vram-classes/report.json $O/step0-report.json 2>/dev/null
    tar czf $O/step0.tgz -C $O step0 && rm -rf $O/step0
fi
if step gputime && gpu_need 100 "GPU pp512/tg128, this tree against the bases and the ALT settings"; then
    wait_bg
    for v in $BASES; do ts "$(tail -1 /tmp/$v.log)"; done
    for v in $NVVAR; do ts "$(tail -1 /tmp/nv-$v.log)"; done
    # each object's greedy stream on the shipped Q8_0 model, as a digest: a variant whose
    # digest differs from the CPU's changed the tokens, and its timing does not count
    for v in cpu $BASES this $ALT $(for n in $NVVAR; do echo nv-$n; done); do
        case $v in cpu) set=QWISP_BACKEND=cpu ;; *) set=$(set_of $v) ;; esac
        ts "greedy digest $v: $(export $set; $Q run -m models/default.gguf -p 'The quick brown fox' -n 48 --ignore-eos 2>/dev/null | md5sum | cut -c1-12)"
    done
    for round in $(seq ${ROUNDS:-3}); do
        for v in $BASES this $ALT $(for n in $NVVAR; do echo nv-$n; done); do
            set=$(set_of $v)
            for f in $GPUFILES; do
                ts "GPU $f $v: $(export $set; qbench $f 3)"
            done
        done
    done
fi
if step ncu && gpu_need 90 "ncu prefill" && command -v ncu > /dev/null; then
    ts "ncu prefill (4 layers, pp512, one rep)"
    timeout 150 ncu --metrics gpu__time_duration.sum --csv --target-processes all \
        $Q bench -m $S/l4.gguf -p 512 -n 0 -r 1 --bw-mb 0 > /tmp/ncu.csv 2> /tmp/ncu.err
    echo "ncu rc=$?"; cp /tmp/ncu.csv "$O/ncu_prefill.csv" 2>/dev/null
    python3 scripts/decode_kernels.py /tmp/ncu.csv | head -30
fi
if step ncudec && gpu_need 90 "ncu decode" && command -v ncu > /dev/null; then
    # the decode graph's kernels one by one (ncu profiles graph nodes alone):
    # their summed time against the token's wall time says what the gaps cost
    ts "ncu decode (4 layers, 8-token prompt, 8 decode tokens, one rep)"
    # caches kept and clocks free (ncu's defaults flush the caches and pin base clocks, which
    # inflates a short kernel several times over), so the sums compare with the wall time
    # this tree's object, then each base's
    for f in $NCUFILE; do
        for v in this $BASES; do
            ts "ncu decode: $f $v"
            QWISP_CUDA_LIB=$(lib_of $v) timeout 150 ncu --metrics gpu__time_duration.sum --csv --target-processes all \
                --cache-control none --clock-control none $Q bench -m $S/$f.gguf -p 8 -n 8 -r 1 --bw-mb 0 > /tmp/ncud.csv 2> /tmp/ncud.err
            echo "ncu rc=$?"; cp /tmp/ncud.csv "$O/ncu_decode_${f}_$v.csv" 2>/dev/null
            python3 scripts/decode_kernels.py /tmp/ncud.csv
        done
    done
    for v in "QWISP_DEVICE_PDL=0" "QWISP_DEVICE_PDL=1"; do
        ts "${NCUFILE%% *} decode $v: $(env $v $Q bench -m $S/${NCUFILE%% *}.gguf -p 8 -n 128 -r 3 --bw-mb 0 2>&1 | grep -E '^tg' | tr '\n' ' ')"
    done
fi
if step nsysdec && gpu_need 60 "nsys decode timeline"; then
    # the decode graph's kernels on a real timeline (graph nodes traced): each
    # kernel's duration and the gap before it, averaged over the last tokens
    NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
    if [ -n "$NSYS" ]; then
        ts "nsys decode (4 layers, 8-token prompt, 64 decode tokens)"
        timeout 120 $NSYS profile -t cuda --cuda-graph-trace=node -o /tmp/nsd -f true \
            $Q bench -m $S/l4.gguf -p 8 -n 64 -r 1 --bw-mb 0 > /tmp/nsd.log 2>&1; echo "nsys rc=$?"
        timeout 60 $NSYS stats -r cuda_gpu_trace -f csv -o /tmp/nsd /tmp/nsd.nsys-rep > /dev/null 2>&1
        cp /tmp/nsd_cuda_gpu_trace.csv "$O/nsys_decode.csv" 2>/dev/null
        python3 scripts/decode_kernels.py /tmp/nsd_cuda_gpu_trace.csv 2>&1 | head -60
    else
        ts "no nsys on this machine"
    fi
fi
if step nsyslanes && gpu_need 60 "nsys lanes timeline"; then
    # where a lanes step's wall time goes beyond its kernels: the CUDA API calls (the
    # host's side: copies, syncs, graph launches) and the device's copies, summed over a
    # B = 8 run of the first LANESFILES file, beside its kernels
    NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
    f=${LANESFILES%% *}
    if [ -n "$NSYS" ]; then
        ts "nsys lanes ($f, B = 8, 64 tokens a sequence)"
        timeout 150 $NSYS profile -t cuda,osrt --cuda-graph-trace=node -o /tmp/nsl -f true \
            $Q bench -m $S/$f.gguf -p 0 -n 64 -r 1 --lanes 8 --bw-mb 0 > /tmp/nsl.log 2>&1; echo "nsys rc=$?"
        grep -E '^tg' /tmp/nsl.log
        for r in cuda_api_sum cuda_gpu_mem_time_sum cuda_gpu_kern_sum; do
            timeout 60 $NSYS stats -r $r -f csv -o /tmp/nsl /tmp/nsl.nsys-rep > /dev/null 2>&1
            ts "nsys $r (top 14)"; head -15 /tmp/nsl_$r.csv | cut -c1-220
        done
    else
        ts "no nsys on this machine"
    fi
fi
if step lanes && gpu_need 120 "GPU lanes"; then
    # aggregate decode of B sequences: this tree's object against each base's, ALT setting's and variant's, alternated
    wait_bg
    for f in $LANESFILES; do
        for round in 1 2; do
            for v in $BASES this $ALT $(for n in $NVVAR; do echo nv-$n; done); do
                ts "lanes $f $v: $(export $(set_of $v); qlanes $f 64)"
            done
        done
    done
fi
# llama.cpp's CUDA builds link the libcublas / libnccl of the machine's pip packages
NVLIBS=$(python3 -c 'import glob, site; print(":".join(d for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")))' 2>/dev/null)
nvrun() { LD_LIBRARY_PATH=$NVLIBS:${LD_LIBRARY_PATH:-} "$@"; }
# llama-batched-bench (CUDA) on /dev/shm's file $1, more flags after it
llama_batched() { local f=$1; shift; nvrun /tmp/llama-batched-bench-cuda -m $S/$f.gguf -ngl 99 -fa on -c 2048 "$@" 2>&1; }
if step llamalanes && gpu_need 120 "lanes against llama-batched-bench" && [ -s .devjob/llama-batched-bench-cuda.xz ]; then
    # aggregate decode of B sequences at once: llama.cpp's llama-batched-bench (CUDA build, carried
    # as .devjob/llama-batched-bench-cuda.xz; a one-token prompt per sequence, then 128 tokens each,
    # S_TG = B x 128 / time) against `qwisp bench --lanes` (each sequence from an empty context)
    xz -dc .devjob/llama-batched-bench-cuda.xz > /tmp/llama-batched-bench-cuda && chmod +x /tmp/llama-batched-bench-cuda
    for f in $LANESFILES; do
        for round in 1 2; do
            ts "llama-batched-bench CUDA $f S_TG: $(llama_batched $f -npp 1 -ntg 128 -npl 1,2,4,8 |
                awk -F'|' '$4 + 0 > 0 { printf "B=%d %s  ", $4, $9 }' | tr -s ' ')"
            for v in this $ALT; do ts "qwisp CUDA $f lanes $v: $(export $(set_of $v); qlanes $f 128)"; done
            # and one sequence's 512-token prompt (S_PP), beside qwisp's pp512
            ts "llama-batched-bench CUDA $f pp512 S_PP: $(llama_batched $f -npp 512 -ntg 1 -npl 1 | awk -F'|' '$4 + 0 > 0 { print $7 }' | tr -s ' ')"
            ts "qwisp CUDA $f: $(qbench $f 2)"
        done
    done
fi
if step llamacuda && gpu_need 150 "against llama.cpp CUDA" && [ -s .devjob/llama-bench-cuda.xz ]; then
    # llama.cpp's llama-bench, CUDA build (docs/cuda.md says how it is built), carried as
    # .devjob/llama-bench-cuda.xz; its libcublas / libnccl from the machine's pip packages.
    # The full-size file with the Qwen3 tokenizer (bigq, from the gen step), each engine
    # twice, alternated.
    wait_bg # the bases' objects
    xz -dc .devjob/llama-bench-cuda.xz > /tmp/llama-bench-cuda && chmod +x /tmp/llama-bench-cuda
    # llama-bench of pp512 / tg128 on /dev/shm's file $1 with extra flags, its two results on one line
    llama_cuda() {
        local f=$1; shift
        nvrun /tmp/llama-bench-cuda -m $S/$f.gguf -ngl 99 -fa 1 -p 512 -n 128 -r 2 "$@" 2>&1 |
            grep -E 'pp512|tg128' | awk -F'|' '{ print $(NF-2), $(NF-1) }' | tr -s ' ' | tr '\n' ' '
    }
    for f in ${LLAMAFILES:-bigq a3b-q8_0}; do
        for round in 1 2; do
            ts "llama.cpp CUDA $f: $(llama_cuda $f)"
            for v in $BASES this; do
                ts "qwisp CUDA $f $v: $(QWISP_CUDA_LIB=$(lib_of $v) qbench $f 2)"
            done
        done
    done
    # under 8 GB (LLAMA8, e.g. "0 2 4": QWISP_DEVICE_HOST_EXPERTS values): llama.cpp with
    # 26 of 40 layers' experts on the CPU (what fits 8 GB), qwisp's streaming tier with each value
    for round in 1 2; do
        [ -n "${LLAMA8:-}" ] || break
        ts "llama.cpp CUDA bigq --n-cpu-moe 26: $(llama_cuda bigq --n-cpu-moe 26 -t 16)"
        for h in $LLAMA8; do # a number: QWISP_DEVICE_HOST_EXPERTS; else settings, commas joining several
            case $h in *=*) set=${h//,/ } ;; *) set=QWISP_DEVICE_HOST_EXPERTS=$h ;; esac
            ts "qwisp CUDA bigq VRAM=8 $set: $(export QWISP_DEVICE_VRAM=8 $set; qbench bigq 2)"
        done
    done
fi
if step layout && gpu_need 40 "Q8_0 GEMV, file layout against repacked"; then
    # decode's GEMV on the file's Q8_0 layout against one repacked once (bench/cuda_layout.cu): an
    # LM head's shape, and down-projection rows of k = 768 (64 experts' worth)
    nvcc -O3 -std=c++17 -arch=sm_90 -Isrc/cuda -Iinclude bench/cuda_layout.cu -o build/cuda_layout &&
        build/cuda_layout 151936 2048 5 && build/cuda_layout 131072 768 5
fi
unset QWISP_BACKEND
if step hostexp && [ -f bench/host_experts_speed.c ] && need 60 "host experts' speed"; then
    # the host side of QWISP_DEVICE_HOST_EXPERTS alone on this host: N experts a layer, one token
    gcc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/host_experts_speed.c build/libqwisp.a \
        $(pkg-config --libs libpcre2-8 libcjson libmicrohttpd liburing) -lm -pthread -o build/host_experts_speed &&
    for t in 16 8; do for n in 2 4 8; do
        ts "host experts big N=$n threads=$t: $(QWISP_BACKEND=cpu build/host_experts_speed $S/big.gguf $n $t 20 2>&1 | tail -1)"
    done; done
fi
# ---- CPU: AMX vs AVX-512, and llama-bench ----
if [ "$LLB" != 0 ]; then ts "waiting for llama-bench build"; wait $LLB; tail -2 /tmp/llb.log; fi
LB=/tmp/qc/llama-bench/build/bin/llama-bench
# AMX against AVX-512 on the host CPU: two rounds of the levels alternated (avx512,
# avx512-amx with the knob $1 at 0, then at 1), pp512 on $2 threads (pinned to cores 2-3 when
# 2) and tg64 on 2 threads (cores 2-3) of each file of $3; then micro_gemm of the types $4 at
# the k's $5, avx512 against avx512-amx with the knob at 1.
amx_vs_avx512() {
    local knob=$1 ppthreads=$2 files=$3 types=$4 ks=$5 pin= round cfg f t k pp tg
    [ "$ppthreads" = 2 ] && pin="taskset -c 2,3"
    for round in 1 2; do
        for cfg in "avx512 0" "avx512-amx 0" "avx512-amx 1"; do
            set -- $cfg
            for f in $files; do
                pp=$(env QWISP_BACKEND=cpu QWISP_TUNE=off QWISP_SIMD=$1 $knob=$2 $pin $Q bench -m $S/$f.gguf -p 512 -n 0 -r 2 --threads $ppthreads --bw-mb 0 | grep pp512)
                tg=$(env QWISP_BACKEND=cpu QWISP_TUNE=off QWISP_SIMD=$1 $knob=$2 taskset -c 2,3 $Q bench -m $S/$f.gguf -p 0 -n 64 -r 2 --threads 2 --bw-mb 0 | grep tg64)
                ts "$f $1 $knob=$2 | $pp | $tg"
            done
        done
    done
    make -s build/micro_gemm &&
    for t in $types; do for k in $ks; do for cfg in "avx512 0" "avx512-amx 1"; do
        set -- $cfg; env QWISP_SIMD=$1 $knob=$2 QWISP_TUNE=off taskset -c 3 build/micro_gemm $t $k
    done; done; done
}
# the K-quants' AMX tiles and reference-order row loops (QWISP_AMX_KQUANT), prefill on 16 threads
step amx && need 180 "AMX vs avx512 pp512 / tg64" &&
    amx_vs_avx512 QWISP_AMX_KQUANT 16 "a3b-q4_K a3b-q6_K" "q4_K q6_K q5_K" "2048 512"
# Q8_0/Q4_0's (QWISP_AMX_Q4_0; Q8_0 is on AMX at avx512-amx either way), 2 threads as issue 16's table
# (then the two orders' decode row loops alternated in one process: bench/micro_rows.c)
step amxq8 && need 150 "AMX Q8_0/Q4_0 vs avx512" &&
    amx_vs_avx512 QWISP_AMX_Q4_0 2 "${AMXQ8FILES:-a3b-q4_0 a3b-q8_0}" "q4_0 q8_0" "2048 768" &&
    make -s build/micro_rows && for t in q8_0 q4_0; do QWISP_TUNE=off taskset -c 3 build/micro_rows $t 2048 1.0 5; done
# The host's SMT topology, and whether two threads on one core's two hardware threads explain
# the avx512-amx level's slower 2-thread decode (docs/kernels.md, "What the reference order costs
# decode on the Xeon"): the two orders' row loops on one core, then in two processes at once on
# cpu 2 and its sibling and on cpu 2 and a core of its own; decode by level on both pairs; and
# perf's counters where the host has perf.  SMT_CPU (default 2) and FAR (default 8) pick the cpus.
if step smt && need 150 "SMT topology and the row loops two at a time"; then
    grep -m1 "model name" /proc/cpuinfo; lscpu | grep -i -E "thread|core|socket|numa|L1d|L2|L3"
    a=${SMT_CPU:-2} # the first cpu of both pairs; the second: its sibling (else a+1), and FAR
    sib=$(tr ',-' '  ' < /sys/devices/system/cpu/cpu$a/topology/thread_siblings_list | awk -v a=$a '{ for (i = 1; i <= NF; i++) if ($i != a) { print $i; exit } }')
    sib=${sib:-$((a + 1))}; far=${FAR:-8}
    ts "cpu$a's siblings: $(cat /sys/devices/system/cpu/cpu$a/topology/thread_siblings_list); pairs: $a,$sib and $a,$far"
    make -s build/micro_rows || exit 1
    rows_pair() { # micro_rows q8_0 on cpus $1 and $2 at once, each process's two lines
        QWISP_TUNE=off taskset -c $1 build/micro_rows q8_0 2048 1.0 5 > /tmp/mr$1.txt 2>&1 & local p=$!
        QWISP_TUNE=off taskset -c $2 build/micro_rows q8_0 2048 1.0 5 > /tmp/mr$2.txt 2>&1; wait $p
        for c in $1 $2; do grep -h GB/s /tmp/mr$c.txt | sed "s/^/cpu $c: /"; done
    }
    ts "one process, cpu $a"; QWISP_TUNE=off taskset -c $a build/micro_rows q8_0 2048 1.0 5 | grep GB/s
    ts "cpus $a and $sib at once"; rows_pair $a $sib
    ts "cpus $a and $far at once"; rows_pair $a $far
    for round in 1 2; do for cpus in $a,$sib $a,$far; do for lv in avx512-amx avx512; do
        ts "a3b-q8_0 r$round cpus $cpus $lv: $(QWISP_BACKEND=cpu QWISP_SIMD=$lv taskset -c $cpus $Q bench -m $S/a3b-q8_0.gguf -p 0 -n 32 -r 3 -t 2 --bw-mb 256 2>&1 | grep -E '^tg|roofline' | tr -s ' ' | tr '\n' ' ')"
    done; done; done
    if command -v perf > /dev/null; then for lv in avx512-amx avx512; do
        ts "perf stat, $lv, cpus $a,$sib"
        QWISP_BACKEND=cpu QWISP_SIMD=$lv taskset -c $a,$sib perf stat -e cycles,instructions,L1-dcache-load-misses,LLC-load-misses -- \
            $Q bench -m $S/a3b-q8_0.gguf -p 0 -n 64 -r 2 -t 2 --bw-mb 0 2>&1 | grep -E '^tg|cycles|instructions|misses'
    done; else ts "no perf on this host"; fi
fi
# Where prefill and decode time goes on the host CPU (QWISP_PROFILE=1: time by phase of the
# forward pass, docs/bench.md), per PROFFILES file (default the three A3B-width ones), both
# levels alternated, two rounds
if step profile && need 120 "forward-pass profile by phase"; then
    for round in 1 2; do for f in ${PROFFILES:-a3b-q8_0 a3b-q4_K a3b-q4_0}; do for lv in avx512-amx avx512; do
        ts "profile $f r$round $lv"
        QWISP_BACKEND=cpu QWISP_PROFILE=1 QWISP_SIMD=$lv taskset -c 2,3 $Q bench -m $S/$f.gguf -p 512 -n 32 -r 3 -t 2 --bw-mb 0 2>&1 |
            grep -E '^(pp|tg)|^profile'
    done; done; done
fi
if step olds && [ -n "$OLDS" ] && need 120 "this tree against the old trees"; then
    for v in $OLDS; do ts "$(tail -1 /tmp/old-$v.log)"; done
    tree_of() { [ "$1" = this ] && echo build || echo /tmp/old-$1/build; }
    make -s build/micro_gemm
    for round in 1 2; do for tk in ${MICROS:-q8_0:768 q8_0:2048 q4_0:768 q4_K:768}; do for v in this $OLDS; do
        echo "micro ${tk%:*} k=${tk#*:} $v r$round: $(taskset -c 3 $(tree_of $v)/micro_gemm ${tk%:*} ${tk#*:} 2>&1 | grep -o 'matmul.*')"
    done; done; done
    for round in 1 2; do for f in ${OLDFILES:-a3b-q8_0 a3b-q4_K a3b-q4_0}; do for v in this $OLDS; do
        need 40 "olds: $f $v" || break 3
        ts "olds $f $v r$round: $(QWISP_BACKEND=cpu QWISP_TUNE_FILE=/tmp/tune-$v.txt QWISP_PROFILE=1 taskset -c 2,3 $(tree_of $v)/qwisp \
            bench -m $S/$f.gguf -p 512 -n 32 -r 3 -t 2 --bw-mb 0 2>&1 | grep -E '^(pp|tg)|^profile' | tr -s ' ' | tr '\n' ' ')"
    done; done; done
fi
if step vsllama && [ -x "$LB" ] && need 150 "speed_vs_llamabench"; then
    QWISP_BACKEND=cpu LLAMA_BENCH=$LB taskset -c 2,3 bench/speed_vs_llamabench.sh -r 3 -p 512 -n 64 -t 2 \
        $(for f in ${VSFILES:-bench-q4_K a3b-q4_K bench-q8_0}; do echo $S/$f.gguf; done) 2>&1 | grep -v "^$"
fi
if step spread && [ -x "$LB" ] && need 120 "decode's spread, repetition by repetition"; then
    # each repetition's tok/s in run order, 2 threads on cores 2,3, ten repetitions, two rounds
    # alternated: qwisp's `bench --json` samples against llama-bench's samples_ts
    for round in 1 2; do
        ts "spread qwisp bench-q8_0: $(QWISP_BACKEND=cpu taskset -c 2,3 $Q bench -m $S/bench-q8_0.gguf -p 0 -n 64 -r 10 -t 2 --bw-mb 0 --json 2>/dev/null |
            python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join("%.1f" % x for x in d["tg_tok_s"]["samples"]))')"
        ts "spread llama bench-q8_0: $(taskset -c 2,3 $LB -m $S/bench-q8_0.gguf -p 0 -n 64 -r 10 -t 2 -o jsonl 2>/dev/null |
            python3 -c 'import json,sys; [print(" ".join("%.1f" % x for x in json.loads(l)["samples_ts"])) for l in sys.stdin if l.startswith("{")]')"
    done
fi
if step bigvsllama && [ -x "$LB" ] && need 300 "full-size speed_vs_llamabench, 2 threads"; then
    # the full-size file at 2 threads (issue 16's Intel row): two rounds, tg32
    QWISP_BACKEND=cpu LLAMA_BENCH=$LB taskset -c 2,3 bench/speed_vs_llamabench.sh -r 2 -p 512 -n 32 -t 2 \
        $S/big.gguf 2>&1 | grep -v "^$"
fi
if step big16 && need 60 "full-size CPU 16 threads"; then
    for cfg in "avx512 0" "avx512-amx 0" "avx512-amx 1"; do
        set -- $cfg
        ts "big pp512 16 threads $1 kq=$2: $(QWISP_BACKEND=cpu QWISP_SIMD=$1 QWISP_AMX_KQUANT=$2 $Q bench -m $S/big.gguf -p 512 -n 0 -r 1 --threads 16 --bw-mb 0 2>&1 | grep pp512)"
    done
fi
ts "done"

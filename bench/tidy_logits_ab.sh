#!/usr/bin/env bash
# tidy_logits_ab.sh XLLM SRC OUTDIR - the `xllm logits` outputs compared (cmp) before and after a
# refactoring (issue 29, bench/tidy_ab.md): stories260k (HF dir and GGUF), the 7 tiny
# architectures, stories260k q8/q4/q4m/q4+calibration and kq-F16 K-quant conversions, the
# llama.cpp kquant GGUFs, each at XLLM_CPU scalar, avx2 and avx512. Run it with both binaries
# into two folders, then: for f in A/*.f32; do cmp $f B/$(basename $f); done
set -u
X=$1; SRC=$2; O=$3; mkdir -p "$O/conv"
S=$SRC/models/stories260k
IDS=1,400,23,77,5,129,311,42,8,260,99,17
KIDS=1,400,23,77,5,129,311,42
# conversions, made by each binary (the files differ only in provenance.created; their logits are compared)
$X convert "$S" -o $O/conv/s_f32.xllm >/dev/null 2>&1
for dt in q8 q4 q4m; do $X convert "$S" -o $O/conv/s_$dt.xllm --dtype $dt >/dev/null 2>&1 || echo "convert $dt failed"; done
$X convert "$S" -o $O/conv/s_q4cal.xllm --dtype q4 --calib $SRC/tests/data/eval/stories_calib.txt --calib-tokens 512 >/dev/null 2>&1 || echo "convert calib failed"
K=$SRC/tests/data/kquants
for dt in q2_k q3_k q4_k q5_k q6_k q4_k_m iq4_nl; do $X convert $K/kq-F16.gguf -o $O/conv/k_$dt.xllm --dtype $dt >/dev/null 2>&1 || echo "convert k $dt failed"; done
models="$S $SRC/tests/data/gguf/stories260k.gguf"
for a in llama mistral mixtral qwen2 qwen2_moe qwen3 qwen3_moe; do models="$models $SRC/tests/data/tiny/$a"; done
for f in $O/conv/*.xllm; do models="$models $f"; done
for f in $K/kq-*.gguf; do models="$models $f"; done
for l in scalar avx2 avx512; do
  for m in $models; do
    n=$(basename $m); ids=$IDS
    case $n in k_*|kq-*) ids=$KIDS;; esac
    case $m in */tiny/*) ids=1,5,9,13,2,7;; esac
    XLLM_CPU=$l $X logits -m $m --ids $ids --out $O/$l.$n.f32 >/dev/null 2>$O/$l.$n.err || echo "FAIL $l $n: $(tail -1 $O/$l.$n.err)"
  done
done
ls $O/*.f32 | wc -l

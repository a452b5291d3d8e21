#!/usr/bin/env bash
# tidy_cpu_ab.sh A B MODEL [ROUNDS] - CPU seconds (user+sys, /usr/bin/time) and wall of one fixed greedy
# generation (3000 tokens, 1 thread), two xllm binaries alternated (the order swaps each round);
# appends "A|B user sys wall" lines to $OUT (default /tmp/cpu_ab.raw). CPU time is the steadier figure on a
# host shared by many processes (bench/tidy_ab.md).
A=$1; B=$2; M=$3; R=${4:-9}
for r in $(seq 1 $R); do
  for v in A B; do
    [ $((r % 2)) -eq 0 ] && { [ $v = A ] && v=B || v=A; }
    bin=$([ $v = A ] && echo $A || echo $B)
    /usr/bin/time -f "$v %U %S %e" $bin run -m $M --ids 1 -n 3000 --temp 0 --ignore-eos --quiet -t 1 -c 4096 > /dev/null 2>> "${OUT:-/tmp/cpu_ab.raw}"
  done
done

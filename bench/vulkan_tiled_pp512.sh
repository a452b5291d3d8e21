#!/bin/bash
# bench/vulkan_tiled_pp512.sh - the sanity figure of docs/VULKAN.md (Speed): columns round, kernel, rc, user s, sys s, wall s, load
# one 512-token prefill (xllm logits: every position's logits) of stories260k on lavapipe,
# matrix-vector vs tiled matmuls, alternating, 5 rounds; CPU seconds (user+sys) and wall
cd "$(dirname "$0")/.."
IDS=$(python3 -c "print(','.join(str(1 + (i * 37) % 500) for i in range(512)))")
for r in 1 2 3 4 5; do
  for m in matvec tiled; do
    /usr/bin/time -f "%U %S %e" -o /tmp/xllm_vk_t.txt env XLLM_VULKAN_MATMUL=$m build/xllm logits -m models/stories260k --backend vulkan --ids $IDS --out /tmp/xllm_vk_l_$m.bin > /dev/null 2>/dev/null
    echo "$r $m rc=$? $(cat /tmp/xllm_vk_t.txt) load=$(cut -d' ' -f1 /proc/loadavg)" >> /dev/stdout
  done
done
cmp /tmp/xllm_vk_l_matvec.bin /tmp/xllm_vk_l_tiled.bin && echo "logits identical" >> /dev/stdout

#!/usr/bin/env node
// llamacpp_bench.mjs - llama.cpp's prompt-processing and generation speed on a
// GGUF file, through node-llama-cpp (pinned 3.21.1: prebuilt CPU binaries),
// measured as `xllm bench` measures xLLM:
//
//   pp<P>  evaluate a P-token prompt (logits of the last position only, as
//          llama-bench), tokens/s
//   tg<N>  after an 8-token prompt, N greedy tokens one at a time; the clock
//          runs from the first generated token to the last (N decode steps)
//
// One warm-up of each, then R runs; mean and sample standard deviation of the
// per-run rates. Same token ids as xllm bench, GPU off, the given threads.
// Prints one JSON object {"pp_tok_s","pp_sd","tg_tok_s","tg_sd","threads",...}.
//
//   node bench/llamacpp_bench.mjs -m FILE.gguf [-p 512] [-n 128] [-t 2] [-r 3]
//
// The package is looked up in $XLLM_BENCH_NODE_MODULES (default
// ~/.cache/xllm-bench/node_modules); bench/compare_llamacpp.sh installs it.
import { homedir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const TG_PROMPT = 8;

function parseArgs(argv) {
    const a = { m: null, p: 512, n: 128, t: 2, r: 3 };
    for (let i = 0; i < argv.length; i++) {
        const f = argv[i], v = argv[i + 1];
        if (!["-m", "-p", "-n", "-t", "-r"].includes(f)) throw new Error(`unknown option ${f}`);
        if (v === undefined) throw new Error(`${f} needs a value`);
        i++;
        if (f === "-m") a.m = v;
        else {
            const x = Number(v);
            if (!Number.isInteger(x) || x < 1) throw new Error(`${f} needs a positive integer`);
            a[f.slice(1)] = x;
        }
    }
    if (!a.m) throw new Error("usage: llamacpp_bench.mjs -m FILE.gguf [-p 512] [-n 128] [-t 2] [-r 3]");
    return a;
}

function meanSd(x) {
    const m = x.reduce((s, v) => s + v, 0) / x.length;
    const q = x.reduce((s, v) => s + (v - m) * (v - m), 0);
    return [m, x.length > 1 ? Math.sqrt(q / (x.length - 1)) : 0];
}

const now = () => Number(process.hrtime.bigint()) / 1e9;

async function main() {
    const a = parseArgs(process.argv.slice(2));
    const dir = process.env.XLLM_BENCH_NODE_MODULES || join(homedir(), ".cache", "xllm-bench", "node_modules");
    const { getLlama, LlamaLogLevel } = await import(pathToFileURL(join(dir, "node-llama-cpp", "dist", "index.js")).href);
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: a.t });
    const model = await llama.loadModel({ modelPath: a.m, gpuLayers: 0, useMmap: true });
    const need = Math.max(a.p, TG_PROMPT + a.n + 1) + 16;
    const context = await model.createContext({
        contextSize: need, batchSize: 512, sequences: 1, threads: { ideal: a.t, min: a.t },
    });
    const seq = context.getSequence();
    const embd = (model.fileInfo.tensorInfo || []).find((t) => t.name === "token_embd.weight");
    const vocab = embd ? Number(embd.dimensions[1]) : 0;
    if (!(vocab > 3)) throw new Error("cannot find the vocabulary size (token_embd.weight)");
    // the ids xllm bench uses
    const ids = [];
    for (let i = 0; i < a.p; i++) ids.push(3 + ((i * 7919 + 13) % (vocab - 3)));
    const tgPrompt = [];
    for (let i = 0; i < TG_PROMPT; i++) tgPrompt.push(ids[i % a.p]);

    async function pp() {
        await seq.clearHistory();
        const input = ids.slice(0, -1);
        input.push([ids[ids.length - 1], { generateNext: { token: true, options: { temperature: 0 } } }]);
        const t0 = now();
        await seq.controlledEvaluate(input);
        return a.p / (now() - t0);
    }
    async function tg(n) {
        await seq.clearHistory();
        let count = 0, first = 0, last = 0;
        for await (const tok of seq.evaluate(tgPrompt, { temperature: 0 })) {
            void tok;
            const t = now();
            if (count++ === 0) first = t;
            last = t;
            if (count === n + 1) break;
        }
        return n / (last - first);
    }
    await pp();
    await tg(Math.min(a.n, 4));
    const pps = [], tgs = [];
    for (let r = 0; r < a.r; r++) {
        pps.push(await pp());
        tgs.push(await tg(a.n));
    }
    const [ppm, pps_] = meanSd(pps), [tgm, tgs_] = meanSd(tgs);
    const out = {
        pp_tok_s: +ppm.toFixed(3), pp_sd: +pps_.toFixed(3), tg_tok_s: +tgm.toFixed(3), tg_sd: +tgs_.toFixed(3),
        threads: context.currentThreads ?? a.t,
        peak_rss_mib: +(process.resourceUsage().maxRSS / 1024).toFixed(1),
        llama_cpp: llama.llamaCppRelease?.release ?? "?", build: llama.buildType, gpu: llama.gpu,
    };
    console.log(JSON.stringify(out));
    await context.dispose();
    await model.dispose();
    await llama.dispose();
}

main().catch((e) => {
    console.error(`llamacpp_bench: ${e.message}`);
    process.exit(1);
});

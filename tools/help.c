/*
 * help.c - the text of `xllm --help` and of `xllm COMMAND --help`: for each
 * subcommand its synopsis, every option with its default, and one example.
 * The one place the command line is documented; tests/e2e/cli_help.sh checks
 * that every option named here is one the parser accepts, and the overview's
 * options appear in each command's own help.
 */
#include "cli.h"
#include "xllm.h"

#include <string.h>

typedef struct help_entry {
    const char *cmd;
    const char *text;
} help_entry;

#define MODEL_LINE "MODEL: " CLI_MODEL_FORMATS ".\n"
/* run and serve: pipeline parallelism (tools/pp_cli.c) */
#define PP_HELP \
     "  --pp N                     split the layers over the N ranks of an MPI job (mpirun -np N xllm ...);\n" \
     "                             rank 0 runs the command, the others a stage (default: 1, no split)\n" \
     "  --pp-layers 8,8,6          layers per rank (default: as even as can be, first ranks take the rest)\n" \
     "  --pp-microbatches M        micro-batches per step, so the stages overlap (default: 2)\n" \
     "  --pp-timeout S             a rank waiting S seconds for another ends the job (default: 60)\n" \
     "  --pp-stats                 each rank prints its layers, bound weights, memory and bubble at the end\n" \
     "  --pp-test-fail-after K     tests: rank 1 exits after K steps (--pp-test-hang: hangs instead)\n"

static const help_entry k_help[] = {
    {"run",
     "usage: xllm run [-m MODEL] [-p TEXT | --ids 1,2,3] [options]\n"
     "Generate a continuation of the prompt. The text streams to stdout; a summary line\n"
     "(prompt and generation tokens/s, load time) goes to stderr.\n"
     "\n"
     "  -m, --model MODEL          the model (default: $XLLM_MODEL, else the bundled stories260k)\n"
     "  --config FILE.yaml         engine config (docs/CONFIG.md): its model unless -m is given, threads,\n"
     "                             context, batching, preemption, caches, knowledge (default: none)\n"
     "  -p, --prompt TEXT          prompt text, tokenized with the model's special tokens (default: empty)\n"
     "  --ids 1,2,3                prompt token ids, used as given (no BOS added)\n"
     "  -n, --max-new-tokens N     tokens to generate (default: 256; also --n-predict)\n"
     "  -c, --ctx-size N           context size in tokens (default: the model's, at most 8192)\n"
     "  --temp T                   temperature from 0 (greedy) to 100 (default: 0.8; also --temperature)\n"
     "  --top-k K                  sample from the K most likely tokens, 0 = off (default: 0)\n"
     "  --top-p P                  nucleus sampling, P in (0, 1], 1 = off (default: 0.9)\n"
     "  --min-p P                  drop tokens below P x the top probability, P in [0, 1], 0 = off (default: 0)\n"
     "  --repetition-penalty R     HF's multiplicative penalty over prompt and output, R in (0, 100], 1 = off\n"
     "                             (default: 1)\n"
     "  --presence-penalty X       OpenAI's additive penalty over the output, X in [-100, 100] (default: 0)\n"
     "  --frequency-penalty X      OpenAI's additive penalty per occurrence, X in [-100, 100] (default: 0)\n"
     "  --seed S                   sampling seed, 0 to 2^64-1; -1 = random (default: random)\n"
     "  --stop STR                 stop at this string; repeatable, at most 16 (default: none)\n"
     "  --ignore-eos               go on past the end-of-sequence token (default: stop there)\n"
     "  --json-schema FILE         constrain the output to JSON valid under this JSON Schema (default: none)\n"
     "  --json-object              constrain the output to a JSON object (default: none)\n"
     "  --grammar FILE             constrain the output to this llama.cpp GBNF grammar, root rule 'root'\n"
     "  --regex RE                 constrain the output to match this regular expression (default: none)\n"
     "  -t, --threads N            CPU threads (default: all online CPUs)\n"
     "  --json                     print {\"prompt_ids\",\"ids\",\"text\"} instead of streaming\n"
     "  --quiet                    no summary line on stderr\n"
     "  --profile [FILE.json]      per-operator kernel profile: a table on stderr and the JSON file\n"
     "                             (default file: xllm-profile.json; also --enable-kernel-profiling)\n"
     "  --chat                     -p TEXT is a user message rendered with the model's chat template\n"
     "  --messages FILE.json       with --chat: the whole conversation (a JSON array of messages)\n"
     "  --tools FILE.json          with --chat: tool definitions for the template (default: none)\n"
     "  --var NAME=JSON            with --chat: a template variable, e.g. enable_thinking=false; repeatable;\n"
     "                             the value is one JSON value (a string in quotes), the last one wins\n"
     "  --template NAME            with --chat: one of the model's named templates (default: HF's choice)\n"
     "  --chat-template FILE.jinja with --chat: this template instead of the model's\n"
     "  --prompts FILE             one prompt per line, generated together (continuous batching); one\n"
     "                             line (or --json object) per prompt, in order, and an aggregate summary\n"
     "  --samples N                with --prompts: N samples per prompt from one prefill (default: 1)\n"
     "  --kv-tokens N              KV pool capacity in tokens; a small pool preempts (default: context x 16, at most 1 GiB)\n"
     "  --kv-dtype D               KV cache storage: f32, f16, q8 (int8 + f16 scale per 32 values, 0.27x of f32)\n"
     "                             or auto (the widest that fits the batch's contexts) (default: f32; XLLM_KV_DTYPE)\n"
     "  --arith A                  whose arithmetic: xllm, or llama (llama.cpp's CPU numbers on its GGUF files;\n"
     "                             with --kv-dtype f16) (default: xllm; XLLM_ARITH)\n"
     PP_HELP
     "\n" MODEL_LINE
     "example:\n"
     "  xllm run -m models/stories260k -p \"Once upon a time\" -n 100 --temp 0\n"
     "  mpirun -np 2 xllm run -m models/stories260k -p \"Once upon a time\" --pp 2   # layers over 2 processes\n"},
    {"logits",
     "usage: xllm logits -m MODEL --ids 1,2,3 [--out FILE] [--attention FILE] [-t THREADS]\n"
     "The logits after a token sequence (no BOS added): the last position as JSON on stdout.\n"
     "\n"
     "  -m, --model MODEL   the model (required)\n"
     "  --ids 1,2,3         the token ids (required)\n"
     "  --out FILE          also write every position's logits there, float32 row-major (default: none)\n"
     "  --attention FILE    also write the attention probabilities there as JSON: {\"ids\", \"layers\",\n"
     "                      \"heads\", \"average_heads\", \"probs\"[layer][head][query][key]} (default: none)\n"
     "  --layers 0,2        with --attention: these layers only (default: all)\n"
     "  --average-heads     with --attention: the mean over the query heads (\"heads\": 1)\n"
     "  -t, --threads N     CPU threads (default: all online CPUs)\n"
     "\n" MODEL_LINE
     "example:\n"
     "  xllm logits -m models/stories260k --ids 1,403,407 --out all.f32\n"},
    {"tokenize",
     "usage: xllm tokenize -m TOKENIZER --jsonl FILE\n"
     "Tokenize each line {\"text\": ...} of FILE (\"-\" for stdin) and print\n"
     "{\"ids\",\"ids_no_special\",\"decode\",\"decode_skip_special\"} per line.\n"
     "\n"
     "  -m, --model PATH    a directory with tokenizer.json (a model or tokenizer directory), a\n"
     "                      tokenizer.json file, or an .xllm or GGUF model (its tokenizer) (required)\n"
     "  --jsonl FILE        the input lines (required)\n"
     "\n"
     "example:\n"
     "  xllm tokenize -m models/stories260k --jsonl tests/data/tokenizers/corpus.jsonl\n"},
    {"template",
     "usage: xllm template -m MODEL --messages FILE.json [options]\n"
     "Render the model's chat template (tokenizer_config.json or chat_template.jinja) exactly\n"
     "as HuggingFace's apply_chat_template does, and print the text.\n"
     "\n"
     "  -m, --model DIR            a model or tokenizer directory (required unless --chat-template)\n"
     "  --messages FILE.json       a JSON array of {\"role\",\"content\",...} messages (\"-\" for stdin; required)\n"
     "  --add-generation-prompt    end with the assistant's turn opening (default: off)\n"
     "  --tools FILE.json          a JSON array of tool definitions (default: none)\n"
     "  --var NAME=JSON            a template variable, e.g. enable_thinking=false; repeatable; the value\n"
     "                             is one JSON value (a string in quotes: NAME='\"text\"'), the last one wins\n"
     "  --template NAME            one of the model's named templates (default: \"tool_use\" with\n"
     "                             --tools when it exists, else \"default\")\n"
     "  --chat-template FILE.jinja render this template instead of the model's\n"
     "\n"
     "example:\n"
     "  xllm template -m tests/data/templates/qwen3 --messages chat.json --add-generation-prompt\n"},
    {"eval",
     "usage: xllm eval -m MODEL --text FILE [--ref MODEL] [--kv-dtype D] [--ref-kv-dtype D] [--json] [-t THREADS]\n"
     "                 [--ctx N]\n"
     "\n"
     "Perplexity of MODEL over the text in FILE (UTF-8, \"-\" for stdin) and, with --ref,\n"
     "the mean and maximum KL divergence KL(ref || model) of the next-token distributions\n"
     "and the fraction of tokens where both models' top-1 predictions agree.\n"
     "\n"
     "The text is tokenized with MODEL's tokenizer (the reference's when MODEL has none)\n"
     "into one token stream and evaluated in windows of N tokens (default: the model's\n"
     "context; the smaller of the two with --ref): each window starts with BOS (the special\n"
     "tokens the tokenizer puts at the start) and continues with the next N-1 tokens of the\n"
     "stream. Windows do not overlap, so every token of the stream is predicted exactly once,\n"
     "from the tokens before it in its window.\n"
     "Each window needs N x vocab floats of logits per model.\n"
     "\n"
     "  -m, --model MODEL   the model to evaluate (required)\n"
     "  --text FILE         the text (required)\n"
     "  --ref MODEL         reference model on the same vocabulary, e.g. the f32 original (default: none)\n"
     "  --kv-dtype D        the model's KV cache storage: f32, f16, q8 (default: f32)\n"
     "  --ref-kv-dtype D    the reference's KV cache storage (default: f32); without --ref the\n"
     "                      reference is MODEL itself, so this measures what KV compression costs\n"
     "  --json              print one object {\"tokens\":N,\"kv_dtype\":D,\"ref_kv_dtype\":D,\"ppl\":x,\n"
     "                      \"kld_mean\":x,\"kld_max\":x,\"top1_agree\":x} (ref_* and the last three with a reference)\n"
     "  -t, --threads N     CPU threads (default: all online CPUs)\n"
     "  --ctx N             window size in tokens (default: the model's context; at most that)\n"
     "\n" MODEL_LINE
     "example:\n"
     "  xllm eval -m s.xllm --ref models/stories260k --text tests/data/eval/stories_heldout.txt\n"
     "  xllm eval -m models/stories260k --kv-dtype q8 --ref-kv-dtype f32 --text tests/data/eval/stories_heldout.txt\n"},
    {"convert",
     "usage: xllm convert SRC -o OUT [options]\n"
     "Convert a HuggingFace checkpoint directory or a GGUF file into one .xllm file (or a GGUF\n"
     "file with --to gguf): quantized, fused, with the tokenizer inside. Progress goes to stderr\n"
     "(a bar on a terminal, a line per stage and tenth otherwise), then a summary line.\n"
     "The output is written to a temporary file and renamed; an error or an interrupt\n"
     "(Ctrl-C, SIGTERM) leaves nothing behind.\n"
     "\n"
     "  -o, --out OUT              the output file (required)\n"
     "  --dtype TYPE               matmul weights: f32, f16, bf16, q8, q4, q4m, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl,\n"
     "                             q3_k_m, q4_k_m or q5_k_m (default: f32;\n"
     "                             quantized types keep embed and lm_head at q8)\n"
     "  --group-size N             q4/q4m group: 32, 64 or 128 (default: 32)\n"
     "  --policy CLASS=TYPE,...    per tensor class: embed, attn, mlp, lm_head, norm, router\n"
     "                             (default: from --dtype; norm and router stay f32)\n"
     "  --calib FILE               text for activation-aware scaling and GPTQ of q4 weights (default: none)\n"
     "  --calib-tokens N           at most N calibration tokens (default: 8192)\n"
     "  -t, --threads N            CPU threads for calibration (default: all online CPUs)\n"
     "  --no-fuse                  keep q/k/v and gate/up as separate matrices (default: fused)\n"
     "  --to FORMAT                xllm or gguf (default: xllm)\n"
     "\n"
     "example:\n"
     "  xllm convert models/stories260k -o s.xllm --dtype q4 --calib tests/data/eval/stories_calib.txt\n"},
    {"info",
     "usage: xllm info MODEL [--json] [--plan]   |   xllm info --devices\n"
     "What a model holds: format, architecture, conversion policy, each tensor's type and size.\n"
     "\n"
     "  --json              the same as JSON\n"
     "  --plan              load the model and show the planner's thread and kernel choices\n"
     "  --devices           (no MODEL) the execution backends and the devices each sees\n"
     "                      (for --backend vulkan --device N on any command that loads a model)\n"
     "\n" MODEL_LINE
     "example:\n"
     "  xllm info s.xllm\n"},
    {"synth",
     "usage: xllm synth --shape SHAPE [-o FILE.xllm] [--gguf FILE.gguf] [--hf DIR] [options]\n"
     "A model of a real architecture's shape with random weights, for benchmarks without\n"
     "downloads: any of an .xllm file, a GGUF file and an HF directory from the same weights.\n"
     "Progress goes to stderr, then a summary line.\n"
     "\n"
     "  --shape SHAPE              tinyllama-1.1b, llama3.2-1b, qwen3-0.6b, small-120m, gemma2-1.1b,\n"
     "                             qwen3moe-8x2-1.7b, tiny-test, tiny-test-qwen3, tiny-test-llama3,\n"
     "                             tiny-test-gemma2, tiny-test-qwen3moe (required)\n"
     "  --dtype TYPE               .xllm matmul type: f32, f16, q8 or q4 (default: f32)\n"
     "  -o, --out FILE.xllm        write an .xllm file\n"
     "  --gguf FILE.gguf           write a GGUF file\n"
     "  --gguf-type TYPE           F32, F16, Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, Q3_K_M,\n"
     "                             Q4_K_M or Q5_K_M (default: the twin of --dtype)\n"
     "  --hf DIR                   write an HF checkpoint directory (f32 safetensors)\n"
     "  --seed N                   weights depend only on shape and seed (default: 1)\n"
     "  -t, --threads N            CPU threads (default: all online CPUs)\n"
     "\n"
     "example:\n"
     "  xllm synth --shape tiny-test --dtype q4 -o t.xllm --gguf t.gguf --hf t-hf\n"},
    {"bench",
     "usage: xllm bench -m MODEL [-p 512] [-n 128] [-d 0] [-t THREADS] [-r 3] [--json] [--profile FILE.json]\n"
     "Prompt processing (pp: one P-token prompt) and generation (tg: N decode steps) speed in\n"
     "tokens/s, mean and sd over R runs after one warm-up; peak RSS; the decode bandwidth bound.\n"
     "Progress goes to stderr.\n"
     "\n"
     "  -m, --model MODEL   the model (required)\n"
     "  -p, --n-prompt P    prompt tokens (default: 512)\n"
     "  -n, --n-gen N       generated tokens (default: 128)\n"
     "  -t, --threads N     CPU threads (default: all online CPUs)\n"
     "  -r, --repetitions R measured runs (default: 3)\n"
     "  --kv-dtype D        KV cache storage: f32, f16, q8, auto (default: f32)\n"
     "  --json              print {\"pp_tok_s\",\"pp_sd\",\"tg_tok_s\",\"tg_sd\",\"threads\",\"kv_dtype\",\n"
     "                      \"kv_bytes_per_token\"} on stdout\n"
     "                      (the table then goes to stderr)\n"
     "  --profile [FILE.json] per-operator profile of the measured runs (default file:\n"
     "                      xllm-profile.json; also --enable-kernel-profiling)\n"
     "  --no-bandwidth      skip the bandwidth probe (a child process reading a 512 MiB buffer\n"
     "                      before and after each tg run)\n"
     "  --bandwidth-only    print the read bandwidth of T threads (GB/s) and exit; no model\n"
     "  -d, --depth D       run both after a context of D tokens (default: 0), as llama-bench -d:\n"
     "                      it is prefilled once and reused from the prefix cache\n"
     "A run needing more context than the model was trained for runs anyway (speed only).\n"
     "\n" MODEL_LINE
     "example:\n"
     "  xllm bench -m models/stories260k -p 128 -n 64 -r 3\n"},
    {"serve",
     "usage: xllm serve -m MODEL [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--config F.yaml] [-t THREADS]\n"
     "                  [--max-queue N]\n"
     "An OpenAI-compatible HTTP server (docs/SERVER.md). It prints one line when it accepts\n"
     "connections and stops cleanly on SIGINT/SIGTERM.\n"
     "\n"
     "  -m, --model MODEL          the model (or models: in --config)\n"
     "  --host HOST                address to listen on (default: 127.0.0.1)\n"
     "  --port PORT                TCP port, 0 = any free one (default: 8080)\n"
     "  --api-key KEY              require Authorization: Bearer KEY (default: none)\n"
     "  --config FILE.yaml         engine and server config (docs/CONFIG.md, docs/SERVER.md)\n"
     "  -t, --threads N            CPU threads (default: all online CPUs)\n"
     "  --kv-dtype D               KV cache storage of every model: f32, f16, q8, auto (default: the\n"
     "                             config's memory.kv_dtype, else f32)\n"
     "  --max-queue N              requests waiting before 429 (default: see docs/SERVER.md)\n"
     "  --max-body BYTES           largest request body (default: 8 MiB)\n"
     "  --request-timeout S        per-request time limit in seconds\n"
     "  --idle-timeout S           a keep-alive connection's wait for its next request (default: 30)\n"
     "  --header-timeout S         a request's whole head must arrive within S seconds, else 408\n"
     "                             (default: 10)\n"
     "  --body-timeout S           its whole body within S seconds of the head, else 408 (default: 60)\n"
     "  --write-timeout S          a client that reads nothing for S seconds is dropped and its\n"
     "                             request aborted (default: 30)\n"
     "  --sse-keepalive MS         a stream with nothing to send for MS milliseconds (queued,\n"
     "                             preempted) gets an SSE comment line; 0 = never (default: 15000)\n"
     "  --max-connections N        simultaneous connections; when full, the oldest one still\n"
     "                             sending its head makes room (default: 4096)\n"
     "  --max-connections-per-ip N connections from one client address (default: 256)\n"
     "  --max-inflight-bytes B     request-body bytes held at once, all clients together; 503 +\n"
     "                             Retry-After beyond (default: 256 MiB)\n"
     "  --http-workers N           worker threads for requests at most (started as needed, reused,\n"
     "                             ended after 30 s idle down to 4); a request holds one until its\n"
     "                             answer is written; more at once get 503 + Retry-After (default:\n"
     "                             each model's batch slots + --max-queue, + 64; 8 of them kept for\n"
     "                             /health, /metrics, /v1/models)\n"
     "  --parse-special            special-token text in request strings becomes control tokens\n"
     "                             (HF/vLLM behaviour; default: only the chat template makes them)\n"
     "  --log-text                 log prompt and output text (default: never)\n"
     PP_HELP
     "\n"
     "example:\n"
     "  xllm serve -m models/stories260k --port 8080\n"
     "  mpirun -np 2 xllm serve -m models/stories260k --port 8080 --pp 2   # layers over 2 processes\n"},
};

int cli_print_help(FILE *f, const char *cmd) {
    for (size_t i = 0; i < sizeof k_help / sizeof *k_help; i++)
        if (!strcmp(k_help[i].cmd, cmd)) {
            fputs(k_help[i].text, f);
            return 0;
        }
    return 1;
}

void cli_print_usage(FILE *f) {
    fprintf(f,
            "xllm %s - LLM inference engine\n"
            "usage: xllm COMMAND [options]      (no command: xllm run)\n"
            "\n"
            "  run       generate text       [-m MODEL | --config F.yaml] [-p TEXT | --ids 1,2,3] [-n 256] [-c CTX]\n"
            "                                [--temp 0.8]\n"
            "                                [--top-k 0] [--top-p 0.9] [--min-p 0] [--seed S] [--stop STR]\n"
            "                                [-t THREADS] [--chat] [--json] [--quiet] [--profile FILE.json]\n"
            "  logits    logits of ids       -m MODEL --ids 1,2,3 [--out FILE]\n"
            "  tokenize  tokenize JSONL      -m TOKENIZER --jsonl FILE\n"
            "  template  chat template       -m MODEL --messages FILE.json [--add-generation-prompt] [--tools FILE.json]\n"
            "  eval      perplexity, KL      -m MODEL --text FILE [--ref MODEL] [--kv-dtype D] [--ctx N] [--json]\n"
            "  convert   HF/GGUF -> .xllm    SRC -o OUT [--dtype f32] [--group-size 32] [--policy ...] [--calib FILE]\n"
            "                                [--calib-tokens 8192] [-t THREADS] [--no-fuse] [--to xllm]\n"
            "  info      what a model holds  MODEL [--json] [--plan] | --devices\n"
            "  synth     random-weight model --shape SHAPE [--dtype f32] [-o FILE.xllm] [--gguf FILE.gguf] [--hf DIR]\n"
            "  bench     tokens/s            -m MODEL [-p 512] [-n 128] [-t THREADS] [-r 3] [--json]\n"
            "  serve     OpenAI HTTP server  -m MODEL [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--config F.yaml]\n"
            "\n"
            "MODEL is %s.\n"
            "Every command that loads a model takes --backend cpu|vulkan [cpu] and --device N [0]\n"
            "(xllm info --devices lists what Vulkan sees).\n"
            "Defaults are shown in brackets; 'xllm COMMAND --help' lists every option of a command with\n"
            "its default and an example. 'xllm --version' prints the version.\n",
            XLLM_VERSION, CLI_MODEL_FORMATS);
}

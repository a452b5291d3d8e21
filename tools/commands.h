/*
 * commands.h - subcommands of the `xllm` command that live in their own
 * files under tools/. Each takes the arguments after "xllm" (argv[0] is the
 * subcommand's name) and returns the process exit status: 0 on success, 1
 * after printing "xllm: error: ..." on stderr.
 */
#ifndef XLLM_TOOLS_COMMANDS_H
#define XLLM_TOOLS_COMMANDS_H

/* xllm run: generate text (tools/cmd_run.c); xllm logits: the logits of a
 * token sequence (tools/cmd_logits.c); xllm tokenize: a tokenizer over a
 * JSONL file (tools/cmd_tokenize.c). */
int cmd_run(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);

/* xllm eval: perplexity of a text, and KL divergence / top-1 agreement
 * against a reference model (tools/cmd_eval.c). */
int cmd_eval(int argc, char **argv);

/* xllm convert: HF checkpoint -> .xllm; xllm info: what a model file holds
 * (tools/cmd_convert.c). */
int cmd_convert(int argc, char **argv);
int cmd_info(int argc, char **argv);

/* xllm synth: random-weight models of real shapes (tools/cmd_synth.c);
 * xllm bench: prompt-processing and generation tokens/s (tools/cmd_bench.c). */
int cmd_synth(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* xllm serve: the OpenAI-compatible HTTP server (tools/cmd_serve.c, src/server). */
int cmd_serve(int argc, char **argv);

#endif

/* xllm.c - the `xllm` command (placeholder until the subcommands land). */
#include <stdio.h>
int main(void) { puts("xllm"); return 0; }

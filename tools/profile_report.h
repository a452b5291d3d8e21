/*
 * profile_report.h - `--profile FILE.json` for CLI commands: the per-operator
 * kernel profile written as JSON and summarised as a table on stderr.
 */
#ifndef XLLM_TOOLS_PROFILE_REPORT_H
#define XLLM_TOOLS_PROFILE_REPORT_H

/* Write xllm_profile_report() to path and print the table. 0 on success, 1
 * after printing "xllm: error: ..." */
int profile_write(const char *path);

#endif

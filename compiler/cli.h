/* cli.h - apexc's command line (DESIGN.md 13) parsed into ApxOptions plus the CLI's own
 * actions. Kept apart from main() so tests can parse argument vectors directly. */
#ifndef APX_CLI_H
#define APX_CLI_H

#include <stddef.h>

#include "ir/arena.h"
#include "ir/options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxCliAction {
  APX_CLI_COMPILE = 0, /* apexc MODEL.onnx ... */
  APX_CLI_HELP,
  APX_CLI_VERSION,
  APX_CLI_LIST_OPS,
  APX_CLI_DUMP_PLAN,   /* --dump-plan PLAN.apx */
} ApxCliAction;

typedef struct ApxCliArgs {
  ApxCliAction action;
  const char *dump_plan_path;
  int write_plan;      /* -o given, or no inspection flag: write the plan */
  int summary;         /* print the model summary (default when nothing else prints) */
  ApxArena strings;    /* copies of split list items and --dim names that o points into */
  int bucket_report;   /* --bucket-report[=text|json]: 1 text, 2 JSON (passes/bucketing.h) */
  char warning[256];   /* one line ("warning: ...") the CLI prints unless -q, or "" */
} ApxCliArgs;

#define APX_VERSION "0.1.0"

/* Parses argv into o (initialized here with apx_options_init) and a. Returns 0, or -1 with a
 * one-line message in err ("apexc: ..."), which the CLI prints with exit code 2. Strings in
 * o point into argv or into a->strings: call apx_cli_args_free(a) (on success and failure)
 * once o is no longer used. */
int apx_cli_parse(int argc, char **argv, ApxOptions *o, ApxCliArgs *a, char *err, size_t cap);
void apx_cli_args_free(ApxCliArgs *a);
/* Before compiling: every output the parsed flags write (-o when the plan is written,
 * --emit-onnx, --explain-out) must be writable. Refuses a directory or an existing file that
 * is not a regular file (FIFO, device), and checks that a temporary file "<path>.tmp.<pid>"
 * can be created beside it (created with O_EXCL|O_NOFOLLOW, then removed). Returns 0, or -1
 * with "<path>: cannot write: <reason>" in err (exit code 2). */
int apx_cli_check_outputs(const ApxOptions *o, const ApxCliArgs *a, char *err, size_t cap);
/* The --help text. */
const char *apx_cli_usage(void);
/* Every option name apx_cli_parse accepts ("-O2", "--lr", ...), NULL-terminated: "did you
 * mean" here, and apexrun's hint that an option belongs to the compiler. */
const char *const *apx_cli_flag_names(void);

#ifdef __cplusplus
}
#endif
#endif

/* cli.c - apexc argument parsing: every flag of DESIGN.md 13 into ApxOptions. Accepts both
 * "--flag=value" and "--flag value", and the spellings users bring from Apex and PyTorch's
 * GradScaler (ir/suggest.h): underscores for dashes (--loss_scale, --keep_batchnorm_fp32=False),
 * --opt-level O2, --init-scale, --growth-interval (= --scale-window), --growth-factor,
 * --backoff-factor. Unknown flags ("did you mean --X?" when one is near), missing values and
 * malformed numbers are usage errors (exit 2) with one line naming the flag. */
#include "compiler/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir/fileio.h"
#include "ir/suggest.h"

static const char usage_text[] =
    "usage: apexc MODEL.onnx [-O0|-O1|-O2|-O3] [-o PLAN.apx] [options]\n"
    "       apexc --list-ops | --dump-plan PLAN.apx | --help | --version\n"
    "\n"
    "Compiles an ONNX forward+loss graph into a mixed-precision training plan (Apex AMP\n"
    "semantics, decided ahead of time). With no -o and no inspection flag it prints a model\n"
    "summary and writes MODEL.apx next to the model.\n"
    "\n"
    "Opt levels (Apex semantics; any explicit flag overrides the preset):\n"
    "  -O0   fp32 everywhere, loss scale 1 (the accuracy baseline)\n"
    "  -O1   per-op lists: allow list in half, deny list in fp32, promote to widest;\n"
    "        weights stay fp32, dynamic loss scaling (default)\n"
    "  -O2   model in half, BatchNorm kept fp32, fp32 master weights, dynamic loss scaling\n"
    "  -O3   everything half, loss scale 1 (the speed baseline)\n"
    "\n"
    "Precision:\n"
    "  --half=fp16|bf16            half type (default fp16; bf16 defaults to loss scale 1)\n"
    "  --keep-batchnorm-fp32[=true|false]   --master-weights[=true|false]\n"
    "  --loss-scale=dynamic|N      dynamic (init 2^16) or a static scale N (defaults: dynamic\n"
    "                              at -O1/-O2, static 1 at -O0/-O3 and with bf16)\n"
    "  --init-scale S              dynamic, starting at S (GradScaler's init_scale)\n"
    "  dynamic scaling only:       --min-loss-scale S (default none)  --max-loss-scale S\n"
    "                              (default 2^24)  --scale-window N (= --growth-interval: clean\n"
    "                              steps before the scale grows, default 2000)\n"
    "                              --growth-factor F (> 1, default 2)  --backoff-factor F (in\n"
    "                              (0, 1), default 0.5)  --hysteresis N (overflows tolerated\n"
    "                              before backing off, default 1)\n"
    "  --half-ops A,B  --fp32-ops A,B  --promote-ops A,B   per-op overrides (op types)\n"
    "  --fp32-nodes PATTERN        keep nodes whose name matches the glob in fp32 (repeatable)\n"
    "  --policy FILE.json          decisions from a file (the --explain=json schema)\n"
    "  --clamp-constants           clamp out-of-range constants instead of keeping fp32\n"
    "  --list-ops                  print the op table with each op's precision list\n"
    "\n"
    "Inspection:\n"
    "  --explain[=text|json|dot]   every node's precision decision and why, then a summary;\n"
    "                              text fits 120 columns (dtype runs as fp16x3); json is\n"
    "                              docs/explain-schema.md (--policy reads it back); dot is a\n"
    "                              Graphviz graph coloured by precision, inserted Casts marked\n"
    "                              (dot -Tsvg FILE.dot -o FILE.svg)\n"
    "  --explain-out FILE          write the explanation to FILE instead of stdout\n"
    "  --emit-onnx FILE            the mixed-precision forward graph as ONNX (Cast nodes added,\n"
    "                              each node's decision and reason in its doc_string; always\n"
    "                              onnx.checker-valid: the opset is raised for bf16 ops)\n"
    "  --fusion-report             what fused and why candidates did not\n"
    "  --bucket-report[=text|json] gradient buckets: members, bytes, kernel each is ready at\n"
    "  --dump-plan PLAN.apx        print a compiled plan readably\n"
    "\n"
    "Graph binding:\n"
    "  --dim NAME=V                bind a symbolic dimension (repeatable)\n"
    "  --loss NAME[,NAME...]       the loss value (default: the first graph output); several\n"
    "                              (--loss A,B) train the sum of their gradients, each loss\n"
    "                              with its own loss scaler (Apex num_losses)\n"
    "  --frozen A,B                float initializers that are not trained (a model from\n"
    "                              scripts/apexc_torch.py lists its trainable ones in\n"
    "                              metadata_props apexc.trainable; --frozen removes names)\n"
    "  --inference                 compile the forward graph only (no training graph; the\n"
    "                              training, loss-scaling and bucketing flags are refused)\n"
    "  --fold-max-mb N             MiB of tensors that constant folding may create (default\n"
    "                              256); nodes on constants past it run at run time, with a\n"
    "                              warning (compile-time only ops always fold)\n"
    "  --allow-old-opset           accept ai.onnx opset 1..12 (below 7: ops unchanged since) and ir_version 3..6\n"
    "\n"
    "Training:\n"
    "  --optimizer sgd|adamw|lamb  (default adamw)      --lr X (default 1e-3)\n"
    "  sgd only:    --momentum M (default 0)  --nesterov (needs momentum > 0)\n"
    "  adamw/lamb:  --betas B1,B2 (default 0.9,0.999)  --eps E (default 1e-8; lamb 1e-6)\n"
    "  --weight-decay W            adamw and lamb: default 0.01, decoupled (AdamW: p *= 1 - lr W;\n"
    "                              lamb adds W p to its update); sgd: default 0, L2 added to the\n"
    "                              gradient (torch.optim.SGD)\n"
    "  --clip-grad-norm N (default off)  --accumulate K (default 1)  --seed S (default 0)\n"
    "  --bn-running-var=auto|population|unbiased   BatchNorm's running variance: the batch\n"
    "                              variance (ONNX's definition) or x n/(n-1) (PyTorch's); auto\n"
    "                              (default): unbiased when producer_name is \"pytorch\"\n"
    "  --warmup-steps N (default 0, at most --total-steps)\n"
    "  --lr-schedule constant|cosine|linear (default constant)\n"
    "  --total-steps N             length of the schedule (default: apexrun's --steps)\n"
    "\n"
    "Fusion and data parallelism:\n"
    "  --no-fuse  --bucket-mb N (25)  --first-bucket-mb N (1)  --allreduce-fp32\n"
    "  --grad-predivide F  --sync-bn\n"
    "\n"
    "Debugging:\n"
    "  --disable-pass=NAME  --dump-after=NAME  --verify-each-pass\n"
    "  --time-passes               wall time and peak memory of load, each pass and the plan\n"
    "                              writing, one line each on stderr (also with -q); the arena\n"
    "                              packing, run on a thread beside plan building, has its own\n"
    "                              line (memplan_pack)\n"
    "  -q, --quiet                 print errors only (no summary, no warnings)\n"
    "\n"
    "Apex's and PyTorch's spellings are accepted: underscores for dashes (--loss_scale 128,\n"
    "--keep_batchnorm_fp32=False, --master_weights=True), --opt-level O2 (= -O2), True/False.\n"
    "Outputs (-o, --emit-onnx, --explain-out) must not be the input model; contradictory\n"
    "flags (e.g. --nesterov without --momentum, --betas with sgd) are usage errors.\n"
    "Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input.\n";

const char *apx_cli_usage(void) { return usage_text; }

void apx_cli_args_free(ApxCliArgs *a) { apx_arena_free(&a->strings); }

typedef struct Parser {
  int argc, i;
  char **argv;
  char *err;
  size_t cap;
  ApxArena *strings;
} Parser;

static int fail(Parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Parser *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = snprintf(p->err, p->cap, "apexc: ");
  if (k >= 0 && (size_t)k < p->cap) vsnprintf(p->err + k, p->cap - (size_t)k, fmt, ap);
  va_end(ap);
  return -1;
}

/* Matches "--name" or "--name=value". Sets *val to the inline value or NULL. */
static int flag_is(const char *arg, const char *name, const char **val) {
  size_t n = strlen(name);
  if (strncmp(arg, name, n) != 0) return 0;
  if (arg[n] == '\0') {
    *val = NULL;
    return 1;
  }
  if (arg[n] == '=') {
    *val = arg + n + 1;
    return 1;
  }
  return 0;
}

/* The flag's value: inline or the next argument. */
static const char *need_value(Parser *p, const char *flag, const char *inline_val) {
  if (inline_val) return inline_val;
  if (p->i + 1 >= p->argc) {
    fail(p, "%s needs a value (see apexc --help)", flag);
    return NULL;
  }
  return p->argv[++p->i];
}

static int parse_double(Parser *p, const char *flag, const char *s, double lo, double hi,
                        double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
    return fail(p, "%s: '%s' is not a number in [%g, %g]", flag, s, lo, hi);
  *out = v;
  return 0;
}

static int parse_float(Parser *p, const char *flag, const char *s, double lo, double hi,
                       float *out) {
  double v;
  if (parse_double(p, flag, s, lo, hi, &v)) return -1;
  *out = (float)v;
  return 0;
}

static int parse_int(Parser *p, const char *flag, const char *s, long long lo, long long hi,
                     long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    return fail(p, "%s: '%s' is not an integer in [%lld, %lld]", flag, s, lo, hi);
  *out = v;
  return 0;
}

static int parse_bool(Parser *p, const char *flag, const char *s, ApxTri *out) {
  int b = apx_bool_parse(s); /* true/false, True/False (Apex's Python spelling), 1/0, on/off */
  if (b < 0) return fail(p, "%s: expected true or false, got '%s'", flag, s);
  *out = b ? APX_TRI_ON : APX_TRI_OFF;
  return 0;
}

/* Appends comma-separated items of s to list (s is copied so items can be split). */
static int add_list(Parser *p, const char *flag, const char *s, ApxNameList *list) {
  char *copy = apx_arena_strdup(p->strings, s); /* options point into it */
  if (!copy) return fail(p, "out of memory");
  for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
    if (!*tok) continue;
    if (list->n >= APX_MAX_LIST) return fail(p, "%s: more than %d entries", flag, APX_MAX_LIST);
    list->items[list->n++] = tok;
  }
  return 0;
}

/* Flags that only mean something when a training graph is built (refused with --inference)
 * and flags of the dynamic loss scaler (accepted with a static loss scale, as Apex does, with
 * a warning that they have no effect). */
static const char *const training_flags[] = {
    "--optimizer", "--lr", "--momentum", "--nesterov", "--betas", "--eps", "--weight-decay",
    "--clip-grad-norm", "--accumulate", "--warmup-steps", "--lr-schedule", "--total-steps",
    "--loss-scale", "--min-loss-scale", "--max-loss-scale", "--scale-window", "--hysteresis",
    "--init-scale", "--growth-interval", "--growth-factor", "--backoff-factor",
    "--master-weights", "--bucket-mb", "--first-bucket-mb", "--allreduce-fp32",
    "--grad-predivide", "--sync-bn", "--bn-running-var", NULL};
static const char *const dynamic_scaler_flags[] = {"--min-loss-scale", "--max-loss-scale",
                                                   "--scale-window", "--hysteresis",
                                                   "--growth-interval", "--growth-factor",
                                                   "--backoff-factor", NULL};

/* Every option apx_cli_parse accepts (after ir/suggest.h normalization), for "did you mean". */
static const char *const all_flags[] = {
    "-O0", "-O1", "-O2", "-O3", "-o", "-h", "--help", "--version", "--list-ops", "--dump-plan",
    "--explain-out", "--explain", "--emit-onnx", "--half", "--keep-batchnorm-fp32",
    "--master-weights", "--loss-scale", "--init-scale", "--min-loss-scale", "--max-loss-scale",
    "--scale-window", "--growth-interval", "--growth-factor", "--backoff-factor", "--hysteresis",
    "--half-ops", "--fp32-ops", "--promote-ops", "--fp32-nodes", "--policy", "--clamp-constants",
    "--dim", "--loss", "--frozen", "--inference", "--allow-old-opset", "--optimizer", "--lr",
    "--momentum", "--nesterov", "--betas", "--eps", "--weight-decay", "--clip-grad-norm",
    "--accumulate", "--warmup-steps", "--lr-schedule", "--total-steps", "--seed", "--no-fuse",
    "--fusion-report", "--bucket-mb", "--first-bucket-mb", "--allreduce-fp32", "--grad-predivide",
    "--sync-bn", "--bucket-report", "--disable-pass", "--dump-after", "--verify-each-pass",
    "--quiet", "-q", "--opt-level", NULL};

const char *const *apx_cli_flag_names(void) { return all_flags; }

/* Apex accepts the dynamic scaler's settings with a static loss scale (they are unused):
 * a one-line warning in a->warning naming the flags given (bit i: dynamic_scaler_flags[i]). */
static void warn_unused_scaler_flags(const ApxOptions *o, ApxCliArgs *a, unsigned seen) {
  if (!seen || !o->training || o->loss_scale_mode != APX_LOSS_SCALE_STATIC) return;
  char names[128] = "";
  int n = 0;
  for (int i = 0; dynamic_scaler_flags[i]; i++) {
    if (!(seen & (1u << i))) continue;
    size_t k = strlen(names);
    snprintf(names + k, sizeof names - k, "%s%s", n ? ", " : "", dynamic_scaler_flags[i]);
    n++;
  }
  snprintf(a->warning, sizeof a->warning, "warning: %s %s no effect with a static loss "
           "scale (%g)", names, n > 1 ? "have" : "has", (double)o->loss_scale);
}

/* Apex starts a dynamic scaler at min(init, max) (and not below the floor): an initial scale
 * outside [--min-loss-scale, --max-loss-scale] is clamped into it, with a warning. */
static void clamp_initial_scale(ApxOptions *o, ApxCliArgs *a) {
  if (!o->training || o->loss_scale_mode != APX_LOSS_SCALE_DYNAMIC) return;
  float lo = o->min_loss_scale, hi = o->max_loss_scale, s = o->loss_scale;
  float to = s > hi ? hi : lo > 0 && s < lo ? lo : s;
  if (to == s) return;
  snprintf(a->warning, sizeof a->warning, "warning: the initial loss scale %g is %s %s %g: training "
           "starts at %g (the initial scale is clamped into [min, max], as in Apex)", (double)s,
           s > hi ? "above" : "below", s > hi ? "--max-loss-scale" : "--min-loss-scale",
           (double)to, (double)to);
  o->loss_scale = to;
}

/* The table entry arg ("--flag" or "--flag=value") names, or NULL. */
static const char *flag_in(const char *arg, const char *const *table) {
  const char *v;
  for (int i = 0; table[i]; i++)
    if (flag_is(arg, table[i], &v)) return table[i];
  return NULL;
}

/* MODEL.onnx -> MODEL.apx next to it (in the parser's arena). */
static const char *default_plan_path(Parser *p, const char *model) {
  size_t n = strlen(model);
  const char *dot = strrchr(model, '.');
  const char *slash = strrchr(model, '/');
  if (dot && (!slash || dot > slash)) n = (size_t)(dot - model);
  return apx_arena_printf(p->strings, "%.*s.apx", (int)n, model);
}

/* What the flags ask for together, once the preset is applied: contradictions and outputs
 * that would overwrite the model are usage errors. */
static int check_combinations(Parser *p, const ApxOptions *o, const ApxCliArgs *a,
                              int default_output, const char *training_flag,
                              int momentum_seen, int betas_seen, int eps_seen) {
  static const char *const optim_names[] = {"sgd", "adamw", "lamb"};
  const char *optim = (unsigned)o->optimizer < 3 ? optim_names[o->optimizer] : "?";
  if (!o->training && training_flag)
    return fail(p, "%s with --inference: it only applies to training (drop one of them)",
                training_flag);
  if (o->nesterov && o->optimizer != APX_OPTIM_SGD)
    return fail(p, "--nesterov with --optimizer %s: Nesterov momentum is an sgd option", optim);
  if (o->nesterov && !(o->momentum > 0))
    return fail(p, "--nesterov needs --momentum M with M > 0 (momentum is %g)",
                (double)o->momentum);
  if (momentum_seen && o->optimizer != APX_OPTIM_SGD)
    return fail(p, "--momentum with --optimizer %s: momentum is an sgd option (%s uses --betas)",
                optim, optim);
  if (betas_seen && o->optimizer == APX_OPTIM_SGD)
    return fail(p, "--betas with --optimizer sgd: betas are adamw/lamb options (sgd uses "
                "--momentum)");
  if (eps_seen && o->optimizer == APX_OPTIM_SGD)
    return fail(p, "--eps with --optimizer sgd: eps is an adamw/lamb option");
  if (o->total_steps > 0 && o->warmup_steps > o->total_steps)
    return fail(p, "--warmup-steps %d is more than --total-steps %lld", (int)o->warmup_steps,
                (long long)o->total_steps);
  if (o->explain_path && !o->explain)
    return fail(p, "--explain-out %s without --explain: nothing to write (add --explain or "
                "--explain=json)", o->explain_path);
  const struct {
    const char *flag, *path;
  } outs[] = {{"-o", a->write_plan ? o->output_path : NULL},
              {"--emit-onnx", o->emit_onnx},
              {"--explain-out", o->explain_path}};
  const size_t n_outs = sizeof outs / sizeof outs[0];
  for (size_t i = 0; i < n_outs; i++) {
    if (!outs[i].path) continue;
    if (apx_same_file(outs[i].path, o->model_path)) {
      if (i == 0 && default_output) /* MODEL.apx given as the model */
        return fail(p, "%s: refusing to overwrite the input model with the default plan path "
                    "(give -o PLAN.apx; a compiled plan runs with apexrun)", o->model_path);
      return fail(p, "%s %s: refusing to overwrite the input model %s", outs[i].flag,
                  outs[i].path, o->model_path);
    }
    if (o->policy_path && apx_same_file(outs[i].path, o->policy_path))
      return fail(p, "%s %s: refusing to overwrite the --policy file %s", outs[i].flag, outs[i].path,
                  o->policy_path);
    /* two outputs on one path: one would silently replace the other */
    for (size_t j = 0; j < i; j++)
      if (outs[j].path && apx_same_file(outs[i].path, outs[j].path))
        return fail(p, "%s %s and %s %s are the same file: one output would replace the other "
                    "(give each its own path)", outs[j].flag, outs[j].path, outs[i].flag, outs[i].path);
  }
  return 0;
}

/* 0 if path can be written as an output (see apx_cli_check_outputs), else -1 with a message.
 * renamed: the writer replaces the file by renaming a temporary beside it (the plan), so an
 * existing non-regular file is refused and the temporary is probed; otherwise the writer
 * opens the path itself (--emit-onnx, --explain-out: /dev/stdout or a pipe are fine), so only
 * a folder is refused and write permission is checked on the file or its folder. */
static int probe_output(const char *path, int renamed, char *err, size_t cap) {
  struct stat st;
  const char *why = NULL;
  if (!*path) {
    why = strerror(ENOENT);
  } else if (!renamed) {
    if (stat(path, &st) == 0) {
      if (S_ISDIR(st.st_mode)) why = strerror(EISDIR);
      else if (access(path, W_OK) != 0) why = strerror(errno);
    } else if (errno != ENOENT) {
      why = strerror(errno);
    } else {
      char *dir = strdup(path);
      if (!dir) {
        why = strerror(ENOMEM);
      } else {
        char *slash = strrchr(dir, '/');
        const char *folder = !slash ? "." : slash == dir ? "/" : (*slash = '\0', dir);
        if (access(folder, W_OK | X_OK) != 0) why = strerror(errno);
        free(dir);
      }
    }
  } else if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) why = strerror(EISDIR);
    else if (!S_ISREG(st.st_mode))
      why = S_ISFIFO(st.st_mode) ? "not a regular file (a FIFO)"
            : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "not a regular file (a device)"
            : "not a regular file";
  } else if (errno != ENOENT) {
    why = strerror(errno);
  }
  if (!why && renamed) { /* a temporary file beside it, as the plan writer creates */
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp) {
      why = strerror(ENOMEM);
    } else {
      snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
      int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0) {
        why = strerror(errno);
      } else {
        close(fd);
        unlink(tmp);
      }
      free(tmp);
    }
  }
  if (!why) return 0;
  snprintf(err, cap, "%s: cannot write: %s", path, why);
  return -1;
}

int apx_cli_check_outputs(const ApxOptions *o, const ApxCliArgs *a, char *err, size_t cap) {
  err[0] = '\0';
  if (a->action != APX_CLI_COMPILE) return 0;
  const char *outs[] = {a->write_plan ? o->output_path : NULL, o->emit_onnx,
                        o->explain ? o->explain_path : NULL};
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
    if (outs[i] && probe_output(outs[i], i == 0, err, cap)) return -1;
  return 0;
}

int apx_cli_parse(int argc, char **argv, ApxOptions *o, ApxCliArgs *a, char *err, size_t cap) {
  memset(a, 0, sizeof *a);
  apx_arena_init(&a->strings);
  Parser p = {argc, 1, argv, err, cap, &a->strings};
  apx_options_init(o);
  err[0] = '\0';
  int explicit_level = 0, inspect = 0, momentum_seen = 0, betas_seen = 0, eps_seen = 0;
  int init_scale_seen = 0, static_scale_seen = 0; /* --init-scale, --loss-scale N */
  const char *training_flag = NULL;
  unsigned scaler_seen = 0; /* bit i: dynamic_scaler_flags[i] given */
  for (; p.i < argc; p.i++) {
    const char *arg = argv[p.i], *v = NULL;
    long long iv;
    /* Apex's spellings: --loss_scale -> --loss-scale (values, which options keep pointers
     * to, live in the arena copy as long as o does) */
    char norm[256];
    if (apx_flag_normalize(arg, norm, sizeof norm) == 1 && !(arg = apx_arena_strdup(p.strings, norm)))
      return fail(&p, "out of memory");
    if (!training_flag) training_flag = flag_in(arg, training_flags);
    for (int i = 0; dynamic_scaler_flags[i]; i++)
      if (flag_is(arg, dynamic_scaler_flags[i], &v)) scaler_seen |= 1u << i;
    v = NULL;
    if (arg[0] != '-' || arg[1] == '\0') {
      if (o->model_path) return fail(&p, "more than one model given ('%s' and '%s')", o->model_path, arg);
      o->model_path = arg;
    } else if (!strcmp(arg, "-O0") || !strcmp(arg, "-O1") || !strcmp(arg, "-O2") || !strcmp(arg, "-O3")) {
      o->opt_level = (ApxOptLevel)(arg[2] - '0');
      explicit_level = 1;
    } else if (arg[1] == 'O') {
      return fail(&p, "unknown opt level '%s' (use -O0, -O1, -O2 or -O3)", arg);
    } else if (flag_is(arg, "--opt-level", &v)) { /* Apex's opt_level="O2" */
      const char *s = need_value(&p, "--opt-level", v);
      if (!s) return -1;
      const char *d = s[0] == 'O' || s[0] == 'o' ? s + 1 : s;
      if (d[0] < '0' || d[0] > '3' || d[1])
        return fail(&p, "--opt-level: expected O0, O1, O2 or O3, got '%s'", s);
      o->opt_level = (ApxOptLevel)(d[0] - '0');
      explicit_level = 1;
    } else if (!strcmp(arg, "-o")) {
      if (!(o->output_path = need_value(&p, "-o", NULL))) return -1;
      a->write_plan = 1;
    } else if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      a->action = APX_CLI_HELP;
      return 0;
    } else if (!strcmp(arg, "--version")) {
      a->action = APX_CLI_VERSION;
      return 0;
    } else if (!strcmp(arg, "--list-ops")) {
      a->action = APX_CLI_LIST_OPS;
    } else if (flag_is(arg, "--dump-plan", &v)) {
      if (!(a->dump_plan_path = need_value(&p, "--dump-plan", v))) return -1;
      a->action = APX_CLI_DUMP_PLAN;
    } else if (flag_is(arg, "--explain-out", &v)) {
      if (!(o->explain_path = need_value(&p, "--explain-out", v))) return -1;
    } else if (flag_is(arg, "--explain", &v)) {
      if (!v || !strcmp(v, "text")) o->explain = 1;
      else if (!strcmp(v, "json")) o->explain = 2;
      else if (!strcmp(v, "dot")) o->explain = 3;
      else return fail(&p, "--explain: expected text, json or dot, got '%s'", v);
      inspect = 1;
    } else if (flag_is(arg, "--emit-onnx", &v)) {
      if (!(o->emit_onnx = need_value(&p, "--emit-onnx", v))) return -1;
      inspect = 1;
    } else if (flag_is(arg, "--half", &v)) {
      const char *s = need_value(&p, "--half", v);
      if (!s) return -1;
      o->half = apx_dtype_parse(s);
      if (!apx_dtype_is_half(o->half)) return fail(&p, "--half: expected fp16 or bf16, got '%s'", s);
      o->half_set = 1;
    } else if (flag_is(arg, "--keep-batchnorm-fp32", &v)) {
      if (parse_bool(&p, "--keep-batchnorm-fp32", v, &o->keep_batchnorm_fp32)) return -1;
    } else if (flag_is(arg, "--master-weights", &v)) {
      if (parse_bool(&p, "--master-weights", v, &o->master_weights)) return -1;
    } else if (flag_is(arg, "--loss-scale", &v)) {
      const char *s = need_value(&p, "--loss-scale", v);
      if (!s) return -1;
      if (!strcmp(s, "dynamic")) {
        o->loss_scale_mode = APX_LOSS_SCALE_DYNAMIC;
        if (!init_scale_seen) o->loss_scale = 65536.0f; /* --init-scale says where it starts */
      } else {
        if (init_scale_seen)
          return fail(&p, "--loss-scale %s with --init-scale %g: --init-scale is where a dynamic scale "
                      "starts (GradScaler's init_scale); give one of them", s, (double)o->loss_scale);
        o->loss_scale_mode = APX_LOSS_SCALE_STATIC;
        if (parse_float(&p, "--loss-scale", s, 1e-30, 3e38, &o->loss_scale)) return -1;
        static_scale_seen = 1;
      }
      o->loss_scale_set = 1;
    } else if (flag_is(arg, "--init-scale", &v)) { /* GradScaler(init_scale=S): dynamic from S */
      const char *s = need_value(&p, "--init-scale", v);
      float f;
      if (!s || parse_float(&p, "--init-scale", s, 1e-30, 3e38, &f)) return -1;
      if (static_scale_seen)
        return fail(&p, "--init-scale %s with --loss-scale %g (static): --init-scale is where a dynamic "
                    "scale starts (GradScaler's init_scale); give one of them", s, (double)o->loss_scale);
      o->loss_scale_mode = APX_LOSS_SCALE_DYNAMIC;
      o->loss_scale = f;
      o->loss_scale_set = 1;
      init_scale_seen = 1;
    } else if (flag_is(arg, "--min-loss-scale", &v)) {
      const char *s = need_value(&p, "--min-loss-scale", v);
      if (!s || parse_float(&p, "--min-loss-scale", s, 0, 3e38, &o->min_loss_scale)) return -1;
    } else if (flag_is(arg, "--max-loss-scale", &v)) {
      const char *s = need_value(&p, "--max-loss-scale", v);
      if (!s || parse_float(&p, "--max-loss-scale", s, 1e-30, 3e38, &o->max_loss_scale)) return -1;
    } else if (flag_is(arg, "--scale-window", &v) || flag_is(arg, "--growth-interval", &v)) {
      const char *flag = arg[2] == 's' ? "--scale-window" : "--growth-interval";
      const char *s = need_value(&p, flag, v);
      if (!s || parse_int(&p, flag, s, 1, 1000000000, &iv)) return -1;
      o->scale_window = (int32_t)iv;
    } else if (flag_is(arg, "--growth-factor", &v)) {
      const char *s = need_value(&p, "--growth-factor", v);
      if (!s || parse_float(&p, "--growth-factor", s, 1, 1e6, &o->growth_factor)) return -1;
      if (!(o->growth_factor > 1)) return fail(&p, "--growth-factor: '%s' must be > 1 (default 2)", s);
    } else if (flag_is(arg, "--backoff-factor", &v)) {
      const char *s = need_value(&p, "--backoff-factor", v);
      if (!s || parse_float(&p, "--backoff-factor", s, 0, 1, &o->backoff_factor)) return -1;
      if (!(o->backoff_factor > 0 && o->backoff_factor < 1))
        return fail(&p, "--backoff-factor: '%s' must be in (0, 1) (default 0.5)", s);
    } else if (flag_is(arg, "--hysteresis", &v)) {
      const char *s = need_value(&p, "--hysteresis", v);
      if (!s || parse_int(&p, "--hysteresis", s, 1, 1000000, &iv)) return -1;
      o->hysteresis = (int32_t)iv;
    } else if (flag_is(arg, "--half-ops", &v)) {
      const char *s = need_value(&p, "--half-ops", v);
      if (!s || add_list(&p, "--half-ops", s, &o->half_ops)) return -1;
    } else if (flag_is(arg, "--fp32-ops", &v)) {
      const char *s = need_value(&p, "--fp32-ops", v);
      if (!s || add_list(&p, "--fp32-ops", s, &o->fp32_ops)) return -1;
    } else if (flag_is(arg, "--promote-ops", &v)) {
      const char *s = need_value(&p, "--promote-ops", v);
      if (!s || add_list(&p, "--promote-ops", s, &o->promote_ops)) return -1;
    } else if (flag_is(arg, "--fp32-nodes", &v)) {
      const char *s = need_value(&p, "--fp32-nodes", v);
      if (!s) return -1;
      if (o->fp32_nodes.n >= APX_MAX_LIST) return fail(&p, "--fp32-nodes: more than %d patterns", APX_MAX_LIST);
      o->fp32_nodes.items[o->fp32_nodes.n++] = s;
    } else if (flag_is(arg, "--policy", &v)) {
      if (!(o->policy_path = need_value(&p, "--policy", v))) return -1;
    } else if (flag_is(arg, "--fold-max-mb", &v)) {
      const char *s = need_value(&p, "--fold-max-mb", v);
      if (!s || parse_double(&p, "--fold-max-mb", s, 0, 1e9, &o->fold_max_mb)) return -1;
    } else if (!strcmp(arg, "--clamp-constants")) {
      o->clamp_constants = 1;
    } else if (flag_is(arg, "--dim", &v)) {
      const char *s = need_value(&p, "--dim", v);
      if (!s) return -1;
      const char *eq = strchr(s, '=');
      if (!eq || eq == s) return fail(&p, "--dim: expected NAME=VALUE, got '%s'", s);
      if (o->n_dims >= APX_MAX_DIMS_BOUND) return fail(&p, "--dim: more than %d bindings", APX_MAX_DIMS_BOUND);
      for (int k = 0; k < o->n_dims; k++)
        if (strlen(o->dim_names[k]) == (size_t)(eq - s) && !strncmp(o->dim_names[k], s, (size_t)(eq - s)))
          return fail(&p, "--dim %s: '%s' is already bound to %lld", s, o->dim_names[k],
                      (long long)o->dim_values[k]);
      if (parse_int(&p, "--dim", eq + 1, 1, (long long)1 << 40, &iv)) return -1;
      if (!(o->dim_names[o->n_dims] = apx_arena_strndup(p.strings, s, (size_t)(eq - s))))
        return fail(&p, "out of memory");
      o->dim_values[o->n_dims++] = iv;
    } else if (flag_is(arg, "--loss", &v)) {
      const char *s = need_value(&p, "--loss", v);
      if (!s) return -1;
      if (o->loss_name)
        return fail(&p, "--loss %s: --loss is already given (--loss %s); name several losses in one "
                    "list: --loss %s,%s", s, o->loss_name, o->loss_name, s);
      o->loss_name = s;
    } else if (flag_is(arg, "--frozen", &v)) {
      const char *s = need_value(&p, "--frozen", v);
      if (!s || add_list(&p, "--frozen", s, &o->frozen)) return -1;
    } else if (!strcmp(arg, "--inference")) {
      o->training = 0;
    } else if (!strcmp(arg, "--allow-old-opset")) {
      o->opset_min = 1;
      o->ir_version_min = 3;
    } else if (flag_is(arg, "--optimizer", &v)) {
      const char *s = need_value(&p, "--optimizer", v);
      if (!s) return -1;
      if (!strcmp(s, "sgd")) o->optimizer = APX_OPTIM_SGD;
      else if (!strcmp(s, "adamw")) o->optimizer = APX_OPTIM_ADAMW;
      else if (!strcmp(s, "lamb")) o->optimizer = APX_OPTIM_LAMB;
      else return fail(&p, "--optimizer: expected sgd, adamw or lamb, got '%s'", s);
    } else if (flag_is(arg, "--lr", &v)) {
      const char *s = need_value(&p, "--lr", v);
      if (!s || parse_float(&p, "--lr", s, 0, 1e6, &o->lr)) return -1;
      o->lr_set = 1;
    } else if (flag_is(arg, "--momentum", &v)) {
      const char *s = need_value(&p, "--momentum", v);
      if (!s || parse_float(&p, "--momentum", s, 0, 1, &o->momentum)) return -1;
      momentum_seen = 1;
    } else if (!strcmp(arg, "--nesterov")) {
      o->nesterov = 1;
    } else if (flag_is(arg, "--betas", &v)) {
      const char *s = need_value(&p, "--betas", v);
      if (!s) return -1;
      const char *comma = strchr(s, ',');
      if (!comma) return fail(&p, "--betas: expected B1,B2, got '%s'", s);
      char b1[64];
      snprintf(b1, sizeof b1, "%.*s", (int)(comma - s), s);
      if (parse_float(&p, "--betas", b1, 0, 0.999999999, &o->beta1) ||
          parse_float(&p, "--betas", comma + 1, 0, 0.999999999, &o->beta2))
        return -1;
      betas_seen = 1;
    } else if (flag_is(arg, "--eps", &v)) {
      const char *s = need_value(&p, "--eps", v);
      if (!s || parse_float(&p, "--eps", s, 0, 1, &o->eps)) return -1;
      o->eps_set = 1;
      eps_seen = 1;
    } else if (flag_is(arg, "--weight-decay", &v)) {
      const char *s = need_value(&p, "--weight-decay", v);
      if (!s || parse_float(&p, "--weight-decay", s, 0, 1e3, &o->weight_decay)) return -1;
      o->weight_decay_set = 1;
    } else if (flag_is(arg, "--clip-grad-norm", &v)) {
      const char *s = need_value(&p, "--clip-grad-norm", v);
      if (!s || parse_float(&p, "--clip-grad-norm", s, 0, 3e38, &o->clip_grad_norm)) return -1;
    } else if (flag_is(arg, "--accumulate", &v)) {
      const char *s = need_value(&p, "--accumulate", v);
      if (!s || parse_int(&p, "--accumulate", s, 1, 1 << 20, &iv)) return -1;
      o->accumulate = (int32_t)iv;
    } else if (flag_is(arg, "--warmup-steps", &v)) {
      const char *s = need_value(&p, "--warmup-steps", v);
      if (!s || parse_int(&p, "--warmup-steps", s, 0, INT32_MAX, &iv)) return -1;
      o->warmup_steps = (int32_t)iv;
    } else if (flag_is(arg, "--lr-schedule", &v)) {
      const char *s = need_value(&p, "--lr-schedule", v);
      if (!s) return -1;
      if (!strcmp(s, "constant")) o->schedule = 0;
      else if (!strcmp(s, "cosine")) o->schedule = 1;
      else if (!strcmp(s, "linear")) o->schedule = 2;
      else return fail(&p, "--lr-schedule: expected constant, cosine or linear, got '%s'", s);
    } else if (flag_is(arg, "--total-steps", &v)) {
      const char *s = need_value(&p, "--total-steps", v);
      if (!s || parse_int(&p, "--total-steps", s, 1, 1LL << 40, &iv)) return -1;
      o->total_steps = iv;
    } else if (flag_is(arg, "--seed", &v)) {
      const char *s = need_value(&p, "--seed", v);
      if (!s || parse_int(&p, "--seed", s, 0, 1LL << 62, &iv)) return -1;
      o->seed = (uint64_t)iv;
    } else if (!strcmp(arg, "--no-fuse")) {
      o->no_fuse = 1;
    } else if (!strcmp(arg, "--fusion-report")) {
      o->fusion_report = 1;
      inspect = 1;
    } else if (flag_is(arg, "--bucket-mb", &v)) {
      const char *s = need_value(&p, "--bucket-mb", v);
      if (!s || parse_double(&p, "--bucket-mb", s, 1e-6, 1e6, &o->bucket_mb)) return -1;
    } else if (flag_is(arg, "--first-bucket-mb", &v)) {
      const char *s = need_value(&p, "--first-bucket-mb", v);
      if (!s || parse_double(&p, "--first-bucket-mb", s, 1e-6, 1e6, &o->first_bucket_mb)) return -1;
    } else if (!strcmp(arg, "--allreduce-fp32")) {
      o->allreduce_fp32 = 1;
    } else if (flag_is(arg, "--grad-predivide", &v)) {
      const char *s = need_value(&p, "--grad-predivide", v);
      if (!s || parse_float(&p, "--grad-predivide", s, 1e-30, 1e30, &o->grad_predivide)) return -1;
    } else if (!strcmp(arg, "--sync-bn")) {
      o->sync_bn = 1;
    } else if (flag_is(arg, "--bn-running-var", &v)) {
      const char *s = need_value(&p, "--bn-running-var", v);
      if (!s) return -1;
      if (!strcmp(s, "auto")) o->bn_running_var = APX_BN_VAR_AUTO;
      else if (!strcmp(s, "population")) o->bn_running_var = APX_BN_VAR_POPULATION;
      else if (!strcmp(s, "unbiased")) o->bn_running_var = APX_BN_VAR_UNBIASED;
      else return fail(&p, "--bn-running-var: expected auto, population or unbiased, got '%s'", s);
    } else if (!strcmp(arg, "--bucket-report") || !strncmp(arg, "--bucket-report=", 16)) {
      const char *f = arg[15] == '=' ? arg + 16 : "text";
      if (!strcmp(f, "text")) a->bucket_report = 1;
      else if (!strcmp(f, "json")) a->bucket_report = 2;
      else return fail(&p, "--bucket-report: expected text or json, got '%s'", f);
      inspect = 1;
    } else if (flag_is(arg, "--disable-pass", &v)) {
      const char *s = need_value(&p, "--disable-pass", v);
      if (!s || add_list(&p, "--disable-pass", s, &o->disable_pass)) return -1;
    } else if (flag_is(arg, "--dump-after", &v)) {
      const char *s = need_value(&p, "--dump-after", v);
      if (!s || add_list(&p, "--dump-after", s, &o->dump_after)) return -1;
    } else if (!strcmp(arg, "--verify-each-pass")) {
      o->verify_each_pass = 1;
    } else if (!strcmp(arg, "--time-passes")) {
      o->time_passes = 1;
    } else if (!strcmp(arg, "--quiet") || !strcmp(arg, "-q")) {
      o->quiet = 1;
    } else {
      const char *near = apx_flag_suggest(arg, all_flags);
      if (near) return fail(&p, "unknown option '%s'; did you mean %s? (see apexc --help)", arg, near);
      return fail(&p, "unknown option '%s' (see apexc --help)", arg);
    }
  }
  (void)explicit_level;
  if (a->action == APX_CLI_COMPILE) {
    if (!o->model_path) return fail(&p, "no model given (usage: apexc MODEL.onnx [-O0|-O1|-O2|-O3] [-o PLAN.apx]; see --help)");
    if (!inspect) a->write_plan = 1;
    a->summary = !inspect && !o->quiet; /* -q: errors only */
    int default_output = a->write_plan && !o->output_path;
    if (default_output &&
        !(o->output_path = default_plan_path(&p, o->model_path)))
      return fail(&p, "out of memory");
    char perr[512];
    if (apx_options_apply_preset(o, perr, sizeof perr)) return fail(&p, "%s", perr);
    if (check_combinations(&p, o, a, default_output, training_flag, momentum_seen, betas_seen,
                           eps_seen))
      return -1;
    warn_unused_scaler_flags(o, a, scaler_seen);
    clamp_initial_scale(o, a);
    /* the fusion log's kernel and byte counts are read only by these two reports */
    o->fusion_traffic = o->fusion_report || o->explain == 1;
    /* the arena packing runs beside plan building (memplan.h) when a plan is written */
    o->memplan_background = a->write_plan;
  }
  return 0;
}

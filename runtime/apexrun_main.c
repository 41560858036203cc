/* apexrun_main.c - the apexrun command line (DESIGN.md 13).
 *
 *   apexrun infer MODEL.onnx|PLAN.apx --input-dir D --output-dir O [-O0|-O1|-O2|-O3]
 *           [--half=fp16|bf16] [--dim NAME=V] [--allow-old-opset] [--threads N]
 *           [--device cpu]
 *   apexrun PLAN.apx --data DIR --steps N [--device cpu] [--threads N] [--seed S]
 *           [--no-shuffle] [--log F.jsonl] [--tensorboard DIR]
 *           [--checkpoint-dir D [--checkpoint-every N]]
 *           [--resume[=auto]] [--export-onnx F] [--quiet] [--progress] [--progress-every N]
 *           [--lr X] [--weight-decay W] [--lr-schedule S] [--warmup-steps N]
 *           [--total-steps N] [--clip-grad-norm N] [--cuda-graph]
 *
 * Spellings from Apex and PyTorch are accepted (ir/suggest.h): underscores for dashes
 * (--checkpoint_dir, --weight_decay), infer's --opt-level O2; an unknown option gets "did you
 * mean --X?", and an apexc option given to apexrun says that the plan fixes it.
 *
 * Training (runtime/train.h): --data DIR holds one NAME.npy per data input; the run goes
 * until N optimizer steps are done (a resumed run continues to the same N).
 * infer reads D/input_K.pb (ONNX TensorProto, K = 0.. in the order of the model's data
 * inputs) or D/NAME.npy (one per data input), runs the forward section and writes the same
 * format into O (output_K.pb, or NAME.npy per graph output; runtime/infer_io.h), then one
 * summary line. A model that is not a plan file is compiled on the fly as apexc would
 * (training off), its inputs that must be compile-time constants (Reshape's shape, Slice's
 * starts ...) bound from D before folding (compiler/bind_inputs.h).
 * Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input; errors are one line. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ir/diag.h"
#include "compiler/emit_plan.h"
#include "ir/ir.h"
#include "compiler/onnx_load.h"
#include "ir/options.h"
#include "compiler/pipeline.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/backend.h"
#include "runtime/collective.h"
#include "runtime/dataset.h"
#include "runtime/exec.h"
#include "runtime/graph_check.h"
#include "compiler/cli.h"
#include "ir/fileio.h"
#include "runtime/infer_io.h"
#include "ir/suggest.h"
#include "plan/plan.h"
#include "runtime/train.h"
#include "runtime/backend_registry.h"

#define APEXRUN_VERSION "0.1.0"

static const char *usage_text =
    "usage: apexrun infer MODEL.onnx|PLAN.apx --input-dir D --output-dir O [options]\n"
    "       apexrun PLAN.apx --data DIR --steps N [options]\n"
    "\n"
    "Options may come before or after PLAN (infer: after the word 'infer').\n"
    "\n"
    "both commands:\n"
    "  --device NAME         backend (this build: %s; default cpu)\n"
    "  --threads N           CPU threads (default: all)\n"
    "  -h, --help            this text\n"
    "  --version             version and plan format\n"
    "\n"
    "training: runs the plan's training step (forward, backward, loss scaling, optimizer).\n"
    "  --data DIR            one NAME.npy per data input of the plan, samples along axis 0\n"
    "                        (at least one batch of samples; class labels within range)\n"
    "  --steps N             train until N optimizer steps are done (also after --resume)\n"
    "  --seed S              data order and Dropout seed, any S >= 0 (default: the plan's --seed)\n"
    "  --no-shuffle          batches in file order: batch k = samples [kB, (k+1)B), wrapping\n"
    "  --log F.jsonl         one JSON object per step: step, loss, loss_scale, skipped,\n"
    "                        overflow_at, grad_norm, lr, ms (and reason when skipped)\n"
    "  --tensorboard DIR     TensorBoard event files in DIR (one per run): scalars loss,\n"
    "                        loss_scale, lr, grad_norm, ms_per_step, skipped_steps per step\n"
    "                        (tensorboard --logdir DIR)\n"
    "  --checkpoint-dir D    write D/ckpt-STEP.apxckpt (atomic, checksummed) at the end ...\n"
    "  --checkpoint-every N  ... and every N steps\n"
    "  --resume              continue from the newest checkpoint in D, bit for bit (same\n"
    "                        seed, order, data and lr schedule length); no checkpoint in D\n"
    "                        is an error (exit 2)\n"
    "  --resume=auto         the same, but start from step 0 when D holds no checkpoint\n"
    "  --export-onnx F       write the trained model as ONNX for inference (fp32 weights);\n"
    "                        F's folder is checked for writing before training starts\n"
    "  -q, --quiet           no progress line or overflow notices (the summary stays)\n"
    "  progress (rank 0): step/total, loss, loss scale, lr, samples/s, skipped so far, ETA;\n"
    "                        on a terminal one line updated in place, otherwise (a file, a\n"
    "                        pipe, mpirun) a plain line every 10 s\n"
    "  --progress-every N    a plain progress line every N steps instead\n"
    "  --progress            the updating line (\\r) even when stdout is not a terminal\n"
    "  --cuda-graph          (--device cuda, one process, no apexc --accumulate) step 1 runs\n"
    "                        as usual, step 2 is captured as a CUDA Graph and every step from\n"
    "                        2 on is one graph launch (lr, loss scale, inputs and Dropout's\n"
    "                        step uploaded before it, losses read after it); other runs are\n"
    "                        refused (exit 2, \"not supported yet: --cuda-graph with ...\").\n"
    "                        Not yet run on a GPU (docs/cuda.md)\n"
    "  A run in which every step overflowed exits with 1 when the loss scale cannot recover\n"
    "  (static, below 1, at --min-loss-scale, or 10 overflows in a row); otherwise it warns.\n"
    "  SIGINT/SIGTERM: the step in progress finishes, a checkpoint is written (with\n"
    "  --checkpoint-dir), the line says how to resume, exit 130/143; a second signal stops at\n"
    "  once. An output (--log, --export-onnx, checkpoints) over an input (the plan, --data\n"
    "  files, the checkpoint resumed) or over another output is refused (exit 2); a failed\n"
    "  write (a full disk) is exit 1 naming the file.\n"
    "  A NaN or Inf in --data is reported at start (file, sample, element); a step whose\n"
    "  loss or gradients are not finite names its cause: the input sample, a non-finite loss\n"
    "  from finite inputs, or a gradient overflow (the log row's \"reason\").\n"
    "\n"
    "run-time hyperparameters: override the plan's values for this run (no recompile); they\n"
    "  are stored in checkpoints: --resume without them continues with the checkpoint's, and\n"
    "  one that contradicts the checkpoint is refused (exit 2) naming both values\n"
    "  --lr X                base learning rate of the schedule (apexc --lr)\n"
    "  --lr-schedule S       constant, cosine or linear\n"
    "  --warmup-steps N      linear warmup to the base lr (at most --total-steps)\n"
    "  --total-steps N       the schedule's length (default: the plan's, else --steps)\n"
    "  --weight-decay W      the optimizer's weight decay (adamw/lamb decoupled, sgd L2)\n"
    "  --clip-grad-norm N    clip gradients to global norm N (0: off)\n"
    "\n"
    "data parallelism: mpirun -np K apexrun PLAN.apx --data DIR --steps N ...\n"
    "  each rank trains on its slice of every global batch (K times the plan's batch); the\n"
    "  plan's gradient buckets are averaged over the ranks as backward produces them (each\n"
    "  bucket's allreduce overlaps the rest of backward); only rank 0 prints, logs and writes\n"
    "  checkpoints; every rank resumes from the same file. The log adds overlap_kernels\n"
    "  (kernels launched while a bucket was in flight).\n"
    "  --collective-timeout S  a collective that waits longer than S seconds (a dead or hung\n"
    "                        rank) ends the whole job with an error (default 300)\n"
    "  --check-replicas N    also check every N steps that all ranks hold identical weights\n"
    "                        (always checked at the start and at the end)\n"
    "  Before the first step the ranks compare plan, data (size and contents of every file),\n"
    "  --steps, --seed, --no-shuffle, accumulation, --check-replicas, --checkpoint-dir/-every,\n"
    "  --resume, --export-onnx, --log and the run-time hyperparameters; a difference is named\n"
    "  on every rank (exit 2). A\n"
    "  SIGINT/SIGTERM to any rank stops every rank after the same step (send it to the apexrun\n"
    "  processes: mpirun itself kills its ranks 1 s after forwarding one).\n"
    "  --no-overlap          each bucket's allreduce blocks inside its kernel instead of\n"
    "                        overlapping the following kernels (same result, bit for bit)\n"
    "\n"
    "infer: runs the model's forward pass on ONNX test data or .npy files; one summary line.\n"
    "  --input-dir D         reads D/input_0.pb, input_1.pb, ... (ONNX TensorProto, one per data\n"
    "                        input, in order) or D/NAME.npy (one per data input, by name);\n"
    "                        inputs that must be compile-time constants (Reshape shape, Slice\n"
    "                        starts/ends/axes/steps, Squeeze/Unsqueeze axes, Split split, Expand\n"
    "                        shape, ReduceSum/Mean axes, Dropout ratio) are bound from D when\n"
    "                        MODEL is ONNX\n"
    "  --output-dir O        writes the format read: O/output_0.pb, ... or O/NAME.npy per graph\n"
    "                        output (other characters than [A-Za-z0-9._-] in NAME as '_'); O is\n"
    "                        created; an output file that is the model or an input file is refused\n"
    "  -O0|-O1|-O2|-O3       opt level when MODEL is ONNX (compiled on the fly; default -O1)\n"
    "  --half=fp16|bf16      half type when MODEL is ONNX (default fp16)\n"
    "  --dim NAME=V          bind a symbolic dimension when MODEL is ONNX (repeatable)\n"
    "  --allow-old-opset     accept ai.onnx opset 1..12 (below 7: ops unchanged since) and ir_version 3..6\n"
    "  --repeat N            then run the forward N more times and print the per-iteration\n"
    "                        time (median, min, mean in ms; benchmarks)\n"
    "\n"
    "Apex's and PyTorch's spellings are accepted: underscores for dashes (--weight_decay,\n"
    "--checkpoint_dir), --opt-level O2 for infer's -O2; an unknown option gets \"did you mean\".\n"
    "Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input.\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("apexrun: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs(" (see apexrun --help)\n", stderr);
  va_end(ap);
  return APX_EXIT_BAD_INPUT;
}

static int fail(const ApxDiag *d) {
  fprintf(stderr, "%s\n", d->msg);
  return d->code ? d->code : APX_EXIT_RUNTIME;
}

/* The options each command accepts (after ir/suggest.h normalization), for "did you mean". */
static const char *const train_flags[] = {
    "--data", "--steps", "--device", "--threads", "--seed", "--no-shuffle", "--log", "--tensorboard", "--checkpoint-dir",
    "--checkpoint-every", "--resume", "--export-onnx", "--quiet", "-q", "--progress", "--progress-every",
    "--collective-timeout", "--no-overlap", "--check-replicas", "--lr", "--weight-decay", "--lr-schedule",
    "--warmup-steps", "--total-steps", "--clip-grad-norm", "--cuda-graph", "--help", "-h", "--version", NULL};
static const char *const infer_flags[] = {
    "--input-dir", "--output-dir", "--device", "--threads", "--repeat", "--half", "--dim",
    "--allow-old-opset", "-O0", "-O1", "-O2", "-O3", "--opt-level", "--help", "-h", "--version", NULL};

/* 1 when arg's name (before '=') is in names. */
static int flag_known(const char *arg, const char *const *names) {
  size_t n = strcspn(arg, "=");
  for (int i = 0; names[i]; i++)
    if (strlen(names[i]) == n && !strncmp(arg, names[i], n)) return 1;
  return 0;
}

/* An option the command does not take: an apexc option says that the plan fixes it; else
 * "did you mean" the nearest of `mine` (ir/suggest.h). One line, exit code 2. */
static int unknown_option(const char *cmd, const char *arg, const char *const *mine) {
  size_t n = strcspn(arg, "=");
  if (flag_known(arg, apx_cli_flag_names()))
    return usage_error("%s'%.*s' is an apexc option: the plan fixes it (recompile the model: apexc MODEL.onnx "
                       "%.*s ...)", cmd, (int)n, arg, (int)n, arg);
  const char *near = apx_flag_suggest(arg, mine);
  if (near) return usage_error("%sunknown option '%s'; did you mean %s?", cmd, arg, near);
  return usage_error("%sunknown option '%s'", cmd, arg);
}

typedef struct InferArgs {
  const char *model, *input_dir, *output_dir, *device;
  int threads;
  long repeat; /* --repeat N: extra timed forward runs */
  ApxOptions o;
  ApxArena strings; /* --dim names (o.dim_names point here); apx_arena_free when done */
} InferArgs;

/* "--flag=value" or "--flag value": the value, advancing *i for the second form. */
static const char *flag_value(int argc, char **argv, int *i, const char *flag) {
  size_t n = strlen(flag);
  const char *a = argv[*i];
  if (strncmp(a, flag, n) != 0) return NULL;
  if (a[n] == '=') return a + n + 1;
  if (a[n] != '\0') return NULL;
  if (*i + 1 >= argc) return "";
  return argv[++*i];
}

static int parse_infer(int argc, char **argv, InferArgs *a) {
  memset(a, 0, sizeof *a);
  apx_arena_init(&a->strings);
  apx_options_init(&a->o);
  a->o.training = 0;
  a->device = "cpu";
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *v;
    if (arg[0] != '-') {
      if (a->model) return usage_error("infer takes one model, got a second: '%s'", arg);
      a->model = arg;
    } else if (!strcmp(arg, "-O0") || !strcmp(arg, "-O1") || !strcmp(arg, "-O2") ||
               !strcmp(arg, "-O3")) {
      a->o.opt_level = (ApxOptLevel)(arg[2] - '0');
    } else if ((v = flag_value(argc, argv, &i, "--input-dir"))) {
      if (!*v) return usage_error("%s needs a folder", "--input-dir");
      a->input_dir = v;
    } else if ((v = flag_value(argc, argv, &i, "--output-dir"))) {
      if (!*v) return usage_error("%s needs a folder", "--output-dir");
      a->output_dir = v;
    } else if ((v = flag_value(argc, argv, &i, "--device"))) {
      if (!*v) return usage_error("%s needs a name", "--device");
      a->device = v;
    } else if ((v = flag_value(argc, argv, &i, "--threads"))) {
      char *end;
      long n = strtol(v, &end, 10);
      if (!*v || *end || n < 1 || n > 4096) return usage_error("--threads: '%s' is not a count in [1, 4096]", v);
      a->threads = (int)n;
    } else if ((v = flag_value(argc, argv, &i, "--repeat"))) {
      char *end;
      long n = strtol(v, &end, 10);
      if (!*v || *end || n < 1 || n > 100000000) return usage_error("--repeat: '%s' is not a count >= 1", v);
      a->repeat = n;
    } else if ((v = flag_value(argc, argv, &i, "--half"))) {
      ApxDType t = apx_dtype_parse(v);
      if (t != APX_DT_F16 && t != APX_DT_BF16) return usage_error("--half: expected fp16 or bf16, got '%s'", v);
      a->o.half = t;
      a->o.half_set = 1;
    } else if ((v = flag_value(argc, argv, &i, "--dim"))) {
      const char *eq = strchr(v, '=');
      char *end = NULL;
      long long n = eq ? strtoll(eq + 1, &end, 10) : 0;
      if (!eq || eq == v || !end || *end || eq[1] == '\0' || n < 1)
        return usage_error("--dim: expected NAME=VALUE with VALUE >= 1, got '%s'", v);
      if (a->o.n_dims >= APX_MAX_DIMS_BOUND) return usage_error("--dim: too many bindings");
      if (!(a->o.dim_names[a->o.n_dims] = apx_arena_strndup(&a->strings, v, (size_t)(eq - v)))) {
        fputs("apexrun: out of memory\n", stderr);
        return APX_EXIT_RUNTIME;
      }
      a->o.dim_values[a->o.n_dims++] = n;
    } else if (!strcmp(arg, "--allow-old-opset")) {
      a->o.opset_min = 1;
      a->o.ir_version_min = 3;
    } else if ((v = flag_value(argc, argv, &i, "--opt-level"))) { /* Apex's opt_level="O2" */
      const char *d = v[0] == 'O' || v[0] == 'o' ? v + 1 : v;
      if (d[0] < '0' || d[0] > '3' || d[1]) return usage_error("--opt-level: expected O0, O1, O2 or O3, got '%s'", v);
      a->o.opt_level = (ApxOptLevel)(d[0] - '0');
    } else {
      return unknown_option("infer: ", arg, infer_flags);
    }
  }
  if (!a->model) return usage_error("infer needs a model (MODEL.onnx or PLAN.apx)");
  if (!a->input_dir) return usage_error("infer needs %s", "--input-dir D");
  if (!a->output_dir) return usage_error("infer needs %s", "--output-dir O");
  char err[512];
  if (apx_options_apply_preset(&a->o, err, sizeof err)) return usage_error("%s", err);
  a->o.model_path = a->model;
  return 0;
}

/* 1 when path is a plan file (its magic), 0 when it is a regular file that is not, -1 when it
 * cannot be read (missing, a FIFO, a device, a folder: the error, naming `what`, in d). A
 * bounded read (fileio.h): nothing but the first 8 bytes, never blocking. */
static int probe_plan(const char *path, const char *what, ApxDiag *d) {
  ApxInFile f;
  if (apx_infile_open(&f, path, what, d)) return -1;
  char m[8] = {0};
  int rc = f.size >= 8 && apx_infile_pread(&f, m, 8, 0, d) == 0 && memcmp(m, "APXPLAN", 8) == 0;
  apx_infile_close(&f);
  return d->code ? -1 : rc;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* --repeat: n more forward runs on the same inputs, each timed (CLOCK_MONOTONIC); one line. */
static int time_forward(ApxExec *ex, long n, ApxDiag *d) {
  double *ms = malloc((size_t)n * sizeof *ms), sum = 0;
  if (!ms) return apx_diag_error(d, APX_EXIT_RUNTIME, "apexrun: out of memory");
  for (long i = 0; i < n; i++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (apx_exec_run(ex, APX_SEC_FORWARD, d)) {
      free(ms);
      return -1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms[i] = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    sum += ms[i];
  }
  qsort(ms, (size_t)n, sizeof *ms, cmp_double);
  double med = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  printf("apexrun infer: forward x %ld: median %.4f ms, min %.4f ms, mean %.4f ms per iteration\n",
         n, med, ms[0], sum / (double)n);
  free(ms);
  return 0;
}

/* The one line infer prints on success. */
static void infer_summary(const InferArgs *a, const ApxInferData *in, const ApxPlan *plan, double ms) {
  int bound = 0;
  for (int k = 0; k < in->n; k++) bound += in->b[k].constant;
  printf("apexrun infer: %s: %d input%s from %s (%s", a->model, in->n, in->n == 1 ? "" : "s", a->input_dir,
         apx_infer_format_name(in->format));
  if (bound) {
    printf("; %d bound as compile-time constant%s:", bound, bound == 1 ? "" : "s");
    for (int k = 0, first = 1; k < in->n; k++)
      if (in->b[k].constant) {
        printf("%s %s", first ? "" : ",", in->b[k].name);
        first = 0;
      }
  }
  printf("), %d output%s to %s (%s), forward %.3f ms\n", plan->n_outputs, plan->n_outputs == 1 ? "" : "s",
         a->output_dir, in->format == APX_INFER_NPY ? "NAME.npy" : "output_K.pb", ms);
}

static int cmd_infer(int argc, char **argv) {
  InferArgs a;
  int rc = parse_infer(argc, argv, &a);
  if (rc) {
    apx_arena_free(&a.strings);
    return rc;
  }
  ApxDiag d;
  apx_diag_init(&d);
  int model_is_plan = probe_plan(a.model, "model", &d); /* a bounded open: FIFOs etc. refused */
  if (model_is_plan < 0) {
    apx_arena_free(&a.strings);
    return fail(&d);
  }
  ApxGraph g;
  int have_graph = 0;
  ApxPlan plan;
  apx_plan_init(&plan);
  ApxExec ex;
  memset(&ex, 0, sizeof ex);
  ApxInferData in; /* the input folder, pb or npy (runtime/infer_io.h) */
  rc = 0;
  if (apx_infer_data_read(a.input_dir, &in, &d)) {
    /* a model that is itself out of scope says so first (its inputs' types explain the data) */
    if (!model_is_plan) {
      ApxDiag dm;
      apx_diag_init(&dm);
      dm.quiet = 1;
      ApxGraph probe;
      apx_graph_init(&probe, a.model);
      if (apx_onnx_load_file(&probe, a.model, &a.o, &dm)) d = dm;
      apx_graph_free(&probe);
    }
    goto done;
  }

  if (model_is_plan) {
    if (apx_plan_read(&plan, a.model, &d)) goto done;
  } else {
    have_graph = 1;
    a.o.bind = in.b; /* inputs that must be compile-time constants are bound before folding */
    a.o.n_bind = in.n;
    if (apx_compile_file(&g, &a.o, &d)) goto done;
    if (apx_plan_from_graph(&g, &a.o, &plan, &d)) goto done;
    plan.path = a.model; /* errors of the compiled plan name the model file */
  }
  if (apx_infer_output_dir(a.output_dir, &d)) goto done; /* before running */
  /* no output file over the model or an input file (by inode, or canonical path) */
  if (apx_infer_check_outputs(&plan, a.output_dir, in.format, a.model, &in, &d)) goto done;

  ApxExecConfig cfg;
  apx_exec_config_init(&cfg);
  cfg.device = a.device;
  cfg.n_threads = a.threads;
  if (apx_exec_init(&ex, &plan, &cfg, &d)) goto done;
  if (apx_infer_set_inputs(&ex, &plan, &in, &d)) goto done;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (apx_exec_run(&ex, APX_SEC_FORWARD, &d)) goto done;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (a.repeat > 0 && time_forward(&ex, a.repeat, &d)) goto done;
  if (apx_infer_write_outputs(&ex, &plan, a.output_dir, in.format, &d)) goto done;
  infer_summary(&a, &in, &plan, (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);

done:
  if (d.code) rc = fail(&d);
  apx_exec_free(&ex);
  apx_plan_free(&plan);
  if (have_graph) apx_graph_free(&g);
  apx_infer_data_free(&in);
  apx_arena_free(&a.strings);
  return rc;
}

static int parse_count(const char *flag, const char *v, long long lo, long long *out) {
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (!*v || *end || errno || n < lo)
    return usage_error("%s: '%s' is not an integer >= %lld", flag, v, lo);
  *out = n;
  return 0;
}

/* A float flag in [lo, hi], stored as fp32 as apexc stores it. */
static int parse_real(const char *flag, const char *v, double lo, double hi, float *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (!*v || *end || errno || !isfinite(x) || x < lo || x > hi)
    return usage_error("%s: '%s' is not a number in [%g, %g]", flag, v, lo, hi);
  *out = (float)x;
  return 0;
}

static int cmd_train(int argc, char **argv) {
  ApxTrainConfig c;
  apx_train_config_init(&c);
  const char *plan_path = NULL, *v;
  int have_steps = 0, every_set = 0;
  double timeout_s = APX_COLL_DEFAULT_TIMEOUT_S;
  long long n;
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    if (arg[0] != '-') {
      if (!strcmp(arg, "infer")) /* `apexrun -q infer MODEL ...` */
        return usage_error("'infer' must come first: apexrun infer MODEL ...");
      if (plan_path) return usage_error("one plan per run, got a second: '%s'", arg);
      plan_path = arg;
    } else if ((v = flag_value(argc, argv, &i, "--data"))) {
      if (!*v) return usage_error("%s needs a folder", "--data");
      c.data_dir = v;
    } else if ((v = flag_value(argc, argv, &i, "--steps"))) {
      if (parse_count("--steps", v, 0, &n)) return APX_EXIT_BAD_INPUT;
      c.steps = n;
      have_steps = 1;
    } else if ((v = flag_value(argc, argv, &i, "--device"))) {
      if (!*v) return usage_error("%s needs a name", "--device");
      c.exec.device = v;
    } else if ((v = flag_value(argc, argv, &i, "--threads"))) {
      if (parse_count("--threads", v, 1, &n)) return APX_EXIT_BAD_INPUT;
      if (n > 4096) return usage_error("--threads: '%s' is not a count in [1, 4096]", v);
      c.exec.n_threads = (int32_t)n;
    } else if ((v = flag_value(argc, argv, &i, "--seed"))) {
      if (parse_count("--seed", v, 0, &n)) return APX_EXIT_BAD_INPUT;
      c.seed = (uint64_t)n;
      c.seed_set = 1;
    } else if (!strcmp(arg, "--no-shuffle")) {
      c.order = APX_ORDER_FILE;
    } else if ((v = flag_value(argc, argv, &i, "--log"))) {
      if (!*v) return usage_error("%s needs a file", "--log");
      c.log_path = v;
    } else if ((v = flag_value(argc, argv, &i, "--tensorboard"))) {
      if (!*v) return usage_error("%s needs a folder", "--tensorboard");
      c.tensorboard_dir = v;
    } else if ((v = flag_value(argc, argv, &i, "--checkpoint-dir"))) {
      if (!*v) return usage_error("%s needs a folder", "--checkpoint-dir");
      c.ckpt_dir = v;
    } else if ((v = flag_value(argc, argv, &i, "--checkpoint-every"))) {
      if (parse_count("--checkpoint-every", v, 1, &n)) return APX_EXIT_BAD_INPUT;
      c.ckpt_every = n;
      every_set = 1;
    } else if (!strcmp(arg, "--resume")) {
      c.resume = APX_RESUME_ON;
    } else if ((v = flag_value(argc, argv, &i, "--resume")) && !strcmp(arg, "--resume=auto")) {
      c.resume = APX_RESUME_AUTO;
    } else if ((v = flag_value(argc, argv, &i, "--export-onnx"))) {
      if (!*v) return usage_error("%s needs a file", "--export-onnx");
      c.export_onnx = v;
    } else if (!strcmp(arg, "--quiet") || !strcmp(arg, "-q")) {
      c.quiet = 1;
    } else if (!strcmp(arg, "--progress")) {
      c.progress = APX_PROGRESS_ON;
    } else if ((v = flag_value(argc, argv, &i, "--progress-every"))) {
      if (parse_count("--progress-every", v, 1, &n)) return APX_EXIT_BAD_INPUT;
      c.progress_every = n;
    } else if ((v = flag_value(argc, argv, &i, "--lr"))) {
      if (parse_real("--lr", v, 0, 1e6, &c.hp.lr)) return APX_EXIT_BAD_INPUT;
      c.hp.given |= APX_HP_LR;
    } else if ((v = flag_value(argc, argv, &i, "--weight-decay"))) {
      if (parse_real("--weight-decay", v, 0, 1e3, &c.hp.weight_decay)) return APX_EXIT_BAD_INPUT;
      c.hp.given |= APX_HP_WEIGHT_DECAY;
    } else if ((v = flag_value(argc, argv, &i, "--clip-grad-norm"))) {
      if (parse_real("--clip-grad-norm", v, 0, 3e38, &c.hp.clip_grad_norm)) return APX_EXIT_BAD_INPUT;
      c.hp.given |= APX_HP_CLIP;
    } else if ((v = flag_value(argc, argv, &i, "--lr-schedule"))) {
      if (!strcmp(v, "constant")) c.hp.schedule = APX_LR_CONSTANT;
      else if (!strcmp(v, "cosine")) c.hp.schedule = APX_LR_COSINE;
      else if (!strcmp(v, "linear")) c.hp.schedule = APX_LR_LINEAR;
      else return usage_error("--lr-schedule: expected constant, cosine or linear, got '%s'", v);
      c.hp.given |= APX_HP_SCHEDULE;
    } else if ((v = flag_value(argc, argv, &i, "--warmup-steps"))) {
      if (parse_count("--warmup-steps", v, 0, &n)) return APX_EXIT_BAD_INPUT;
      if (n > INT32_MAX) return usage_error("--warmup-steps: '%s' is more than %d", v, INT32_MAX);
      c.hp.warmup = n;
      c.hp.given |= APX_HP_WARMUP;
    } else if ((v = flag_value(argc, argv, &i, "--total-steps"))) {
      if (parse_count("--total-steps", v, 1, &n)) return APX_EXIT_BAD_INPUT;
      if (n > (1LL << 40)) return usage_error("--total-steps: '%s' is more than 2^40", v);
      c.hp.total = n;
      c.hp.given |= APX_HP_TOTAL;
    } else if ((v = flag_value(argc, argv, &i, "--collective-timeout"))) {
      char *end;
      double s = strtod(v, &end);
      if (!*v || *end || !(s > 0) || s > 1e6)
        return usage_error("--collective-timeout: '%s' is not a number of seconds in (0, 1e6]", v);
      timeout_s = s;
    } else if (!strcmp(arg, "--no-overlap")) {
      c.exec.no_overlap = 1;
    } else if (!strcmp(arg, "--cuda-graph")) {
      c.cuda_graph = 1;
    } else if ((v = flag_value(argc, argv, &i, "--check-replicas"))) {
      if (parse_count("--check-replicas", v, 1, &n)) return APX_EXIT_BAD_INPUT;
      c.check_replicas = n;
    } else {
      return unknown_option("", arg, train_flags);
    }
  }
  if (!plan_path) return usage_error("no plan given");
  if (!c.data_dir) return usage_error("training needs %s", "--data DIR");
  if (!have_steps) return usage_error("training needs %s", "--steps N");
  if (every_set && !c.ckpt_dir) return usage_error("--checkpoint-every needs --checkpoint-dir D");
  if (c.resume && !c.ckpt_dir) return usage_error("--resume needs --checkpoint-dir D");
  if (c.cuda_graph) { /* the backend first; ranks and accumulation once they are known (train.c) */
    ApxGraphUse gu = {c.exec.device, 1, 1};
    char why[400];
    if (apx_graph_refusal(&gu, why, sizeof why)) return usage_error("%s", why);
  }
  ApxDiag d;
  apx_diag_init(&d);
  int is_plan = probe_plan(plan_path, "plan", &d);
  if (is_plan < 0) return fail(&d);
  if (!is_plan) {
    fprintf(stderr, "%s: not an apexc plan (compile the model first: apexc MODEL.onnx -O2 -o PLAN.apx)\n",
            plan_path);
    return APX_EXIT_BAD_INPUT;
  }
  /* under mpirun: rank and world from MPI (collective.h); otherwise one process */
  ApxCollConfig cc;
  apx_coll_config_init(&cc);
  cc.timeout_s = timeout_s;
  ApxColl *coll = NULL;
  if (apx_coll_init(&coll, &cc, &d)) return fail(&d);
  c.coll = coll;
  c.rank = apx_coll_rank(coll);
  c.world = apx_coll_world(coll);
  /* one GPU per rank: the rank's index among the ranks on its node (the launcher's local
   * rank; the cuda backend refuses an index past the device count, naming both) */
  if (c.world > 1) {
    static const char *local[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMIX_LOCAL_RANK", "SLURM_LOCALID"};
    for (size_t k = 0; k < sizeof local / sizeof local[0]; k++)
      if (getenv(local[k])) {
        c.exec.device_index = (int32_t)atoi(getenv(local[k]));
        break;
      }
  }
  ApxPlan plan;
  apx_plan_init(&plan);
  int rc = apx_plan_read(&plan, plan_path, &d) ? fail(&d) : apx_train_run(&plan, &c);
  apx_plan_free(&plan);
  /* a failed rank ends the job (its error is printed): the others would wait for it; unless
   * every rank ends with the same decision (collective.h: each prints its line and exits) */
  if (rc && c.world > 1 && !apx_coll_agreed_exit(coll)) apx_coll_abort(coll, rc, NULL);
  apx_coll_finalize(coll);
  return rc;
}

/* What went to stdout (progress, summary, --repeat timings) was written: a full disk or a
 * closed pipe is a failure (exit code 1), not a silent loss. */
static int stdout_checked(int rc) {
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "apexrun: cannot write to stdout: %s\n", strerror(errno ? errno : EIO));
    if (rc == 0) rc = APX_EXIT_RUNTIME;
  }
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs("apexrun: no plan given (usage: apexrun PLAN.apx --data DIR --steps N ...; see apexrun --help)\n",
          stderr);
    return APX_EXIT_BAD_INPUT;
  }
  /* --help and --version in any position, for both commands */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf(usage_text, apx_backend_names());
      return stdout_checked(APX_EXIT_OK);
    }
    if (!strcmp(argv[i], "--version")) {
      printf("apexrun %s (plan format %u, attrs ABI %d, backends: %s)\n", APEXRUN_VERSION,
             APX_PLAN_FORMAT_VERSION, APX_ATTRS_ABI, apx_backend_names());
      return stdout_checked(APX_EXIT_OK);
    }
  }
  /* Debian's OpenBLAS does not know newer CPUs and falls back to SSE3 kernels unless
   * OPENBLAS_CORETYPE is set before it loads: set it and re-exec once (docs/runtime.md) */
  apx_cpu_reexec_tuned(argv);
  /* Apex's spellings: --weight_decay -> --weight-decay (ir/suggest.h), in a copy of argv
   * that the options point into until the command returns */
  char **av = calloc((size_t)argc + 1, sizeof *av);
  if (!av) {
    fputs("apexrun: out of memory\n", stderr);
    return APX_EXIT_RUNTIME;
  }
  for (int i = 0; i < argc; i++) {
    char norm[256];
    av[i] = apx_flag_normalize(argv[i], norm, sizeof norm) == 1 ? strdup(norm) : NULL;
    if (!av[i]) av[i] = argv[i];
  }
  /* training: options in any position, before or after PLAN (cmd_train rejects unknown ones) */
  int rc = !strcmp(av[1], "infer") ? cmd_infer(argc - 1, av + 1) : cmd_train(argc - 1, av + 1);
  for (int i = 0; i < argc; i++)
    if (av[i] != argv[i]) free(av[i]);
  free(av);
  return stdout_checked(rc);
}

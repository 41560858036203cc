/* apexrun_main.c - the apexrun command line (DESIGN.md 13).
 *
 *   apexrun infer MODEL.onnx|PLAN.apx --input-dir D --output-dir O [-O0|-O1|-O2|-O3]
 *           [--half=fp16|bf16] [--dim NAME=V] [--allow-old-opset] [--threads N]
 *           [--device cpu]
 *   apexrun PLAN.apx --data DIR --steps N [--device cpu] [--threads N] [--seed S]
 *           [--no-shuffle] [--log F.jsonl] [--tensorboard DIR] [--checkpoint-dir D [--checkpoint-every N]]
 *           [--resume[=auto]] [--export-onnx F] [--quiet] [--progress]
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
#include <stdarg.h>
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
#include "ir/fileio.h"
#include "runtime/infer_io.h"
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
    "                        overflow_at, grad_norm, lr, ms\n"
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
    "  --progress            progress line per step even when stdout is not a terminal\n"
    "  A run in which every step overflowed exits with 1 when the loss scale cannot recover\n"
    "  (static, below 1, at --min-loss-scale, or 10 overflows in a row); otherwise it warns.\n"
    "  SIGINT/SIGTERM: the step in progress finishes, a checkpoint is written (with\n"
    "  --checkpoint-dir), the line says how to resume, exit 130/143; a second signal stops at\n"
    "  once. An output (--log, --export-onnx, checkpoints) over an input (the plan, --data\n"
    "  files, the checkpoint resumed) or over another output is refused (exit 2); a failed\n"
    "  write (a full disk) is exit 1 naming the file.\n"
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
    "  --resume, --export-onnx and --log; a difference is named on every rank (exit 2). A\n"
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
    } else {
      return usage_error("infer: unknown option '%s'", arg);
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
    } else if ((v = flag_value(argc, argv, &i, "--collective-timeout"))) {
      char *end;
      double s = strtod(v, &end);
      if (!*v || *end || !(s > 0) || s > 1e6)
        return usage_error("--collective-timeout: '%s' is not a number of seconds in (0, 1e6]", v);
      timeout_s = s;
    } else if (!strcmp(arg, "--no-overlap")) {
      c.exec.no_overlap = 1;
    } else if ((v = flag_value(argc, argv, &i, "--check-replicas"))) {
      if (parse_count("--check-replicas", v, 1, &n)) return APX_EXIT_BAD_INPUT;
      c.check_replicas = n;
    } else {
      return usage_error("unknown option '%s'", arg);
    }
  }
  if (!plan_path) return usage_error("no plan given");
  if (!c.data_dir) return usage_error("training needs %s", "--data DIR");
  if (!have_steps) return usage_error("training needs %s", "--steps N");
  if (every_set && !c.ckpt_dir) return usage_error("--checkpoint-every needs --checkpoint-dir D");
  if (c.resume && !c.ckpt_dir) return usage_error("--resume needs --checkpoint-dir D");
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
  /* training: options in any position, before or after PLAN (cmd_train rejects unknown ones) */
  int rc = !strcmp(argv[1], "infer") ? cmd_infer(argc - 1, argv + 1) : cmd_train(argc - 1, argv + 1);
  return stdout_checked(rc);
}

/* options.h - every compiler option (DESIGN.md 5, 6, 13) in one struct, filled by the CLI
 * (apexc_main.c) or by tests, read by passes. Defaults come from apx_options_init(); the
 * opt-level preset is applied by apx_options_apply_preset() and never overrides a field
 * the user set explicitly (the *_set flags). */
#ifndef APX_OPTIONS_H
#define APX_OPTIONS_H

#include <stdint.h>

#include "kernels/attrs.h"
#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxOptLevel { APX_O0 = 0, APX_O1 = 1, APX_O2 = 2, APX_O3 = 3 } ApxOptLevel;

typedef enum ApxLossScaleMode {
  APX_LOSS_SCALE_STATIC = 0,  /* fixed value loss_scale */
  APX_LOSS_SCALE_DYNAMIC = 1,
} ApxLossScaleMode;

/* --bn-running-var: how training-mode BatchNormalization updates its running variance
 * (kernels/attrs.def ApxAttrBatchNorm). AUTO: UNBIASED when the model's producer_name is
 * "pytorch" (both PyTorch exporters write it), else POPULATION. */
typedef enum ApxBnRunningVar {
  APX_BN_VAR_AUTO = 0,
  APX_BN_VAR_POPULATION = 1, /* the batch variance itself (ONNX's definition) */
  APX_BN_VAR_UNBIASED = 2,   /* x n / (n - 1) (PyTorch's BatchNorm) */
} ApxBnRunningVar;

/* Tri-state for properties an opt level presets and a flag may override. */
typedef enum ApxTri { APX_TRI_UNSET = -1, APX_TRI_OFF = 0, APX_TRI_ON = 1 } ApxTri;

#define APX_MAX_LIST 64
#define APX_MAX_DIMS_BOUND 32
#define APX_MAX_PASS_FLAGS 16
#define APX_FOLD_MAX_MB_DEFAULT 256.0

typedef struct ApxNameList {
  int32_t n;
  const char *items[APX_MAX_LIST];
} ApxNameList;

typedef struct ApxOptions {
  const char *model_path;
  const char *output_path; /* -o; apexc sets MODEL.apx next to the model when absent */
  ApxOptLevel opt_level;

  /* precision properties (DESIGN.md 5) */
  ApxDType half;               /* F16 (default) or BF16 */
  ApxDType cast_model_type;    /* F32 at O0/O1, half at O2/O3 */
  ApxTri patch_lists;          /* O1 per-op lists */
  ApxTri keep_batchnorm_fp32;  /* O2 on, O3 off, not allowed with O0/O1 set explicitly */
  ApxTri master_weights;       /* O2 on */
  ApxLossScaleMode loss_scale_mode;
  float loss_scale;            /* static value, or the dynamic initial value (2^16) */
  float min_loss_scale;        /* 0: none */
  float max_loss_scale;        /* 2^24 */
  int32_t scale_window;        /* growth interval: 2000 */
  int32_t hysteresis;          /* 1: back off at the first overflow */
  float growth_factor;         /* scale *= this after scale_window clean steps: 2 */
  float backoff_factor;        /* scale *= this on an overflow: 0.5 (GradScaler's names) */
  int32_t loss_scale_set, half_set; /* explicit flags seen */

  /* overrides (DESIGN.md 6) */
  ApxNameList half_ops, fp32_ops, promote_ops; /* op types */
  ApxNameList fp32_nodes;                      /* glob patterns on node names */
  const char *policy_path;                     /* --policy FILE.json (for messages) */
  const struct ApxPolicy *policy;              /* its decisions, read by the driver
                                                  (compiler/policy_file.h); passes/policy.h */
  int32_t clamp_constants;

  /* input contract (DESIGN.md 2): accepted ranges. Defaults ir_version >= 7, ai.onnx
   * opset >= 13; --allow-old-opset (and the ONNX node-test harness) lowers them to 3 and 7,
   * where apexc reads the older attribute forms (Split/Squeeze/Reduce* axes attributes,
   * Dropout ratio attribute). */
  int32_t ir_version_min, opset_min;

  /* graph binding (DESIGN.md 2) */
  const char *loss_name; /* --loss */
  ApxNameList frozen;    /* --frozen A,B */
  int32_t n_dims;
  const char *dim_names[APX_MAX_DIMS_BOUND];
  int64_t dim_values[APX_MAX_DIMS_BOUND];
  struct ApxInputBinding *bind; /* graph inputs bound to data before the passes
                                   (compiler/bind_inputs.h; apexrun infer); n_bind of them */
  int32_t n_bind;

  /* constant evaluation at compile time (DESIGN.md 2, passes/fold_constants.h) */
  double fold_max_mb;    /* --fold-max-mb: MiB of tensors folding may create (default
                            APX_FOLD_MAX_MB_DEFAULT); past it, nodes run at run time */

  /* training (DESIGN.md 13) */
  int32_t training;        /* build the training graph (apexc default 1; infer 0) */
  ApxOptimizerKind optimizer;
  float lr, momentum, beta1, beta2, eps, weight_decay;
  int32_t nesterov;
  int32_t eps_set, weight_decay_set, lr_set;
  float clip_grad_norm;    /* 0: off */
  int32_t accumulate;      /* micro-batches per step, >= 1 */
  int32_t warmup_steps;
  int32_t schedule;        /* 0 constant, 1 cosine, 2 linear */
  int64_t total_steps;     /* for the schedule */
  uint64_t seed;

  /* fusion and bucketing (DESIGN.md 10, 11) */
  int32_t no_fuse;
  int32_t fusion_report;
  /* 1 (the default): the fusion log counts kernels and bytes per step before and after fusion
   * (--fusion-report's and --explain's figures); apexc sets it only when one of those is asked
   * for, since the count walks the graph (passes/fusion.h) */
  int32_t fusion_traffic;
  /* 1: pass_memplan may leave the arena packing running on a thread and return (apexc sets
   * it when it writes a plan: apx_plan_from_graph builds the rest of the plan meanwhile);
   * whoever reads g->arena_bytes or an arena value's mem_offset calls apx_graph_settle
   * first. 0 (the default): the pass finishes the plan itself */
  int32_t memplan_background;
  double bucket_mb, first_bucket_mb;
  int32_t allreduce_fp32;
  float grad_predivide;
  int32_t sync_bn;
  ApxBnRunningVar bn_running_var; /* --bn-running-var (default AUTO) */

  /* inspection and debugging (DESIGN.md 4, 7) */
  int32_t explain;          /* 0 none, 1 text, 2 json, 3 dot (Graphviz) */
  const char *explain_path; /* NULL: stdout */
  const char *emit_onnx;
  ApxNameList disable_pass, dump_after;
  int32_t verify_each_pass; /* run apx_graph_verify after every pass (tests: on) */
  int32_t time_passes;      /* --time-passes: each stage's time and peak memory on stderr */
  int32_t quiet;
} ApxOptions;

void apx_options_init(ApxOptions *o);
/* Applies the opt-level preset to every property not set explicitly and checks combinations
 * the way Apex does; returns -1 with a message in err (cap bytes) on an invalid one. */
int apx_options_apply_preset(ApxOptions *o, char *err, size_t cap);
/* 1 if name is in the list. */
int apx_name_list_has(const ApxNameList *l, const char *name);

#ifdef __cplusplus
}
#endif
#endif

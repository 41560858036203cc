/* precision_rules.h - the vocabulary shared by the precision passes (passes/overflow_check.c,
 * passes/precision.c, passes/cast_insert.c, passes/cast_cleanup.c), --explain and --policy:
 *
 *   - ApxPrecReason: which rule decided a node's precision (ApxNode.reason), with a short
 *     stable id ("list-half", used by --explain=json) and a one-line description;
 *   - ApxPrecSettings: the options the precision passes read, with Apex's opt-level preset
 *     filled in where the caller did not run apx_options_apply_preset();
 *   - which input slots of a node carry data that follows the node's precision, and which
 *     outputs take the node's compute type (the rest keep their dtype: BN statistics,
 *     LayerNorm stash, masks, indices);
 *   - the half type's range and the constant range check / clamp used by the overflow rule.
 *
 * Precedence of the rules (DESIGN.md 6), highest first, for forward float nodes:
 *   node override > op override > overflow rule > BN retention > list > default.
 * Fixed roles come before all of them: a model Cast runs in its target type, integer/bool
 * nodes keep their type, optimizer and loss-scaling nodes and loss ops stay fp32, backward
 * nodes inherit their forward node's decision. */
#ifndef APX_PRECISION_RULES_H
#define APX_PRECISION_RULES_H

#include <stdint.h>

#include "ir/diag.h"
#include "ir/ir.h"
#include "ir/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Why a node runs in the precision it runs in (stored in ApxNode.reason). The numbering is
 * internal; --explain=json writes apx_reason_id(). */
typedef enum ApxPrecReason {
  APX_REASON_UNDECIDED = 0,
  APX_REASON_NODE_OVERRIDE,    /* --fp32-nodes glob on the node name */
  APX_REASON_POLICY_NODE,      /* --policy node entry */
  APX_REASON_OP_OVERRIDE,      /* --half-ops / --fp32-ops / --promote-ops */
  APX_REASON_POLICY_OP,        /* --policy op entry */
  APX_REASON_OVERFLOW_CONST,   /* a constant / initializer input outside the half range */
  APX_REASON_OVERFLOW_PATTERN, /* a risky pattern found by interval analysis */
  APX_REASON_BN_FP32,          /* keep_batchnorm_fp32 */
  APX_REASON_LIST_HALF,        /* O1 allow list */
  APX_REASON_LIST_FP32,        /* O1 deny list */
  APX_REASON_LIST_PROMOTE,     /* O1 promote list: widest float input */
  APX_REASON_DEFAULT_FP32,     /* O0: everything fp32 */
  APX_REASON_DEFAULT_INPUTS,   /* O1, op on no list: the type of its inputs */
  APX_REASON_DEFAULT_HALF,     /* O2/O3: float ops in the half type */
  APX_REASON_INTEGER,          /* integer/bool data: keeps its type */
  APX_REASON_CAST,             /* a Cast from the model: runs in its target type */
  APX_REASON_INHERITED,        /* backward node: its forward node's decision */
  APX_REASON_BACKWARD_WIDEST,  /* backward node without a forward origin: widest input */
  APX_REASON_LOSS,             /* loss op / the loss's producer: fp32 */
  APX_REASON_OPTIMIZER,        /* optimizer section or loss-scaling op: fp32 */
  APX_REASON_CAST_INSERTED,    /* a Cast added by cast_insert */
  APX_REASON_COUNT
} ApxPrecReason;

/* Stable short id ("node-override", "list-fp32", ...); "?" out of range. */
const char *apx_reason_id(int reason);
/* One-line description of the rule, for docs and --explain's legend. */
const char *apx_reason_what(int reason);
/* Reason by id, APX_REASON_UNDECIDED if unknown. */
int apx_reason_from_id(const char *id);

/* The options the precision passes read, with the opt-level preset applied where a field
 * is still unset (so tests may fill ApxOptions by hand). */
typedef struct ApxPrecSettings {
  ApxOptLevel level;
  ApxDType half;       /* F16 or BF16 */
  int lists;           /* O1 per-op lists on */
  int keep_bn_fp32;
  int master_weights;
  int model_half;      /* cast_model_type is the half type (O2/O3): params, inputs in half */
} ApxPrecSettings;
ApxPrecSettings apx_prec_settings(const ApxOptions *o);

/* How an input slot relates to the node's precision. */
typedef enum ApxInputRole {
  APX_IN_DATA = 0,  /* float data in the node's compute type (cast when it differs) */
  APX_IN_KEEP,      /* keeps its own dtype: BN scale/bias/mean/var, saved statistics,
                       inputs of Cast, optimizer and loss-scaling ops */
  APX_IN_STATIC,    /* compile-time operand read into the typed attributes (ops.def) */
} ApxInputRole;
ApxInputRole apx_prec_input_role(const ApxGraph *g, int node, int slot);
/* 1 when output `slot` of node takes the node's compute type (if it is a float value);
 * 0 when it keeps its dtype (BN running/saved statistics, LayerNorm Mean/InvStdDev,
 * BatchNormGrad dscale/dB, outputs of optimizer and loss-scaling ops). */
int apx_prec_output_follows(const ApxGraph *g, int node, int slot);

/* 1 when the node computes on float data: one of its present outputs is a float value
 * (gradient ops may leave output 0 absent). */
int apx_prec_is_float_node(const ApxGraph *g, int node);
/* 1 for loss ops (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss, FusedXentropy) and
 * the producer of the value flagged APX_VALF_LOSS. */
int apx_prec_is_loss_node(const ApxGraph *g, int node);
/* 1 for nodes whose dtypes are fixed by their role: optimizer section, FIXED-class ops
 * other than Cast (loss scaling, optimizer step, state assignment, allreduce). */
int apx_prec_is_fixed_node(const ApxGraph *g, int node);
/* 1 for Cast nodes added by cast_insert (reason APX_REASON_CAST_INSERTED). */
int apx_prec_is_inserted_cast(const ApxGraph *g, int node);

/* Widest float type of a and b (F64 > F32 > F16/BF16; F16 with BF16 gives F32);
 * UNDEFINED operands are ignored. */
ApxDType apx_dtype_widest(ApxDType a, ApxDType b);

/* Range of the half type t (F16 or BF16; F32 for anything else). */
double apx_half_max(ApxDType t);
double apx_half_min_normal(ApxDType t);

/* Result of checking a float constant against a half type's range. */
typedef enum ApxRangeIssue {
  APX_RANGE_OK = 0,
  APX_RANGE_OVERFLOW,  /* a finite element with |x| > the type's max finite value */
  APX_RANGE_INF,       /* an infinite element (as -inf masks: the half type cannot hold the
                          model's intent of a large finite sentinel either way) */
  APX_RANGE_UNDERFLOW, /* every nonzero element is below the smallest normal (an epsilon
                          such as 1e-12 that flushes or loses its precision) */
} ApxRangeIssue;
typedef struct ApxConstRange {
  ApxRangeIssue issue;
  double value;        /* the offending element (first out of range, or the largest nonzero
                          magnitude for UNDERFLOW, with its sign) */
  int64_t n_bad;       /* elements out of range (OVERFLOW + INF) or nonzero tiny (UNDERFLOW) */
} ApxConstRange;
/* Checks a value with data (CONST/PARAM/STATE, dtype F32/F64/F16/BF16) against half type
 * t. Values already in t, without data or non-float are OK. The underflow test is on the
 * tensor as a whole (its largest nonzero magnitude): single tiny elements of a weight
 * tensor are harmless noise, an epsilon constant is not. NaN elements are ignored. */
void apx_const_range_check(const ApxValue *v, ApxDType t, ApxConstRange *r);
/* The same for value v of g, remembering the values found in range (ApxGraph.range_ok): a
 * value whose data pointer is unchanged since is not scanned again. */
void apx_const_range_check_memo(ApxGraph *g, int v, ApxDType t, ApxConstRange *r);
/* "value -1e+09 outside fp16 range (max 65504)" etc. into the arena. */
const char *apx_const_range_text(ApxArena *a, const ApxConstRange *r, ApxDType t);

/* Clamping rule for --clamp-constants (DESIGN.md 8), per element x of an fp32/fp64
 * constant and half type t: |x| > max (inf included) -> sign(x) * max; 0 < |x| < smallest
 * normal -> sign(x) * smallest normal; NaN, zero and in-range values unchanged.
 * Makes a new APX_VAL_CONST value (dtype and shape of v, origin = v) holding the clamped
 * data and returns its id (-1 with an error in d). */
int apx_const_clamped_copy(ApxGraph *g, int v, ApxDType t, ApxDiag *d);

/* Converts n elements between float types (F32, F64, F16, BF16) with the rounding of
 * kernels/half.h (round to nearest even; fp16 overflow to inf). Returns 0, or -1 when a
 * type is not one of those four. */
int apx_convert_floats(const void *src, ApxDType from, void *dst, ApxDType to, int64_t n);

/* A new value of kind `kind` and dtype `to` with v's shape, named "<v>_<to>_apxN";
 * no data, no producer. Returns its id or -1. */
int apx_value_add_like(ApxGraph *g, int v, ApxValueKind kind, ApxDType to, ApxDiag *d);
/* A new APX_VAL_CONST value holding v's data converted to float type `to` (origin = v,
 * name "<v>_<to>_apxN", v's shape). v must have data. Returns its id or -1 (error in d). */
int apx_const_converted_copy(ApxGraph *g, int v, ApxDType to, ApxDiag *d);
/* Adds Cast(v -> to). out < 0: it produces a new activation of v's shape named
 * "<v>_<to>_apxN"; out >= 0: it produces that existing value (whose dtype becomes `to`).
 * The node is named "Cast_<output name>", with typed ApxAttrCast{to, saturate = 1}, a
 * generic "to" attribute, compute = to and reason APX_REASON_CAST_INSERTED; the caller sets
 * section and origin. Returns the node id or -1 (error in d). */
int apx_cast_node_add(ApxGraph *g, int v, ApxDType to, int out, ApxDiag *d);

/* Glob match (fnmatch, no flags): 1 when name matches pattern. */
int apx_glob_match(const char *pattern, const char *name);

#ifdef __cplusplus
}
#endif
#endif

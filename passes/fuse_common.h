/* fuse_common.h - the machinery shared by the fusion passes (passes/fuse_*.c; DESIGN.md 10).
 *
 * Fusion runs on the whole training graph, after the precision passes and master_weights:
 * autodiff has already differentiated the unfused forward nodes, and cast_insert has put
 * Casts between nodes whose decisions differ. A fusion therefore replaces three things at
 * once (fz_apply):
 *
 *   R  the matched forward nodes plus the inserted Casts between them (the matcher lists
 *      them in FzFusion.fwd) -> one fused forward node F;
 *   B  the backward nodes derived from R -> one fused gradient node G. B is every live
 *      BACKWARD node whose root is in R: the root of a node is the node itself in the
 *      FORWARD section, else its origin's root (autodiff sets origin = forward node, or the
 *      value's producer for gradient sums; cast_insert sets a Cast's origin to its first
 *      user, so a Cast between two nodes of B is in B and a Cast of B's result for a reader
 *      outside is not); gradient sums of the region's output (an Add/Sum of contributions
 *      made outside B) and Casts of incoming gradients are not part of B;
 *   the gradient wiring: B reads exactly one incoming gradient (the region output's), and
 *      its outputs read elsewhere ("exits") are gradient contributions to F's inputs. The
 *      input an exit belongs to is found from the forward node its backward chain comes
 *      from: the output slot of a multi-output gradient op (LayerNormGrad, BatchNormGrad,
 *      ConvGrad, PowGrad), the only input of that node F reads, or the only candidate that
 *      the exit's backward chain does not read and whose shape matches (dA = dY B^T reads B,
 *      not A). One exit per input: G writes that value itself (consumers unchanged). Several
 *      (an input read by two nodes of R, like x in a hand-written LayerNorm): they must all
 *      be summed by one Add/Sum outside B, which then sums G's output instead (and
 *      disappears when nothing else is left in it: G writes its output).
 *
 * Legality is checked before anything changes: intermediates (outputs of R other than
 * those F takes over) must have no consumers outside R and B and must not be graph
 * outputs; F and G are created and inferred (ir/infer.h) writing the values they
 * take over, whose dtypes and shapes must come out unchanged. A candidate that fails is
 * recorded with its reason (passes/fusion.h) and the graph is left as it was (trial
 * nodes are marked dead). On success: R and B are marked dead, F and G take over their
 * outputs, nodes whose origin was in R or B point at F or G, and inserted Casts left
 * without consumers are removed.
 *
 * Precision: F's compute type is the decision the nodes of R agreed on (FZ_PREC_AGREE:
 * they must all have the same one, else "dtype" is the reason), or the widest of their
 * decisions (FZ_PREC_WIDEST: for kernels that compute in fp32 internally whatever their
 * storage types -- LayerNorm, softmax, BatchNorm -- so a decision such as "kept fp32 by the
 * overflow rule" carries over). F takes the reason of the node that decided it (the
 * highest-precedence rule among the nodes with that decision), with the detail prefixed
 * "fused: ". G inherits F's decision (APX_REASON_INHERITED). Input and output dtypes stay
 * what they were at the region's boundary: fused kernels read and write those storage
 * types directly (fp32 math, rounded once on store, DESIGN.md 12). */
#ifndef APX_FUSE_COMMON_H
#define APX_FUSE_COMMON_H

#include <stdint.h>

#include "passes/fusion.h"
#include "ir/pass.h"

#define FZ_MAX_NODES 64
#define FZ_MAX_IO 8

/* FzFusion.out entries */
enum { FZ_NEW = -1, FZ_ABSENT = -2 };
/* FzFusion.grad_in entries (besides value ids and -1 = absent) */
enum { FZ_DY = -2 };                   /* the incoming gradient of the region output */
#define FZ_FOUT(k) (-10 - (k))         /* output k of the fused forward node */

typedef enum FzPrec { FZ_PREC_AGREE = 0, FZ_PREC_WIDEST = 1 } FzPrec;

typedef struct FzFusion {
  const char *pattern;  /* "MatMul+Add+Relu" (for the report) */
  int n_fwd;
  int fwd[FZ_MAX_NODES]; /* R: pattern nodes and the Casts between them; fwd[0] names F */
  FzPrec prec;
  /* F */
  ApxOp op;
  const void *attrs;     /* F's typed attributes (the op's struct) */
  int n_in, in[FZ_MAX_IO];
  int n_out, out[FZ_MAX_IO]; /* value F takes over (out[0]: the region output), FZ_NEW, FZ_ABSENT */
  /* G; grad_op APX_OP_INVALID: no fused gradient (a region with backward nodes is then
   * not fused, reason grad_missing or "legality") */
  ApxOp grad_op;
  const void *grad_attrs;
  int grad_n_in, grad_in[FZ_MAX_IO]; /* value ids, FZ_DY, FZ_FOUT(k), -1 */
  int grad_n_out, grad_of[FZ_MAX_IO]; /* output k = gradient of F input grad_of[k], -1 */
  const char *grad_missing; /* reason text when grad_op is APX_OP_INVALID */
  int mixed_out;  /* 1: output 0 of F and of G is written in the dtype of the value it
                     takes over (ops whose inference keeps a preset float output dtype,
                     ir/infer_nn.c; pass_fuse_casts may fold a following Cast later) */
} FzFusion;

/* Per-pass state: use lists and backward-node index built once per pass, kept valid as
 * fusions apply (nodes created or rewired since are scanned directly). */
typedef struct FzCtx {
  ApxGraph *g;
  const ApxOptions *o;
  ApxDiag *d;
  const char *pass;
  ApxUses uses;
  int uses_nvals;   /* values when the index was built */
  int n0;          /* nodes when the pass started */
  int *root;       /* [n0] root forward node of each node (-1 none) */
  int *bw_start, *bw_node; /* CSR: live BACKWARD nodes by root */
  int *ch_start, *ch_node; /* CSR: nodes by origin */
  uint8_t *touched;        /* [n0] rewired since the index was built */
  int *ex_head;            /* [value] first entry of the uses added since the index */
  int *ex_node, *ex_next;  /* entries: a node created or rewired since, reading the value */
  int ex_head_cap, n_ex, cap_ex;
  int changed;
  /* scratch of fz_apply, kept across calls (grown, never cleared: stamps) */
  int *mark;       /* [node cap] region membership stamps */
  int mark_cap, stamp;
  int *w_nodes, *w_vals, *w_slot, *w_vmark; /* B; exits and their slots; value stamps */
  int w_nodes_cap, w_vals_cap, w_vmark_cap, w_vstamp;
  /* outputs of trial nodes (fz_apply): values reused from trial to trial, so that a
   * candidate that is not fused leaves no named value behind; [0..FZ_MAX_IO) forward,
   * [FZ_MAX_IO..) backward; -1 until first used */
  int trial_val[2 * FZ_MAX_IO];
  unsigned trial_gen[2 * FZ_MAX_IO]; /* name counter step reserved for each (see fuse_common.c) */
  /* the fusion log's traffic kept up to date by the commits (apx_fusion_log_after_delta)
   * when it was current at fz_begin (traffic_ok), instead of a walk over the whole graph */
  int traffic_ok;
  ApxTraffic traffic_delta;
} FzCtx;

/* A pass that changes the graph itself, not through fz_apply, counts the nodes it changed
 * into the traffic (apx_traffic_count_node: -1 before the change, +1 after) and adds that
 * here, so that the log's traffic after fusion stays exact. */
void fz_traffic_add(FzCtx *c, const ApxTraffic *t);
/* apx_traffic_count_node(g, node, t, sign) when the pass keeps the log's traffic
 * (c->traffic_ok); nothing otherwise. */
void fz_traffic_node(FzCtx *c, int node, ApxTraffic *t, int sign);

/* Starts a pass: returns 1 when the pass should run, 0 with --no-fuse (the log records
 * that), -1 on error. */
int fz_begin(FzCtx *c, ApxGraph *g, const ApxOptions *o, ApxDiag *d, const char *pass);
/* Ends a pass; returns APX_PASS_CHANGED / APX_PASS_UNCHANGED. */
int fz_end(FzCtx *c);

/* Selects the nodes a pass tries (FzRun), and tries one (1 fused, 0 not, -1 error). */
typedef int (*FzWant)(const ApxGraph *g, int node);
typedef int (*FzTry)(FzCtx *c, int node);
/* The driver of every fusion pass: fz_begin, then try_node for each node of the schedule as
 * it was when the pass started (fusions append nodes and mark others dead) that `want`
 * accepts when its turn comes, until one fails; fz_end. Returns -1 error, 0 unchanged,
 * 1 changed (the pass result). */
int fz_run(ApxGraph *g, const ApxOptions *o, ApxDiag *d, const char *pass, FzWant want,
           FzTry try_node);
/* 1 for a live FORWARD-section node with op `op` (for FzWant functions). */
int fz_fwd_op(const ApxGraph *g, int node, ApxOp op);

/* Tries fusion f: 1 fused, 0 not fused (recorded with the reason), -1 error. */
int fz_apply(FzCtx *c, const FzFusion *f);
/* Records a candidate the matcher rejected itself. Returns 0, or -1 (out of memory). */
int fz_reject(FzCtx *c, const FzFusion *f, ApxOp fused_op, ApxFusionWhy why, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ---- helpers for matchers ----------------------------------------------------------- */
static inline int fz_live(const ApxGraph *g, int n) {
  return n >= 0 && !(g->nodes[n].flags & APX_NODEF_DEAD);
}
/* Live consumers of v: count; the first `cap` node ids (each node once) into out. */
int fz_users(FzCtx *c, int v, int *out, int cap);
/* Live FORWARD-section consumers of v (backward nodes reading saved values excluded). */
int fz_fwd_users(FzCtx *c, int v, int *out, int cap);
/* 1 for a live float -> float Cast inserted by cast_insert. */
int fz_is_cast(const ApxGraph *g, int node);
/* The single forward consumer of v, following inserted Casts with a single forward
 * consumer (each added to f->fwd); -1 when v does not have exactly one. */
int fz_next(FzCtx *c, FzFusion *f, int v);
/* The producer of v, following inserted Casts backwards (each added to f->fwd); *pv = the
 * producer's output value on the path. -1 when v has no live producer. */
int fz_prev(FzCtx *c, FzFusion *f, int v, int *pv);
/* v without an inserted widening Cast in front (fp16/bf16 -> fp32): the value a fused
 * kernel can read directly, with the same numbers. v itself otherwise. */
int fz_source(const ApxGraph *g, int v);
/* 1 when v is a constant with data and one element; *x its value. */
int fz_scalar(const ApxGraph *g, int v, double *x);
/* Adds node to f->fwd (once). Returns 0, -1 when full. */
int fz_add(FzFusion *f, int node);
/* 1 when node is in f->fwd. */
int fz_has(const FzFusion *f, int node);
/* The decision of a node as a short name ("fp16"). */
const char *fz_dt(ApxDType t);

#endif

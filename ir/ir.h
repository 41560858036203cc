/* ir.h - the graph IR: values and nodes with provenance (STYLE.md 6).
 *
 * Ids, not pointers: values and nodes live in growable arrays and are referred to by index,
 * so passes may add nodes and values while holding ids. Nodes are never removed from the
 * array; a pass marks them APX_NODEF_DEAD and apx_graph_toposort() rebuilds g->order, the
 * execution order every pass iterates. Every value and node keeps its ONNX name and index
 * (onnx_index = -1 when a pass created it), so errors and --explain rows point at the
 * user's model. Dimensions are int64_t; -1 means not known yet (an unbound symbolic dim).
 *
 * Ownership: all strings, lists, attributes and constant payloads live in g->arena and go
 * away with apx_graph_free(). */
#ifndef APX_IR_H
#define APX_IR_H

#include <stdint.h>

#include "ir/arena.h"
#include "ir/diag.h"
#include "kernels/buffer.h"
#include "kernels/dtype.h"
#include "kernels/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxValue { /* fields ordered for size (136 bytes, no padding) */
  const char *name;        /* ONNX name (unique in the graph) */
  ApxValueKind kind;
  ApxDType dtype;          /* APX_DT_UNDEFINED until known */
  int32_t rank;            /* -1 until known */
  int producer;            /* node id, -1 for inputs and initializers */
  int64_t dims[APX_MAX_RANK];
  const char **dim_params; /* [rank] symbolic names from ONNX (NULL entries = numeric) or NULL */
  void *data;              /* host bytes for CONST/PARAM/STATE initial values, else NULL
                              (a STATE without data starts at zero: optimizer moments,
                              gradient accumulators) */
  int onnx_index;          /* index in graph.input / graph.initializer / producer outputs */
  uint32_t flags;          /* ApxValueFlags */
  int grad;                /* value id of d(loss)/d(this) once autodiff ran, else -1 */
  int origin;              /* value this one derives from (cast copy, grad, master), -1 */
  /* memory plan (passes/memplan.c); apx_graph_add_value sets -1 / NONE */
  int32_t mem_region;      /* ApxMemRegion */
  int mem_alias;           /* value whose bytes this one shares (SHAPEONLY view or in-place
                              output), -1 when it owns its bytes */
  int64_t mem_offset;      /* byte offset in its region, -1 unplanned */
} ApxValue;

typedef enum ApxAttrType { /* = ONNX AttributeProto.AttributeType */
  APX_ATTR_UNDEFINED = 0,
  APX_ATTR_FLOAT = 1,
  APX_ATTR_INT = 2,
  APX_ATTR_STRING = 3,
  APX_ATTR_TENSOR = 4,
  APX_ATTR_GRAPH = 5,
  APX_ATTR_FLOATS = 6,
  APX_ATTR_INTS = 7,
  APX_ATTR_STRINGS = 8,
} ApxAttrType;

/* A constant tensor held by an attribute (Constant.value, ConstantOfShape.value). */
typedef struct ApxTensorConst {
  ApxDType dtype;
  int32_t rank;
  int64_t dims[APX_MAX_RANK];
  void *data; /* numel * dtype size bytes */
} ApxTensorConst;

/* Generic ONNX attribute as loaded; the typed struct (attrs.h) is derived from these. */
typedef struct ApxAttr {
  const char *name;
  ApxAttrType type;
  float f;
  int64_t i;
  const char *s;
  int32_t n; /* element count of floats / ints / strings */
  float *floats;
  int64_t *ints;
  const char **strings;
  ApxTensorConst *t;
} ApxAttr;

typedef enum ApxNodeFlags {
  APX_NODEF_DEAD = 1 << 0, /* removed; skipped by toposort and every pass */
  APX_NODEF_EAGER = 1 << 1, /* toposort schedules it as soon as its inputs are ready, ahead
                               of the other ready nodes of its section (gradient-bucket
                               Allreduce and its casts, passes/bucketing.h) */
  APX_NODEF_NOTE_KEPT = 1 << 2, /* its note was set before the precision passes (fold_constants:
                                   left to run time by --fold-max-mb); overflow_check, which
                                   recomputes the notes it and precision write, keeps it */
} ApxNodeFlags;

typedef struct ApxNode { /* fields ordered for size (104 bytes), the ones every pass reads first */
  ApxOp op;
  uint32_t flags;     /* ApxNodeFlags */
  int32_t n_in, n_out;
  int *in;            /* value ids; -1 = absent optional input */
  int *out;           /* value ids; -1 = absent optional output */
  ApxSection section;
  int origin;         /* forward node this node derives from (gradient, cast, fusion), -1 */
  const char *name;   /* ONNX node name, or a generated unique one */
  const char *op_type; /* op_type as written in the model (for messages on unknown ops) */
  void *typed;        /* typed attribute struct (attrs.h), apx_op_info(op)->attrs_size bytes */
  ApxAttr *attrs;     /* generic attributes as loaded */
  int32_t n_attrs;
  int onnx_index;     /* index in graph.node, -1 when created by a pass */
  ApxDType compute;   /* precision decision; APX_DT_UNDEFINED until decided */
  int32_t reason;     /* why (precision pass's rule enum) */
  const char *reason_detail;
  const char *note;   /* advisory text for --explain (tensor-core alignment, clamped
                         constants), NULL; never changes a decision */
} ApxNode;

typedef struct ApxGraph {
  ApxArena arena;
  const char *file;   /* model path, first word of every message */
  const char *name;
  int64_t ir_version;
  int64_t opset;      /* ai.onnx opset version */
  const char *producer_name; /* the model's producer_name (NULL when absent) */
  /* BatchNormalization's running variance (attrs.def ApxAttrBatchNorm): 1 unbiased
   * (PyTorch's), 0 the batch's own (ONNX's); decided by the loader from --bn-running-var
   * and producer_name, copied into every BatchNorm node's attributes */
  int32_t bn_unbiased_running_var;

  ApxValue *vals;
  int32_t n_vals, cap_vals;
  ApxNode *nodes;
  int32_t n_nodes, cap_nodes;
  int *order;         /* live nodes in execution (topological) order */
  int32_t n_order, cap_order;

  int *inputs;        /* data inputs (APX_VAL_INPUT) in graph.input order */
  int32_t n_inputs;
  int *outputs;       /* graph outputs in order */
  int32_t n_outputs;
  int loss;           /* value id of the loss, -1 if none */

  /* memory plan summary (passes/memplan.c); -1 until planned */
  int64_t arena_bytes;      /* size of the reused arena */
  int64_t peak_live_bytes;  /* lower bound: max over schedule steps of bytes live then */
  int64_t no_reuse_bytes;   /* arena size if no buffer were reused */
  int64_t persistent_bytes; /* params, constants, states */
  /* work a pass left running on another thread for this graph (passes/memplan.c: the arena
   * packing, beside plan building, with ApxOptions.memplan_background): arena_bytes and the
   * arena values' mem_offset are known only after apx_graph_settle. NULL when none. */
  int (*settle_fn)(struct ApxGraph *g, void *arg, ApxDiag *d);
  int (*settle_ready_fn)(void *arg); /* 1 once settling would not wait; NULL: unknown */
  void *settle_arg;
  double background_s, background_cpu_s; /* that work's own wall and CPU seconds, once settled */

  /* cast counts for --explain (passes/cast_insert.c, passes/cast_cleanup.c); 0 until run */
  struct {
    int32_t inserted;       /* Cast nodes added by cast_insert */
    int32_t folded;         /* constant casts folded into converted constants */
    int32_t before_cleanup; /* live Cast nodes when cast_cleanup started */
    int32_t after_cleanup;  /* live Cast nodes when it finished */
  } casts;

  /* fusion candidates and results for --fusion-report / --explain (passes/fusion.h),
   * NULL until a fusion pass ran; lives in the arena */
  struct ApxFusionLog *fusion;

  /* name -> value id, open addressing (private to ir.c): name_cap slots of two ints, the
   * value id (-1 empty) and its name's hash, so probes rarely touch the values */
  int *name_slots;
  int32_t name_cap;
  uint64_t *name_bits; /* 4 * name_cap bits, one set per name's hash: most lookups of a name
                          not in the table end in this cache-sized filter */
  /* values with generated names not in the table yet: a generated name is looked up rarely
   * (only a name of its form can equal it), so it goes in when such a name is looked up */
  int32_t *name_pending;
  int32_t n_name_pending, cap_name_pending;
  /* other new names: in the filter at once, into the slots in batches (each batch's slots
   * prefetched together) when a lookup finds its filter bit set or the table grows; pairs
   * of value id and hash */
  uint32_t *name_deferred;
  int32_t n_name_deferred, cap_name_deferred;
  int32_t name_gen;   /* counter for generated names */
  /* generated names ("<hint>_apx<n>", n from name_gen) never equal one another; a name
   * given explicitly in that form (a model's, a pass's) moves name_gen past its n, so they
   * never meet either, but for names whose n is out of range, counted here: while there is
   * none, apx_graph_unique_name needs no lookup. last_unique: the name
   * apx_graph_unique_name / apx_graph_free_name returned last, known free until the next
   * value is added (apx_graph_add_value skips its lookup); _generated: in the arena already */
  int32_t n_apx_form_names;
  /* apx_const_range_check_memo (passes/precision_rules.h): range_ok[v] is the data pointer
   * value v had when its data was found inside half type range_ok_type's range, else NULL
   * (a 163M-parameter model's weights are scanned by several passes) */
  const void **range_ok;
  int32_t range_ok_cap, range_ok_type;
  int32_t last_unique_generated;
  const char *last_unique;
} ApxGraph;

void apx_graph_init(ApxGraph *g, const char *file);
/* Settles first (any error is dropped: call apx_graph_settle to see it). */
void apx_graph_free(ApxGraph *g);
/* Waits for the work a pass left running for g (settle_fn) and applies it: 0, or -1 with an
 * error in d (d may be NULL). Does nothing when none is pending. */
int apx_graph_settle(ApxGraph *g, ApxDiag *d);
/* 1 when apx_graph_settle would not wait (nothing pending, or the work is done), 0 while it
 * still runs: a caller with other work to do meanwhile asks between steps of it. */
int apx_graph_settle_ready(const ApxGraph *g);

/* Adds a value; name NULL generates a unique one from `hint` ("<hint>_apx<N>").
 * Returns the id, or -1 with an error in d when the name is taken or memory is out. */
int apx_graph_add_value(ApxGraph *g, ApxDiag *d, const char *name, ApxValueKind kind,
                        ApxDType dtype, int32_t rank, const int64_t *dims);
/* A fresh unique name built from hint (never collides with model names). */
const char *apx_graph_unique_name(ApxGraph *g, const char *hint);
/* name when no value has it, else apx_graph_unique_name(g, name). Either way the next
 * apx_graph_add_value of the returned pointer (no value added in between) skips its lookup. */
const char *apx_graph_free_name(ApxGraph *g, const char *name);
/* [n_vals] the APX_VALF_MASTER value of each parameter that has one, else -1 (malloc'd;
 * NULL when out of memory). */
int *apx_value_master_map(const ApxGraph *g);
/* Value id by name, -1 if none. */
int apx_graph_find_value(const ApxGraph *g, const char *name);
/* ids[i] = apx_graph_find_value(g, names[i]) for i < n (a NULL or empty name: -1), the
 * lookups of a batch overlapped: the table slots, then the values, then their names are
 * prefetched for several names before any is compared (a loader resolving every node input
 * of a large model missed the cache three times per name, one name after another). */
void apx_graph_find_values(const ApxGraph *g, const char *const *names, int n, int *ids);

/* Adds a node (section FORWARD, origin -1, onnx_index -1) with copies of the in/out lists
 * and zeroed typed attributes; sets out values' producer. name NULL: generated from the op.
 * Returns the node id or -1 (error in d). */
int apx_graph_add_node(ApxGraph *g, ApxDiag *d, ApxOp op, const char *name, int n_in,
                       const int *in, int n_out, const int *out);
/* Typed attributes of node, cast to the op's struct type. */
#define APX_NODE_ATTRS(g, node_id, Type) ((Type *)(g)->nodes[(node_id)].typed)
/* 1 if input slot k of node n is present and a runtime tensor (not one of the op's static
 * inputs, which the compiler reads into the typed attributes). */
static inline int apx_node_input_is_runtime(const ApxNode *n, int k) {
  return k >= 0 && k < n->n_in && n->in[k] >= 0 && !apx_op_input_is_static(n->op, k);
}
/* Generic attribute lookup by name, NULL when absent. */
const ApxAttr *apx_node_attr(const ApxGraph *g, int node, const char *name);

/* Number of elements (product of dims); -1 if the shape is unknown or overflows. */
int64_t apx_value_numel(const ApxValue *v);
/* numel * dtype size; -1 if unknown. */
int64_t apx_value_bytes(const ApxValue *v);
/* Sets rank and dims and marks APX_VALF_SHAPE_KNOWN when every dim is >= 0. */
void apx_value_set_shape(ApxValue *v, int32_t rank, const int64_t *dims);
/* "[64,128]" / "[N,128]" / "?" into buf; returns buf. */
char *apx_value_shape_str(const ApxValue *v, char *buf, size_t cap);

/* Rebuilds g->order from live nodes: a stable topological order (Kahn's algorithm, ties
 * broken by section (forward, backward, optimizer) and then node id, so sections stay
 * contiguous and the model's order is kept where it is valid; APX_NODEF_EAGER nodes go
 * before the other ready nodes of their section). A cycle is an error naming one node on
 * it. Returns 0 or -1. */
int apx_graph_toposort(ApxGraph *g, ApxDiag *d);
/* For a pass that only appended nodes: nodes [0, n_before) and the edges between them are as
 * the last apx_graph_toposort left them (none killed, none rewired), and g->order is still
 * that sort's. When every appended live node sorts after every old one (a later section, or
 * the same section and no old node there) and reads only values made by old nodes or by
 * appended nodes that sort before it, a fresh sort would give the old order followed by the
 * appended nodes by (section, eager, id): g->order is extended so and 2
 * (APX_PASS_CHANGED_KEEPS_ORDER) returned. Otherwise g->order is left as it was and 1
 * (APX_PASS_CHANGED: sort again) returned; -1 when out of memory (d). A pass ends with
 * `return apx_graph_order_append(g, n_before, d);`. */
int apx_graph_order_append(ApxGraph *g, int n_before, ApxDiag *d);

/* Structural invariants (run after every pass in tests): value ids in range, each value has
 * at most one producer and it matches value.producer, g->order is topological and holds
 * exactly the live nodes, activations consumed by live nodes have a live producer, ranks in
 * [0, APX_MAX_RANK] where known, constants carry data, typed attributes exist.
 * Returns 0 or -1 with the first broken invariant in d. */
int apx_graph_verify(const ApxGraph *g, ApxDiag *d);

/* Consumers of every value as CSR (for passes): uses of value v are
 * use_node[use_start[v] .. use_start[v+1]) with the input slot in use_slot. Only live
 * nodes count. Build after structural changes; free with apx_uses_free. */
typedef struct ApxUses {
  int *use_start; /* [n_vals + 1] */
  int *use_node;
  int *use_slot;
} ApxUses;
int apx_uses_build(const ApxGraph *g, ApxUses *u);
void apx_uses_free(ApxUses *u);
static inline int apx_uses_count(const ApxUses *u, int v) {
  return u->use_start[v + 1] - u->use_start[v];
}

/* Error helpers producing the one-line contract (return -1):
 *   "<file>: node '<name>' (<op>): <message>"
 *   "<file>: value '<name>': <message>" */
int apx_node_error(ApxDiag *d, const ApxGraph *g, int node, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int apx_value_error(ApxDiag *d, const ApxGraph *g, int value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void apx_node_warn(ApxDiag *d, const ApxGraph *g, int node, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif
#endif

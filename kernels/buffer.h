/* buffer.h - what a tensor buffer is to the program, shared by the IR (ir/ir.h), the plan
 * format (plan/plan.h) and the runtime: its kind (data input, parameter, constant, state,
 * activation), flags, the memory region it lives in and the section of the training step a
 * kernel belongs to. Plain enums; the plan file stores their values. */
#ifndef APX_BUFFER_H
#define APX_BUFFER_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxValueKind {
  APX_VAL_ACTIVATION = 0, /* produced by a node */
  APX_VAL_INPUT,          /* graph input fed with data each step (NAME.npy) */
  APX_VAL_PARAM,          /* trainable float initializer */
  APX_VAL_CONST,          /* constant: non-trainable initializer, Constant, folded value */
  APX_VAL_STATE,          /* persistent runtime state: BN running stats, optimizer moments,
                             fp32 masters, loss scale */
} ApxValueKind;

typedef enum ApxValueFlags {
  APX_VALF_GRAPH_OUTPUT = 1 << 0, /* listed in graph.output */
  APX_VALF_LOSS = 1 << 1,         /* the loss (first graph output or --loss) */
  APX_VALF_FROZEN = 1 << 2,       /* float initializer excluded by --frozen */
  APX_VALF_SHAPE_KNOWN = 1 << 3,  /* rank and every dim known (set by inference) */
  APX_VALF_GRAD = 1 << 4,         /* a gradient */
  APX_VALF_MASTER = 1 << 5,       /* fp32 master copy (STATE) of a parameter stored in half
                                     (passes/cast_insert.c at O2); origin = the parameter */
  APX_VALF_DATA_FROM_MASTER = 1 << 6, /* a half parameter whose bytes are its master's converted
                                     (apx_value_master_map), made only where needed: the
                                     graph holds no data for it (the plan derives it at load;
                                     compiler/emit_plan.c) */
} ApxValueFlags;

/* Where a runtime buffer lives (DESIGN.md 12): one reused arena per device for
 * activations, data inputs and gradients; a persistent region (never reused) for params,
 * constants and states. Values that are never runtime tensors (static inputs only) have
 * APX_MEM_NONE. */
typedef enum ApxMemRegion {
  APX_MEM_NONE = 0,
  APX_MEM_ARENA = 1,
  APX_MEM_PERSISTENT = 2,
} ApxMemRegion;

typedef enum ApxSection {
  APX_SEC_FORWARD = 0,
  APX_SEC_BACKWARD,
  APX_SEC_OPTIMIZER,
} ApxSection;

#ifdef __cplusplus
}
#endif
#endif

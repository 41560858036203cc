/* graph_check.c - the capture-eligibility decision of apexrun --cuda-graph (graph_check.h). */
#include "runtime/graph_check.h"

#include <stdio.h>
#include <string.h>

int apx_graph_refusal(const ApxGraphUse *u, char *why, size_t cap) {
  const char *dev = u->device && *u->device ? u->device : "cpu";
  if (strcmp(dev, "cuda") != 0) {
    snprintf(why, cap, "not supported yet: --cuda-graph with --device %s (CUDA Graphs need --device cuda)", dev);
    return 1;
  }
  if (u->world > 1) {
    snprintf(why, cap, "not supported yet: --cuda-graph with data parallelism (%d ranks; the NCCL buckets "
             "overlap on their own stream); run it as one process or without --cuda-graph", (int)u->world);
    return 1;
  }
  if (u->accumulate > 1) {
    snprintf(why, cap, "not supported yet: --cuda-graph with gradient accumulation (the plan accumulates %d "
             "micro-batches: apexc --accumulate); recompile without --accumulate or run without --cuda-graph",
             (int)u->accumulate);
    return 1;
  }
  if (why && cap) why[0] = 0;
  return 0;
}

/* grad_rules_resample.c - gradient rules of the v1.1 resampling and contraction ops:
 * Resize's ResizeGrad (the forward's interpolation weights scattered back onto X; scales and
 * sizes are static), and Einsum's gradients, each itself an Einsum: for Y = einsum(A, B),
 * dA = einsum("y,b->a")(dY, B) and dB = einsum("y,a->b")(dY, A) (one operand: dA =
 * einsum("y->a")(dY)). Labels of a that neither y nor b has (summed away in the forward)
 * are broadcast, and a label repeated in a writes the diagonal: the Einsum kernels allow
 * both for pass-created nodes, whose output is pre-shaped like the operand. */
#include "passes/grad_rules.h"

#include <string.h>

GRAD_RULE(Resize) {
  if (!gr_need(c, 0)) return 0;
  c->dx[0] = gr_op_like(c, APX_OP_ResizeGrad, gr_attrs(c), 1, &c->dy[0], gr_in(c, 0),
                        gr_val(c, c->dy[0])->dtype);
  return c->dx[0] < 0 ? -1 : 0;
}

static void copy_term(int64_t *dst, int32_t *n_dst, const int64_t *src, int32_t n) {
  memcpy(dst, src, (size_t)n * sizeof *src);
  *n_dst = n;
}

GRAD_RULE(Einsum) {
  const ApxAttrEinsum fw = *(const ApxAttrEinsum *)gr_attrs(c);
  int two = gr_n_in(c) > 1 && gr_in(c, 1) >= 0;
  for (int k = 0; k < (two ? 2 : 1); k++) {
    if (!gr_need(c, k)) continue;
    ApxAttrEinsum e;
    memset(&e, 0, sizeof e);
    copy_term(e.a, &e.n_a, fw.y, fw.n_y);
    if (two) copy_term(e.b, &e.n_b, k == 0 ? fw.b : fw.a, k == 0 ? fw.n_b : fw.n_a);
    copy_term(e.y, &e.n_y, k == 0 ? fw.a : fw.b, k == 0 ? fw.n_a : fw.n_b);
    int in[2] = {c->dy[0], two ? gr_in(c, 1 - k) : -1};
    c->dx[k] = gr_op_like(c, APX_OP_Einsum, &e, two ? 2 : 1, in, gr_in(c, k), gr_val(c, c->dy[0])->dtype);
    if (c->dx[k] < 0) return -1;
  }
  return 0;
}

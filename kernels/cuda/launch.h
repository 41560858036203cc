/* launch.h - the launch configuration table of the CUDA kernels: every __global__ kernel of
 * kernels/cuda with the largest block size (threads) it is ever launched with.
 *
 * One table, two uses:
 *   - each kernel is declared APX_CU_KERNEL(name) (common.cuh), which expands to
 *     __global__ void __launch_bounds__(<its entry>) name: ptxas then keeps the kernel's
 *     registers within what that many threads may use (65,536 per block on sm_80/sm_90, so
 *     at most 64 per thread at 1024 threads), spilling if it must, instead of producing a
 *     kernel that fails to launch with "too many resources requested";
 *   - //kernels/cuda:objects_test reads the built objects' register counts (cuobjdump
 *     --dump-resource-usage) and checks registers x this entry against the register file,
 *     and that the table and the objects name the same kernels.
 * Kernels launched with apx_cu_block() (common.cuh) may get any block size up to
 * APX_CU_BLOCK_MAX (the kernel lab sweeps 32 ... 1024, ApxCudaCtx.block); the others are
 * launched with the fixed size given here. CUB's kernels (gather_grad.cu's radix sort) carry
 * CUB's own __launch_bounds__ and are launched by CUB with them.
 * Plain C (the host test includes it). */
#ifndef APX_CUDA_LAUNCH_H
#define APX_CUDA_LAUNCH_H

#define APX_CU_BLOCK_MAX 1024 /* the largest block apx_cu_block() returns */
#define APX_CU_MT_BLOCK 512   /* multi-tensor optimizer kernels (training.cu) */

/* X(kernel, largest block) */
#define APX_CU_KERNELS(X)                         \
  X(conv_bias_act_kernel, APX_CU_BLOCK_MAX)       \
  X(convert_float_kernel, APX_CU_BLOCK_MAX)       \
  X(convert_any_kernel, APX_CU_BLOCK_MAX)         \
  X(dropout_kernel, APX_CU_BLOCK_MAX)             \
  X(dropout_grad_kernel, APX_CU_BLOCK_MAX)        \
  X(unary_kernel, APX_CU_BLOCK_MAX)               \
  X(unary_grad_kernel, APX_CU_BLOCK_MAX)          \
  X(binary_kernel, APX_CU_BLOCK_MAX)              \
  X(pow_mixed_kernel, APX_CU_BLOCK_MAX)           \
  X(pow_grad_kernel, APX_CU_BLOCK_MAX)            \
  X(gather_keys_kernel, APX_CU_BLOCK_MAX)         \
  X(gather_grad_sum_kernel, APX_CU_BLOCK_MAX)     \
  X(loss_lines_kernel, APX_CU_BLOCK_MAX)          \
  X(loss_grad_kernel, APX_CU_BLOCK_MAX)           \
  X(loss_finish_kernel, 32)                       \
  X(loss_none_kernel, APX_CU_BLOCK_MAX)           \
  X(dense_epilogue_kernel, APX_CU_BLOCK_MAX)      \
  X(dense_act_grad_kernel, APX_CU_BLOCK_MAX)      \
  X(layer_norm_kernel, APX_CU_BLOCK_MAX)          \
  X(layer_norm_dx_kernel, APX_CU_BLOCK_MAX)       \
  X(bn_stats_kernel, APX_CU_BLOCK_MAX)            \
  X(bn_apply_kernel, APX_CU_BLOCK_MAX)            \
  X(bn_dx_kernel, APX_CU_BLOCK_MAX)               \
  X(bn_grad_out_kernel, APX_CU_BLOCK_MAX)         \
  X(bn_grad_stats_kernel, APX_CU_BLOCK_MAX)       \
  X(relu_mask_kernel, APX_CU_BLOCK_MAX)           \
  X(max_pool_kernel, APX_CU_BLOCK_MAX)            \
  X(avg_pool_kernel, APX_CU_BLOCK_MAX)            \
  X(argmax_kernel, APX_CU_BLOCK_MAX)              \
  X(pool_grad_kernel, APX_CU_BLOCK_MAX)           \
  X(gap_grad_kernel, APX_CU_BLOCK_MAX)            \
  X(strided_copy_kernel, APX_CU_BLOCK_MAX)        \
  X(gather_kernel, APX_CU_BLOCK_MAX)              \
  X(where_kernel, APX_CU_BLOCK_MAX)               \
  X(softmax_rows_warp, APX_CU_BLOCK_MAX)          \
  X(softmax_rows_block, APX_CU_BLOCK_MAX)         \
  X(softmax_lines, APX_CU_BLOCK_MAX)              \
  X(softmax_grad_rows_warp, APX_CU_BLOCK_MAX)     \
  X(softmax_grad_rows_block, APX_CU_BLOCK_MAX)    \
  X(softmax_grad_lines, APX_CU_BLOCK_MAX)         \
  X(loss_scale_seed_kernel, APX_CU_BLOCK_MAX)     \
  X(unscale_kernel, APX_CU_MT_BLOCK)              \
  X(unscale_finish_kernel, 32)                    \
  X(opt_scalars_kernel, 32)                       \
  X(opt_update_kernel, APX_CU_MT_BLOCK)           \
  X(lamb_ratio_kernel, 128)                       \
  X(lamb_apply_kernel, APX_CU_MT_BLOCK)           \
  X(opt_step_kernel, 32)                          \
  X(apx_cu_reduce_row_kernel, APX_CU_BLOCK_MAX)   \
  X(apx_cu_reduce_col_kernel, APX_CU_BLOCK_MAX)   \
  X(apx_cu_reduce_finish_kernel, APX_CU_BLOCK_MAX) \
  X(compare_kernel, APX_CU_BLOCK_MAX)             \
  X(logic_kernel, APX_CU_BLOCK_MAX)               \
  X(not_kernel, APX_CU_BLOCK_MAX)                 \
  X(isclass_kernel, APX_CU_BLOCK_MAX)             \
  X(minmax_kernel, APX_CU_BLOCK_MAX)              \
  X(clip_kernel, APX_CU_BLOCK_MAX)                \
  X(mod_kernel, APX_CU_BLOCK_MAX)                 \
  X(clip_grad_kernel, APX_CU_BLOCK_MAX)           \
  X(minmax_count_kernel, APX_CU_BLOCK_MAX)        \
  X(minmax_grad_kernel, APX_CU_BLOCK_MAX) \
  X(pad_kernel, APX_CU_BLOCK_MAX)                 \
  X(pad_grad_kernel, APX_CU_BLOCK_MAX)            \
  X(tile_kernel, APX_CU_BLOCK_MAX)                \
  X(trilu_kernel, APX_CU_BLOCK_MAX)               \
  X(gather_elements_kernel, APX_CU_BLOCK_MAX)     \
  X(gather_elements_grad_kernel, APX_CU_BLOCK_MAX) \
  X(gather_nd_kernel, APX_CU_BLOCK_MAX)           \
  X(gather_nd_grad_kernel, APX_CU_BLOCK_MAX)      \
  X(reduce_max_kernel, APX_CU_BLOCK_MAX)          \
  X(reduce_max_grad_kernel, APX_CU_BLOCK_MAX)     \
  X(random_uniform_kernel, APX_CU_BLOCK_MAX)      \
  X(step_write_kernel, 32)                        \
  X(resize_kernel, APX_CU_BLOCK_MAX)              \
  X(resize_grad_kernel, APX_CU_BLOCK_MAX)         \
  X(einsum_kernel, APX_CU_BLOCK_MAX)

#endif

/* real_end.h - closes an instantiation opened by real_begin.h. */
#undef real_t
#undef acc_t
#undef RF
#undef RC
#undef R_EXP
#undef R_LOG
#undef R_SQRT
#undef R_TANH
#undef R_POW
#undef R_FABS
#undef R_ISNAN
#undef R_INF
#undef R_DT
#undef R_GEMM
#undef APX_REAL_F64

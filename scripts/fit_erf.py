#!/usr/bin/env python3
"""fit_erf.py - coefficients of apx_erf_poly_f32 (kernels/ew_math.h): erf for fp32 inputs
evaluated in double as two polynomials, printed as the C Horner chains the header holds.

    python3 scripts/fit_erf.py            (needs mpmath; 50-digit arithmetic)

  |x| < 1:          erf(x) = x * P(x^2),   P of degree 7 fitted to erf(sqrt u) / sqrt u on
                    u in [0, 1] (relative error 3.7e-11)
  1 <= |x| < 3.92:  erf(|x|) = Q(t), t = (|x| - 2.46) / 1.46, Q of degree 16 fitted to erf on
                    [1, 3.92] (absolute error 4.5e-10; erf >= 0.84 there, whose fp32 ulp is
                    6e-8); beyond 3.92 erf rounds to 1 in fp32 (erfc(3.83) = 2^-25).
Fits are least squares on 600 Chebyshev nodes (near-minimax). The rounding to fp32 then
dominates: kernels/cpu/erf_test measures the max error over a dense sweep (0.51 ulp; glibc's
erff: 0.97 ulp on the same sweep).
"""
import mpmath as mp

mp.mp.dps = 50


def fit(f, a, b, deg, n=600):
    c, h = (a + b) / 2, (b - a) / 2
    xs = [c + h * mp.cos(mp.pi * (k + 0.5) / n) for k in range(n)]
    A, y = mp.matrix(n, deg + 1), mp.matrix(n, 1)
    for i, x in enumerate(xs):
        t = (x - c) / h
        for j in range(deg + 1):
            A[i, j] = t ** j
        y[i] = f(x)
    co = mp.lu_solve(A.T * A, A.T * y)
    return [co[j] for j in range(deg + 1)]


def horner(name, var, cs):
    lines = [f"  double {name} = {mp.nstr(cs[-1], 17)};"]
    for c in reversed(cs[:-1]):
        lines.append(f"  {name} = {name} * {var} + {mp.nstr(c, 17)};")
    return "\n".join(lines)


def main():
    small = lambda u: mp.erf(mp.sqrt(u)) / mp.sqrt(u) if u > 0 else 2 / mp.sqrt(mp.pi)
    ct = fit(small, mp.mpf(0), mp.mpf(1), 7)  # in t = 2u - 1: convert to powers of u
    p = [mp.mpf(0)] * len(ct)
    for j, cj in enumerate(ct):
        for k in range(j + 1):
            p[k] += cj * mp.binomial(j, k) * 2 ** k * (-1) ** (j - k)
    q = fit(mp.erf, mp.mpf(1), mp.mpf("3.92"), 16)
    print(horner("p", "u", p))
    print(horner("q", "t", q))


if __name__ == "__main__":
    main()

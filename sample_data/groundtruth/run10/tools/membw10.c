// run10: host memory read bandwidth (GB/s) with N OpenMP threads: sum a 4 GiB array of doubles (first-touched by
// the same threads), best of 5 passes. Build: gcc -O3 -march=native -fopenmp membw10.c -o membw10
// Run: OMP_NUM_THREADS=N OMP_PROC_BIND=close OMP_PLACES=cores ./membw10
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  size_t n = (size_t)1 << 29;  // 4 GiB
  double *a = malloc(n * sizeof(double));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) a[i] = (double)(i & 7);
  double best = 0, sum = 0;
  for (int r = 0; r < 5; r++) {
    double t0 = omp_get_wtime(), s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s)
    for (size_t i = 0; i < n; i++) s += a[i];
    double gbs = n * sizeof(double) / (omp_get_wtime() - t0) / 1e9;
    if (gbs > best) best = gbs;
    sum += s;
  }
  printf("threads %d read_gbs %.1f (check %.0f)\n", omp_get_max_threads(), best, sum);
  return 0;
}

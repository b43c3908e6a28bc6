// run11: memory read bandwidth, OpenMP, integer sum over a 4 GiB array (gcc -O3 -march=native vectorises the
// reduction: integer adds need no -ffast-math, unlike run10's double chain). Best of 5 passes.
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    size_t n = (size_t)1 << 29;  // 2^29 uint64 = 4 GiB
    uint64_t *a = aligned_alloc(64, n * sizeof(uint64_t));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = i;
    double best = 1e9;
    uint64_t total = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = omp_get_wtime();
        uint64_t s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += a[i];
        double t = omp_get_wtime() - t0;
        if (t < best) best = t;
        total += s;
    }
    printf("threads %d read %.1f GB/s (checksum %llu)\n", omp_get_max_threads(), n * 8.0 / best / 1e9,
           (unsigned long long)total);
    return 0;
}

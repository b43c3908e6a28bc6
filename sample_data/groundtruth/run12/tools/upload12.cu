// run12: CUDA's host-to-device copy of expert-sized slices from an mmap'd model file (llama-server's --cpu-moe
// experts are CPU_Mapped), against one core's memcpy of the same slices and against anonymous and pinned memory.
// usage: upload12 MODEL.gguf SLICE_BYTES [SAMPLE_MIB]   prints one line per measurement (key=value)
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("cuda error %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1); } } while (0)
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static unsigned long long rng = 11;
static size_t rnd(size_t n) { rng = rng * 6364136223846793005ULL + 1442695040888963407ULL; return (rng >> 17) % n; }

// per "layer": `per_layer` slices uploaded async on one stream, then a sync (the cache reads the next layer's ids)
static double uploads(const char *base, size_t span, size_t slice, size_t count, int per_layer, char *dev,
                      size_t dev_bytes, cudaStream_t s, const size_t *offs) {
  double t0 = now();
  for (size_t i = 0; i < count; i++) {
    CK(cudaMemcpyAsync(dev + (i * slice) % (dev_bytes - slice), base + offs[i], slice, cudaMemcpyHostToDevice, s));
    if ((i + 1) % per_layer == 0) CK(cudaStreamSynchronize(s));
  }
  CK(cudaStreamSynchronize(s));
  return now() - t0;
}

static double memcpys(const char *base, size_t slice, size_t count, char *buf, const size_t *offs) {
  double t0 = now();
  for (size_t i = 0; i < count; i++) memcpy(buf, base + offs[i], slice);
  return now() - t0;
}

int main(int argc, char **argv) {
  if (argc < 3) { printf("usage: upload12 MODEL SLICE_BYTES [SAMPLE_MIB]\n"); return 2; }
  size_t slice = strtoull(argv[2], 0, 10), sample = (argc > 3 ? strtoull(argv[3], 0, 10) : 2048) << 20;
  int fd = open(argv[1], O_RDONLY); struct stat st; fstat(fd, &st);
  size_t span = st.st_size;
  const char *map = (const char *)mmap(0, span, PROT_READ, MAP_SHARED, fd, 0);
  size_t count = sample / slice, pages = (span - slice) / 4096;
  size_t *offs = (size_t *)malloc(count * sizeof(size_t));
  for (size_t i = 0; i < count; i++) offs[i] = rnd(pages) * 4096;
  size_t dev_bytes = 1ull << 30; char *dev; CK(cudaMalloc(&dev, dev_bytes));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  char *buf = (char *)malloc(slice);
  memcpys(map, slice, count, buf, offs);  // first touch: map the pages, as a server's earlier tokens did
  double gb = count * (double)slice / 1e9;
  for (int rep = 0; rep < 2; rep++) {
    double t = memcpys(map, slice, count, buf, offs);
    printf("memcpy_mmap rep=%d slice=%zu copies=%zu GBps=%.2f us_per_copy=%.1f\n", rep, slice, count, gb / t, t / count * 1e6);
    for (int per = 1; per <= 15; per += 14) {
      t = uploads(map, span, slice, count, per, dev, dev_bytes, s, offs);
      printf("upload_mmap rep=%d per_sync=%d slice=%zu copies=%zu GBps=%.2f us_per_copy=%.1f\n", rep, per, slice, count, gb / t, t / count * 1e6);
    }
  }
  // the prompt's bypass: one copy per run of consecutive uncached experts (here 32 slices a copy)
  size_t big = 32 * slice, nbig = sample / big;
  for (size_t i = 0; i < nbig; i++) offs[i] = rnd((span - big) / 4096) * 4096;
  buf = (char *)realloc(buf, big);
  memcpys(map, big, nbig, buf, offs);  // first touch of these pages
  double t = uploads(map, span, big, nbig, 1, dev, dev_bytes, s, offs);
  printf("upload_mmap_big slice=%zu copies=%zu GBps=%.2f us_per_copy=%.1f\n", big, nbig, nbig * (double)big / 1e9 / t, t / nbig * 1e6);
  t = memcpys(map, big, nbig, buf, offs);
  printf("memcpy_mmap_big slice=%zu copies=%zu GBps=%.2f\n", big, nbig, nbig * (double)big / 1e9 / t);
  // anonymous pageable and pinned, the same slices of a 2 GiB buffer
  char *anon = (char *)malloc(sample + slice); memset(anon, 1, sample + slice);
  for (size_t i = 0; i < count; i++) offs[i] = rnd((sample) / 4096) * 4096;
  t = uploads(anon, sample, slice, count, 15, dev, dev_bytes, s, offs);
  printf("upload_anon per_sync=15 slice=%zu copies=%zu GBps=%.2f us_per_copy=%.1f\n", slice, count, gb / t, t / count * 1e6);
  CK(cudaHostRegister(anon, sample + slice, 0));
  t = uploads(anon, sample, slice, count, 15, dev, dev_bytes, s, offs);
  printf("upload_pinned per_sync=15 slice=%zu copies=%zu GBps=%.2f us_per_copy=%.1f\n", slice, count, gb / t, t / count * 1e6);
  return 0;
}

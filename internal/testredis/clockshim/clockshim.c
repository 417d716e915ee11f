// clockshim: an LD_PRELOAD library that steps the wall clock of the process
// it is loaded into, for tests of what a clock step does to redis-server.
//
// It overrides gettimeofday, time and clock_gettime for CLOCK_REALTIME and
// CLOCK_REALTIME_COARSE, adding an offset in microseconds. The offset is an
// int64 in native byte order at the start of the file named by the
// environment variable DLOCK_CLOCKSHIM_FILE, mapped shared at load time and
// read (atomically) at every call: a test that stores a new value into its
// own mapping of the file steps the server's clock at once, without a
// restart. Every other clock (CLOCK_MONOTONIC, CLOCK_BOOTTIME, the CPU-time
// clocks) is left alone, as a real clock step leaves it.
//
// The real clocks are read with the clock_gettime system call, not through
// dlsym(RTLD_NEXT): dlsym may allocate, and an allocator that reads a clock
// (jemalloc does) would call back into this library before dlsym returned.
// Without the variable, or when the file cannot be mapped, the offset is 0.
//
// Built by internal/testredis (clock_linux.go): gcc -shared -fPIC -O2.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int64_t *offset_us; // the mapped offset, or NULL

__attribute__((constructor)) static void clockshim_init(void) {
  const char *path = getenv("DLOCK_CLOCKSHIM_FILE");
  if (path == NULL || *path == '\0') {
    return;
  }
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return;
  }
  void *p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p != MAP_FAILED) {
    offset_us = p;
  }
}

static int64_t offset(void) {
  return offset_us ? __atomic_load_n(offset_us, __ATOMIC_RELAXED) : 0;
}

static int real_clock_gettime(clockid_t id, struct timespec *ts) {
  return (int)syscall(SYS_clock_gettime, id, ts);
}

// shift adds off microseconds to ts, keeping tv_nsec in [0, 1e9).
static void shift(struct timespec *ts, int64_t off) {
  int64_t ns = (int64_t)ts->tv_nsec + (off % 1000000) * 1000;
  int64_t s = (int64_t)ts->tv_sec + off / 1000000;
  if (ns < 0) {
    ns += 1000000000;
    s--;
  } else if (ns >= 1000000000) {
    ns -= 1000000000;
    s++;
  }
  ts->tv_sec = (time_t)s;
  ts->tv_nsec = (long)ns;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  int r = real_clock_gettime(id, ts);
  if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
    shift(ts, offset());
  }
  return r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
  (void)tz; // obsolete: nothing fills it
  struct timespec ts;
  int r = clock_gettime(CLOCK_REALTIME, &ts);
  if (r == 0) {
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  return r;
}

time_t time(time_t *t) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
    return (time_t)-1;
  }
  if (t != NULL) {
    *t = ts.tv_sec;
  }
  return ts.tv_sec;
}

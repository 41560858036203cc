/* prefault.c - page faults taken on a helper thread ahead of the compile (see prefault.h). */
#include "ir/prefault.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
#define PREFAULT_SUPPORTED 1
#endif

#ifdef PREFAULT_SUPPORTED

#define HINTS 64                  /* ranges waiting (a ring; the oldest is dropped when full) */
#define STEP (2u << 20)           /* bytes populated per madvise */

typedef struct Hint {
  uintptr_t lo, hi;
} Hint;

static struct {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int running, stopping;
  Hint hints[HINTS];
  unsigned head, tail; /* hints[head % HINTS .. tail % HINTS) */
  uintptr_t heap_done; /* the program break up to which the heap is populated */
  size_t page;
  atomic_size_t populated;
  int unsupported; /* the helper's own: it stops */
} pf = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static uintptr_t page_down(uintptr_t a) { return a & ~(uintptr_t)(pf.page - 1); }
static uintptr_t page_up(uintptr_t a) { return (a + pf.page - 1) & ~(uintptr_t)(pf.page - 1); }

/* Populates [lo, hi) writable, STEP bytes at a time from the top down: the memory's user
 * fills it from the bottom up, so the two meet once instead of faulting the same page-table
 * pages in step (a 650 MB copy outruns the helper). A range that was unmapped or moved
 * meanwhile (mremap) fails harmlessly: madvise only maps pages in, it never changes bytes. */
static void populate(uintptr_t lo, uintptr_t hi) {
  lo = page_down(lo);
  hi = page_up(hi);
  while (lo < hi) {
    uintptr_t start = hi - lo > STEP ? hi - STEP : lo;
    if (madvise((void *)start, hi - start, MADV_POPULATE_WRITE) != 0) {
      /* EINVAL before anything was populated: a kernel older than the advice (5.14) */
      if (errno == EINVAL && !atomic_load_explicit(&pf.populated, memory_order_relaxed)) pf.unsupported = 1;
      return;
    }
    atomic_fetch_add_explicit(&pf.populated, hi - start, memory_order_relaxed);
    hi = start;
  }
}

static void *prefault_main(void *arg) {
  (void)arg;
  /* the helper runs on what the compile's own threads leave idle (SCHED_IDLE): the packing
   * and plan-check threads keep their core, and a page the helper did not reach in time is
   * faulted by its user as it would be without the helper */
  struct sched_param idle = {0};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
  pthread_mutex_lock(&pf.mu);
  while (!pf.stopping && !pf.unsupported) {
    if (pf.head != pf.tail) {
      Hint h = pf.hints[pf.head++ % HINTS];
      pthread_mutex_unlock(&pf.mu);
      populate(h.lo, h.hi);
      pthread_mutex_lock(&pf.mu);
      continue;
    }
    /* The heap grows by brk in steps of at least the top pad (apexc_main.c sets it): the
     * pages between the last populated break and the current one are new. sbrk(0) only
     * reads the break. */
    uintptr_t top = (uintptr_t)sbrk(0);
    if (top != (uintptr_t)-1 && top > pf.heap_done) {
      uintptr_t lo = pf.heap_done;
      pf.heap_done = top;
      pthread_mutex_unlock(&pf.mu);
      populate(lo, top);
      pthread_mutex_lock(&pf.mu);
      continue;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 500 * 1000; /* the heap is polled every 0.5 ms while idle */
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&pf.cv, &pf.mu, &until);
  }
  pthread_mutex_unlock(&pf.mu);
  return NULL;
}

int apx_prefault_start(void) {
  pthread_mutex_lock(&pf.mu);
  int rc = 0;
  if (!pf.running) {
    long pg = sysconf(_SC_PAGESIZE);
    pf.page = pg > 0 ? (size_t)pg : 4096;
    pf.heap_done = (uintptr_t)sbrk(0);
    pf.stopping = 0;
    pf.head = pf.tail = 0;
    /* the helper takes no signals: one it took would wait for its idle-priority turn
     * (apexc's handler for SIGINT/SIGTERM/SIGHUP removes the temporary plan) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (pthread_create(&pf.thread, NULL, prefault_main, NULL) == 0) pf.running = 1;
    else rc = -1;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  pthread_mutex_unlock(&pf.mu);
  return rc;
}

void apx_prefault_hint(void *addr, size_t bytes) {
  if (!addr || !bytes) return;
  pthread_mutex_lock(&pf.mu);
  if (pf.running && !pf.stopping) {
    if (pf.tail - pf.head == HINTS) pf.head++;
    pf.hints[pf.tail++ % HINTS] = (Hint){(uintptr_t)addr, (uintptr_t)addr + bytes};
    pthread_cond_signal(&pf.cv);
  }
  pthread_mutex_unlock(&pf.mu);
}

size_t apx_prefault_stop(void) {
  pthread_mutex_lock(&pf.mu);
  int was = pf.running;
  pf.stopping = 1;
  pthread_cond_signal(&pf.cv);
  pthread_mutex_unlock(&pf.mu);
  if (was) pthread_join(pf.thread, NULL);
  pthread_mutex_lock(&pf.mu);
  pf.running = 0;
  pthread_mutex_unlock(&pf.mu);
  return atomic_load(&pf.populated);
}

#else /* no MADV_POPULATE_WRITE: nothing is prefaulted */

int apx_prefault_start(void) { return -1; }
void apx_prefault_hint(void *addr, size_t bytes) {
  (void)addr;
  (void)bytes;
}
size_t apx_prefault_stop(void) { return 0; }

#endif

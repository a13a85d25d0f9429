/* How many threads a model run uses: measured, not assumed.
 *
 * With every core free, a run is fastest on all of them. When another program keeps
 * some cores busy, the threads that share a core with it get a share of that core in
 * slices of milliseconds, and every parallel region waits for its slowest thread: on
 * two cores with one taken, BERT-base ran 2.7x slower on two threads than alone, and
 * 1.8x slower on one (BENCHMARKS.md, "Threads under load"). So each instance times its
 * runs and now and then tries one thread fewer or one more, keeping what is faster:
 *
 * - `level` is the run time at the chosen count: the median of its last three runs, so
 *   one run that an interrupt or a page fault slowed does not move it.
 * - A probe runs once on the other count. If it is not 10% faster than `level` (the
 *   usual case on a quiet machine) that is all; if it is, a duel follows: the chosen
 *   count, the candidate, the chosen count again, and the candidate is taken when its
 *   two runs together beat the chosen count's two by 10%. A short burst of load that
 *   slowed the runs before the probe (another program's threads still spinning)
 *   does not switch the count, only load that lasts.
 * - Probes come every `interval` runs, which doubles after each probe that loses (4 to
 *   64 runs): on a quiet machine one run in 64 is slower, by less than one run's time.
 * - Two runs in a row slower than 1.3x the best level since the count was chosen (the
 *   machine got busier) bring the next probe forward and the interval back to 4; if
 *   that probe loses too, the slower level is the new normal.
 * - The first run (page faults, cold caches) is not counted.
 *
 * The policy is plain arithmetic on the times it is given (no clock, no OpenMP), so it
 * can be tested with made-up times; runtime.c applies it around ember_model_run.
 * Like timing.h, Ember prepends this text to runtime.c; everything here is static. */

#ifndef EMBER_THREADS_H
#define EMBER_THREADS_H

#include <stdint.h>

#define EMBER_THREADS_TAKE 0.9    /* a candidate must take <= this x the chosen count's time */
#define EMBER_THREADS_SLOWER 1.3  /* a run this much over the best level is slow */
#define EMBER_THREADS_SLOW_RUNS 2 /* slow runs in a row that bring a probe forward */
#define EMBER_THREADS_DUEL_RUNS 4 /* candidate, chosen, candidate, chosen */
#define EMBER_THREADS_MIN_INTERVAL 4
#define EMBER_THREADS_MAX_INTERVAL 64

typedef struct {
  int32_t max_threads;   /* the most a run may use; <= 1 turns the policy off */
  int32_t threads;       /* the count runs use now */
  int32_t candidate;     /* the count being tried (probe, then duel), 0 if none */
  int32_t duel_runs;     /* runs since the candidate's probe began, that one included */
  double candidate_seconds, chosen_seconds; /* their times in the duel, summed */
  int32_t fewer_next;    /* with neighbours on both sides, probe fewer next (else more) */
  int32_t runs_to_probe; /* runs at `threads` before the next probe */
  int32_t interval;      /* runs between probes */
  int32_t slow_runs;     /* consecutive slow runs at `threads` */
  int32_t warmed;        /* the first run, which is not counted, is over */
  int32_t recent_count;  /* runs recorded at `threads` */
  double recent[3];      /* seconds of the last three, oldest replaced first */
  double level;          /* the median of `recent` (0: no run yet) */
  double best;           /* the lowest level since `threads` was chosen */
} ember_thread_policy;

static inline void ember_threads_record(ember_thread_policy* policy, double seconds) {
  double* recent = policy->recent;
  recent[policy->recent_count % 3] = seconds;
  int32_t count = ++policy->recent_count;
  if (count == 1) {
    policy->level = seconds;
  } else if (count == 2) {
    policy->level = 0.5 * (recent[0] + recent[1]);
  } else {
    double a = recent[0], b = recent[1], c = recent[2];
    policy->level = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
  }
  if (policy->best <= 0.0 || policy->level < policy->best) policy->best = policy->level;
}

static inline void ember_threads_init(ember_thread_policy* policy, int32_t max_threads) {
  *policy = (ember_thread_policy){0};
  policy->max_threads = max_threads;
  policy->threads = max_threads > 1 ? max_threads : 1;
  policy->fewer_next = 1;
  policy->interval = EMBER_THREADS_MIN_INTERVAL;
  policy->runs_to_probe = EMBER_THREADS_MIN_INTERVAL;
}

/* The thread count of the next run. */
static inline int32_t ember_threads_next(ember_thread_policy* policy) {
  if (policy->candidate != 0) return policy->duel_runs % 2 ? policy->threads : policy->candidate;
  if (policy->max_threads <= 1 || policy->runs_to_probe > 0 || policy->level <= 0.0) {
    return policy->threads;
  }
  int32_t fewer = policy->threads - 1, more = policy->threads + 1;
  int32_t has_fewer = fewer >= 1, has_more = more <= policy->max_threads;
  if (has_fewer && has_more) {
    policy->candidate = policy->fewer_next ? fewer : more;
    policy->fewer_next = !policy->fewer_next;
  } else {
    policy->candidate = has_fewer ? fewer : more;
  }
  policy->duel_runs = 0;
  policy->candidate_seconds = policy->chosen_seconds = 0.0;
  return policy->candidate;
}

/* The end of a probe or duel: the candidate taken or not. */
static inline void ember_threads_decide(ember_thread_policy* policy, int32_t take) {
  if (take) {
    policy->threads = policy->candidate;
    policy->recent_count = 0;
    policy->best = 0.0;
    ember_threads_record(policy, policy->candidate_seconds / (policy->duel_runs / 2));
    policy->interval = EMBER_THREADS_MIN_INTERVAL;
  } else {
    /* What is now is the normal here: slow runs are counted from it. */
    policy->best = policy->level;
    if (policy->interval < EMBER_THREADS_MAX_INTERVAL) policy->interval *= 2;
  }
  policy->candidate = 0;
  policy->runs_to_probe = policy->interval;
  policy->slow_runs = 0;
}

/* Records that a run on `threads` threads (what ember_threads_next said) took
 * `seconds`. */
static inline void ember_threads_observe(ember_thread_policy* policy, int32_t threads,
                                         double seconds) {
  if (policy->max_threads <= 1) return;
  if (policy->candidate != 0) {
    if (threads == policy->candidate) {
      policy->candidate_seconds += seconds;
    } else if (threads == policy->threads) {
      policy->chosen_seconds += seconds;
      ember_threads_record(policy, seconds);
    } else {
      return; /* not a run this policy chose */
    }
    policy->duel_runs += 1;
    if (policy->duel_runs == 1 && seconds > EMBER_THREADS_TAKE * policy->level) {
      ember_threads_decide(policy, 0);
    } else if (policy->duel_runs == EMBER_THREADS_DUEL_RUNS) {
      ember_threads_decide(
          policy, policy->candidate_seconds <= EMBER_THREADS_TAKE * policy->chosen_seconds);
    }
    return;
  }
  if (threads != policy->threads) return; /* not a run this policy chose */
  if (!policy->warmed) {
    policy->warmed = 1; /* the first run pays for first touches: not a measure */
    return;
  }
  ember_threads_record(policy, seconds);
  policy->slow_runs = seconds > EMBER_THREADS_SLOWER * policy->best ? policy->slow_runs + 1 : 0;
  if (policy->slow_runs >= EMBER_THREADS_SLOW_RUNS) {
    policy->slow_runs = 0;
    policy->interval = EMBER_THREADS_MIN_INTERVAL;
    policy->runs_to_probe = 0;
  } else if (policy->runs_to_probe > 0) {
    policy->runs_to_probe -= 1;
  }
}

#endif

//! A team for small forward passes: the calling thread leads, up to three other workers of the
//! current rayon pool help, and work is handed over through atomics instead of rayon jobs.
//!
//! At batch 1 a product or a LayerNorm is a few microseconds of work, about what handing a
//! job to a sleeping rayon worker costs, so rayon either left the second core idle or spent
//! the gain on wake-ups (BENCHMARKS.md). A team's helpers spin for the length of one forward
//! pass (about a millisecond), so each product, each head of attention and each block of
//! rows can be split for the price of a few atomic operations. Helpers are offered to the
//! pool as `rayon::spawn` jobs: one only comes when a worker of the pool is free, so a team
//! never takes a core a concurrent job of that pool holds, the leader never waits for one to
//! start, and a forward whose helpers never come runs every task itself. A pool of one
//! thread (the search path's `Encoder::encode_one`, the API's write pool on 2 cores) forms
//! no team.
//!
//! A team needs its threads on cores at the same time: a helper preempted in the middle of a
//! task holds up its leader until the scheduler gives it a core again (milliseconds, where a
//! task is microseconds). On a machine with more runnable threads than cores (another process
//! computing, a second team) every product would wait out a time slice. So a leader that
//! waits [`STALL`] for a helper's task stands the team down for the rest of its forward, and
//! its thread leads no team for [`SOLO_FOR`] after: under contention the forward runs on its
//! own thread, as a pool of one does.
//!
//! Which thread runs a task never changes its arithmetic, so results are bit-identical with
//! and without a team (tested).

use std::cell::{Cell, UnsafeCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A job: `count` tasks, each run once by whichever thread claims it.
type Job = (*const (dyn Fn(usize) + Sync), usize);

/// State shared by the leader (the forward's thread) and its helpers. Every atomic operation
/// is SeqCst; the protocol around `job`: the leader writes it only while `active` is false
/// and, after clearing `active`, it has seen `helpers_in` at zero; a helper reads it only
/// between entering (`helpers_in` + 1) and leaving (− 1), and only after seeing `active`
/// true.
struct Shared {
    job: UnsafeCell<Job>,
    active: AtomicBool,
    helpers_in: AtomicUsize,
    /// The next unclaimed task of the job.
    next: AtomicUsize,
    /// Tasks of the job finished (by either thread).
    done: AtomicUsize,
    /// A task panicked on a helper.
    panicked: AtomicBool,
    /// The forward is over (or unwinding), or the team stood down ([`STALL`]): the helpers
    /// leave, and the forward's remaining jobs run on the leader alone.
    finished: AtomicBool,
    /// The leader's pool thread index (`usize::MAX` outside a pool): a helper started on the
    /// leader's own thread (rayon may run a pending job there while the leader waits inside
    /// nested rayon work) would wait for itself, so it leaves at once.
    leader: AtomicUsize,
}

// SAFETY: `job` is only touched under the protocol above; the closure it points to is `Sync`,
// and a helper that outlives the forward (it holds an `Arc`) never dereferences it.
unsafe impl Sync for Shared {}
// SAFETY: as above; the pointer is data until the protocol lets a helper use it.
unsafe impl Send for Shared {}

/// Most helpers of one team. A batch-1 product has 6 to 24 tasks (64-column panels), so a
/// few threads share it evenly; measured on 2 cores only (one helper), so larger pools keep
/// their other workers for other jobs rather than spin on tasks they would rarely get.
const MAX_HELPERS: usize = 3;

/// How long a leader waits for a helper's task before it stands the team down: far longer
/// than a task (a few to a hundred microseconds), about a scheduler's time slice, so only a
/// helper that lost its core waits this long.
const STALL: Duration = Duration::from_millis(2);

/// How long a thread whose team stood down leads none: long enough that contention costs one
/// stall in hundreds of forwards, short enough that a machine that became free is used again
/// soon.
const SOLO_FOR: Duration = Duration::from_millis(500);

/// A no-op job for the slot's initial value.
fn nothing(_: usize) {}

thread_local! {
    /// The team the forward on this thread leads, if any.
    static TEAM: Cell<*const Shared> = const { Cell::new(std::ptr::null()) };
    /// Until when this thread leads no team (a team of its stood down).
    static SOLO_UNTIL: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// True while this thread leads no team because one of its teams stood down lately.
fn standing_down() -> bool {
    SOLO_UNTIL.with(|u| u.get().is_some_and(|until| Instant::now() < until))
}

/// Runs `f` (one forward pass) as the leader of a team with up to [`MAX_HELPERS`] other
/// workers of the current rayon pool as helpers, each joining when it is free; in a pool of
/// one thread, inside another team's forward, or on a thread whose team stood down within
/// [`SOLO_FOR`], simply runs `f`. Work inside `f` reaches the team through [`run`] and
/// [`for_each_part_mut`].
pub fn lead<R>(f: impl FnOnce() -> R) -> R {
    let helpers = (rayon::current_num_threads() - 1).min(MAX_HELPERS);
    if helpers == 0 || leading() || standing_down() {
        return f();
    }
    let shared = Arc::new(Shared {
        job: UnsafeCell::new((&nothing as &(dyn Fn(usize) + Sync), 0)),
        active: AtomicBool::new(false),
        helpers_in: AtomicUsize::new(0),
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        panicked: AtomicBool::new(false),
        finished: AtomicBool::new(false),
        leader: AtomicUsize::new(rayon::current_thread_index().unwrap_or(usize::MAX)),
    });
    // Offered, not awaited: a worker that is free takes one; one taken after the forward
    // finds it finished and returns at once. The leader never waits for a helper to start,
    // so a busy pool (a reindex, a parallel evaluation) delays nothing.
    for _ in 0..helpers {
        let s = Arc::clone(&shared);
        rayon::spawn(move || help(&s));
    }
    // The guard clears the team and releases the helpers even when `f` unwinds.
    struct Guard<'a>(&'a Shared);
    impl Drop for Guard<'_> {
        fn drop(&mut self) {
            TEAM.with(|t| t.set(std::ptr::null()));
            self.0.finished.store(true, SeqCst);
        }
    }
    TEAM.with(|t| t.set(Arc::as_ptr(&shared)));
    let _guard = Guard(&shared);
    f()
}

/// True while this thread leads a team.
pub fn leading() -> bool {
    TEAM.with(|t| !t.get().is_null())
}

/// Runs `task(0..count)`, shared with this thread's team if it leads one (with whichever
/// helpers have come), else on this thread alone. Returns after every task has run.
pub fn run(count: usize, task: &(dyn Fn(usize) + Sync)) {
    let team = TEAM.with(|t| t.get());
    // SAFETY: the pointer is set by `lead` on this thread for the duration of `f`, and
    // `shared` outlives `f`.
    if team.is_null() || count < 2 || unsafe { &*team }.finished.load(SeqCst) {
        (0..count).for_each(task);
        return;
    }
    // SAFETY: as above.
    let s = unsafe { &*team };
    // Post the job. `active` is false and every helper is out (the previous `run` waited for
    // that), so nobody reads the slot now.
    // SAFETY: as said; the lifetime is erased because the job is withdrawn (below) before
    // this function returns, and no helper touches it after.
    let job: Job = (
        unsafe {
            std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const (dyn Fn(usize) + Sync)>(
                task,
            )
        },
        count,
    );
    unsafe { *s.job.get() = job };
    s.next.store(0, SeqCst);
    s.done.store(0, SeqCst);
    s.active.store(true, SeqCst);
    // A task that panics here must not unwind past the helpers still running the job's other
    // tasks (the job lives in this caller's frame): the panic is held until they are out.
    let mut mine = 0;
    let mut caught = None;
    loop {
        let i = s.next.fetch_add(1, SeqCst);
        if i >= count {
            break;
        }
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| task(i))) {
            caught.get_or_insert(p);
        }
        mine += 1;
    }
    s.done.fetch_add(mine, SeqCst);
    let mut spins = 0u32;
    let mut yielding_since = None;
    while s.done.load(SeqCst) < count {
        if backoff(&mut spins) {
            // A helper's task is late: past STALL its thread has lost its core, and every
            // later job would wait for it as well. The helpers leave after their tasks.
            let since = *yielding_since.get_or_insert_with(Instant::now);
            if since.elapsed() > STALL && !s.finished.swap(true, SeqCst) {
                SOLO_UNTIL.with(|u| u.set(Some(Instant::now() + SOLO_FOR)));
                tracing::debug!(
                    "a helper of the encoder's team lost its core: forwards on this thread \
                     run alone for {SOLO_FOR:?}"
                );
            }
        }
    }
    // Withdraw the job and wait until every helper has let go of it.
    s.active.store(false, SeqCst);
    while s.helpers_in.load(SeqCst) > 0 {
        std::hint::spin_loop();
    }
    if let Some(p) = caught {
        std::panic::resume_unwind(p);
    }
    if s.panicked.load(SeqCst) {
        panic!("a task of the encoder's team panicked on a helper thread");
    }
}

/// Runs `f(i, part)` for consecutive parts of `data`, part `i` holding `lens[i]` elements
/// (`Σ lens ≤ data.len()`): with this thread's team if it leads one, else on the current
/// rayon pool (inline for a single part).
pub fn for_each_part_mut<T: Send>(
    data: &mut [T],
    lens: &[usize],
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    assert!(
        lens.iter().sum::<usize>() <= data.len(),
        "parts past the data"
    );
    if leading() {
        let mut starts = Vec::with_capacity(lens.len());
        let mut at = 0;
        for &l in lens {
            starts.push(at);
            at += l;
        }
        let base = Parts(data.as_mut_ptr());
        run(lens.len(), &|i| {
            // SAFETY: parts are disjoint ranges of `data`, and each index runs exactly once.
            let part = unsafe { std::slice::from_raw_parts_mut(base.at(starts[i]), lens[i]) };
            f(i, part);
        });
    } else {
        use rayon::prelude::*;
        let mut parts = Vec::with_capacity(lens.len());
        let mut rest = data;
        for &l in lens {
            let (head, tail) = rest.split_at_mut(l);
            parts.push(head);
            rest = tail;
        }
        if parts.len() == 1 || rayon::current_num_threads() == 1 {
            parts.into_iter().enumerate().for_each(|(i, p)| f(i, p));
        } else {
            parts.into_par_iter().enumerate().for_each(|(i, p)| f(i, p));
        }
    }
}

/// The base pointer of [`for_each_part_mut`]'s data, shared by its tasks.
struct Parts<T>(*mut T);
// SAFETY: tasks write through it to disjoint parts only.
unsafe impl<T: Send> Sync for Parts<T> {}

impl<T> Parts<T> {
    /// A pointer to element `i` (a method, so closures capture the wrapper, not the field).
    fn at(&self, i: usize) -> *mut T {
        // SAFETY: `i` is within the data (the caller's parts are).
        unsafe { self.0.add(i) }
    }
}

/// A helper's loop: claim tasks of each posted job until the forward is over.
fn help(s: &Shared) {
    if rayon::current_thread_index() == Some(s.leader.load(SeqCst)) {
        // Not taken by another worker: the leader's own thread runs it (after `f`, or while
        // waiting inside nested rayon work); waiting here would wait for itself.
        return;
    }
    let mut spins = 0u32;
    while !s.finished.load(SeqCst) {
        s.helpers_in.fetch_add(1, SeqCst);
        let mut worked = false;
        if s.active.load(SeqCst) {
            // SAFETY: `active` was seen true after entering, so the leader waits for this
            // helper to leave before it withdraws or rewrites the job.
            let (task, count) = unsafe { *s.job.get() };
            let task = unsafe { &*task };
            let mut mine = 0;
            loop {
                let i = s.next.fetch_add(1, SeqCst);
                if i >= count {
                    break;
                }
                if catch_unwind(AssertUnwindSafe(|| task(i))).is_err() {
                    s.panicked.store(true, SeqCst);
                }
                mine += 1;
            }
            if mine > 0 {
                s.done.fetch_add(mine, SeqCst);
                worked = true;
            }
        }
        s.helpers_in.fetch_sub(1, SeqCst);
        if worked {
            spins = 0;
        } else {
            backoff(&mut spins);
        }
    }
}

/// Waits a little: spin first, then give the core away (a helper whose leader is between
/// products, or a leader whose helper was preempted mid-task). True once it gives it away.
fn backoff(spins: &mut u32) -> bool {
    *spins = spins.saturating_add(1);
    if *spins < 4096 {
        std::hint::spin_loop();
        false
    } else {
        std::thread::yield_now();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;
    use std::sync::atomic::AtomicU64;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
    }

    #[test]
    fn every_task_runs_exactly_once_with_or_without_a_helper() {
        for threads in [1, 2, 3] {
            pool(threads).install(|| {
                let hits: Vec<AtomicU64> = (0..1000).map(|_| AtomicU64::new(0)).collect();
                let helped = lead(|| {
                    for round in 0..200usize {
                        let count = round % 17 + 1;
                        run(count, &|i| {
                            hits[i].fetch_add(1, SeqCst);
                        });
                    }
                    leading()
                });
                assert_eq!(helped, threads > 1, "{threads} threads");
                let total: u64 = hits.iter().map(|h| h.load(SeqCst)).sum();
                let expected: usize = (0..200usize).map(|r| r % 17 + 1).sum();
                assert_eq!(total, expected as u64);
                assert!(!leading(), "the team ends with the forward");
            });
        }
    }

    #[test]
    fn an_idle_worker_comes_to_help() {
        pool(2).install(|| {
            let threads: Vec<AtomicUsize> = (0..40).map(|_| AtomicUsize::new(0)).collect();
            lead(|| {
                run(40, &|i| {
                    threads[i].store(rayon::current_thread_index().unwrap(), SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(2));
                })
            });
            let mut used: Vec<usize> = threads.iter().map(|t| t.load(SeqCst)).collect();
            used.sort_unstable();
            used.dedup();
            assert_eq!(used, [0, 1], "both workers ran tasks");
        });
    }

    #[test]
    fn a_helper_that_loses_its_core_stands_the_team_down_for_a_while() {
        pool(2).install(|| {
            let leader = rayon::current_thread_index();
            let on_leader =
                |ran: &[AtomicUsize]| ran.iter().all(|t| t.load(SeqCst) == leader.unwrap() + 1);
            let (stood_down, after) = lead(|| {
                // Until the helper comes and takes a task, which it then holds until the
                // leader stands the team down (a preempted helper, as on a machine with more
                // threads than cores; at most 20 s, after which the asserts below fail).
                let team = TEAM.with(|t| t.get()) as usize;
                // SAFETY: the team outlives this forward's jobs.
                let solo = || unsafe { &*(team as *const Shared) }.finished.load(SeqCst);
                let mut held = false;
                while !held {
                    let slow = AtomicBool::new(false);
                    run(64, &|_| {
                        if rayon::current_thread_index() != leader {
                            slow.store(true, SeqCst);
                            let start = Instant::now();
                            while !solo() && start.elapsed() < Duration::from_secs(20) {
                                std::thread::sleep(Duration::from_micros(100));
                            }
                        } else {
                            std::thread::sleep(Duration::from_micros(50));
                        }
                    });
                    held = slow.load(SeqCst);
                }
                // The forward's later jobs run on the leader alone.
                let ran: Vec<AtomicUsize> = (0..64).map(|_| AtomicUsize::new(0)).collect();
                run(64, &|i| {
                    std::thread::sleep(Duration::from_micros(50));
                    ran[i].store(rayon::current_thread_index().unwrap() + 1, SeqCst);
                });
                (on_leader(&ran), leading())
            });
            assert!(stood_down, "the jobs after the stall ran on the leader");
            assert!(
                after,
                "the forward still leads (its team is only stood down)"
            );
            // The thread's next forwards form no team for a while...
            assert!(!lead(leading), "no team within SOLO_FOR");
            // ...and one again after it.
            std::thread::sleep(SOLO_FOR + Duration::from_millis(50));
            assert!(lead(leading), "a team again after SOLO_FOR");
        });
    }

    #[test]
    fn a_busy_pool_leaves_the_leader_alone_and_nested_rayon_work_does_not_deadlock() {
        pool(2).install(|| {
            // Both workers lead at once: neither can help the other, and each finishes.
            let sums: Vec<usize> = (0..8usize)
                .map(|n| {
                    let (a, b) = rayon::join(
                        || {
                            lead(|| {
                                let acc = AtomicUsize::new(0);
                                run(64, &|i| {
                                    acc.fetch_add(i + n, SeqCst);
                                });
                                // Nested rayon work inside a forward (a parallel LayerNorm).
                                let v: usize = (0..1000usize).into_par_iter().sum();
                                acc.load(SeqCst) + v
                            })
                        },
                        || lead(|| (0..64).map(|i| i + n).sum::<usize>()),
                    );
                    a - 499_500 - b
                })
                .collect();
            assert!(sums.iter().all(|&d| d == 0), "{sums:?}");
        });
    }

    #[test]
    fn a_leader_never_waits_for_a_busy_pool() {
        // Every worker of the global pool held; a forward from outside any pool still runs
        // at once, all on its own thread (under rayon::join it would wait for a worker).
        let workers = rayon::current_num_threads();
        let (hold, held) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(std::sync::Mutex::new(held));
        let (started, all_started) = std::sync::mpsc::channel();
        for _ in 0..workers {
            let (held, started) = (Arc::clone(&held), started.clone());
            rayon::spawn(move || {
                started.send(()).unwrap();
                let _ = held.lock().unwrap().recv();
            });
        }
        // Wait until one worker holds the lock and the rest are blocked on it (all busy).
        for _ in 0..workers {
            all_started.recv().unwrap();
        }
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let me = std::thread::current().id();
            let here = AtomicUsize::new(0);
            lead(|| {
                run(8, &|_| {
                    if std::thread::current().id() == me {
                        here.fetch_add(1, SeqCst);
                    }
                })
            });
            done.send(here.load(SeqCst)).unwrap();
        });
        let ran_here = finished.recv_timeout(std::time::Duration::from_secs(20));
        for _ in 0..workers {
            hold.send(()).unwrap();
        }
        assert_eq!(
            ran_here,
            Ok(8),
            "every task ran on the leader, without waiting"
        );
    }

    #[test]
    fn a_task_that_panics_on_either_thread_is_reported_after_the_others_finish() {
        let p = pool(2);
        for bad in [0usize, 63] {
            let finished = AtomicUsize::new(0);
            let r = p.install(|| {
                catch_unwind(AssertUnwindSafe(|| {
                    lead(|| {
                        run(64, &|i| {
                            std::thread::sleep(std::time::Duration::from_micros(200));
                            assert_ne!(i, bad, "task {i} fails");
                            finished.fetch_add(1, SeqCst);
                        })
                    })
                }))
            });
            assert!(r.is_err(), "the panic reaches the caller");
            assert_eq!(finished.load(SeqCst), 63, "every other task ran to its end");
        }
        assert_eq!(p.install(|| lead(|| 7)), 7, "the pool still works");
    }

    #[test]
    fn a_panicking_forward_releases_its_helper() {
        let p = pool(2);
        let r = p.install(|| catch_unwind(AssertUnwindSafe(|| lead(|| panic!("boom")))));
        assert!(r.is_err());
        // The pool still works (the helper left).
        assert_eq!(p.install(|| lead(|| 7)), 7);
    }
}

//! Connection sampling: which connections the kernel captures when ebtop must stay within a CPU
//! budget (`--max-cpu`), or when a fixed share is asked for (`--sample`). The kernel decides
//! once per connection, before any copy or ring write (src/bpf/capture.h `sample_keeps`): a
//! connection is kept when the hash of its socket id is below `keep_below`. This module is
//! the user-space half: the same hash, the control entry the kernel reads (`sample_ctl`), and
//! the controller that moves it once per interval.
//!
//! Why by connection and new connections first: a connection captured is captured until it
//! ends or until a call boundary, so every call seen is a whole call and its numbers are
//! exact; the sample changes only which connections are seen. Lowering the share decides new
//! connections against the lower threshold; raising it (a new `epoch`) lets sampled-out
//! connections be decided again — they join mid-stream, as a connection older than ebtop
//! does. When the budget is still exceeded after the share for new connections went down
//! (long-lived connections: keep-alive, pools), captured connections above the share are
//! cut at a call boundary ([`CutBoard`]): the trackers name those whose parser has seen one
//! call at a time and knows the direction of their requests, and the kernel stops capturing
//! each at its next turn into that direction — the first bytes of a new request.

/// A connection's place in the sample (the kernel's `sample_hash`, capture.h).
pub fn sample_hash(id: u64) -> u32 {
    let mut id = id;
    id ^= id >> 33;
    id = id.wrapping_mul(0xff51afd7ed558ccd);
    id ^= id >> 33;
    id = id.wrapping_mul(0xc4ceb9fe1a85ec53);
    id ^= id >> 33;
    id as u32
}

/// `keep_below` for a share of connections (0.0 ..= 1.0).
pub fn keep_below_of(ratio: f64) -> u64 {
    ((ratio.clamp(0.0, 1.0) * (1u64 << 32) as f64).round() as u64).min(1 << 32)
}

/// Whether the connection of socket `id` is in a sample of `keep_below` (decided under it).
pub fn keeps(id: u64, keep_below: u64) -> bool {
    u64::from(sample_hash(id)) < keep_below
}

/// The kernel's `struct ebtop_sample_ctl` (capture.h), as written into `sample_ctl`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleCtl {
    pub keep_below: u64,
    pub epoch: u32,
    pub active: bool,
    /// The generation of cuts asked for (0: none): the kernel cuts a connection named in
    /// `sample_cuts` under this generation only.
    pub cuts: u32,
}

impl SampleCtl {
    pub fn to_bytes(self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[0..8].copy_from_slice(&self.keep_below.to_ne_bytes());
        b[8..12].copy_from_slice(&self.epoch.to_ne_bytes());
        b[12..16].copy_from_slice(&u32::from(self.active).to_ne_bytes());
        b[16..20].copy_from_slice(&self.cuts.to_ne_bytes());
        b
    }

    /// The share of connections kept, in parts per million (None when not sampling).
    pub fn keep_ppm(self) -> Option<u64> {
        if !self.active {
            return None;
        }
        Some((self.keep_below as u128 * 1_000_000 / (1u128 << 32)) as u64)
    }
}

/// A captured connection to cut at its next request (the kernel's `sample_cuts` entry: key
/// the socket id, value the generation and the direction its requests take).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutName {
    pub sock_id: u64,
    pub request_dir: u8,
    pub generation: u32,
}

impl CutName {
    /// The kernel's `struct ebtop_cut_name` (capture.h).
    pub fn value_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0..4].copy_from_slice(&self.generation.to_ne_bytes());
        b[4] = self.request_dir;
        b
    }
}

/// Names offered by the trackers in one interval, at most (the rest are named at the next).
pub const MAX_CUT_NAMES: usize = 4096;

/// Where the session's loop asks for cuts and the trackers (on their own threads) offer the
/// connections to cut: one per process ([`CUT_BOARD`]); a replay never asks.
pub struct CutBoard {
    /// Connections whose sample hash is at least this are cut (u64::MAX: none asked).
    from_hash: std::sync::atomic::AtomicU64,
    generation: std::sync::atomic::AtomicU32,
    names: std::sync::Mutex<Vec<CutName>>,
}

/// The session's board (live only).
pub static CUT_BOARD: CutBoard = CutBoard::new();

impl CutBoard {
    pub const fn new() -> CutBoard {
        CutBoard {
            from_hash: std::sync::atomic::AtomicU64::new(u64::MAX),
            generation: std::sync::atomic::AtomicU32::new(0),
            names: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Asks for cuts of captured connections whose hash is at least `from_hash` under
    /// `generation` (None: none asked from now on).
    pub fn ask(&self, cut: Option<(u64, u32)>) {
        use std::sync::atomic::Ordering::Relaxed;
        let (from, generation) = cut.unwrap_or((u64::MAX, 0));
        self.generation.store(generation, Relaxed);
        self.from_hash.store(from, Relaxed);
    }

    /// What is asked now: the hash from which connections are cut, and the generation.
    pub fn asked(&self) -> Option<(u64, u32)> {
        use std::sync::atomic::Ordering::Relaxed;
        let from = self.from_hash.load(Relaxed);
        (from != u64::MAX).then(|| (from, self.generation.load(Relaxed)))
    }

    /// Room for this many more names in the interval.
    pub fn room(&self) -> usize {
        let names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        MAX_CUT_NAMES.saturating_sub(names.len())
    }

    /// A tracker's names (at most [`CutBoard::room`] are kept).
    pub fn offer(&self, offered: &[CutName]) {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        let room = MAX_CUT_NAMES.saturating_sub(names.len());
        names.extend_from_slice(&offered[..offered.len().min(room)]);
    }

    /// The names offered since the last call.
    pub fn take(&self) -> Vec<CutName> {
        std::mem::take(&mut *self.names.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Default for CutBoard {
    fn default() -> Self {
        CutBoard::new()
    }
}

/// What decides the sample (`--max-cpu`, `--sample`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SamplingMode {
    /// Every connection captured (no budget).
    Off,
    /// A fixed share of connections (0.0 ..= 1.0), whatever the load.
    Fixed(f64),
    /// ebtop's CPU (its threads and its BPF programs), % of one CPU, at most this.
    Budget(f64),
}

/// BPF time per data run when the kernel's statistics are unavailable (ns, measured on the
/// 2-core development VM at nginx saturation, docs/performance.md "A bounded cost"): a run on
/// a captured connection (hook, state, copy, ring), and one on a sampled-out connection (hook
/// and the socket's storage).
pub const KEPT_RUN_NS: f64 = 1_300.0;
pub const SHED_RUN_NS: f64 = 150.0;

/// User-space CPU per captured data run before anything is measured (ns): the reader, the
/// tracker and the aggregates (2-core VM, nginx + wrk). Replaced by what each interval shows.
const PRIOR_USER_NS_PER_RUN: f64 = 2_000.0;

/// The budget aims this far below the limit: the load moves between intervals.
const AIM: f64 = 0.85;
/// Below this share of the budget a sample is raised.
const RAISE_BELOW: f64 = 0.7;
/// Fewer captured runs per second than this cost too little to measure their cost from.
const MIN_RUNS_PER_S: f64 = 2_000.0;

/// One interval as the controller sees it.
#[derive(Debug, Clone, Copy, Default)]
pub struct IntervalLoad {
    pub period_ns: u64,
    /// ebtop's user-space CPU, % of one CPU (None: not measurable this interval).
    pub user_cpu_pct: Option<f64>,
    /// Its BPF programs' CPU from the kernel's statistics (None: unavailable).
    pub bpf_cpu_pct: Option<f64>,
    /// Data sends/receives the capture programs saw on selected sockets, and of those, the
    /// ones on sampled-out (or undecided) connections.
    pub runs: u64,
    pub shed_runs: u64,
}

impl IntervalLoad {
    fn per_s(&self, n: u64) -> f64 {
        if self.period_ns == 0 {
            0.0
        } else {
            n as f64 * 1e9 / self.period_ns as f64
        }
    }

    /// ebtop's CPU in the interval, % of one CPU: user space and BPF (measured, or from the
    /// runs at the per-run costs above when the kernel's statistics are unavailable).
    pub fn cost_pct(&self) -> Option<f64> {
        let user = self.user_cpu_pct?;
        let bpf = self.bpf_cpu_pct.unwrap_or_else(|| {
            let kept = self.runs.saturating_sub(self.shed_runs);
            (self.per_s(kept) * KEPT_RUN_NS + self.per_s(self.shed_runs) * SHED_RUN_NS) / 1e7
        });
        Some(user + bpf)
    }
}

/// Moves the sample once per interval so that ebtop's CPU stays within its budget.
#[derive(Debug, Clone)]
pub struct Sampler {
    mode: SamplingMode,
    ctl: SampleCtl,
    /// ebtop's CPU with nothing captured (% of one CPU): estimated when the budget is first
    /// exceeded, measured whenever little is captured.
    base_pct: Option<f64>,
    /// CPU per captured run per second (% of one CPU per run/s), learned.
    per_run_pct: f64,
    /// Intervals seen (the first one holds the load start-up's cost: not measured from).
    intervals: u64,
    /// Intervals in a row over the budget while sampling.
    over_budget: u32,
    /// Cuts asked for: captured connections whose hash is at least this are cut at a call
    /// boundary, under `ctl.cuts` (its generation).
    cut_from: Option<u64>,
    /// The last generation of cuts asked for.
    cut_generation: u32,
    /// The last interval cost more than the budget with nothing captured (every connection
    /// sampled out or cut): what the hooks that stay attached cost at this load.
    over_at_floor: bool,
    /// `EBTOP_DEBUG_SAMPLE_SCHEDULE` (debug builds): the share per interval, not the load's.
    schedule: Option<Vec<f64>>,
    /// The schedule's entry now: one more per interval, once `EBTOP_DEBUG_SAMPLE_GATE`'s
    /// file exists when one is named.
    schedule_step: usize,
    schedule_gate: Option<std::path::PathBuf>,
}

impl Sampler {
    pub fn new(mode: SamplingMode) -> Sampler {
        let ctl = match mode {
            SamplingMode::Off => SampleCtl::default(),
            SamplingMode::Fixed(r) => SampleCtl {
                keep_below: keep_below_of(r),
                epoch: 0,
                active: true,
                cuts: 0,
            },
            // Every connection captured until the budget is exceeded: a captured connection
            // can be cut at a call boundary later, so starting with all costs nothing exact.
            SamplingMode::Budget(_) => SampleCtl::default(),
        };
        let mut sampler = Sampler {
            mode,
            ctl,
            base_pct: None,
            per_run_pct: (PRIOR_USER_NS_PER_RUN + KEPT_RUN_NS) / 1e7,
            intervals: 0,
            over_budget: 0,
            cut_from: None,
            cut_generation: 0,
            over_at_floor: false,
            schedule: None,
            schedule_step: 0,
            schedule_gate: None,
        };
        if matches!(mode, SamplingMode::Budget(_)) {
            if let Some(s) = crate::diag::debug_sample_schedule() {
                sampler.ctl = SampleCtl::default();
                sampler.apply_schedule(&s, 0);
                sampler.schedule = Some(s);
                sampler.schedule_gate = crate::diag::debug_sample_gate();
            }
        }
        sampler
    }

    /// Cuts asked for now: (the hash from which captured connections are cut, generation).
    pub fn cuts(&self) -> Option<(u64, u32)> {
        self.cut_from.map(|from| (from, self.ctl.cuts))
    }

    /// Asks for cuts of captured connections above the share now (a new generation when the
    /// share moved since the last ask), or none.
    fn ask_cuts(&mut self, on: bool) {
        if !on || !self.ctl.active {
            self.cut_from = None;
            self.ctl.cuts = 0;
            return;
        }
        match self.cut_from {
            // The share went down (or stayed): the names of the last ask stay right — a
            // connection above the higher share is above this one — so the kernel keeps
            // reading them, and the trackers add those between the two shares. (A new
            // generation at each step down would leave the names of one interval valid only
            // until the next interval's ask, before most of them met a turn.)
            Some(from) if self.ctl.keep_below <= from => {}
            // First asked, or the share went up: names asked under the lower share are
            // never read again; never 0 (none).
            _ => self.cut_generation = self.cut_generation.wrapping_add(1).max(1),
        }
        self.cut_from = Some(self.ctl.keep_below);
        self.ctl.cuts = self.cut_generation;
    }

    /// The schedule's share for interval `i` (the last one stays); cuts asked whenever the
    /// share is below one that came before it.
    fn apply_schedule(&mut self, schedule: &[f64], i: usize) {
        let share = schedule[i.min(schedule.len() - 1)];
        self.set_ratio(share);
        let lowered = schedule[..=i.min(schedule.len() - 1)]
            .iter()
            .any(|&s| s > share);
        self.ask_cuts(lowered);
    }

    pub fn mode(&self) -> SamplingMode {
        self.mode
    }

    /// What the kernel should read now.
    pub fn ctl(&self) -> SampleCtl {
        self.ctl
    }

    /// The budget, % of one CPU (None without one).
    pub fn budget_pct(&self) -> Option<f64> {
        match self.mode {
            SamplingMode::Budget(b) => Some(b),
            _ => None,
        }
    }

    /// Whether the last interval cost more than the budget although nothing was captured
    /// (None without a budget): sampling can go no lower, the rest is the hooks' own cost.
    pub fn over_at_floor(&self) -> Option<bool> {
        self.budget_pct().map(|_| self.over_at_floor)
    }

    /// The interval that ended: returns the new control entry when it changed.
    pub fn on_interval(&mut self, load: &IntervalLoad) -> Option<SampleCtl> {
        let SamplingMode::Budget(budget) = self.mode else {
            return None;
        };
        self.intervals += 1;
        // Nothing captured: every run on a connection sampled out or cut (a cut still
        // pending keeps its connection captured until its call boundary).
        self.over_at_floor = self.ctl.active
            && load.runs > 0
            && load.runs <= load.shed_runs
            && load.cost_pct().is_some_and(|c| c > budget);
        if let Some(schedule) = self.schedule.take() {
            let before = self.ctl;
            match self.schedule_gate.as_ref().map(std::fs::read_to_string) {
                None => self.schedule_step += 1,
                Some(Ok(text)) => match text.trim().parse::<usize>() {
                    Ok(step) => self.schedule_step = step,
                    Err(_) => self.schedule_step += 1,
                },
                Some(Err(_)) => {}
            }
            self.apply_schedule(&schedule, self.schedule_step);
            self.schedule = Some(schedule);
            return (self.ctl != before).then_some(self.ctl);
        }
        let cost = load.cost_pct()?;
        let runs_per_s = load.per_s(load.runs);
        let kept_per_s = load.per_s(load.runs.saturating_sub(load.shed_runs));
        let before = self.ctl;
        // The first interval carries the start-up (loading, the TLS lookout's first pass).
        if self.intervals < 2 {
            return None;
        }
        let base = match self.base_pct {
            // Nearly nothing captured: what ebtop costs now is its cost with nothing captured.
            Some(_) if kept_per_s < MIN_RUNS_PER_S && self.ctl.active => cost,
            Some(b) => b.min(cost),
            None if cost <= budget => return None,
            // First over the budget, everything captured so far: the cost with nothing
            // captured is estimated from the per-run prior, at least the sampled-out runs'
            // own BPF floor (measured again once little is captured; the feedback below keeps
            // the budget whatever the model's error).
            None => {
                let floor = runs_per_s * SHED_RUN_NS / 1e7;
                (cost - self.per_run_pct * kept_per_s).clamp(floor.min(cost), cost)
            }
        };
        self.base_pct = Some(base);
        if kept_per_s >= MIN_RUNS_PER_S && self.ctl.active {
            // Learned slowly: one noisy interval must not swing the sample.
            let measured = (cost - base).max(0.0) / kept_per_s;
            self.per_run_pct = 0.7 * self.per_run_pct + 0.3 * measured;
        }
        let current = if self.ctl.active {
            self.ctl.keep_below as f64 / (1u64 << 32) as f64
        } else {
            1.0
        };
        if cost > budget || (cost < budget * RAISE_BELOW && current < 1.0) {
            let want = self.ratio_for(budget, base, runs_per_s);
            if cost > budget && want >= current {
                // Over the budget although the model says there is room: new connections
                // go down by half (captured ones stay whole).
                self.set_ratio(current * 0.5);
            } else {
                self.set_ratio(want);
            }
        }
        // New connections first: a budget still exceeded in the interval after the share
        // for them went down is spent on captured ones (long-lived connections), which are
        // cut at their next call boundary from then on, while it lasts.
        self.over_budget = if cost > budget && self.ctl.active {
            self.over_budget.saturating_add(1)
        } else {
            0
        };
        self.ask_cuts(self.over_budget >= 2);
        (self.ctl != before).then_some(self.ctl)
    }

    /// The share of runs the budget affords, given ebtop's cost with nothing captured.
    fn ratio_for(&self, budget: f64, base: f64, runs_per_s: f64) -> f64 {
        if runs_per_s <= 0.0 || self.per_run_pct <= 0.0 {
            return 1.0;
        }
        let room = (budget * AIM - base).max(0.0);
        (room / (self.per_run_pct * runs_per_s)).clamp(0.0, 1.0)
    }

    fn set_ratio(&mut self, ratio: f64) {
        let keep_below = keep_below_of(ratio);
        if ratio >= 1.0 {
            // Sampling ends: sampled-out connections are captured from their next send or
            // receive on.
            if self.ctl.active {
                self.ctl = SampleCtl {
                    keep_below,
                    epoch: self.ctl.epoch.wrapping_add(1),
                    active: false,
                    cuts: self.ctl.cuts,
                };
            }
            return;
        }
        let raised = !self.ctl.active || keep_below > self.ctl.keep_below;
        self.ctl = SampleCtl {
            keep_below,
            // Raised: connections sampled out are decided again (they may join now).
            epoch: if raised && self.ctl.active {
                self.ctl.epoch.wrapping_add(1)
            } else {
                self.ctl.epoch
            },
            active: true,
            cuts: self.ctl.cuts,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_the_kernels_and_spreads_socket_ids() {
        assert_eq!(sample_hash(0), 0);
        assert_ne!(sample_hash(1), sample_hash(2));
        // Consecutive inode numbers (as sockets get them) fall evenly on both halves.
        let kept = (1_000_000u64..1_010_000)
            .filter(|&i| keeps(i, keep_below_of(0.5)))
            .count();
        assert!((4_800..=5_200).contains(&kept), "{kept}");
        assert!((0..1000u64).all(|i| keeps(i, keep_below_of(1.0))));
        assert!((0..1000u64).all(|i| !keeps(i, keep_below_of(0.0))));
    }

    #[test]
    fn the_control_entry_is_the_kernels_layout() {
        let ctl = SampleCtl {
            keep_below: 1 << 31,
            epoch: 3,
            active: true,
            cuts: 7,
        };
        let b = ctl.to_bytes();
        assert_eq!(u64::from_ne_bytes(b[0..8].try_into().unwrap()), 1 << 31);
        assert_eq!(u32::from_ne_bytes(b[8..12].try_into().unwrap()), 3);
        assert_eq!(u32::from_ne_bytes(b[12..16].try_into().unwrap()), 1);
        assert_eq!(u32::from_ne_bytes(b[16..20].try_into().unwrap()), 7);
        assert_eq!(&b[20..24], &[0; 4]);
        let name = CutName {
            sock_id: 9,
            request_dir: 1,
            generation: 7,
        };
        assert_eq!(name.value_bytes(), [7, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(ctl.keep_ppm(), Some(500_000));
        assert_eq!(SampleCtl::default().keep_ppm(), None);
    }

    fn load(cost_user: f64, runs: u64, shed: u64) -> IntervalLoad {
        IntervalLoad {
            period_ns: 1_000_000_000,
            user_cpu_pct: Some(cost_user),
            bpf_cpu_pct: Some(0.0),
            runs,
            shed_runs: shed,
        }
    }

    #[test]
    fn without_a_budget_nothing_moves() {
        let mut s = Sampler::new(SamplingMode::Off);
        assert!(!s.ctl().active);
        assert_eq!(s.on_interval(&load(500.0, 1_000_000, 0)), None);
        let mut f = Sampler::new(SamplingMode::Fixed(0.25));
        assert_eq!(f.ctl().keep_below, 1 << 30);
        assert_eq!(f.on_interval(&load(500.0, 1_000_000, 0)), None);
    }

    #[test]
    fn a_budget_captures_everything_until_exceeded_then_samples_then_raises_when_load_falls() {
        let mut s = Sampler::new(SamplingMode::Budget(10.0));
        assert!(!s.ctl().active, "every connection captured from the start");
        // The first interval (start-up) decides nothing, however costly.
        assert_eq!(s.on_interval(&load(80.0, 200_000, 0)), None);
        // Within the budget: nothing sampled.
        assert_eq!(s.on_interval(&load(9.0, 20_000, 0)), None);
        assert!(!s.ctl().active);
        // Over it, everything captured: 20% with 200K runs/s. The cost with nothing captured
        // is estimated from the prior (3.3 µs per run: more than the cost, so the floor of
        // the sampled-out runs, 200K × 150 ns = 3%): 10 * 0.85 - 3 = 5.5% of room for 200K
        // runs/s at 0.00033 % each = ~8% of connections.
        let ctl = s.on_interval(&load(20.0, 200_000, 0)).unwrap();
        assert!(ctl.active && ctl.cuts == 0);
        let r = ctl.keep_below as f64 / (1u64 << 32) as f64;
        assert!((0.07..0.095).contains(&r), "{r}");
        // Little captured now (1K runs/s of 200K): its cost is what nothing captured costs,
        // measured; within the budget (above the 70% that raises it), the share stays.
        assert_eq!(s.on_interval(&load(7.5, 200_000, 199_000)), None);
        // Over the budget again: new connections go down, the epoch stays (nobody is cut in
        // the first interval over).
        let lower = s.on_interval(&load(30.0, 200_000, 150_000)).unwrap();
        assert!(lower.keep_below < ctl.keep_below);
        assert_eq!((lower.epoch, lower.cuts), (ctl.epoch, 0));
        // The load falls away: raised, sampled-out connections decided again, then off.
        let mut last = lower;
        for _ in 0..20 {
            if let Some(c) = s.on_interval(&load(1.0, 1_000, 900)) {
                assert!(c.epoch != last.epoch, "a raise is a new epoch");
                last = c;
            }
        }
        assert!(!last.active, "{last:?}");
    }

    #[test]
    fn a_budget_exceeded_while_everything_is_captured_cuts_long_lived_connections_next() {
        // Keep-alive connections open before the budget was exceeded: no new connection
        // comes, so lowering the share for new ones changes nothing; the interval after, the
        // captured connections above the share are cut.
        let mut s = Sampler::new(SamplingMode::Budget(10.0));
        s.on_interval(&load(80.0, 200_000, 0));
        let first = s.on_interval(&load(30.0, 200_000, 0)).unwrap();
        assert!(first.active);
        assert_eq!((first.cuts, s.cuts()), (0, None));
        let cut = s.on_interval(&load(30.0, 200_000, 0)).unwrap();
        assert_ne!(cut.cuts, 0);
        assert_eq!(s.cuts(), Some((cut.keep_below, cut.cuts)));
    }

    #[test]
    fn a_budget_still_over_after_new_connections_went_down_cuts_captured_ones() {
        let mut s = Sampler::new(SamplingMode::Budget(10.0));
        s.on_interval(&load(80.0, 200_000, 0));
        s.on_interval(&load(9.0, 200_000, 0));
        // Over once: new connections go down, nothing cut yet.
        let lower = s.on_interval(&load(30.0, 200_000, 0)).unwrap();
        assert_eq!((lower.cuts, s.cuts()), (0, None));
        // Still over: captured connections above the share are cut.
        let cut = s.on_interval(&load(30.0, 200_000, 0)).unwrap();
        assert_ne!(cut.cuts, 0);
        assert_eq!(s.cuts(), Some((cut.keep_below, cut.cuts)));
        // The share goes on down: the same generation (the names of the last ask are still
        // right: above the higher share is above the lower), the bound lower.
        let again = s.on_interval(&load(30.0, 200_000, 0)).unwrap();
        assert!(again.keep_below < cut.keep_below);
        assert_eq!(again.cuts, cut.cuts);
        assert_eq!(s.cuts(), Some((again.keep_below, cut.cuts)));
        // Within the budget: no more cuts; a later ask is yet another generation.
        let under = s.on_interval(&load(8.0, 200_000, 100_000)).unwrap();
        assert_eq!((under.cuts, s.cuts()), (0, None));
        s.on_interval(&load(30.0, 200_000, 0));
        let later = s.on_interval(&load(30.0, 200_000, 0)).unwrap();
        assert!(later.cuts != 0 && later.cuts != again.cuts && later.cuts != cut.cuts);
    }

    #[test]
    fn over_the_budget_with_nothing_captured_is_said_and_only_then() {
        let mut s = Sampler::new(SamplingMode::Budget(10.0));
        assert_eq!(Sampler::new(SamplingMode::Off).over_at_floor(), None);
        // Start-up and an interval within the budget: nothing to say.
        s.on_interval(&load(2.0, 100_000, 0));
        s.on_interval(&load(2.0, 100_000, 0));
        assert_eq!(s.over_at_floor(), Some(false));
        // Over it while runs are still captured: sampling, not the floor.
        for _ in 0..4 {
            s.on_interval(&load(14.0, 400_000, 200_000));
            assert!(s.ctl().active);
            assert_eq!(s.over_at_floor(), Some(false));
        }
        // Every run shed and still over: said.
        s.on_interval(&load(14.0, 400_000, 400_000));
        assert_eq!(s.over_at_floor(), Some(true));
        // Within the budget again: no longer.
        s.on_interval(&load(9.0, 400_000, 400_000));
        assert_eq!(s.over_at_floor(), Some(false));
    }

    #[test]
    fn a_board_hands_on_what_trackers_offered_within_its_bound() {
        let board = CutBoard::new();
        assert_eq!(board.asked(), None);
        board.ask(Some((5, 2)));
        assert_eq!(board.asked(), Some((5, 2)));
        let name = |i| CutName {
            sock_id: i,
            request_dir: 0,
            generation: 2,
        };
        let many: Vec<CutName> = (0..MAX_CUT_NAMES as u64 + 10).map(name).collect();
        board.offer(&many[..10]);
        assert_eq!(board.room(), MAX_CUT_NAMES - 10);
        board.offer(&many);
        assert_eq!(board.take().len(), MAX_CUT_NAMES);
        assert!(board.take().is_empty());
        board.ask(None);
        assert_eq!(board.asked(), None);
    }
}

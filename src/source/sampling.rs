//! Connection sampling: which connections the kernel captures when ebtop must stay within a CPU
//! budget (`--max-cpu`), or when a fixed share is asked for (`--sample`). The kernel decides
//! once per connection, before any copy or ring write (src/bpf/capture.h `sample_keeps`): a
//! connection is kept when the hash of its socket id is below `keep_below`. This module is
//! the user-space half: the same hash, the control entry the kernel reads (`sample_ctl`), and
//! the controller that moves it once per interval.
//!
//! Why by connection and only for new (or sampled-out) connections: a connection captured is
//! captured until it ends, so every call seen is a whole call and its numbers are exact; the
//! sample changes only which connections are seen. Lowering the share decides new connections
//! against the lower threshold; raising it (a new `epoch`) lets sampled-out connections be
//! decided again — they join mid-stream, as a connection older than ebtop does.

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
    pub hold: bool,
}

impl SampleCtl {
    pub fn to_bytes(self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[0..8].copy_from_slice(&self.keep_below.to_ne_bytes());
        b[8..12].copy_from_slice(&self.epoch.to_ne_bytes());
        b[12..16].copy_from_slice(&u32::from(self.active).to_ne_bytes());
        b[16..20].copy_from_slice(&u32::from(self.hold).to_ne_bytes());
        b
    }

    /// The share of connections kept, in parts per million (None when not sampling; 0 while
    /// holding: nothing is decided, nothing new captured).
    pub fn keep_ppm(self) -> Option<u64> {
        if !self.active {
            return None;
        }
        if self.hold {
            return Some(0);
        }
        Some((self.keep_below as u128 * 1_000_000 / (1u128 << 32)) as u64)
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
    /// ebtop's CPU with nothing new captured (% of one CPU), measured while holding.
    base_pct: Option<f64>,
    /// CPU per captured run per second (% of one CPU per run/s), learned.
    per_run_pct: f64,
    /// Intervals seen (the first one holds the load start-up's cost: not measured from).
    intervals: u64,
}

impl Sampler {
    pub fn new(mode: SamplingMode) -> Sampler {
        let ctl = match mode {
            SamplingMode::Off => SampleCtl::default(),
            SamplingMode::Fixed(r) => SampleCtl {
                keep_below: keep_below_of(r),
                epoch: 0,
                active: true,
                hold: false,
            },
            // Nothing decided until the load is measured: a connection decided in now would
            // stay in whatever it costs.
            SamplingMode::Budget(_) => SampleCtl {
                keep_below: 0,
                epoch: 0,
                active: true,
                hold: true,
            },
        };
        Sampler {
            mode,
            ctl,
            base_pct: None,
            per_run_pct: (PRIOR_USER_NS_PER_RUN + KEPT_RUN_NS) / 1e7,
            intervals: 0,
        }
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

    /// The interval that ended: returns the new control entry when it changed.
    pub fn on_interval(&mut self, load: &IntervalLoad) -> Option<SampleCtl> {
        let SamplingMode::Budget(budget) = self.mode else {
            return None;
        };
        self.intervals += 1;
        let cost = load.cost_pct()?;
        let runs_per_s = load.per_s(load.runs);
        let kept_per_s = load.per_s(load.runs.saturating_sub(load.shed_runs));
        let before = self.ctl;
        if self.ctl.hold {
            // The first interval carries the start-up (loading, the TLS lookout's first pass):
            // the second one measures what the hooks cost with nothing captured.
            if self.intervals < 2 {
                return None;
            }
            self.base_pct = Some(cost);
            let ratio = self.ratio_for(budget, cost, runs_per_s);
            self.ctl = SampleCtl {
                keep_below: keep_below_of(ratio),
                epoch: self.ctl.epoch.wrapping_add(1),
                active: ratio < 1.0,
                hold: false,
            };
            return (self.ctl != before).then_some(self.ctl);
        }
        let base = self.base_pct.unwrap_or(0.0).min(cost);
        if kept_per_s >= MIN_RUNS_PER_S {
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
                    hold: false,
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
            hold: false,
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
            hold: false,
        };
        let b = ctl.to_bytes();
        assert_eq!(u64::from_ne_bytes(b[0..8].try_into().unwrap()), 1 << 31);
        assert_eq!(u32::from_ne_bytes(b[8..12].try_into().unwrap()), 3);
        assert_eq!(u32::from_ne_bytes(b[12..16].try_into().unwrap()), 1);
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
    fn a_budget_holds_then_samples_then_raises_when_load_falls() {
        let mut s = Sampler::new(SamplingMode::Budget(10.0));
        assert!(s.ctl().hold && s.ctl().active);
        // The first interval (start-up) decides nothing.
        assert_eq!(s.on_interval(&load(80.0, 200_000, 200_000)), None);
        // Holding: 2% with 200K runs/s, all shed. Prior 3.3 µs per run: 10 * 0.85 - 2 = 6.5%
        // of room for 200K runs/s at 0.00033 % each = ~10%.
        let ctl = s.on_interval(&load(2.0, 200_000, 200_000)).unwrap();
        assert!(!ctl.hold && ctl.active);
        let r = ctl.keep_below as f64 / (1u64 << 32) as f64;
        assert!((0.09..0.11).contains(&r), "{r}");
        // Over the budget: new connections go down, the epoch stays (nobody is cut).
        let lower = s.on_interval(&load(30.0, 200_000, 150_000)).unwrap();
        assert!(lower.keep_below < ctl.keep_below);
        assert_eq!(lower.epoch, ctl.epoch);
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
}

//! ebtop's core, shared by the binary and the tests. Data flow (docs/architecture.md):
//! source (live BPF ring buffer | recording) → [`event`] → [`conntrack`] → [`protocols`] →
//! [`call`] → [`pipeline`] → [`sink`] (JSON lines | TUI | recorder).

pub mod aggregate;
pub mod allocator;
pub mod bpf;
pub mod call;
pub mod call_filter;
pub mod cgroups;
pub mod chains;
pub mod cli;
pub mod clock;
pub mod conntrack;
pub mod diag;
pub mod driver;
pub mod event;
pub mod eventfd;
pub mod filters;
pub mod flows;
// Test and fuzz support: built for the tests, benches, examples and fuzz targets (the
// `test-support` feature, which the dev-dependency on this crate turns on), not for ebtop.
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod kernel_counters;
pub mod pipeline;
pub mod plugins;
pub mod pods;
pub mod preflight;
pub mod process_events;
pub mod procfs;
pub mod procinfo;
pub mod profile;
pub mod protocols;
pub mod record;
pub mod report;
pub mod segfile;
pub mod session_meta;
pub mod sink;
pub mod source;
pub mod summary;
pub mod text;
pub mod tls;
pub mod tty;
pub mod tui;
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod xorshift;

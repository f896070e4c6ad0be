//! The types that describe a session, by their former paths (for the code that still names
//! them so): each lives in a module named for what it is ([`crate::filters`],
//! [`crate::session_meta`], [`crate::kernel_counters`], [`crate::summary`]). The modules the
//! summary or the pipeline depends on import those, never this one.

pub use crate::filters::{comm_prefix, Filters, MAX_FILTER_VALUES};
pub use crate::kernel_counters::KernelCounters;
pub use crate::session_meta::SessionMeta;
pub use crate::summary::Summary;

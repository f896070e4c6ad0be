//! The session types by their former paths, for src/protocols/'s fixture tests only (changed
//! on another branch meanwhile): everything else imports the modules named for what each is
//! ([`crate::session_meta`], [`crate::kernel_counters`], [`crate::summary`]), and this file
//! goes once src/protocols/ does too.

#[doc(hidden)]
pub use crate::kernel_counters::KernelCounters;
#[doc(hidden)]
pub use crate::session_meta::SessionMeta;
#[doc(hidden)]
pub use crate::summary::Summary;

//! Triggers.

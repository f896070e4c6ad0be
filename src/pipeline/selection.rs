//! Which calls reach the sinks' call outputs: `--filter` (fixed for the session) and the
//! terminal UI's Calls filter (changed while it runs, [`LiveCallFilter`]). Applied on the
//! pipeline's thread after a call was counted in every aggregate, so endpoints, processes,
//! connections and the summary stay over all traffic; the calls left out are counted
//! (`Summary::calls_filtered_out`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::call::Call;
use crate::call_filter::CallFilter;

/// A filter another thread changes while the pipeline runs (the terminal UI's Calls filter):
/// the pipeline looks at a generation number per call and takes the filter again only when
/// it moved.
#[derive(Debug, Default)]
pub struct LiveCallFilter {
    generation: AtomicU64,
    filter: Mutex<Option<Arc<CallFilter>>>,
}

impl LiveCallFilter {
    /// From the next call on, only calls `filter` matches pass (None or empty: all).
    pub fn set(&self, filter: Option<CallFilter>) {
        let filter = filter.filter(|f| !f.is_empty()).map(Arc::new);
        if let Ok(mut slot) = self.filter.lock() {
            *slot = filter;
        }
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The filter in force now.
    pub fn get(&self) -> Option<Arc<CallFilter>> {
        self.filter.lock().ok().and_then(|f| f.clone())
    }
}

/// The pipeline's call selection.
#[derive(Debug, Default)]
pub(crate) struct CallSelection {
    fixed: Option<CallFilter>,
    live: Option<Arc<LiveCallFilter>>,
    /// The live filter as last taken, and its generation then.
    live_taken: Option<Arc<CallFilter>>,
    live_generation: u64,
}

impl CallSelection {
    pub fn set_fixed(&mut self, filter: CallFilter) {
        self.fixed = (!filter.is_empty()).then_some(filter);
    }

    pub fn set_live(&mut self, live: Arc<LiveCallFilter>) {
        self.live_taken = live.get();
        self.live_generation = live.generation.load(Ordering::Acquire);
        self.live = Some(live);
    }

    /// Whether `call` goes to the sinks' call outputs.
    pub fn passes(&mut self, call: &Call) -> bool {
        if let Some(live) = &self.live {
            let generation = live.generation.load(Ordering::Acquire);
            if generation != self.live_generation {
                self.live_generation = generation;
                self.live_taken = live.get();
            }
        }
        self.fixed.as_ref().is_none_or(|f| f.matches(call))
            && self.live_taken.as_ref().is_none_or(|f| f.matches(call))
    }
}

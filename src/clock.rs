//! Kernel timestamps (CLOCK_MONOTONIC) to wall-clock time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid pointer we pass.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC now, the clock bpf_ktime_get_ns() reads.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Wall time minus monotonic time, in ns: add it to a kernel timestamp to get Unix time.
/// Taken as the tightest of a few samples so a preemption between the two reads cannot skew it.
pub fn wall_offset_ns() -> i64 {
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..5 {
        let m1 = clock_ns(libc::CLOCK_MONOTONIC);
        let w = clock_ns(libc::CLOCK_REALTIME);
        let m2 = clock_ns(libc::CLOCK_MONOTONIC);
        let width = m2 - m1;
        let off = w as i64 - (m1 / 2 + m2 / 2) as i64;
        if best.is_none_or(|(bw, _)| width < bw) {
            best = Some((width, off));
        }
    }
    best.map(|b| b.1).unwrap_or(0)
}

/// RFC 3339 UTC with nanoseconds, e.g. `2026-11-21T10:00:00.123456789Z`.
pub fn rfc3339(unix_ns: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_nanos(unix_ns.max(0) as u64);
    humantime::format_rfc3339_nanos(t).to_string()
}

/// A time zone as shown: its offset from UTC and its abbreviation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    pub offset_s: i64,
    pub name: String,
}

impl Zone {
    pub fn utc() -> Zone {
        Zone {
            offset_s: 0,
            name: "UTC".to_owned(),
        }
    }

    /// The local zone (`TZ`, else /etc/localtime) at Unix time `unix_s`; UTC if the C
    /// library cannot say.
    pub fn local_at(unix_s: i64) -> Zone {
        // SAFETY: an all-zero `tm` is a valid value for localtime_r to overwrite.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        let t: libc::time_t = unix_s;
        // SAFETY: `t` and `tm` are valid for the call; localtime_r is thread-safe and
        // reads TZ itself (tzset).
        let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
        if !ok {
            return Zone::utc();
        }
        let name = if tm.tm_zone.is_null() {
            String::new()
        } else {
            // SAFETY: tm_zone points to a NUL-terminated name owned by the C library.
            unsafe { std::ffi::CStr::from_ptr(tm.tm_zone) }
                .to_string_lossy()
                .into_owned()
        };
        Zone {
            offset_s: tm.tm_gmtoff,
            name: if name.is_empty() {
                format!("UTC{:+}", tm.tm_gmtoff / 3600)
            } else {
                name
            },
        }
    }

    /// `YYYY-MM-DD HH:MM:SS.mmm` of Unix time `unix_ns` in this zone.
    pub fn date_time(&self, unix_ns: i64) -> String {
        let shifted = unix_ns.saturating_add(self.offset_s.saturating_mul(1_000_000_000));
        let s = rfc3339(shifted);
        // 2026-11-23T22:48:28.123456789Z → 2026-11-23 22:48:28.123
        match (s.get(..10), s.get(11..23)) {
            (Some(d), Some(t)) => format!("{d} {t}"),
            _ => s,
        }
    }
}

/// How times are shown: at one fixed offset (UTC), or in the local zone as it was at each
/// instant shown, so a summer recording replayed in winter shows summer time, and a live
/// session across a DST change shows each call at its own offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeZone {
    Fixed(Zone),
    /// `TZ`, else /etc/localtime, asked for each instant.
    Local,
}

impl TimeZone {
    pub fn utc() -> TimeZone {
        TimeZone::Fixed(Zone::utc())
    }

    /// The zone (offset and name) in force at Unix time `unix_ns`.
    pub fn at(&self, unix_ns: i64) -> Zone {
        match self {
            TimeZone::Fixed(z) => z.clone(),
            TimeZone::Local => {
                // A screen of calls asks thousands of times per redraw. Offsets change only
                // at instants on a quarter hour of UTC (every zone's offset is a multiple
                // of 15 minutes and changes at a local :00 or :30), so one answer per
                // quarter hour is exact.
                thread_local! {
                    static LAST: std::cell::RefCell<Option<(i64, Zone)>> =
                        const { std::cell::RefCell::new(None) };
                }
                let unix_s = unix_ns.div_euclid(1_000_000_000);
                let quarter = unix_s.div_euclid(900);
                LAST.with_borrow_mut(|last| match last {
                    Some((q, z)) if *q == quarter => z.clone(),
                    _ => {
                        let z = Zone::local_at(unix_s);
                        *last = Some((quarter, z.clone()));
                        z
                    }
                })
            }
        }
    }

    /// `YYYY-MM-DD HH:MM:SS.mmm` of Unix time `unix_ns`, at the offset of that instant.
    pub fn date_time(&self, unix_ns: i64) -> String {
        self.at(unix_ns).date_time(unix_ns)
    }
}

/// Converts monotonic timestamps with a fixed offset (live: measured now; replay: recorded).
#[derive(Debug, Clone, Copy, Default)]
pub struct WallClock {
    pub offset_ns: i64,
}

impl WallClock {
    pub fn live() -> Self {
        WallClock {
            offset_ns: wall_offset_ns(),
        }
    }
    pub fn unix_ns(&self, mono_ns: u64) -> i64 {
        // Saturating: a recording from another machine may carry any offset.
        (mono_ns as i64).saturating_add(self.offset_ns)
    }
    pub fn rfc3339(&self, mono_ns: u64) -> String {
        rfc3339(self.unix_ns(mono_ns))
    }
}

pub fn now_unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_nanoseconds() {
        assert_eq!(
            rfc3339(1_700_000_000_123_456_789),
            "2023-11-14T22:13:20.123456789Z"
        );
    }

    #[test]
    fn offset_maps_monotonic_to_now() {
        let c = WallClock::live();
        let diff = (c.unix_ns(monotonic_ns()) - now_unix_ns()).abs();
        assert!(diff < 50_000_000, "offset off by {diff} ns");
    }
}

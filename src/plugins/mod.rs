//! User protocol plugins in WebAssembly (`--plugin FILE.wasm`, issue 46; docs/plugins.md).
//!
//! A plugin is a Wasm module with a manifest ([`manifest`]) that either frames and parses a
//! protocol of its own on given ports (the `plugin` protocol's parser,
//! `protocols/plugin/`, drives it through the framing core and pairs its call halves) or
//! enriches the calls of a built-in protocol ([`enrich`]). The guest runs in wasmi, an
//! interpreter: no JIT memory, no signal handlers, and every call has a fuel budget; its
//! memory has a cap; a guest that traps, runs out of fuel or answers outside the ABI
//! ([`abi`]) [`Limits::max_faults`] times is disabled for the session, with a warning.
//! Guests import nothing (no WASI): a plugin sees only what ebtop hands it, so a replay gives
//! the same calls as the capture did.
//!
//! The modules are compiled once ([`Plugin::load`], at start); each tracking thread makes its
//! own instance of each ([`Guest`], through [`PluginHost::for_tracker`]) and its connections
//! share it (a mutex no other thread takes). Counters are per plugin, shared by its instances.

pub mod abi;
pub mod enrich;
#[doc(hidden)]
#[cfg(any(test, feature = "test-support"))]
pub mod fuzzing;
pub mod manifest;
pub mod wasi;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use wasi::HostState;
use wasmi::{Engine, Linker, Memory, Module, Store, StoreLimitsBuilder, TypedFunc};

pub use manifest::{EnrichProto, Manifest, PluginKind};

/// The largest plugin file read.
pub const MAX_FILE: u64 = 64 * 1024 * 1024;

/// What one plugin may use.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Fuel per call (wasmi: about one unit per instruction; 1M ≈ 1 ms of interpretation).
    pub fuel_per_call: u64,
    /// Fuel for instantiation (the module's start function).
    pub fuel_to_start: u64,
    /// Linear memory of one instance, bytes.
    pub memory_bytes: usize,
    /// Faults (traps, fuel run out, answers outside the ABI) before the plugin is disabled.
    pub max_faults: u64,
    /// Guests may import WASI, given deterministic stubs ([`wasi`], `--plugin-wasi-stubs`).
    pub wasi_stubs: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel_per_call: 1_000_000,
            fuel_to_start: 50_000_000,
            memory_bytes: 32 << 20,
            max_faults: 3,
            wasi_stubs: false,
        }
    }
}

/// One plugin's counters, shared by its instances (every tracking thread's).
#[derive(Debug, Default)]
pub struct Counters {
    pub calls: AtomicU64,
    pub ns: AtomicU64,
    pub fuel: AtomicU64,
    pub traps: AtomicU64,
    pub out_of_fuel: AtomicU64,
    pub bad_answers: AtomicU64,
    /// Enrichments not made: the response's bytes were not all seen, or not this call's alone.
    pub skipped: AtomicU64,
    /// Bytes the guest wrote through the WASI stubs (discarded).
    pub wasi_written: Arc<AtomicU64>,
    pub disabled: AtomicBool,
    /// Why it was disabled, once: taken by the pipeline for its `warning` line.
    disabled_why: Mutex<Option<String>>,
}

/// A loaded plugin: its manifest and compiled module.
pub struct Plugin {
    pub manifest: Manifest,
    pub path: String,
    pub limits: Limits,
    engine: Engine,
    module: Module,
    pub counters: Counters,
}

/// Per-call figures of one plugin, for the `overhead` line and the summary.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PluginOverhead {
    pub name: String,
    pub calls: u64,
    pub ns_per_call: Option<f64>,
    pub fuel_per_call: Option<f64>,
    pub traps: u64,
    pub out_of_fuel: u64,
    pub bad_answers: u64,
    pub enrich_skipped: u64,
    /// Bytes written through the WASI stubs (`fd_write`, discarded); 0 without them.
    pub wasi_written_bytes: u64,
    pub disabled: bool,
}

/// Why a call into a guest gave nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The plugin is disabled (no call made).
    Disabled,
    Trap,
    OutOfFuel,
    BadAnswer,
}

impl Plugin {
    /// Reads, checks and compiles `path` (the manifest first: a file that is no plugin is
    /// refused before it is compiled), then instantiates it once to check its exports.
    pub fn load(path: &Path, limits: Limits) -> Result<Plugin> {
        use std::io::Read;
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_FILE + 1).read_to_end(&mut bytes))
            .with_context(|| format!("plugin {}", path.display()))?;
        if bytes.len() as u64 > MAX_FILE {
            bail!(
                "plugin {}: larger than {} MiB",
                path.display(),
                MAX_FILE >> 20
            );
        }
        Self::from_bytes(&bytes, &path.display().to_string(), limits)
    }

    pub fn from_bytes(bytes: &[u8], path: &str, limits: Limits) -> Result<Plugin> {
        let manifest = manifest::read(bytes).map_err(|e| anyhow!("plugin {path}: {e}"))?;
        let engine = new_engine();
        let module = Module::new(&engine, bytes)
            .map_err(|e| anyhow!("plugin {path}: invalid module: {e}"))?;
        for i in module.imports() {
            let stubbed = i.module() == wasi::MODULE
                && wasi::FUNCS.contains(&i.name())
                && matches!(i.ty(), wasmi::ExternType::Func(_));
            if stubbed && !limits.wasi_stubs {
                bail!(
                    "plugin {path}: imports {}.{}: run with --plugin-wasi-stubs to give it \
                     ebtop's deterministic WASI stubs (docs/plugins.md)",
                    i.module(),
                    i.name()
                );
            }
            if !stubbed {
                bail!(
                    "plugin {path}: imports {}.{}: ABI 1 plugins import nothing but, with \
                     --plugin-wasi-stubs, these of {}: {}",
                    i.module(),
                    i.name(),
                    wasi::MODULE,
                    wasi::FUNCS.join(", ")
                );
            }
        }
        let plugin = Plugin {
            manifest,
            path: path.to_owned(),
            limits,
            engine,
            module,
            counters: Counters::default(),
        };
        plugin
            .instantiate_checked()
            .map_err(|e| anyhow!("plugin {path}: {e}"))?;
        Ok(plugin)
    }

    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    /// A new instance, or why not.
    fn instantiate_checked(self: &Plugin) -> Result<GuestParts, String> {
        let limits = StoreLimitsBuilder::new()
            .memory_size(self.limits.memory_bytes)
            .memories(1)
            .tables(1)
            .table_elements(100_000)
            .instances(1)
            .trap_on_grow_failure(true)
            .build();
        let state = HostState::new(limits, self.counters.wasi_written.clone());
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s: &mut HostState| &mut s.limits);
        store
            .set_fuel(self.limits.fuel_to_start)
            .map_err(|e| e.to_string())?;
        let mut linker = Linker::<HostState>::new(&self.engine);
        if self.limits.wasi_stubs {
            wasi::define(&mut linker).map_err(|e| e.to_string())?;
        }
        let ran_out = |e: &wasmi::Error, what: &str| {
            if is_out_of_fuel(e) {
                format!(
                    "instantiating: its {what} ran out of its {} fuel",
                    self.limits.fuel_to_start
                )
            } else {
                format!("instantiating: {what}: {e}")
            }
        };
        let instance = linker
            .instantiate_and_start(&mut store, &self.module)
            .map_err(|e| ran_out(&e, "start"))?;
        // A WASI reactor (Go's c-shared build) initialises its runtime in `_initialize`,
        // within the same fuel.
        if let Ok(init) = instance.get_typed_func::<(), ()>(&store, "_initialize") {
            init.call(&mut store, ())
                .map_err(|e| ran_out(&e, "_initialize"))?;
        }
        let memory = instance
            .get_memory(&store, "memory")
            .ok_or("exports no `memory`")?;
        let buffer_fn = instance
            .get_typed_func::<(), i32>(&store, "ebtop_buffer")
            .map_err(|_| "exports no `ebtop_buffer: [] -> [i32]`")?;
        let buffer = buffer_fn
            .call(&mut store, ())
            .map_err(|e| format!("ebtop_buffer: {e}"))? as u32 as usize;
        if buffer + abi::BUFFER_LEN > memory.data_size(&store) {
            return Err(format!(
                "ebtop_buffer's {} KiB at {buffer:#x} are outside its memory",
                abi::BUFFER_LEN >> 10
            ));
        }
        let func = |name: &str| instance.get_typed_func::<i32, i32>(&store, name).ok();
        let (frame, message, enrich) = match self.manifest.kind {
            PluginKind::Parse { .. } => (
                Some(
                    instance
                        .get_typed_func::<i32, i64>(&store, "ebtop_frame")
                        .map_err(|_| "a parse plugin exports `ebtop_frame: [i32] -> [i64]`")?,
                ),
                Some(
                    func("ebtop_message")
                        .ok_or("a parse plugin exports `ebtop_message: [i32] -> [i32]`")?,
                ),
                None,
            ),
            PluginKind::Enrich { .. } => (
                None,
                None,
                Some(
                    func("ebtop_enrich")
                        .ok_or("an enrich plugin exports `ebtop_enrich: [i32] -> [i32]`")?,
                ),
            ),
        };
        Ok(GuestParts {
            store,
            memory,
            buffer,
            frame,
            message,
            enrich,
        })
    }

    /// A fault: counted, and the plugin disabled at the `max_faults`th.
    fn fault(&self, f: Fault, detail: &str) {
        let c = &self.counters;
        match f {
            Fault::Trap => c.traps.fetch_add(1, Ordering::Relaxed),
            Fault::OutOfFuel => c.out_of_fuel.fetch_add(1, Ordering::Relaxed),
            Fault::BadAnswer => c.bad_answers.fetch_add(1, Ordering::Relaxed),
            Fault::Disabled => return,
        };
        let faults = c.traps.load(Ordering::Relaxed)
            + c.out_of_fuel.load(Ordering::Relaxed)
            + c.bad_answers.load(Ordering::Relaxed);
        if faults >= self.limits.max_faults && !c.disabled.swap(true, Ordering::Relaxed) {
            let why = format!(
                "plugin {} disabled after {faults} faults (last: {detail})",
                self.name()
            );
            *c.disabled_why.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        }
    }

    /// `ebtop_frame` answered outside the ABI (or asked for the header it was given).
    pub fn bad_frame_answer(&self) {
        self.fault(Fault::BadAnswer, "a frame answer outside the ABI");
    }

    pub fn is_disabled(&self) -> bool {
        self.counters.disabled.load(Ordering::Relaxed)
    }

    /// The warning of its disabling, once.
    pub fn take_disabled_warning(&self) -> Option<String> {
        self.counters
            .disabled_why
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    pub fn overhead(&self) -> PluginOverhead {
        let c = &self.counters;
        let calls = c.calls.load(Ordering::Relaxed);
        let per = |n: u64| (calls > 0).then(|| n as f64 / calls as f64);
        PluginOverhead {
            name: self.name().to_owned(),
            calls,
            ns_per_call: per(c.ns.load(Ordering::Relaxed)),
            fuel_per_call: per(c.fuel.load(Ordering::Relaxed)),
            traps: c.traps.load(Ordering::Relaxed),
            out_of_fuel: c.out_of_fuel.load(Ordering::Relaxed),
            bad_answers: c.bad_answers.load(Ordering::Relaxed),
            enrich_skipped: c.skipped.load(Ordering::Relaxed),
            wasi_written_bytes: c.wasi_written.load(Ordering::Relaxed),
            disabled: self.is_disabled(),
        }
    }
}

struct GuestParts {
    store: Store<HostState>,
    memory: Memory,
    buffer: usize,
    frame: Option<TypedFunc<i32, i64>>,
    message: Option<TypedFunc<i32, i32>>,
    enrich: Option<TypedFunc<i32, i32>>,
}

/// One instance of a plugin (one per tracking thread).
pub struct Guest {
    pub plugin: Arc<Plugin>,
    /// None: the instance could not be made (the plugin is then disabled).
    parts: Option<GuestParts>,
}

/// A guest shared by one tracking thread's connections.
pub type SharedGuest = Arc<Mutex<Guest>>;

impl Guest {
    pub fn new(plugin: Arc<Plugin>) -> Guest {
        let parts = match plugin.instantiate_checked() {
            Ok(p) => Some(p),
            Err(e) => {
                plugin.fault(Fault::Trap, &e);
                plugin.counters.disabled.store(true, Ordering::Relaxed);
                None
            }
        };
        Guest { plugin, parts }
    }

    /// The guest's buffer, for the host to write its input (`abi::BUFFER_LEN` bytes), or None
    /// when the plugin is disabled.
    pub fn buffer(&mut self) -> Option<&mut [u8]> {
        if self.plugin.is_disabled() {
            return None;
        }
        let p = self.parts.as_mut()?;
        let b = p.buffer;
        // Checked at instantiation; memory only grows.
        p.memory
            .data_mut(&mut p.store)
            .get_mut(b..b + abi::BUFFER_LEN)
    }

    /// The answer the guest wrote (`len` bytes at its buffer's start, bounded by it).
    pub fn answer(&mut self, len: i32) -> Result<abi::Answer, Fault> {
        let plugin = self.plugin.clone();
        let buf = self.buffer().ok_or(Fault::Disabled)?;
        let bytes = usize::try_from(len)
            .ok()
            .and_then(|n| buf.get(..n))
            .ok_or(Fault::BadAnswer);
        match bytes.and_then(|b| abi::answer(b).map_err(|_| Fault::BadAnswer)) {
            Ok(a) => Ok(a),
            Err(f) => {
                plugin.fault(f, "an answer outside the ABI");
                Err(f)
            }
        }
    }

    /// Calls `ebtop_frame(len)`.
    pub fn frame(&mut self, len: usize) -> Result<i64, Fault> {
        self.call(|p| p.frame.as_ref(), len)
    }

    /// Calls `ebtop_message(len)`.
    pub fn message(&mut self, len: usize) -> Result<i32, Fault> {
        self.call(|p| p.message.as_ref(), len)
    }

    /// Calls `ebtop_enrich(len)`.
    pub fn enrich(&mut self, len: usize) -> Result<i32, Fault> {
        self.call(|p| p.enrich.as_ref(), len)
    }

    fn call<R: wasmi::WasmResults>(
        &mut self,
        f: impl Fn(&GuestParts) -> Option<&TypedFunc<i32, R>>,
        len: usize,
    ) -> Result<R, Fault> {
        if self.plugin.is_disabled() {
            return Err(Fault::Disabled);
        }
        let Some(p) = self.parts.as_mut() else {
            return Err(Fault::Disabled);
        };
        let func = *f(p).ok_or(Fault::Disabled)?;
        let budget = self.plugin.limits.fuel_per_call;
        if p.store.set_fuel(budget).is_err() {
            return Err(Fault::Disabled);
        }
        let t0 = Instant::now();
        let r = func.call(&mut p.store, len as i32);
        let ns = t0.elapsed().as_nanos() as u64;
        let left = p.store.get_fuel().unwrap_or(0);
        let c = &self.plugin.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.ns.fetch_add(ns, Ordering::Relaxed);
        c.fuel.fetch_add(budget - left, Ordering::Relaxed);
        match r {
            Ok(v) => Ok(v),
            // Fuel is taken per block: some may be left when the next block needs more.
            Err(e) if is_out_of_fuel(&e) => {
                let why = format!("ran out of its {budget} fuel");
                self.plugin.fault(Fault::OutOfFuel, &why);
                Err(Fault::OutOfFuel)
            }
            Err(e) => {
                self.plugin.fault(Fault::Trap, &e.to_string());
                Err(Fault::Trap)
            }
        }
    }
}

/// The engine a plugin's module is compiled for: fuel metered.
fn new_engine() -> Engine {
    let mut config = wasmi::Config::default();
    config.consume_fuel(true);
    Engine::new(&config)
}

fn is_out_of_fuel(e: &wasmi::Error) -> bool {
    matches!(
        e.kind(),
        wasmi::errors::ErrorKind::TrapCode(wasmi::TrapCode::OutOfFuel)
            | wasmi::errors::ErrorKind::Fuel(_)
    )
}

/// The session's plugins, loaded once at start (`--plugin`).
static SESSION: OnceLock<Vec<Arc<Plugin>>> = OnceLock::new();

/// Sets the session's plugins (once; a second call is refused).
pub fn install(plugins: Vec<Plugin>) -> Result<()> {
    SESSION
        .set(plugins.into_iter().map(Arc::new).collect())
        .map_err(|_| anyhow!("plugins installed twice"))
}

/// The session's plugins (none unless [`install`]ed).
pub fn session() -> &'static [Arc<Plugin>] {
    SESSION.get().map_or(&[], Vec::as_slice)
}

/// Whether a plugin parses a protocol of its own: the kernel must then copy the payloads of
/// connections it does not recognise (as `--capture-all`).
pub fn wants_unrecognised(plugins: &[Arc<Plugin>]) -> bool {
    plugins
        .iter()
        .any(|p| matches!(p.manifest.kind, PluginKind::Parse { .. }))
}

/// One tracking thread's instances of the session's plugins.
#[derive(Default)]
pub struct PluginHost {
    /// Parse plugins, their ports, and whether they parse datagrams (`transport=udp`).
    parse: Vec<(SharedGuest, Vec<u16>, bool)>,
    /// The enrich plugins of HTTP/1 calls.
    pub enrich_http: Vec<SharedGuest>,
    /// The enrich plugins of Redis calls.
    pub enrich_redis: Vec<SharedGuest>,
}

impl PluginHost {
    pub fn new(plugins: &[Arc<Plugin>]) -> PluginHost {
        let mut host = PluginHost::default();
        for p in plugins {
            let guest = Arc::new(Mutex::new(Guest::new(p.clone())));
            match &p.manifest.kind {
                PluginKind::Parse { ports, datagrams } => {
                    host.parse.push((guest, ports.clone(), *datagrams))
                }
                PluginKind::Enrich {
                    proto: EnrichProto::Http,
                } => host.enrich_http.push(guest),
                PluginKind::Enrich {
                    proto: EnrichProto::Redis,
                } => host.enrich_redis.push(guest),
            }
        }
        host
    }

    /// The session's plugins, instantiated for a new tracking thread.
    pub fn for_tracker() -> PluginHost {
        PluginHost::new(session())
    }

    pub fn is_empty(&self) -> bool {
        self.parse.is_empty() && self.enrich_http.is_empty() && self.enrich_redis.is_empty()
    }

    /// The enrich plugins of `proto`'s calls (None: none enrich them). The caller names the
    /// built-in parser's protocol (conntrack: plugins know no parser, so that protocols, whose
    /// plugin parser drives plugins, import nothing back from here).
    pub fn enrichers(&self, proto: EnrichProto) -> Option<&[SharedGuest]> {
        let guests = match proto {
            EnrichProto::Http => &self.enrich_http,
            EnrichProto::Redis => &self.enrich_redis,
        };
        (!guests.is_empty()).then_some(guests.as_slice())
    }

    /// The parse plugin of a connection between these ports (the first listed that claims
    /// either, for this transport: `datagrams` for a datagram socket), if one is enabled.
    pub fn parser_for(&self, local: u16, peer: u16, datagrams: bool) -> Option<&SharedGuest> {
        self.parse
            .iter()
            .find(|(g, ports, dg)| {
                *dg == datagrams
                    && (ports.contains(&local) || ports.contains(&peer))
                    && !g
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .plugin
                        .is_disabled()
            })
            .map(|(g, _, _)| g)
    }
}

/// Interned attribute keys (`<plugin>.<key>`): a call's details have static keys. Bounded:
/// past [`MAX_KEYS`] distinct keys, new ones are dropped (counted by the caller as skipped).
const MAX_KEYS: usize = 1024;
static KEYS: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

pub fn intern_key(plugin: &str, key: &str) -> Option<&'static str> {
    let mut keys = KEYS.lock().unwrap_or_else(|e| e.into_inner());
    let full_len = plugin.len() + 1 + key.len();
    if let Some(k) = keys.iter().find(|k| {
        k.len() == full_len
            && k.starts_with(plugin)
            && k.as_bytes()[plugin.len()] == b'.'
            && k.ends_with(key)
    }) {
        return Some(k);
    }
    if keys.len() >= MAX_KEYS {
        return None;
    }
    let k: &'static str = Box::leak(format!("{plugin}.{key}").into_boxed_str());
    keys.push(k);
    Some(k)
}

/// The per-plugin figures of the session's plugins.
pub fn overheads() -> Vec<PluginOverhead> {
    session().iter().map(|p| p.overhead()).collect()
}

/// Warnings of plugins disabled since the last call.
pub fn take_disabled_warnings() -> Vec<String> {
    session()
        .iter()
        .filter_map(|p| p.take_disabled_warning())
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;

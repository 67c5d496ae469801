//! Model-based testing support for the combkv store.
//!
//! A sequence of [`Op`]s is generated from a seed, run against a real
//! [`Store`] and, in lockstep, against a plain `BTreeMap` model (plus one
//! frozen clone of the model per live snapshot). Every result is compared.
//!
//! Ops are self-contained (keys and values are concrete, anything that depends
//! on the store's state, such as a CAS version or a snapshot handle, is
//! symbolic and resolved against the model when it runs), so a failing trace
//! can be replayed and shrunk by deleting ops. The `Debug` form of an op list
//! is valid Rust once `Op::*`, `Exp::*`, `CasVer::*`, `Fl::*` and `Bound::*` are in
//! scope, which is how the regression tests are written.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::{self, Write as _};
use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use combkv::{Config, Error, Expiry, Flags, Item, Range, SnapshotId, Store, Write};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

/// Wall clock in unix milliseconds (the clock the engine's TTLs use).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock before 1970")
        .as_millis() as u64
}

/// An expiry this far in the past is invisible at once.
pub const PAST_MS: u64 = 10_000;
/// An expiry this far in the future never fires during a test.
pub const FUTURE_MS: u64 = 3_600_000;
/// TTL of the snapshots the model takes (far longer than any test).
pub const SNAP_TTL: Duration = Duration::from_secs(600);

/// Escapes bytes the way a Rust byte-string literal would show them.
pub fn esc(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        match c {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(c as char),
            _ => {
                let _ = write!(s, "\\x{c:02x}");
            }
        }
    }
    s
}

/// Short human form of a value (long values are summarised).
pub fn show(b: &[u8]) -> String {
    if b.len() <= 48 {
        format!("b\"{}\"", esc(b))
    } else {
        format!(
            "<{} bytes b\"{}\"..b\"{}\">",
            b.len(),
            esc(&b[..16]),
            esc(&b[b.len() - 8..])
        )
    }
}

fn show_opt(v: &Option<Bytes>) -> String {
    match v {
        None => "None".into(),
        Some(b) => format!("Some({})", show(b)),
    }
}

/// A key. `Debug` prints `k(b"..")`, or `kf(prefix, fill, len)` for long keys
/// that end in a run of one byte.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct K(pub Vec<u8>);

/// Key from a byte string.
pub fn k(b: &[u8]) -> K {
    K(b.to_vec())
}

/// `prefix` followed by `fill` repeated up to `len` bytes in all.
pub fn kf(prefix: &[u8], fill: u8, len: usize) -> K {
    let mut v = prefix.to_vec();
    v.resize(len, fill);
    K(v)
}

impl fmt::Debug for K {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        if b.len() > 16 {
            let fill = b[b.len() - 1];
            let mut p = b.len();
            while p > 0 && b[p - 1] == fill {
                p -= 1;
            }
            if b.len() - p >= 8 {
                return write!(f, "kf(b\"{}\", {:#04x}, {})", esc(&b[..p]), fill, b.len());
            }
        }
        write!(f, "k(b\"{}\")", esc(b))
    }
}

/// A value: literal bytes, or a large deterministic pattern.
#[derive(Clone, PartialEq, Eq)]
pub enum Val {
    /// Literal bytes.
    S(Vec<u8>),
    /// `len` bytes of a pattern determined by `tag`.
    Big(usize, u8),
}

/// Value from a byte string.
pub fn v(b: &[u8]) -> Val {
    Val::S(b.to_vec())
}

/// A large value of `len` bytes (pattern chosen by `tag`).
pub fn big(len: usize, tag: u8) -> Val {
    Val::Big(len, tag)
}

impl Val {
    /// The bytes of the value.
    pub fn bytes(&self) -> Bytes {
        match self {
            Val::S(b) => Bytes::copy_from_slice(b),
            Val::Big(len, tag) => (0..*len)
                .map(|i| {
                    tag.wrapping_add((i % 251) as u8)
                        .wrapping_add((i / 251) as u8)
                })
                .collect::<Vec<u8>>()
                .into(),
        }
    }
}

impl fmt::Debug for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Val::S(b) => write!(f, "v(b\"{}\")", esc(b)),
            Val::Big(len, tag) => write!(f, "big({len}, {tag})"),
        }
    }
}

/// A symbolic expiry, resolved against the clock when the op runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exp {
    /// `Expiry::Never`.
    Never,
    /// `Expiry::Keep`.
    Keep,
    /// `Expiry::AtMs(now - 10 s)`: invisible immediately.
    Past,
    /// `Expiry::AtMs(now + 1 h)`: visible for the whole test.
    Future,
    /// `Expiry::AtMs(0)`: long expired.
    Epoch,
    /// `Expiry::AtMs(now)`, `now` read just before the call: the engine's
    /// clock is at least that far, so the item is invisible at once
    /// (`expires_at_ms <= now`).
    Now,
    /// `Expiry::AtMs(u64::MAX)`: never fires.
    Max,
}

/// The `expected` version handed to `cas`, resolved against the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasVer {
    /// The key's current version if it is present; otherwise the version it
    /// had before it was deleted/expired (or 0 if it never existed).
    Right,
    /// 0: "only if absent".
    Zero,
    /// An older version of the key (or some other wrong version).
    Stale,
    /// A version that was never issued (greater than every version so far).
    Bogus,
}

/// Client flags handed to `write_with`, mirrors [`combkv::Flags`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fl {
    /// `Flags::Keep`.
    Keep,
    /// `Flags::Set(n)` (0 included: clears them).
    Set(u32),
}

/// A range query, mirrors [`combkv::Range`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeSpec {
    pub start: Bound<K>,
    pub end: Bound<K>,
    pub limit: Option<usize>,
    pub reverse: bool,
    pub floor_start: bool,
}

impl RangeSpec {
    /// The whole key space.
    pub fn all() -> RangeSpec {
        RangeSpec {
            start: Unbounded,
            end: Unbounded,
            limit: None,
            reverse: false,
            floor_start: false,
        }
    }

    /// The engine's `Range`, built with its builder methods.
    fn to_range(&self) -> Range {
        let start = self.start.clone().map(|k| k.0);
        let end = self.end.clone().map(|k| k.0);
        let mut r = Range::new(start.clone(), end.clone());
        if let Some(l) = self.limit {
            r = r.with_limit(l);
        }
        if self.reverse {
            r = r.reversed();
        }
        if self.floor_start {
            r = r.with_floor_start();
        }
        assert!(
            r.start == start
                && r.end == end
                && r.limit == self.limit
                && r.reverse == self.reverse
                && r.floor_start == self.floor_start,
            "Range builders built {r:?} for {self:?}"
        );
        r
    }
}

/// One operation. Bursts (`DeleteMost`, `Asc`, `Desc`) expand into
/// primitive ops when they run; traces only hold primitive ops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Get(K),
    GetItem(K),
    Put(K, Val),
    PutWith(K, Val, Exp),
    Insert(K, Val),
    Update(K, Val),
    Delete(K),
    Cas(K, CasVer, Val, Exp),
    Incr(K, i64),
    Append(K, Val),
    Expire(K, Exp),
    Scan(RangeSpec),
    Floor(K),
    Ceil(K),
    /// `snapshot(600 s)`.
    Snap,
    /// `snapshot(2 h)`: must fail with `SnapshotTooLong`.
    SnapTooLong,
    /// `snapshot(1 ms)`, then sleep 3 ms: the snapshot has expired (unless
    /// its id is also held by a longer-lived snapshot).
    SnapShort,
    /// Release the n-th (mod count) unreleased snapshot handle, or if none,
    /// an already released one.
    Release(usize),
    /// Release an id that was never issued.
    ReleaseBogus(u64),
    /// `get_at` on the n-th (mod count) snapshot handle ever created
    /// (released ones must answer `NoSuchSnapshot`).
    GetAt(usize, K),
    /// `range_at`, handle chosen as for `GetAt`.
    ScanAt(usize, RangeSpec),
    ListSnaps,
    Collect,
    /// `collect()` three times, then (if no snapshot is live) check
    /// `live_buffers == reachable_buffers`.
    Reclaim,
    /// Compare the whole store (and every live snapshot) with the model.
    CheckAll,
    /// Burst: delete every visible key except one in `keep_one_in` (0 =
    /// delete all); order 0 ascending, 1 descending, 2 scrambled by `seed`.
    DeleteMost(usize, u8, u64),
    /// Burst: `n` keys `prefix ++ enc(first + i)` in ascending order, with
    /// values of `val_len` bytes; `insert` picks insert over put.
    Asc(K, usize, usize, usize, bool),
    /// Burst: like `Asc` in descending order.
    Desc(K, usize, usize, usize, bool),
    /// Burst: `n` puts of one key (long version chains, log overflow), with
    /// a snapshot every `snap_every` puts (0 = none).
    Hammer(K, usize, usize),
    /// Burst: `n` keys `prefix ++ enc(first + i)` written already expired
    /// (`put_with(.., Past)`), ascending.
    ExpiredRun(K, usize, usize),
    /// `sweep_expired(max_items)`; the model tracks the sweep's cursor.
    Sweep(usize),
    /// `write_with` storing a value with an expiry and client flags
    /// (memcached's set), unconditionally.
    PutFlags(K, Val, Exp, Fl),
}

impl Op {
    fn name(&self) -> &'static str {
        match self {
            Op::Get(..) => "Get",
            Op::GetItem(..) => "GetItem",
            Op::Put(..) => "Put",
            Op::PutWith(..) => "PutWith",
            Op::Insert(..) => "Insert",
            Op::Update(..) => "Update",
            Op::Delete(..) => "Delete",
            Op::Cas(..) => "Cas",
            Op::Incr(..) => "Incr",
            Op::Append(..) => "Append",
            Op::Expire(..) => "Expire",
            Op::Scan(..) => "Scan",
            Op::Floor(..) => "Floor",
            Op::Ceil(..) => "Ceil",
            Op::Snap => "Snap",
            Op::SnapTooLong => "SnapTooLong",
            Op::SnapShort => "SnapShort",
            Op::Release(..) => "Release",
            Op::ReleaseBogus(..) => "ReleaseBogus",
            Op::GetAt(..) => "GetAt",
            Op::ScanAt(..) => "ScanAt",
            Op::ListSnaps => "ListSnaps",
            Op::Collect => "Collect",
            Op::Reclaim => "Reclaim",
            Op::CheckAll => "CheckAll",
            Op::DeleteMost(..) => "DeleteMost",
            Op::Asc(..) => "Asc",
            Op::Desc(..) => "Desc",
            Op::Hammer(..) => "Hammer",
            Op::ExpiredRun(..) => "ExpiredRun",
            Op::Sweep(..) => "Sweep",
            Op::PutFlags(..) => "PutFlags",
        }
    }
}

/// Key suffix used by the ascending/descending bursts: 4 letters, base 8,
/// so byte order equals numeric order.
fn burst_suffix(i: usize) -> [u8; 4] {
    [
        b'a' + ((i >> 9) & 7) as u8,
        b'a' + ((i >> 6) & 7) as u8,
        b'a' + ((i >> 3) & 7) as u8,
        b'a' + (i & 7) as u8,
    ]
}

fn burst_key(prefix: &K, i: usize) -> K {
    let mut key = prefix.0.clone();
    key.extend_from_slice(&burst_suffix(i));
    K(key)
}

fn burst_val(i: usize, len: usize) -> Val {
    if len > 64 {
        Val::Big(len, i as u8)
    } else {
        Val::S((0..len).map(|j| b'A' + ((i + j) % 26) as u8).collect())
    }
}

fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

fn hash_key(key: &[u8], seed: u64) -> u64 {
    let mut h = seed ^ 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(h)
}

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

/// The configuration one sequence runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// Node size: 8192 uses `Config::default()`, others `Config::with_node_size`.
    pub node: usize,
    /// `Some(n)` overrides `max_value_len`.
    pub max_val: Option<usize>,
    /// `Some(n)` overrides `max_snapshots`.
    pub max_snapshots: Option<usize>,
    /// `Config::learned_search` (half the seeds).
    pub learned: bool,
}

impl Setup {
    /// Small (1 KiB) nodes, default limits.
    pub fn small() -> Setup {
        Setup {
            node: 1024,
            max_val: None,
            max_snapshots: None,
            learned: false,
        }
    }

    /// Default (8 KiB) nodes, default limits.
    pub fn default_nodes() -> Setup {
        Setup {
            node: 8192,
            max_val: None,
            max_snapshots: None,
            learned: false,
        }
    }

    /// The setup a seed runs under.
    pub fn for_seed(node: usize, seed: u64) -> Setup {
        let h = mix64(seed ^ 0x5eed);
        let max_val = match h % 20 {
            0..=9 => None,
            10..=16 => Some(16 * 1024),
            _ => Some(100),
        };
        let max_snapshots = if (h >> 8).is_multiple_of(10) {
            Some(3)
        } else {
            None
        };
        Setup {
            node,
            max_val,
            max_snapshots,
            learned: (h >> 20) & 1 == 1,
        }
    }

    /// The engine config.
    pub fn config(&self) -> Config {
        let mut cfg = if self.node == 8192 {
            Config::default()
        } else {
            Config::with_node_size(self.node)
        };
        if let Some(n) = self.max_val {
            cfg.max_value_len = n;
        }
        if let Some(n) = self.max_snapshots {
            cfg.max_snapshots = n;
        }
        cfg.learned_search = self.learned;
        cfg
    }

    /// A fresh store for this setup.
    pub fn store(&self) -> Store {
        Store::new(self.config()).expect("Store::new")
    }

    /// `(max_key_len, max_value_len)` of a store with this setup (memoised).
    pub fn limits(&self) -> (usize, usize) {
        /// (node size, max_value_len override) -> (max key, max value).
        type Limits = HashMap<(usize, Option<usize>), (usize, usize)>;
        thread_local! {
            static LIMITS: RefCell<Limits> = RefCell::new(HashMap::new());
        }
        LIMITS.with(|m| {
            *m.borrow_mut()
                .entry((self.node, self.max_val))
                .or_insert_with(|| {
                    let s = self.store();
                    (s.max_key_len(), s.max_value_len())
                })
        })
    }
}

// ---------------------------------------------------------------------------
// Generation
// ---------------------------------------------------------------------------

/// Random op generator.
#[derive(Debug)]
pub struct Gen {
    rng: StdRng,
    max_key: usize,
    max_val: usize,
    small_nodes: bool,
    used: Vec<K>,
}

impl Gen {
    /// A generator for `setup`, seeded with `seed`.
    pub fn new(setup: Setup, seed: u64) -> Gen {
        let (max_key, max_val) = setup.limits();
        Gen {
            rng: StdRng::seed_from_u64(seed),
            max_key,
            max_val,
            small_nodes: setup.node < 4096,
            used: Vec::new(),
        }
    }

    fn pct(&mut self) -> u32 {
        self.rng.random_range(0..100)
    }

    fn key_byte(&mut self) -> u8 {
        match self.rng.random_range(0..100) {
            0..=2 => 0x00,
            3..=5 => 0xff,
            6 => 0x01,
            7 => 0xfe,
            _ => b'a' + self.rng.random_range(0..8u8),
        }
    }

    /// A long shared prefix (8+ bytes, longer than a shortcut entry's key
    /// prefix) of `len` bytes.
    fn shared_prefix(&mut self, len: usize) -> Vec<u8> {
        const PREFIXES: [&[u8]; 4] = [
            b"abcdefghabcdefghabcdefgh",
            b"aaaaaaaaaaaaaaaaaaaaaaaa",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
            b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
        ];
        let p = PREFIXES[self.rng.random_range(0..PREFIXES.len())];
        let mut v: Vec<u8> = p.iter().copied().cycle().take(len).collect();
        // Sometimes differ early, inside the first 8 bytes.
        if len > 0 && self.rng.random_bool(0.2) {
            let i = self.rng.random_range(0..len.min(8));
            v[i] = self.key_byte();
        }
        v
    }

    fn fresh_key(&mut self) -> K {
        if self.max_key > 9 && self.rng.random_bool(0.15) {
            let plen = self.rng.random_range(7..=(self.max_key - 2).min(14));
            let mut key = self.shared_prefix(plen);
            let slen = self.rng.random_range(0..=(self.max_key - plen).min(4));
            key.extend((0..slen).map(|_| self.key_byte()));
            return K(key);
        }
        let max = self.max_key.min(12);
        let len = if self.rng.random_bool(0.5) {
            self.rng.random_range(1..=3.min(max))
        } else {
            self.rng.random_range(1..=max)
        };
        K((0..len).map(|_| self.key_byte()).collect())
    }

    fn long_key(&mut self) -> K {
        let plen = self.rng.random_range(1..=3);
        let prefix: Vec<u8> = (0..plen).map(|_| self.key_byte()).collect();
        let fill = self.key_byte();
        let len = if self.rng.random_bool(0.8) {
            self.max_key
        } else {
            self.rng
                .random_range(plen.max(self.max_key.saturating_sub(4))..=self.max_key)
        };
        kf(&prefix, fill, len.max(1))
    }

    fn neighbour(&mut self, base: &K) -> K {
        let mut b = base.0.clone();
        match self.rng.random_range(0..6) {
            0 => b.push(self.key_byte()),
            1 => {
                if b.len() > 1 {
                    b.pop();
                }
            }
            2 => {
                let l = b.len() - 1;
                b[l] = b[l].wrapping_add(1);
            }
            3 => {
                let l = b.len() - 1;
                b[l] = b[l].wrapping_sub(1);
            }
            4 => b.push(0x00),
            _ => {
                let l = b.len() - 1;
                b[l] = if self.rng.random_bool(0.5) {
                    0x00
                } else {
                    0xff
                };
            }
        }
        b.truncate(self.max_key);
        if b.is_empty() {
            b.push(b'a');
        }
        K(b)
    }

    /// A valid key, often one used before or a neighbour of one.
    pub fn valid_key(&mut self) -> K {
        let r = self.pct();
        let key = if r < 45 && !self.used.is_empty() {
            let i = self.rng.random_range(0..self.used.len());
            return self.used[i].clone();
        } else if r < 62 && !self.used.is_empty() {
            let i = self.rng.random_range(0..self.used.len());
            let base = self.used[i].clone();
            self.neighbour(&base)
        } else if r < 95 {
            self.fresh_key()
        } else {
            self.long_key()
        };
        if self.used.len() < 256 {
            self.used.push(key.clone());
        } else {
            let i = self.rng.random_range(0..self.used.len());
            self.used[i] = key.clone();
        }
        key
    }

    /// A key; about 3% are invalid (empty or too long).
    pub fn key(&mut self) -> K {
        if self.rng.random_range(0..1000) < 30 {
            if self.rng.random_bool(0.4) {
                K(Vec::new())
            } else {
                let len = self.max_key + self.rng.random_range(1..=8);
                kf(b"a", b'a' + self.rng.random_range(0..8u8), len)
            }
        } else {
            self.valid_key()
        }
    }

    fn int_text(&mut self) -> Vec<u8> {
        let r = self.pct();
        let s = match r {
            0..=59 => self.rng.random_range(-1000i64..=1000).to_string(),
            60..=69 => (i64::MAX - self.rng.random_range(0..4)).to_string(),
            70..=79 => (i64::MIN + self.rng.random_range(0..4)).to_string(),
            80..=84 => self.rng.random::<i64>().to_string(),
            // Not integers at all.
            85..=89 => ["12a", "x", "1.5", "--1", "0x10", "- 1", "1 2"]
                [self.rng.random_range(0..7)]
            .to_string(),
            // Ambiguous spellings (the model accepts either outcome).
            _ => [
                "007",
                "+5",
                " 5",
                "5 ",
                "",
                "-0",
                "99999999999999999999",
                "-9223372036854775809",
                "9223372036854775808",
            ][self.rng.random_range(0..9)]
            .to_string(),
        };
        s.into_bytes()
    }

    /// A value: mostly 0..=64 bytes, sometimes large, sometimes a decimal
    /// integer, rarely larger than `max_value_len`.
    pub fn val(&mut self) -> Val {
        let r = self.rng.random_range(0..1000);
        let small_limit = self.max_val < 1000;
        if r < 60 {
            // Large: several KiB, so it goes out of line.
            let len = if small_limit {
                self.rng.random_range(65..=self.max_val)
            } else {
                self.rng.random_range(1000..=12_000usize).min(self.max_val)
            };
            Val::Big(len, self.rng.random())
        } else if r < 170 {
            Val::S(self.int_text())
        } else if r < 185 && self.max_val <= 16 * 1024 {
            let len = self.max_val + self.rng.random_range(1..=64);
            Val::Big(len, self.rng.random())
        } else if r < 190 && self.max_val <= 16 * 1024 {
            Val::Big(self.max_val, self.rng.random())
        } else if r < 210 && self.max_val >= 500 {
            // Around the inline limit of 8 KiB nodes (469 bytes).
            Val::Big(self.rng.random_range(440..=500), self.rng.random())
        } else {
            let len = if self.rng.random_bool(0.3) {
                self.rng.random_range(0..=4)
            } else {
                self.rng.random_range(0..=64)
            };
            if self.rng.random_bool(0.6) {
                Val::S(
                    (0..len)
                        .map(|_| b'a' + self.rng.random_range(0..26u8))
                        .collect(),
                )
            } else {
                Val::S((0..len).map(|_| self.rng.random()).collect())
            }
        }
    }

    fn small_val(&mut self) -> Val {
        let len = self.rng.random_range(0..=16);
        Val::S(
            (0..len)
                .map(|_| b'0' + self.rng.random_range(0..75u8))
                .collect(),
        )
    }

    fn append_val(&mut self) -> Val {
        if self.rng.random_bool(0.7) {
            self.small_val()
        } else {
            self.val()
        }
    }

    fn exp(&mut self) -> Exp {
        match self.pct() {
            0..=29 => Exp::Never,
            30..=54 => Exp::Keep,
            55..=65 => Exp::Past,
            66..=67 => Exp::Now,
            68..=69 => Exp::Epoch,
            70..=71 => Exp::Max,
            _ => Exp::Future,
        }
    }

    fn delta(&mut self) -> i64 {
        match self.pct() {
            0..=79 => self.rng.random_range(-100..=100),
            80..=84 => i64::MAX,
            85..=89 => i64::MIN,
            90..=94 => self.rng.random_range(-3..=3),
            _ => self.rng.random(),
        }
    }

    fn bound(&mut self) -> Bound<K> {
        match self.pct() {
            0..=19 => Unbounded,
            20..=64 => Included(self.key()),
            _ => Excluded(self.key()),
        }
    }

    /// A random range query.
    pub fn range(&mut self) -> RangeSpec {
        let floor_start = self.rng.random_bool(0.3);
        let mut start = if floor_start && self.rng.random_bool(0.7) {
            Included(self.key())
        } else {
            self.bound()
        };
        let mut end = self.bound();
        // Mostly make non-empty ranges: swap inverted bounds 60% of the time.
        if let (Included(a) | Excluded(a), Included(b) | Excluded(b)) = (&start, &end)
            && a > b
            && self.rng.random_bool(0.6)
        {
            let (a, b) = (a.clone(), b.clone());
            start = match start {
                Included(_) => Included(b),
                _ => Excluded(b),
            };
            end = match end {
                Included(_) => Included(a),
                _ => Excluded(a),
            };
        }
        let limit = match self.pct() {
            0..=59 => None,
            60..=69 => Some(0),
            70..=89 => Some(self.rng.random_range(1..=3)),
            _ => Some(self.rng.random_range(1..=40)),
        };
        RangeSpec {
            start,
            end,
            limit,
            reverse: self.rng.random_bool(0.35),
            floor_start,
        }
    }

    fn burst(&mut self, descending: bool) -> Op {
        let max_n = if self.small_nodes { 120 } else { 300 };
        let n = self.rng.random_range(8..=max_n);
        let first = self.rng.random_range(0..(4096 - n));
        let prefix = if self.max_key > 12 && self.rng.random_bool(0.3) {
            let plen = self.rng.random_range(8..=(self.max_key - 4).min(16));
            K(self.shared_prefix(plen))
        } else {
            let plen = self
                .rng
                .random_range(0..=3)
                .min(self.max_key.saturating_sub(4));
            K((0..plen).map(|_| self.key_byte()).collect())
        };
        let val_len = match self.pct() {
            0..=59 => self.rng.random_range(0..=16),
            60..=89 => self.rng.random_range(17..=64),
            _ => self.rng.random_range(65..=3000).min(self.max_val),
        };
        for _ in 0..4 {
            let i = self.rng.random_range(0..n);
            let key = burst_key(&prefix, first + i);
            self.used.push(key);
        }
        let insert = self.rng.random_bool(0.3);
        if descending {
            Op::Desc(prefix, first, n, val_len, insert)
        } else {
            Op::Asc(prefix, first, n, val_len, insert)
        }
    }

    /// One random op.
    pub fn op(&mut self) -> Op {
        let w = self.rng.random_range(0..985);
        match w {
            0..=59 => Op::Get(self.key()),
            60..=99 => Op::GetItem(self.key()),
            100..=209 => Op::Put(self.key(), self.val()),
            210..=269 => Op::PutWith(self.key(), self.val(), self.exp()),
            270..=319 => Op::Insert(self.key(), self.val()),
            320..=359 => Op::Update(self.key(), self.val()),
            360..=439 => Op::Delete(self.key()),
            440..=499 => {
                let cv = match self.pct() {
                    0..=49 => CasVer::Right,
                    50..=69 => CasVer::Zero,
                    70..=89 => CasVer::Stale,
                    _ => CasVer::Bogus,
                };
                Op::Cas(self.key(), cv, self.val(), self.exp())
            }
            500..=549 => Op::Incr(self.key(), self.delta()),
            550..=579 => Op::Append(self.key(), self.append_val()),
            580..=609 => Op::Expire(self.key(), self.exp()),
            610..=689 => Op::Scan(self.range()),
            690..=719 => Op::Floor(self.key()),
            720..=749 => Op::Ceil(self.key()),
            750..=774 => Op::Snap,
            775..=777 => Op::SnapTooLong,
            778..=794 => Op::Release(self.rng.random_range(0..64)),
            795..=797 => Op::ReleaseBogus(self.rng.random_range(0..1000)),
            798..=839 => Op::GetAt(self.rng.random_range(0..64), self.key()),
            840..=869 => Op::ScanAt(self.rng.random_range(0..64), self.range()),
            870..=874 => Op::ListSnaps,
            875..=884 => Op::Collect,
            885..=889 => Op::Reclaim,
            890..=899 => Op::CheckAll,
            900..=909 => {
                let keep = match self.pct() {
                    0..=29 => 0,
                    30..=79 => self.rng.random_range(5..=20),
                    _ => self.rng.random_range(2..=4),
                };
                Op::DeleteMost(keep, self.rng.random_range(0..3), self.rng.random())
            }
            910..=917 => self.burst(false),
            918..=924 => self.burst(true),
            925..=926 => Op::SnapShort,
            931..=934 => {
                let n = self.rng.random_range(5..=150);
                let first = self.rng.random_range(0..(4096 - n));
                let plen = self.rng.random_range(0..=2);
                let prefix = K((0..plen).map(|_| self.key_byte()).collect());
                for _ in 0..3 {
                    let i = self.rng.random_range(0..n);
                    self.used.push(burst_key(&prefix, first + i));
                }
                Op::ExpiredRun(prefix, first, n)
            }
            935..=944 => Op::Sweep([1, 2, 3, 5, 10, 50, usize::MAX][self.rng.random_range(0..7)]),
            945..=984 => {
                let fl = match self.pct() {
                    0..=34 => Fl::Keep,
                    35..=49 => Fl::Set(0),
                    50..=79 => Fl::Set(self.rng.random_range(1..=1000)),
                    _ => Fl::Set(self.rng.random()),
                };
                Op::PutFlags(self.key(), self.val(), self.exp(), fl)
            }
            927..=930 => {
                let n = self.rng.random_range(10..=200);
                let every = if self.rng.random_bool(0.5) {
                    0
                } else {
                    self.rng.random_range(5..=60)
                };
                Op::Hammer(self.valid_key(), n, every)
            }
            _ => unreachable!(),
        }
    }

    /// A sequence of `1..=max_ops` ops.
    pub fn ops(&mut self, max_ops: usize) -> Vec<Op> {
        let n = self.rng.random_range(1..=max_ops);
        (0..n).map(|_| self.op()).collect()
    }
}

// ---------------------------------------------------------------------------
// The model and the runner
// ---------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    value: Bytes,
    version: u64,
    expires: Option<u64>,
    /// Client flags.
    flags: u32,
}

type Map = BTreeMap<Vec<u8>, Entry>;

/// What an item looks like to the checks: (key, value, version, expiry,
/// client flags).
type Obs = (Bytes, Bytes, u64, Option<u64>, u32);

fn obs(item: &Item) -> Obs {
    (
        item.key.clone(),
        item.value.clone(),
        item.version.get(),
        item.expires_at_ms,
        item.flags,
    )
}

fn obs_entry(key: &[u8], e: &Entry) -> Obs {
    (
        Bytes::copy_from_slice(key),
        e.value.clone(),
        e.version,
        e.expires,
        e.flags,
    )
}

fn show_obs(o: &Obs) -> String {
    format!(
        "{{key {}, value {}, version {}, expires {:?}, flags {}}}",
        show(&o.0),
        show(&o.1),
        o.2,
        o.3,
        o.4
    )
}

fn show_obs_opt(o: &Option<Obs>) -> String {
    match o {
        None => "None".into(),
        Some(o) => format!("Some({})", show_obs(o)),
    }
}

fn show_obs_list(v: &[Obs]) -> String {
    if v.len() <= 12 {
        let parts: Vec<String> = v.iter().map(show_obs).collect();
        format!("[{}]", parts.join(", "))
    } else {
        let keys: Vec<String> = v.iter().map(|o| show(&o.0)).collect();
        format!("{} items, keys [{}]", v.len(), keys.join(", "))
    }
}

/// Describes the first difference between two item lists.
fn diff_lists(exp: &[Obs], got: &[Obs]) -> String {
    let mut s = format!("expected {} items, got {}", exp.len(), got.len());
    for i in 0..exp.len().max(got.len()) {
        match (exp.get(i), got.get(i)) {
            (Some(a), Some(b)) if a == b => continue,
            (a, b) => {
                let _ = write!(
                    s,
                    "; first difference at index {i}: expected {}, got {}",
                    a.map_or("nothing".into(), show_obs),
                    b.map_or("nothing".into(), show_obs)
                );
                break;
            }
        }
    }
    let _ = write!(
        s,
        "\n    expected: {}\n    got:      {}",
        show_obs_list(exp),
        show_obs_list(got)
    );
    s
}

fn in_bounds(key: &[u8], start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    let lo = match start {
        Included(s) => key >= s,
        Excluded(s) => key > s,
        Unbounded => true,
    };
    let hi = match end {
        Included(e) => key <= e,
        Excluded(e) => key < e,
        Unbounded => true,
    };
    lo && hi
}

fn bound_ref(b: &Bound<K>) -> Bound<&[u8]> {
    match b {
        Included(k) => Included(&k.0[..]),
        Excluded(k) => Excluded(&k.0[..]),
        Unbounded => Unbounded,
    }
}

/// The model's answer to a range query, plus an alternative answer where the
/// API doc is ambiguous (floor_start moving the start of a range whose
/// original start is past its end).
fn model_range(map: &Map, r: &RangeSpec) -> (Vec<Obs>, Option<Vec<Obs>>) {
    let end = bound_ref(&r.end);
    let mut alt_empty = false;
    let start: Bound<&[u8]> = match (&r.start, r.floor_start) {
        (Included(s), true) => match map
            .range::<[u8], _>((Unbounded, Included(&s.0[..])))
            .next_back()
        {
            Some((f, _)) => {
                if f[..] != s.0[..] && !in_bounds(&s.0, Unbounded, end) {
                    alt_empty = true;
                }
                Included(&f[..])
            }
            None => Included(&s.0[..]),
        },
        (b, _) => bound_ref(b),
    };
    let mut items: Vec<Obs> = map
        .iter()
        .filter(|(k, _)| in_bounds(k, start, end))
        .map(|(k, e)| obs_entry(k, e))
        .collect();
    if r.reverse {
        items.reverse();
    }
    if let Some(l) = r.limit {
        items.truncate(l);
    }
    let alt = if alt_empty && !items.is_empty() {
        Some(Vec::new())
    } else {
        None
    };
    (items, alt)
}

#[derive(Debug)]
struct SnapModel {
    refs: usize,
    frozen: Map,
}

/// A failed check: a short tag (for the failure's signature) and a message.
#[derive(Debug)]
pub struct Fail {
    tag: &'static str,
    msg: String,
}

type R = Result<(), Fail>;

macro_rules! bail {
    ($tag:expr, $($fmt:tt)*) => {
        return Err(Fail { tag: $tag, msg: format!($($fmt)*) })
    };
}

macro_rules! ensure {
    ($cond:expr, $tag:expr, $($fmt:tt)*) => {
        if !$cond {
            bail!($tag, $($fmt)*);
        }
    };
}

/// A kind of bad input and the error it must produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bad {
    KeyEmpty,
    KeyTooLong(usize),
    /// Value too large; `Some(len)` when the reported length is known.
    ValueTooLarge(Option<usize>),
}

/// How the engine treats the TTL of a key on `update` (the API doc does not
/// say); learned from the first observation and then required to be stable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UpdateTtl {
    Clears,
    Keeps,
}

/// Runs ops against a store and the model.
pub struct Runner {
    store: Store,
    model: Map,
    /// Every version each key has held (for stale CAS versions).
    history: BTreeMap<Vec<u8>, Vec<u64>>,
    /// Keys whose newest item in the engine is an expired one (invisible,
    /// but there for `sweep_expired` to delete).
    expired: BTreeSet<Vec<u8>>,
    /// Where the engine's next `sweep_expired` resumes.
    sweep_cursor: Option<Vec<u8>>,
    /// Whether any item was ever stored with an expiry (else a sweep visits
    /// nothing).
    expiring: bool,
    last_version: u64,
    /// The highest version a snapshot pinned.
    max_snap_version: Option<u64>,
    last_snap: Option<u64>,
    wrote_since_snap: bool,
    snaps: BTreeMap<u64, SnapModel>,
    /// (id, released) per successful `snapshot` call.
    handles: Vec<(u64, bool)>,
    max_key: usize,
    max_val: usize,
    max_snapshots: usize,
    update_ttl: Option<UpdateTtl>,
    /// Primitive ops run so far (bursts expanded).
    pub trace: Vec<Op>,
}

impl fmt::Debug for Runner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runner")
            .field("keys", &self.model.len())
            .field("last_version", &self.last_version)
            .field("snaps", &self.snaps.len())
            .finish()
    }
}

fn err_tag(e: &Error) -> &'static str {
    match e {
        Error::KeyEmpty => "KeyEmpty",
        Error::KeyTooLong { .. } => "KeyTooLong",
        Error::ValueTooLarge { .. } => "ValueTooLarge",
        Error::NotAnInteger => "NotAnInteger",
        Error::Overflow => "Overflow",
        Error::NoSuchSnapshot => "NoSuchSnapshot",
        Error::TooManySnapshots => "TooManySnapshots",
        Error::SnapshotTooLong { .. } => "SnapshotTooLong",
        _ => "other error",
    }
}

/// Classification of a stored value for `incr_by`.
enum IntVal {
    /// Canonical decimal i64.
    Int(i64),
    /// Certainly not an integer.
    NotInt,
    /// A spelling the doc does not settle ("007", "+5", "", overflow...).
    Ambiguous,
}

fn classify_int(b: &[u8]) -> IntVal {
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    let canonical = !digits.is_empty()
        && digits.iter().all(u8::is_ascii_digit)
        && (digits[0] != b'0' || digits.len() == 1)
        && b != b"-0";
    if canonical {
        return match std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
        {
            Some(n) => IntVal::Int(n),
            None => IntVal::Ambiguous,
        };
    }
    if b.iter()
        .all(|c| c.is_ascii_digit() || matches!(c, b'-' | b'+' | b' ' | b'\t'))
    {
        IntVal::Ambiguous
    } else {
        IntVal::NotInt
    }
}

impl Runner {
    /// A runner over a fresh store for `setup`.
    pub fn new(setup: Setup) -> Runner {
        let store = setup.store();
        let max_key = store.max_key_len();
        let max_val = store.max_value_len();
        let max_snapshots = setup.config().max_snapshots;
        let last_version = store.read_version().get();
        Runner {
            store,
            model: Map::new(),
            history: BTreeMap::new(),
            expired: BTreeSet::new(),
            sweep_cursor: None,
            expiring: false,
            last_version,
            max_snap_version: None,
            last_snap: None,
            wrote_since_snap: false,
            snaps: BTreeMap::new(),
            handles: Vec::new(),
            max_key,
            max_val,
            max_snapshots,
            update_ttl: None,
            trace: Vec::new(),
        }
    }

    fn key_bad(&self, key: &[u8]) -> Option<Bad> {
        if key.is_empty() {
            Some(Bad::KeyEmpty)
        } else if key.len() > self.max_key {
            Some(Bad::KeyTooLong(key.len()))
        } else {
            None
        }
    }

    fn write_bads(&self, key: &[u8], val_len: Option<usize>) -> Vec<Bad> {
        let mut v: Vec<Bad> = self.key_bad(key).into_iter().collect();
        if let Some(l) = val_len
            && l > self.max_val
        {
            v.push(Bad::ValueTooLarge(Some(l)));
        }
        v
    }

    fn err_matches(&self, bad: Bad, e: &Error) -> bool {
        match (bad, e) {
            (Bad::KeyEmpty, Error::KeyEmpty) => true,
            (Bad::KeyTooLong(l), Error::KeyTooLong { len, max }) => {
                *len == l && *max == self.max_key
            }
            (Bad::ValueTooLarge(l), Error::ValueTooLarge { len, max }) => {
                l.is_none_or(|l| *len == l) && *max == self.max_val
            }
            _ => false,
        }
    }

    /// A write with bad input must fail with a matching error and change
    /// nothing (the read version included; the rest is checked later).
    fn expect_rejected<T: fmt::Debug>(
        &self,
        what: &str,
        bads: &[Bad],
        rv0: u64,
        got: Result<T, Error>,
    ) -> R {
        match got {
            Ok(x) => bail!(
                "bad input accepted",
                "{what}: expected an error {bads:?}, got Ok({x:?})"
            ),
            Err(e) => ensure!(
                bads.iter().any(|&b| self.err_matches(b, &e)),
                "wrong error",
                "{what}: expected an error {bads:?}, got Err({e:?})"
            ),
        }
        let rv = self.store.read_version().get();
        ensure!(
            rv == rv0,
            "error changed state",
            "{what}: failed with an error but the read version moved {rv0} -> {rv}"
        );
        Ok(())
    }

    fn ok<T>(&self, what: &str, got: Result<T, Error>) -> Result<T, Fail> {
        got.map_err(|e| Fail {
            tag: err_tag(&e),
            msg: format!("{what}: unexpected Err({e:?})"),
        })
    }

    /// Records a successful write's version and checks it is fresh.
    fn new_version(&mut self, what: &str, v: u64) -> Result<u64, Fail> {
        ensure!(
            v > self.last_version,
            "version not increasing",
            "{what}: returned version {v}, but version {} was already issued",
            self.last_version
        );
        if let Some(s) = self.max_snap_version {
            ensure!(
                v > s,
                "version not after snapshot",
                "{what}: returned version {v}, not greater than snapshot version {s} taken earlier"
            );
        }
        let rv = self.store.read_version().get();
        ensure!(
            rv >= v,
            "read version behind",
            "{what}: returned version {v} but read_version() is {rv}"
        );
        self.last_version = v;
        self.wrote_since_snap = true;
        Ok(v)
    }

    /// Sets the model's entry (an already-expired expiry removes it).
    fn set(
        &mut self,
        key: &[u8],
        value: Bytes,
        version: u64,
        expires: Option<u64>,
        flags: u32,
        now: u64,
    ) {
        self.history.entry(key.to_vec()).or_default().push(version);
        self.expiring |= expires.is_some();
        if expires.is_some_and(|t| t <= now) {
            self.model.remove(key);
            self.expired.insert(key.to_vec());
        } else {
            self.expired.remove(key);
            self.model.insert(
                key.to_vec(),
                Entry {
                    value,
                    version,
                    expires,
                    flags,
                },
            );
        }
    }

    /// Resolves an `Exp` at `now`: the engine's `Expiry` and the model's
    /// resulting expiry for a key whose current expiry is `cur`.
    fn expiry(e: Exp, now: u64, cur: Option<u64>) -> (Expiry, Option<u64>) {
        match e {
            Exp::Never => (Expiry::Never, None),
            Exp::Keep => (Expiry::Keep, cur),
            Exp::Past => (Expiry::AtMs(now - PAST_MS), Some(now - PAST_MS)),
            Exp::Future => (Expiry::AtMs(now + FUTURE_MS), Some(now + FUTURE_MS)),
            Exp::Epoch => (Expiry::AtMs(0), Some(0)),
            Exp::Now => (Expiry::AtMs(now), Some(now)),
            Exp::Max => (Expiry::AtMs(u64::MAX), Some(u64::MAX)),
        }
    }

    fn cur_expiry(&self, key: &[u8]) -> Option<u64> {
        self.model.get(key).and_then(|e| e.expires)
    }

    /// Reads the item back right after a write whose result does not carry
    /// the version (incr, append) or whose TTL effect is undocumented.
    fn observe(&self, what: &str, key: &[u8]) -> Result<Option<Obs>, Fail> {
        let got = self.ok(
            &format!("{what}: get_item afterwards"),
            self.store.get_item(key),
        )?;
        Ok(got.as_ref().map(obs))
    }

    fn cas_expected(&self, key: &[u8], cv: CasVer) -> u64 {
        let cur = self.model.get(key).map(|e| e.version);
        let hist = self.history.get(key);
        match cv {
            CasVer::Zero => 0,
            CasVer::Right => cur
                .or_else(|| hist.and_then(|h| h.last().copied()))
                .unwrap_or(0),
            CasVer::Stale => hist
                .and_then(|h| h.iter().rev().copied().find(|&v| Some(v) != cur))
                .unwrap_or_else(|| cur.map_or(1, |c| c.saturating_sub(1).max(1))),
            CasVer::Bogus => self.last_version + 1 + (key.len() as u64 % 3),
        }
    }

    /// Runs one op (bursts expand into primitive ops, each checked).
    pub fn apply(&mut self, op: &Op) -> R {
        match op {
            Op::DeleteMost(keep, order, seed) => {
                let mut keys: Vec<Vec<u8>> = self.model.keys().cloned().collect();
                let keep_it = |i: usize| *keep != 0 && i.is_multiple_of(*keep);
                keys = keys
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| !keep_it(*i))
                    .map(|(_, k)| k)
                    .collect();
                match order {
                    0 => {}
                    1 => keys.reverse(),
                    _ => keys.sort_by_key(|k| hash_key(k, *seed)),
                }
                for key in keys {
                    self.prim(&Op::Delete(K(key)))?;
                }
                Ok(())
            }
            Op::Asc(prefix, first, n, len, insert) | Op::Desc(prefix, first, n, len, insert) => {
                let mut idx: Vec<usize> = (*first..*first + *n).collect();
                if matches!(op, Op::Desc(..)) {
                    idx.reverse();
                }
                for i in idx {
                    let key = burst_key(prefix, i);
                    let val = burst_val(i, *len);
                    let p = if *insert {
                        Op::Insert(key, val)
                    } else {
                        Op::Put(key, val)
                    };
                    self.prim(&p)?;
                }
                Ok(())
            }
            Op::ExpiredRun(prefix, first, n) => {
                for i in *first..*first + *n {
                    let key = burst_key(prefix, i);
                    self.prim(&Op::PutWith(key, burst_val(i, 8), Exp::Past))?;
                }
                Ok(())
            }
            Op::Hammer(key, n, snap_every) => {
                for i in 0..*n {
                    if *snap_every != 0 && i % *snap_every == 0 {
                        self.prim(&Op::Snap)?;
                    }
                    let val = if i % 7 == 3 {
                        Val::Big(100 + i * 13 % 700, i as u8)
                    } else {
                        Val::S(format!("v{i}").into_bytes())
                    };
                    self.prim(&Op::Put(key.clone(), val))?;
                }
                Ok(())
            }
            _ => self.prim(op),
        }
    }

    fn prim(&mut self, op: &Op) -> R {
        self.trace.push(op.clone());
        self.exec(op)
    }

    fn exec(&mut self, op: &Op) -> R {
        let rv0 = self.store.read_version().get();
        match op {
            Op::Get(key) => {
                let got = self.store.get(&key.0);
                let what = format!("get({key:?})");
                if let Some(b) = self.key_bad(&key.0) {
                    match got {
                        Err(e) => ensure!(
                            self.err_matches(b, &e),
                            "wrong error",
                            "{what}: invalid key, expected {b:?} or Ok(None), got Err({e:?})"
                        ),
                        Ok(None) => {}
                        Ok(Some(x)) => {
                            bail!("bad key read", "{what}: invalid key returned {}", show(&x))
                        }
                    }
                    return Ok(());
                }
                let got = self.ok(&what, got)?;
                let exp = self.model.get(&key.0).map(|e| e.value.clone());
                ensure!(
                    got == exp,
                    "get mismatch",
                    "{what}: expected {}, got {}",
                    show_opt(&exp),
                    show_opt(&got)
                );
            }
            Op::GetItem(key) => {
                let got = self.store.get_item(&key.0);
                let what = format!("get_item({key:?})");
                if let Some(b) = self.key_bad(&key.0) {
                    match got {
                        Err(e) => ensure!(
                            self.err_matches(b, &e),
                            "wrong error",
                            "{what}: invalid key, expected {b:?} or Ok(None), got Err({e:?})"
                        ),
                        Ok(None) => {}
                        Ok(Some(x)) => {
                            bail!("bad key read", "{what}: invalid key returned {:?}", x)
                        }
                    }
                    return Ok(());
                }
                let got = self.ok(&what, got)?.as_ref().map(obs);
                let exp = self.model.get(&key.0).map(|e| obs_entry(&key.0, e));
                ensure!(
                    got == exp,
                    "get_item mismatch",
                    "{what}: expected {}, got {}",
                    show_obs_opt(&exp),
                    show_obs_opt(&got)
                );
            }
            Op::Put(key, val) | Op::PutWith(key, val, _) => {
                let vb = val.bytes();
                let now = now_ms();
                let cur = self.cur_expiry(&key.0);
                let (what, got, expires) = match op {
                    Op::PutWith(_, _, e) => {
                        let (ex, expires) = Self::expiry(*e, now, cur);
                        let what = format!("put_with({key:?}, {val:?}, {ex:?})");
                        (what, self.store.put_with(&key.0, &vb, ex), expires)
                    }
                    _ => (
                        format!("put({key:?}, {val:?})"),
                        self.store.put(&key.0, &vb),
                        None,
                    ),
                };
                let bads = self.write_bads(&key.0, Some(vb.len()));
                if !bads.is_empty() {
                    return self.expect_rejected(&what, &bads, rv0, got);
                }
                let ver = self.ok(&what, got)?.get();
                let ver = self.new_version(&what, ver)?;
                self.set(&key.0, vb, ver, expires, 0, now);
            }
            Op::Insert(key, val) => {
                let vb = val.bytes();
                let now = now_ms();
                let what = format!("insert({key:?}, {val:?})");
                let got = self.store.insert(&key.0, &vb);
                let bads = self.write_bads(&key.0, Some(vb.len()));
                if !bads.is_empty() {
                    return self.expect_rejected(&what, &bads, rv0, got);
                }
                let got = self.ok(&what, got)?;
                let present = self.model.contains_key(&key.0);
                match (present, got) {
                    (false, Some(ver)) => {
                        let ver = self.new_version(&what, ver.get())?;
                        self.set(&key.0, vb, ver, None, 0, now);
                    }
                    (true, None) => self.expect_unchanged(&what, rv0)?,
                    (true, Some(ver)) => bail!(
                        "insert over present key",
                        "{what}: key is present ({}), expected Ok(None), got Ok(Some({ver:?}))",
                        show_obs_opt(&self.model.get(&key.0).map(|e| obs_entry(&key.0, e)))
                    ),
                    (false, None) => bail!(
                        "insert refused on absent key",
                        "{what}: key is absent, expected Ok(Some(version)), got Ok(None)"
                    ),
                }
            }
            Op::Update(key, val) => {
                let vb = val.bytes();
                let now = now_ms();
                let what = format!("update({key:?}, {val:?})");
                let got = self.store.update(&key.0, &vb);
                let bads = self.write_bads(&key.0, Some(vb.len()));
                if !bads.is_empty() {
                    return self.expect_rejected(&what, &bads, rv0, got);
                }
                let got = self.ok(&what, got)?;
                let cur = self.model.get(&key.0).cloned();
                match (cur, got) {
                    (Some(cur), Some(ver)) => {
                        let ver = self.new_version(&what, ver.get())?;
                        // The doc does not say whether update keeps the TTL:
                        // learn it once, then hold the engine to it.
                        let seen = self.observe(&what, &key.0)?;
                        let seen_exp = seen.as_ref().and_then(|o| o.3);
                        let mode = if cur.expires.is_none() {
                            None
                        } else if seen_exp == cur.expires {
                            Some(UpdateTtl::Keeps)
                        } else if seen_exp.is_none() {
                            Some(UpdateTtl::Clears)
                        } else {
                            bail!(
                                "update ttl",
                                "{what}: old expiry {:?}, after update {:?}",
                                cur.expires,
                                seen_exp
                            )
                        };
                        if let Some(m) = mode {
                            ensure!(
                                self.update_ttl.is_none_or(|u| u == m),
                                "update ttl inconsistent",
                                "{what}: update {m:?} the TTL now but {:?} it before",
                                self.update_ttl
                            );
                            self.update_ttl = Some(m);
                        }
                        let expires = match mode {
                            Some(UpdateTtl::Keeps) => cur.expires,
                            _ => None,
                        };
                        self.set(&key.0, vb, ver, expires, 0, now);
                        let exp = self.model.get(&key.0).map(|e| obs_entry(&key.0, e));
                        ensure!(
                            seen == exp,
                            "update readback",
                            "{what}: read back {}, expected {}",
                            show_obs_opt(&seen),
                            show_obs_opt(&exp)
                        );
                    }
                    (None, None) => self.expect_unchanged(&what, rv0)?,
                    (None, Some(ver)) => bail!(
                        "update on absent key",
                        "{what}: key is absent, expected Ok(None), got Ok(Some({ver:?}))"
                    ),
                    (Some(cur), None) => bail!(
                        "update refused on present key",
                        "{what}: key is present ({}), expected Ok(Some(version)), got Ok(None)",
                        show_obs(&obs_entry(&key.0, &cur))
                    ),
                }
            }
            Op::Delete(key) => {
                let what = format!("delete({key:?})");
                let got = self.store.delete(&key.0);
                let bads = self.write_bads(&key.0, None);
                if !bads.is_empty() {
                    return self.expect_rejected(&what, &bads, rv0, got);
                }
                let got = self.ok(&what, got)?;
                let present = self.model.contains_key(&key.0);
                match (present, got) {
                    (true, Some(ver)) => {
                        let ver = self.new_version(&what, ver.get())?;
                        self.history.entry(key.0.clone()).or_default().push(ver);
                        self.model.remove(&key.0);
                    }
                    (false, None) => self.expect_unchanged(&what, rv0)?,
                    (false, Some(ver)) => bail!(
                        "delete of absent key",
                        "{what}: key is absent, expected Ok(None), got Ok(Some({ver:?}))"
                    ),
                    (true, None) => bail!(
                        "delete missed present key",
                        "{what}: key is present, expected Ok(Some(version)), got Ok(None)"
                    ),
                }
            }
            Op::Cas(key, cv, val, e) => {
                let vb = val.bytes();
                let now = now_ms();
                let expected = self.cas_expected(&key.0, *cv);
                let cur = self.model.get(&key.0).cloned();
                let (ex, expires) = Self::expiry(*e, now, cur.as_ref().and_then(|c| c.expires));
                let what = format!("cas({key:?}, {expected} [{cv:?}], {val:?}, {ex:?})");
                let got = self.store.cas(&key.0, expected, &vb, ex);
                let bads = self.write_bads(&key.0, Some(vb.len()));
                if !bads.is_empty() {
                    return self.expect_rejected(&what, &bads, rv0, got);
                }
                let got = self.ok(&what, got)?;
                let applies = match &cur {
                    Some(c) => c.version == expected,
                    None => expected == 0,
                };
                let cur_s = show_obs_opt(&cur.as_ref().map(|c| obs_entry(&key.0, c)));
                match (applies, got) {
                    (true, Some(ver)) => {
                        let ver = self.new_version(&what, ver.get())?;
                        self.set(&key.0, vb, ver, expires, 0, now);
                    }
                    (false, None) => self.expect_unchanged(&what, rv0)?,
                    (true, None) => bail!(
                        "cas refused",
                        "{what}: current item {cur_s}, cas should apply, got Ok(None)"
                    ),
                    (false, Some(ver)) => bail!(
                        "cas wrongly applied",
                        "{what}: current item {cur_s}, cas should not apply, got Ok(Some({ver:?}))"
                    ),
                }
            }
            Op::Incr(key, delta) => {
                let now = now_ms();
                let what = format!("incr_by({key:?}, {delta})");
                let got = self.store.incr_by(&key.0, *delta);
                let bads = self.write_bads(&key.0, None);
                if !bads.is_empty() {
                    return self.expect_rejected(&what, &bads, rv0, got);
                }
                let cur = self.model.get(&key.0).cloned();
                let cur_s = show_obs_opt(&cur.as_ref().map(|c| obs_entry(&key.0, c)));
                let class = match &cur {
                    None => IntVal::Int(0),
                    Some(c) => classify_int(&c.value),
                };
                let expect: Option<i64> = match class {
                    IntVal::Int(n) => match n.checked_add(*delta) {
                        Some(r) => Some(r),
                        None => {
                            match got {
                                Err(Error::Overflow) => {}
                                other => bail!(
                                    "incr overflow",
                                    "{what}: current {cur_s}, expected Err(Overflow), got {other:?}"
                                ),
                            }
                            return self.expect_unchanged(&what, rv0);
                        }
                    },
                    IntVal::NotInt => {
                        match got {
                            Err(Error::NotAnInteger) => {}
                            other => bail!(
                                "incr not integer",
                                "{what}: current {cur_s}, expected Err(NotAnInteger), got {other:?}"
                            ),
                        }
                        return self.expect_unchanged(&what, rv0);
                    }
                    IntVal::Ambiguous => match got {
                        Err(Error::NotAnInteger | Error::Overflow) => {
                            return self.expect_unchanged(&what, rv0);
                        }
                        Ok(_) => None,
                        Err(e) => bail!(
                            "incr ambiguous",
                            "{what}: current {cur_s}, got unexpected Err({e:?})"
                        ),
                    },
                };
                let r = self.ok(&what, got)?;
                if let Some(x) = expect {
                    ensure!(
                        r == x,
                        "incr result",
                        "{what}: current {cur_s}, expected Ok({x}), got Ok({r})"
                    );
                }
                let seen = self.observe(&what, &key.0)?;
                let Some(seen_o) = seen.clone() else {
                    bail!(
                        "incr lost key",
                        "{what}: returned Ok({r}) but get_item is None"
                    );
                };
                let ver = self.new_version(&what, seen_o.2)?;
                let expires = cur.as_ref().and_then(|c| c.expires);
                let flags = cur.as_ref().map_or(0, |c| c.flags);
                self.set(&key.0, Bytes::from(r.to_string()), ver, expires, flags, now);
                let exp = self.model.get(&key.0).map(|e| obs_entry(&key.0, e));
                ensure!(
                    seen == exp,
                    "incr readback",
                    "{what}: current {cur_s}, read back {}, expected {}",
                    show_obs_opt(&seen),
                    show_obs_opt(&exp)
                );
            }
            Op::Append(key, val) => {
                let vb = val.bytes();
                let now = now_ms();
                let what = format!("append({key:?}, {val:?})");
                let got = self.store.append(&key.0, &vb);
                let cur = self.model.get(&key.0).cloned();
                let cur_len = cur.as_ref().map_or(0, |c| c.value.len());
                let mut bads = self.write_bads(&key.0, None);
                if vb.len() > self.max_val || cur_len + vb.len() > self.max_val {
                    bads.push(Bad::ValueTooLarge(None));
                }
                if !bads.is_empty() {
                    return self.expect_rejected(&what, &bads, rv0, got);
                }
                let n = self.ok(&what, got)?;
                ensure!(
                    n == cur_len + vb.len(),
                    "append length",
                    "{what}: old length {cur_len}, expected Ok({}), got Ok({n})",
                    cur_len + vb.len()
                );
                let seen = self.observe(&what, &key.0)?;
                let Some(seen_o) = seen.clone() else {
                    bail!(
                        "append lost key",
                        "{what}: returned Ok({n}) but get_item is None"
                    );
                };
                let ver = self.new_version(&what, seen_o.2)?;
                let mut nv = cur.as_ref().map_or_else(Vec::new, |c| c.value.to_vec());
                nv.extend_from_slice(&vb);
                let expires = cur.as_ref().and_then(|c| c.expires);
                let flags = cur.as_ref().map_or(0, |c| c.flags);
                self.set(&key.0, nv.into(), ver, expires, flags, now);
                let exp = self.model.get(&key.0).map(|e| obs_entry(&key.0, e));
                ensure!(
                    seen == exp,
                    "append readback",
                    "{what}: read back {}, expected {}",
                    show_obs_opt(&seen),
                    show_obs_opt(&exp)
                );
            }
            Op::Expire(key, e) => {
                let now = now_ms();
                let cur = self.model.get(&key.0).cloned();
                let (ex, expires) = Self::expiry(*e, now, cur.as_ref().and_then(|c| c.expires));
                let what = format!("expire({key:?}, {ex:?})");
                let got = self.store.expire(&key.0, ex);
                let bads = self.write_bads(&key.0, None);
                if !bads.is_empty() {
                    return self.expect_rejected(&what, &bads, rv0, got);
                }
                let got = self.ok(&what, got)?;
                match (cur, got) {
                    (Some(c), Some(ver)) => {
                        let ver = self.new_version(&what, ver.get())?;
                        self.set(&key.0, c.value, ver, expires, c.flags, now);
                    }
                    (None, None) => self.expect_unchanged(&what, rv0)?,
                    (None, Some(ver)) => bail!(
                        "expire on absent key",
                        "{what}: key is absent, expected Ok(None), got Ok(Some({ver:?}))"
                    ),
                    (Some(_), None) => bail!(
                        "expire missed present key",
                        "{what}: key is present, expected Ok(Some(version)), got Ok(None)"
                    ),
                }
            }
            Op::PutFlags(key, val, e, fl) => {
                let vb = val.bytes();
                let now = now_ms();
                let cur = self.model.get(&key.0).cloned();
                let (ex, expires) = Self::expiry(*e, now, cur.as_ref().and_then(|c| c.expires));
                let (flags, model_flags) = match *fl {
                    Fl::Keep => (Flags::Keep, cur.as_ref().map_or(0, |c| c.flags)),
                    Fl::Set(n) => (Flags::Set(n), n),
                };
                let what = format!("write_with({key:?}, Put {{ {val:?}, {ex:?}, {flags:?} }})");
                let got = self.store.write_with(&key.0, |_| {
                    let value = vb.to_vec();
                    let w = Write::Put {
                        value,
                        expiry: ex,
                        flags,
                    };
                    (w, ())
                });
                let bads = self.write_bads(&key.0, Some(vb.len()));
                if !bads.is_empty() {
                    return self.expect_rejected(&what, &bads, rv0, got);
                }
                let ((), ver) = self.ok(&what, got)?;
                let Some(ver) = ver else {
                    bail!("write_with put", "{what}: returned no version");
                };
                let ver = self.new_version(&what, ver.get())?;
                self.set(&key.0, vb, ver, expires, model_flags, now);
                let seen = self.observe(&what, &key.0)?;
                let exp = self.model.get(&key.0).map(|e| obs_entry(&key.0, e));
                ensure!(
                    seen == exp,
                    "write_with readback",
                    "{what}: read back {}, expected {}",
                    show_obs_opt(&seen),
                    show_obs_opt(&exp)
                );
            }
            Op::Scan(rs) => {
                let what = format!("range({rs:?})");
                let got = self.store.range(&rs.to_range());
                self.check_range(&what, rs, got, None)?;
            }
            Op::Floor(key) | Op::Ceil(key) => {
                let is_floor = matches!(op, Op::Floor(_));
                let (what, got) = if is_floor {
                    (format!("floor({key:?})"), self.store.floor(&key.0))
                } else {
                    (format!("ceil({key:?})"), self.store.ceil(&key.0))
                };
                let exp = if is_floor {
                    self.model
                        .range::<[u8], _>((Unbounded, Included(&key.0[..])))
                        .next_back()
                } else {
                    self.model
                        .range::<[u8], _>((Included(&key.0[..]), Unbounded))
                        .next()
                }
                .map(|(k, e)| obs_entry(k, e));
                if let (Some(b), Err(e)) = (self.key_bad(&key.0), &got) {
                    ensure!(
                        self.err_matches(b, e),
                        "wrong error",
                        "{what}: invalid key, expected {b:?} or the right answer, got Err({e:?})"
                    );
                    return Ok(());
                }
                let got = self.ok(&what, got)?.as_ref().map(obs);
                ensure!(
                    got == exp,
                    if is_floor {
                        "floor mismatch"
                    } else {
                        "ceil mismatch"
                    },
                    "{what}: expected {}, got {}",
                    show_obs_opt(&exp),
                    show_obs_opt(&got)
                );
            }
            Op::Sweep(max) => self.sweep(*max, rv0)?,
            Op::Snap => self.snap()?,
            Op::SnapShort => self.snap_short()?,
            Op::SnapTooLong => {
                let got = self.store.snapshot(Duration::from_secs(7200));
                match got {
                    Err(Error::SnapshotTooLong { max_secs }) => ensure!(
                        max_secs == 3600,
                        "wrong error",
                        "snapshot(2h): SnapshotTooLong reports max_secs {max_secs}, config says 3600"
                    ),
                    other => bail!(
                        "snapshot too long",
                        "snapshot(2h): expected Err(SnapshotTooLong {{ max_secs: 3600 }}), got {other:?}"
                    ),
                }
                self.expect_unchanged("snapshot(2h)", rv0)?;
            }
            Op::Release(sel) => {
                let live: Vec<usize> = (0..self.handles.len())
                    .filter(|&i| !self.handles[i].1)
                    .collect();
                let (id, hi) = if !live.is_empty() {
                    let hi = live[sel % live.len()];
                    (self.handles[hi].0, Some(hi))
                } else if !self.handles.is_empty() {
                    (self.handles[sel % self.handles.len()].0, None)
                } else {
                    return Ok(());
                };
                let got = self.store.release_snapshot(SnapshotId(id));
                let exp = self.snaps.contains_key(&id);
                ensure!(
                    got == exp,
                    "release",
                    "release_snapshot({id}): expected {exp}, got {got} (live ids {:?})",
                    self.live_ids()
                );
                if let Some(hi) = hi {
                    self.handles[hi].1 = true;
                }
                if exp {
                    let s = self.snaps.get_mut(&id).expect("live");
                    s.refs -= 1;
                    if s.refs == 0 {
                        self.snaps.remove(&id);
                    }
                }
            }
            Op::ReleaseBogus(x) => {
                let id = u64::MAX - x;
                let got = self.store.release_snapshot(SnapshotId(id));
                ensure!(
                    !got,
                    "release",
                    "release_snapshot({id}) of an id never issued returned true"
                );
            }
            Op::GetAt(sel, key) => {
                let (id, live) = self.pick_snap(*sel);
                let what = format!("get_at({id}, {key:?})");
                let got = self.store.get_at(SnapshotId(id), &key.0);
                let bad = self.key_bad(&key.0);
                if !live {
                    match &got {
                        Err(Error::NoSuchSnapshot) => {}
                        Err(e) if bad.is_some_and(|b| self.err_matches(b, e)) => {}
                        other => bail!(
                            "released snapshot readable",
                            "{what}: snapshot is not live (live ids {:?}), expected Err(NoSuchSnapshot), got {:?}",
                            self.live_ids(),
                            other
                                .as_ref()
                                .map(|o| o.as_ref().map(obs).map(|o| show_obs(&o)))
                        ),
                    }
                    return Ok(());
                }
                if let Some(b) = bad {
                    match got {
                        Err(e) => ensure!(
                            self.err_matches(b, &e),
                            "wrong error",
                            "{what}: invalid key, expected {b:?} or Ok(None), got Err({e:?})"
                        ),
                        Ok(None) => {}
                        Ok(Some(x)) => bail!("bad key read", "{what}: invalid key returned {x:?}"),
                    }
                    return Ok(());
                }
                let got = self.ok(&what, got)?.as_ref().map(obs);
                let frozen = &self.snaps[&id].frozen;
                let exp = frozen.get(&key.0).map(|e| obs_entry(&key.0, e));
                ensure!(
                    got == exp,
                    "get_at mismatch",
                    "{what}: expected {}, got {}",
                    show_obs_opt(&exp),
                    show_obs_opt(&got)
                );
            }
            Op::ScanAt(sel, rs) => {
                let (id, live) = self.pick_snap(*sel);
                let what = format!("range_at({id}, {rs:?})");
                let got = self.store.range_at(SnapshotId(id), &rs.to_range());
                if !live {
                    match &got {
                        Err(Error::NoSuchSnapshot) => {}
                        Err(Error::KeyEmpty | Error::KeyTooLong { .. }) => {}
                        Err(e) => bail!(
                            "released snapshot readable",
                            "{what}: snapshot is not live, expected Err(NoSuchSnapshot), got Err({e:?})"
                        ),
                        Ok(items) => bail!(
                            "released snapshot readable",
                            "{what}: snapshot is not live (live ids {:?}), expected Err(NoSuchSnapshot), got Ok({} items)",
                            self.live_ids(),
                            items.len()
                        ),
                    }
                    return Ok(());
                }
                self.check_range(&what, rs, got, Some(id))?;
            }
            Op::ListSnaps => self.check_list()?,
            Op::Collect => self.store.collect(),
            Op::Reclaim => {
                for _ in 0..3 {
                    self.store.collect();
                }
                if self.snaps.is_empty() {
                    self.check_buffers("after collect() x3 with no snapshot live")?;
                }
            }
            Op::CheckAll => self.check_all()?,
            Op::DeleteMost(..)
            | Op::Asc(..)
            | Op::Desc(..)
            | Op::Hammer(..)
            | Op::ExpiredRun(..) => {
                unreachable!("bursts are expanded by apply")
            }
        }
        Ok(())
    }

    fn expect_unchanged(&self, what: &str, rv0: u64) -> R {
        let rv = self.store.read_version().get();
        ensure!(
            rv == rv0,
            "no-op changed state",
            "{what}: changed nothing, but read_version() moved {rv0} -> {rv}"
        );
        Ok(())
    }

    fn live_ids(&self) -> Vec<u64> {
        self.snaps.keys().copied().collect()
    }

    /// (snapshot id, live) for handle selector `sel`; a bogus id if there
    /// are no handles at all.
    fn pick_snap(&self, sel: usize) -> (u64, bool) {
        if self.handles.is_empty() {
            return (u64::MAX - sel as u64, false);
        }
        let id = self.handles[sel % self.handles.len()].0;
        (id, self.snaps.contains_key(&id))
    }

    fn snap(&mut self) -> R {
        let rv0 = self.store.read_version().get();
        let got = self.store.snapshot(SNAP_TTL);
        // Every creation is a handle of its own; max_snapshots counts them.
        let live = self.snaps.len();
        let id = match got {
            Err(Error::TooManySnapshots) => {
                ensure!(
                    live >= self.max_snapshots,
                    "too many snapshots",
                    "snapshot(): {live} held, max_snapshots {}, got Err(TooManySnapshots)",
                    self.max_snapshots
                );
                return self.expect_unchanged("snapshot() refused", rv0);
            }
            Err(e) => bail!(err_tag(&e), "snapshot(): unexpected Err({e:?})"),
            Ok(id) => {
                ensure!(
                    live < self.max_snapshots,
                    "too many snapshots",
                    "snapshot(): {live} held, max_snapshots {}, expected Err(TooManySnapshots), got Ok({})",
                    self.max_snapshots,
                    id.0
                );
                id.0
            }
        };
        let version = self.new_handle("snapshot()", id)?;
        self.handles.push((id, false));
        self.snaps.insert(
            id,
            SnapModel {
                refs: 1,
                frozen: self.model.clone(),
            },
        );
        self.max_snap_version = Some(self.max_snap_version.map_or(version, |m| m.max(version)));
        Ok(())
    }

    /// Checks a new handle: an id never issued before, and the version it
    /// pins (read from `list_snapshots`) at or after the last write, and the
    /// same as the last snapshot's when nothing was written since.
    fn new_handle(&mut self, what: &str, id: u64) -> Result<u64, Fail> {
        Ok(self
            .handle_listed(what, id, false)?
            .expect("a handle that may not expire is listed or fails"))
    }

    /// `new_handle`, for a snapshot that may have expired before it could
    /// be listed (`may_expire`): None then.
    fn handle_listed(
        &mut self,
        what: &str,
        id: u64,
        may_expire: bool,
    ) -> Result<Option<u64>, Fail> {
        ensure!(
            self.handles.iter().all(|h| h.0 != id),
            "snapshot id",
            "{what}: id {id} was issued before"
        );
        let listed = self.store.list_snapshots();
        let Some(info) = listed.iter().find(|i| i.id.0 == id) else {
            if may_expire {
                return Ok(None);
            }
            bail!(
                "list_snapshots",
                "{what}: id {id} is not listed: {listed:?}"
            );
        };
        let version = info.version.get();
        ensure!(
            version >= self.last_version,
            "snapshot version",
            "{what}: pins version {version}, below the last write's version {}",
            self.last_version
        );
        if let Some(last) = self.last_snap.filter(|_| !self.wrote_since_snap) {
            ensure!(
                version == last,
                "snapshot version",
                "{what}: no write since a snapshot of version {last}, but this one pins {version}"
            );
        }
        self.last_snap = Some(version);
        self.wrote_since_snap = false;
        Ok(Some(version))
    }

    /// `sweep_expired(max)`: the model walks the same items from the same
    /// cursor (every key whose newest item is not a tombstone), so it knows
    /// which expired keys are deleted and where the next call resumes.
    fn sweep(&mut self, max: usize, rv0: u64) -> R {
        let what = format!(
            "sweep_expired({max}) from cursor {:?}",
            self.sweep_cursor.clone().map(K)
        );
        let n = self.store.sweep_expired(max);
        if !self.expiring {
            // No item ever had an expiry: the sweep visits nothing.
            ensure!(
                n == 0,
                "sweep count",
                "{what}: deleted {n} keys, but no item ever had an expiry"
            );
            return Ok(());
        }
        let max = max.max(1);
        let mut keys: Vec<&Vec<u8>> = self.model.keys().chain(self.expired.iter()).collect();
        keys.sort();
        let after: Bound<&[u8]> = match &self.sweep_cursor {
            Some(c) => Excluded(&c[..]),
            None => Unbounded,
        };
        let mut doomed = Vec::new();
        let mut last = None;
        let mut seen = 0;
        for key in keys.into_iter().filter(|k| in_bounds(k, after, Unbounded)) {
            if self.expired.contains(key) {
                doomed.push(key.clone());
            }
            seen += 1;
            if seen >= max {
                last = Some(key.clone());
                break;
            }
        }
        ensure!(
            n == doomed.len(),
            "sweep count",
            "{what}: expected to delete {} expired keys {:?}, deleted {n} (expired keys in the store: {:?})",
            doomed.len(),
            doomed.iter().map(|k| K(k.clone())).collect::<Vec<_>>(),
            self.expired
                .iter()
                .map(|k| K(k.clone()))
                .collect::<Vec<_>>()
        );
        self.sweep_cursor = last;
        let rv = self.store.read_version().get();
        if n == 0 {
            ensure!(
                rv == rv0,
                "no-op changed state",
                "{what}: deleted nothing, but read_version() moved {rv0} -> {rv}"
            );
            return Ok(());
        }
        ensure!(
            rv >= rv0 + n as u64,
            "version not increasing",
            "{what}: deleted {n} items but read_version() moved only {rv0} -> {rv}"
        );
        for key in doomed {
            self.expired.remove(&key);
            self.history.entry(key).or_default().push(rv);
        }
        self.last_version = rv;
        self.wrote_since_snap = true;
        Ok(())
    }

    fn snap_short(&mut self) -> R {
        let got = self.store.snapshot(Duration::from_millis(1));
        let live = self.snaps.len();
        let id = match got {
            Err(Error::TooManySnapshots) => {
                ensure!(
                    live >= self.max_snapshots,
                    "too many snapshots",
                    "snapshot(1ms): {live} held, max_snapshots {}, got Err(TooManySnapshots)",
                    self.max_snapshots
                );
                return Ok(());
            }
            Err(e) => bail!(err_tag(&e), "snapshot(1ms): unexpected Err({e:?})"),
            Ok(id) => id.0,
        };
        // On a loaded machine the millisecond may pass before it is listed:
        // then it is gone already, as a read through it would find.
        let Some(version) = self.handle_listed("snapshot(1ms)", id, true)? else {
            self.handles.push((id, false));
            return Ok(());
        };
        self.max_snap_version = Some(self.max_snap_version.map_or(version, |m| m.max(version)));
        self.handles.push((id, false));
        // Expired by the time anything reads through it.
        std::thread::sleep(Duration::from_millis(3));
        Ok(())
    }

    fn check_list(&self) -> R {
        let list = self.store.list_snapshots();
        let got: BTreeSet<u64> = list.iter().map(|i| i.id.0).collect();
        let exp: BTreeSet<u64> = self.snaps.keys().copied().collect();
        ensure!(
            got == exp,
            "list_snapshots",
            "list_snapshots(): expected ids {exp:?}, got {list:?}"
        );
        for i in &list {
            ensure!(
                i.left <= SNAP_TTL,
                "list_snapshots",
                "list_snapshots(): snapshot {} has {:?} left, more than its TTL {SNAP_TTL:?}",
                i.id.0,
                i.left
            );
        }
        Ok(())
    }

    fn check_range(
        &self,
        what: &str,
        rs: &RangeSpec,
        got: Result<Vec<Item>, Error>,
        at: Option<u64>,
    ) -> R {
        let map = match at {
            Some(id) => &self.snaps[&id].frozen,
            None => &self.model,
        };
        let (exp, alt) = model_range(map, rs);
        let bad_bound = [&rs.start, &rs.end].into_iter().any(|b| match b {
            Included(k) | Excluded(k) => self.key_bad(&k.0).is_some(),
            Unbounded => false,
        });
        let got = match got {
            Err(Error::KeyEmpty | Error::KeyTooLong { .. }) if bad_bound => return Ok(()),
            other => self.ok(what, other)?,
        };
        let got: Vec<Obs> = got.iter().map(obs).collect();
        if got == exp || alt.as_ref().is_some_and(|a| *a == got) {
            return Ok(());
        }
        let tag = if at.is_some() {
            "range_at mismatch"
        } else {
            "range mismatch"
        };
        bail!(tag, "{what}: {}", diff_lists(&exp, &got))
    }

    /// Whole-store comparison: range(all), a point read per key, every live
    /// snapshot, and the snapshot list.
    pub fn check_all(&self) -> R {
        let all = RangeSpec::all();
        let got = self.store.range(&Range::all());
        self.check_range("range(all)", &all, got, None)?;
        let got = self.store.range(&Range::all().reversed());
        let rev = RangeSpec {
            reverse: true,
            ..RangeSpec::all()
        };
        self.check_range("range(all, reversed)", &rev, got, None)?;
        for (key, e) in &self.model {
            let what = format!("get_item({:?}) in full check", K(key.clone()));
            let got = self.ok(&what, self.store.get_item(key))?.as_ref().map(obs);
            let exp = Some(obs_entry(key, e));
            ensure!(
                got == exp,
                "get_item mismatch",
                "{what}: expected {}, got {}",
                show_obs_opt(&exp),
                show_obs_opt(&got)
            );
        }
        for &id in self.snaps.keys() {
            let got = self.store.range_at(SnapshotId(id), &Range::all());
            self.check_range(&format!("range_at({id}, all)"), &all, got, Some(id))?;
        }
        self.check_list()
    }

    /// `live_buffers == reachable_buffers` (the store is quiescent and
    /// `collect()` was called; see also the test
    /// `regression_collect_starved_by_other_threads`).
    fn check_buffers(&self, when: &str) -> R {
        let c = self.store.node_counts();
        ensure!(
            c.live_buffers == c.reachable_buffers,
            "buffer leak",
            "node_counts() {when}: live_buffers {} != reachable_buffers {}",
            c.live_buffers,
            c.reachable_buffers
        );
        Ok(())
    }

    /// End of sequence: compare everything, release all snapshots, reclaim
    /// and check the buffer accounting.
    pub fn finish(&mut self) -> R {
        self.check_all()?;
        for i in 0..self.handles.len() {
            let (id, released) = self.handles[i];
            if released {
                continue;
            }
            let ok = self.store.release_snapshot(SnapshotId(id));
            let exp = self.snaps.contains_key(&id);
            ensure!(
                ok == exp,
                "release",
                "final release_snapshot({id}) of an unreleased handle: expected {exp}, got {ok}"
            );
            self.handles[i].1 = true;
            if let Some(s) = self.snaps.get_mut(&id) {
                s.refs -= 1;
                if s.refs == 0 {
                    self.snaps.remove(&id);
                }
            }
        }
        self.check_list()?;
        let ids: BTreeSet<u64> = self.handles.iter().map(|h| h.0).collect();
        for id in ids {
            match self.store.get_at(SnapshotId(id), b"a") {
                Err(Error::NoSuchSnapshot) => {}
                other => bail!(
                    "released snapshot readable",
                    "final get_at({id}, b\"a\") after releasing everything: expected Err(NoSuchSnapshot), got {other:?}"
                ),
            }
        }
        for _ in 0..4 {
            self.store.collect();
        }
        self.check_buffers("at the end (snapshots released, collect() x4)")?;
        self.check_all()
    }
}

// ---------------------------------------------------------------------------
// Running, shrinking, reporting
// ---------------------------------------------------------------------------

/// A failed run.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Name of the op that failed ("final" for the end-of-sequence checks).
    pub op: &'static str,
    /// Kind of check that failed.
    pub tag: String,
    /// Description.
    pub msg: String,
}

impl Failure {
    fn signature(&self) -> (&'static str, String) {
        (self.op, self.tag.clone())
    }
}

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

static HOOK: Once = Once::new();

/// Installs a panic hook that stays silent while this thread is shrinking.
fn install_hook() {
    HOOK.call_once(|| {
        let prev = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                prev(info);
            }
        }));
    });
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic>".into()
    }
}

/// Runs `ops` on a fresh store; returns the primitive trace and the failure.
pub fn run_ops(setup: Setup, ops: &[Op]) -> (Vec<Op>, Option<Failure>) {
    install_hook();
    let mut runner = match panic::catch_unwind(|| Runner::new(setup)) {
        Ok(r) => r,
        Err(p) => {
            let f = Failure {
                op: "Store::new",
                tag: "panic".into(),
                msg: format!("Store::new panicked: {}", panic_text(&*p)),
            };
            return (Vec::new(), Some(f));
        }
    };
    let in_final = Cell::new(false);
    let res = panic::catch_unwind(AssertUnwindSafe(|| -> R {
        for op in ops {
            runner.apply(op)?;
        }
        in_final.set(true);
        runner.finish()
    }));
    let op_name = |r: &Runner| {
        if in_final.get() {
            "final"
        } else {
            r.trace.last().map_or("?", Op::name)
        }
    };
    let failure = match res {
        Ok(Ok(())) => None,
        Ok(Err(f)) => Some(Failure {
            op: op_name(&runner),
            tag: f.tag.to_string(),
            msg: f.msg,
        }),
        Err(p) => Some(Failure {
            op: op_name(&runner),
            tag: "panic".into(),
            msg: format!("engine panicked: {}", panic_text(&*p)),
        }),
    };
    let trace = std::mem::take(&mut runner.trace);
    let dropped = panic::catch_unwind(AssertUnwindSafe(move || drop(runner)));
    let failure = match (failure, dropped) {
        (Some(f), _) => Some(f),
        (None, Err(p)) => Some(Failure {
            op: "drop",
            tag: "panic".into(),
            msg: format!("dropping the store panicked: {}", panic_text(&*p)),
        }),
        (None, Ok(())) => None,
    };
    (trace, failure)
}

/// Shrinks a failing primitive trace by deleting ops while the failure keeps
/// its signature (op name and check). Returns the shrunk trace and failure.
pub fn shrink(setup: Setup, trace: Vec<Op>, failure: Failure) -> (Vec<Op>, Failure) {
    let sig = failure.signature();
    let mut cur = trace;
    let mut best = failure;
    let budget = Instant::now();
    QUIET.with(|q| q.set(true));
    let try_ops = |ops: &[Op]| -> Option<(Vec<Op>, Failure)> {
        let (t, f) = run_ops(setup, ops);
        f.filter(|f| f.signature() == sig).map(|f| (t, f))
    };
    let mut chunk = (cur.len() / 2).max(1);
    loop {
        let mut i = 0;
        let mut progress = false;
        while i < cur.len() && budget.elapsed() < Duration::from_secs(120) {
            let mut cand = cur.clone();
            let end = (i + chunk).min(cand.len());
            cand.drain(i..end);
            match try_ops(&cand) {
                Some((t, f)) => {
                    // Keep only the ops up to the failure.
                    cur = if f.op == "final" { cand } else { t };
                    best = f;
                    progress = true;
                }
                None => i += chunk,
            }
        }
        if budget.elapsed() >= Duration::from_secs(120) {
            break;
        }
        if chunk == 1 && !progress {
            break;
        }
        if !progress {
            chunk = (chunk / 2).max(1);
        }
    }
    // Make big values small where that keeps the failure.
    for i in 0..cur.len() {
        let mut cand = cur.clone();
        let changed = match &mut cand[i] {
            Op::Put(_, v)
            | Op::PutWith(_, v, _)
            | Op::Insert(_, v)
            | Op::Update(_, v)
            | Op::Cas(_, _, v, _)
            | Op::PutFlags(_, v, _, _)
            | Op::Append(_, v) => match v {
                Val::Big(len, _) if *len > 64 => {
                    *v = Val::S(b"x".to_vec());
                    true
                }
                _ => false,
            },
            _ => false,
        };
        if changed && let Some((_, f)) = try_ops(&cand) {
            cur = cand;
            best = f;
        }
    }
    QUIET.with(|q| q.set(false));
    (cur, best)
}

/// Formats ops as Rust source (one per line).
pub fn ops_source(ops: &[Op]) -> String {
    let mut s = String::from("vec![\n");
    for op in ops {
        let _ = writeln!(s, "    {op:?},");
    }
    s.push(']');
    s
}

/// Counters for a batch of sequences.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub sequences: usize,
    pub ops: usize,
}

fn describe(
    setup: Setup,
    seed: Option<(u64, usize)>,
    ops: &[Op],
    f: &Failure,
    shrunk_from: usize,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "==== combkv model failure ====");
    if let Some((seed, max_ops)) = seed {
        let _ = writeln!(
            s,
            "seed {seed}, node size {}, 1..={max_ops} ops ({setup:?})\n\
             replay: COMBKV_REPLAY={}:{seed}:{max_ops} cargo test -p combkv --test model replay -- --nocapture",
            setup.node, setup.node
        );
    } else {
        let _ = writeln!(s, "setup {setup:?}");
    }
    let _ = writeln!(s, "failed in {} [{}]: {}", f.op, f.tag, f.msg);
    let _ = writeln!(
        s,
        "minimal ops ({} of {shrunk_from} primitive ops):\n{}",
        ops.len(),
        ops_source(ops)
    );
    s
}

/// Runs `ops` under `setup` and panics with a description on failure
/// (used by the regression tests).
pub fn check_ops(setup: Setup, ops: Vec<Op>) {
    let (_, f) = run_ops(setup, &ops);
    if let Some(f) = f {
        panic!("{}", describe(setup, None, &ops, &f, ops.len()));
    }
}

/// Generates and runs one seed; on failure returns the shrunk report.
pub fn run_seed(
    node: usize,
    seed: u64,
    max_ops: usize,
    stats: &mut Stats,
) -> Option<(Failure, String)> {
    let setup = Setup::for_seed(node, seed);
    let ops = Gen::new(setup, seed).ops(max_ops);
    let (trace, f) = run_ops(setup, &ops);
    stats.sequences += 1;
    stats.ops += trace.len();
    let f = f?;
    let n = trace.len();
    let (small, f) = shrink(setup, trace, f);
    let report = describe(setup, Some((seed, max_ops)), &small, &f, n);
    Some((f, report))
}

/// Runs the seeds in `seeds` with `node`-byte nodes. Panics on the first
/// failure, or with `COMBKV_KEEP_GOING=1` after all seeds, listing one report
/// per distinct failure signature. `COMBKV_SEED_BASE` shifts the seeds.
pub fn run_seeds(node: usize, seeds: std::ops::Range<u64>, max_ops: usize) -> Stats {
    let base: u64 = std::env::var("COMBKV_SEED_BASE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let keep_going = std::env::var_os("COMBKV_KEEP_GOING").is_some();
    let max_ops: usize = std::env::var("COMBKV_MAX_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(max_ops);
    let mut stats = Stats::default();
    let mut seen: BTreeMap<(&'static str, String), (u64, usize, String)> = BTreeMap::new();
    let t0 = Instant::now();
    for seed in seeds.start + base..seeds.end + base {
        if let Some((f, report)) = run_seed(node, seed, max_ops, &mut stats) {
            eprintln!("{report}");
            if !keep_going {
                panic!("model check failed (seed {seed}, node {node}): {}", f.msg);
            }
            let e = seen.entry(f.signature()).or_insert((seed, 0, report));
            e.1 += 1;
        }
    }
    eprintln!(
        "node {node}: {} sequences of 1..={max_ops} ops, {} ops run in {:.1?}",
        stats.sequences,
        stats.ops,
        t0.elapsed()
    );
    if !seen.is_empty() {
        let mut s = String::new();
        for ((op, tag), (seed, n, _)) in &seen {
            let _ = writeln!(s, "  {op} [{tag}]: {n} seeds, first {seed}");
        }
        panic!("model check failures (node {node}):\n{s}");
    }
    stats
}

/// Replays `COMBKV_REPLAY=<node>:<seed>[:<max_ops>]` if set.
pub fn replay_from_env() {
    let Ok(spec) = std::env::var("COMBKV_REPLAY") else {
        return;
    };
    let parts: Vec<u64> = spec
        .split(':')
        .map(|p| p.parse().expect("COMBKV_REPLAY=<node>:<seed>[:<max_ops>]"))
        .collect();
    assert!(
        (2..=3).contains(&parts.len()),
        "COMBKV_REPLAY=<node>:<seed>[:<max_ops>]"
    );
    let (node, seed) = (parts[0] as usize, parts[1]);
    let max_ops = parts.get(2).map_or(200, |&m| m as usize);
    let mut stats = Stats::default();
    if let Some((f, report)) = run_seed(node, seed, max_ops, &mut stats) {
        panic!("{report}\n{}", f.msg);
    }
    eprintln!("seed {seed} (node {node}) passes: {} ops", stats.ops);
}

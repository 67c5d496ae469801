//! One operation of a run, with its check against the model.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::generator::Chooser;
use crate::model::{Model, check_counter};
use crate::record::Shape;
use crate::target::Target;
use crate::workload::{Mix, Op, SCAN_LEN_MAX};
use crate::{BenchError, Result};

/// What every worker of a run shares.
pub struct Context<'a, T: ?Sized> {
    pub target: &'a T,
    pub model: &'a Model,
    pub shape: Shape,
    pub mix: Mix,
    /// Whether existing records change value (updates or read-modify-writes).
    pub writes_existing: bool,
    /// The greatest key of the initial store: a scan that stops short of its
    /// limit must have reached at least this key.
    pub max_initial_key: Vec<u8>,
    /// Initial record numbers in key order (cloud only, else empty).
    pub sorted: &'a [u64],
}

impl<T: ?Sized> std::fmt::Debug for Context<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("shape", &self.shape)
            .field("mix", &self.mix)
            .finish_non_exhaustive()
    }
}

/// Operations completed, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OpCounts {
    pub read: u64,
    pub update: u64,
    pub insert: u64,
    pub scan: u64,
    pub rmw: u64,
    pub cloud_range: u64,
}

impl OpCounts {
    /// Adds another thread's counts.
    pub fn add(&mut self, o: &OpCounts) {
        self.read += o.read;
        self.update += o.update;
        self.insert += o.insert;
        self.scan += o.scan;
        self.rmw += o.rmw;
        self.cloud_range += o.cloud_range;
    }
}

/// One worker thread's state.
#[derive(Debug)]
pub struct Worker {
    pub(crate) rng: SmallRng,
    pub(crate) chooser: Chooser,
    pub(crate) key: Vec<u8>,
    pub(crate) key2: Vec<u8>,
    pub(crate) key3: Vec<u8>,
    pub(crate) value: Vec<u8>,
    pub(crate) scratch: Vec<u8>,
    pub(crate) prev: Vec<u8>,
    /// Operations completed, by kind.
    pub counts: OpCounts,
}

impl Worker {
    /// A worker with its own seeded generator and a copy of the chooser.
    pub fn new(seed: u64, chooser: Chooser) -> Self {
        Worker {
            rng: SmallRng::seed_from_u64(seed),
            chooser,
            key: Vec::with_capacity(64),
            key2: Vec::with_capacity(64),
            key3: Vec::with_capacity(64),
            value: Vec::with_capacity(64),
            scratch: Vec::with_capacity(64),
            prev: Vec::with_capacity(64),
            counts: OpCounts::default(),
        }
    }
}

pub(crate) fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Draws one operation of the mix, runs it and checks what it read.
#[inline]
pub fn run_op<T: Target + ?Sized>(cx: &Context<'_, T>, w: &mut Worker) -> Result<()> {
    match cx.mix.pick(&mut w.rng) {
        Op::Read => {
            let i = w.chooser.next(&mut w.rng, cx.model.acked());
            read(cx, w, i)?;
            w.counts.read += 1;
        }
        Op::Update => {
            let i = w.chooser.next(&mut w.rng, cx.model.acked());
            let h = cx.shape.key_into(i, &mut w.key);
            let c = cx.model.write_begin(i);
            let r = write(cx, w, h, c + 1);
            cx.model.write_end(i, if r.is_ok() { c + 1 } else { c });
            r?;
            w.counts.update += 1;
        }
        Op::ReadModifyWrite => {
            let i = w.chooser.next(&mut w.rng, cx.model.acked());
            let c = cx.model.write_begin(i);
            // Holding the write bit, the read must see exactly `c`.
            let r = read(cx, w, i).and_then(|got| {
                if got != c {
                    return Err(BenchError(format!(
                        "read-modify-write: record {i} read update {got}, but update {c} is the \
                         last written and no other write can be in flight"
                    )));
                }
                write(cx, w, crate::keys::key_hash(i), c + 1)
            });
            cx.model.write_end(i, if r.is_ok() { c + 1 } else { c });
            r?;
            w.counts.rmw += 1;
        }
        Op::Insert => {
            let i = cx.model.insert_begin();
            let h = cx.shape.key_into(i, &mut w.key);
            write(cx, w, h, 0)?;
            cx.model.insert_end(i);
            w.counts.insert += 1;
        }
        Op::Scan => {
            scan(cx, w)?;
            w.counts.scan += 1;
        }
        Op::CloudRange => {
            cloud_range(cx, w)?;
            w.counts.cloud_range += 1;
        }
    }
    Ok(())
}

/// Writes the value at counter `c` under `w.key` (hash `h`).
#[inline]
fn write<T: Target + ?Sized>(cx: &Context<'_, T>, w: &mut Worker, h: u64, c: u32) -> Result<()> {
    cx.shape.value_into(h, c, &mut w.value);
    cx.target.insert(&w.key, &w.value)
}

/// Reads record `i` and checks the value against the model's window;
/// returns the counter it read.
#[inline]
pub fn read<T: Target + ?Sized>(cx: &Context<'_, T>, w: &mut Worker, i: u64) -> Result<u32> {
    let h = cx.shape.key_into(i, &mut w.key);
    let lo = cx.model.read_begin(i);
    let mut got = None;
    let (shape, scratch, value) = (&cx.shape, &mut w.scratch, &mut w.value);
    let found = cx.target.read(&w.key, &mut |v| {
        let c = shape.decode_value(h, v, scratch);
        if c.is_none() {
            value.clear();
            value.extend_from_slice(v);
        }
        got = Some(c);
    })?;
    let hi = cx.model.read_end(i);
    let Some(got) = got.filter(|_| found) else {
        return Err(BenchError(format!(
            "read: record {i} (key {}) is missing",
            show(&w.key)
        )));
    };
    check_counter(got, lo, hi).map_err(|m| {
        let shown = match got {
            Some(c) => format!("update {c}"),
            None => format!("{:?}", show(&w.value)),
        };
        BenchError(format!(
            "read: record {i} (key {}) returned {shown}: {m}",
            show(&w.key)
        ))
    })?;
    Ok(got.unwrap_or_default())
}

/// Checks one item past the first of a range: a well-formed key above the
/// previous one, holding a value of that key (at counter 0 when existing
/// records never change).
#[inline]
fn check_item(
    shape: &Shape,
    writes_existing: bool,
    prev: &[u8],
    k: &[u8],
    v: &[u8],
    scratch: &mut Vec<u8>,
) -> Option<&'static str> {
    let Some(h) = shape.parse_key(k) else {
        return Some("a malformed key");
    };
    if k <= prev {
        return Some("keys out of order");
    }
    match shape.decode_value(h, v, scratch) {
        None => Some("a value its key never has"),
        Some(c) if c != 0 && !writes_existing => Some("an updated value, but nothing updates"),
        Some(_) => None,
    }
}

/// The checks of one `RANGE [start + LIMIT n` answer, fed item by item: the
/// first item is the start record (its counter checked against the model's
/// window at the end), the rest are well-formed items in ascending key order,
/// and a range shorter than its limit reached the greatest initial key.
#[derive(Debug)]
pub struct ScanCheck<'w> {
    shape: &'w Shape,
    writes_existing: bool,
    start: &'w [u8],
    /// Hash of the start key.
    h: u64,
    seen: usize,
    /// The start record's decoded counter, once its item arrived.
    first: Option<Option<u32>>,
    bad: Option<(usize, &'static str)>,
    prev: &'w mut Vec<u8>,
    scratch: &'w mut Vec<u8>,
}

impl<'w> ScanCheck<'w> {
    /// A check of a range from `start` (hash `h`); `prev` and `scratch` are
    /// reusable buffers.
    pub fn new<T: ?Sized>(
        cx: &'w Context<'_, T>,
        start: &'w [u8],
        h: u64,
        prev: &'w mut Vec<u8>,
        scratch: &'w mut Vec<u8>,
    ) -> Self {
        prev.clear();
        ScanCheck {
            shape: &cx.shape,
            writes_existing: cx.writes_existing,
            start,
            h,
            seen: 0,
            first: None,
            bad: None,
            prev,
            scratch,
        }
    }

    /// Checks the next item of the answer.
    #[inline]
    pub fn item(&mut self, k: &[u8], v: &[u8]) {
        let idx = self.seen;
        self.seen += 1;
        if self.bad.is_some() {
            return;
        }
        if idx == 0 {
            if k != self.start {
                self.bad = Some((0, "the first key is not the start key"));
            } else {
                self.first = Some(self.shape.decode_value(self.h, v, self.scratch));
            }
        } else if let Some(what) = check_item(
            self.shape,
            self.writes_existing,
            self.prev,
            k,
            v,
            self.scratch,
        ) {
            self.bad = Some((idx, what));
        }
        self.prev.clear();
        self.prev.extend_from_slice(k);
    }

    /// The verdict on the whole answer: `count` items reported by the target
    /// for a limit of `n`, the start record's window `lo..=hi`.
    pub fn finish(
        self,
        count: usize,
        n: usize,
        lo: u32,
        hi: u32,
        max_initial_key: &[u8],
    ) -> std::result::Result<(), String> {
        if let Some((at, what)) = self.bad {
            return Err(format!("item {at}: {what}"));
        }
        if count != self.seen {
            return Err(format!(
                "returned count {count} but visited {} items",
                self.seen
            ));
        }
        let Some(first) = self.first else {
            return Err("no items".into());
        };
        if let Err(m) = check_counter(first, lo, hi) {
            return Err(format!("start record: {m}"));
        }
        if self.seen > n {
            return Err(format!("{} items, limit was {n}", self.seen));
        }
        if self.seen < n && self.prev[..] < max_initial_key[..] {
            return Err(format!(
                "only {} items but the range did not reach the greatest key",
                self.seen
            ));
        }
        Ok(())
    }
}

/// `RANGE [start + LIMIT n` from an existing record.
fn scan<T: Target + ?Sized>(cx: &Context<'_, T>, w: &mut Worker) -> Result<()> {
    let i = w.chooser.next(&mut w.rng, cx.model.acked());
    let n = w.rng.random_range(1..=SCAN_LEN_MAX);
    let h = cx.shape.key_into(i, &mut w.key);
    let lo = cx.model.read_begin(i);
    let mut check = ScanCheck::new(cx, &w.key, h, &mut w.prev, &mut w.scratch);
    let count = cx.target.range(&w.key, n, &mut |k, v| check.item(k, v))?;
    let hi = cx.model.read_end(i);
    check
        .finish(count, n, lo, hi, &cx.max_initial_key)
        .map_err(|what| {
            BenchError(format!(
                "scan of {n} from record {i} (key {}): {what}",
                show(&w.key)
            ))
        })
}

/// The bounds of the cloud range at sorted position `j`: writes `lo` (the key
/// of `sorted[j]` with `~` appended) and `hi` (the key of `sorted[j + 2]`);
/// returns the length of the key of `sorted[j]`, a prefix of `lo`. No key
/// lies strictly between that key and `lo` (keys differ within their first
/// 16 bytes), so the floor of `lo` is always `sorted[j]`.
pub fn cloud_bounds(
    shape: &Shape,
    sorted: &[u64],
    j: usize,
    lo: &mut Vec<u8>,
    hi: &mut Vec<u8>,
) -> usize {
    shape.key_into(sorted[j], lo);
    shape.key_into(sorted[j + 2], hi);
    let floor_len = lo.len();
    lo.push(b'~');
    floor_len
}

/// The checks of one cloud range answer, fed item by item: the first item
/// is the floor record `a`, the middle record `b` is present, the last item
/// is `hi` (record `c`), and every item is well formed and in key order.
#[derive(Debug)]
pub struct CloudCheck<'w> {
    shape: &'w Shape,
    writes_existing: bool,
    floor: &'w [u8],
    mid: &'w [u8],
    seen: usize,
    saw_mid: bool,
    bad: Option<(usize, &'static str)>,
    prev: &'w mut Vec<u8>,
    scratch: &'w mut Vec<u8>,
}

impl<'w> CloudCheck<'w> {
    /// A check of a range whose floor item is `floor` and which must hold
    /// `mid`; `prev` and `scratch` are reusable buffers.
    pub fn new<T: ?Sized>(
        cx: &'w Context<'_, T>,
        floor: &'w [u8],
        mid: &'w [u8],
        prev: &'w mut Vec<u8>,
        scratch: &'w mut Vec<u8>,
    ) -> Self {
        prev.clear();
        CloudCheck {
            shape: &cx.shape,
            writes_existing: cx.writes_existing,
            floor,
            mid,
            seen: 0,
            saw_mid: false,
            bad: None,
            prev,
            scratch,
        }
    }

    /// Checks the next item of the answer.
    #[inline]
    pub fn item(&mut self, k: &[u8], v: &[u8]) {
        let idx = self.seen;
        self.seen += 1;
        if self.bad.is_some() {
            return;
        }
        if idx == 0 && k != self.floor {
            self.bad = Some((0, "the first key is not the floor of lo"));
        } else if let Some(what) = check_item(
            self.shape,
            self.writes_existing,
            self.prev,
            k,
            v,
            self.scratch,
        ) {
            self.bad = Some((idx, what));
        }
        self.saw_mid |= k == self.mid;
        self.prev.clear();
        self.prev.extend_from_slice(k);
    }

    /// The verdict on the whole answer: `count` items reported by the
    /// target, `hi` the range's upper bound.
    pub fn finish(self, count: usize, hi: &[u8]) -> std::result::Result<(), String> {
        if let Some((at, what)) = self.bad {
            return Err(format!("item {at}: {what}"));
        }
        if count != self.seen {
            return Err(format!(
                "returned count {count} but visited {} items",
                self.seen
            ));
        }
        if self.seen < 3 || !self.saw_mid || self.prev[..] != *hi {
            return Err(format!(
                "{} items, want the 3 initial records (and any inserted between)",
                self.seen
            ));
        }
        Ok(())
    }
}

/// `RANGE [lo [hi FLOOR`: `lo` lies just above the key of initial record
/// `a = sorted[j]` (below every other key), `hi` is the key of `c =
/// sorted[j+2]`, so the range covers exactly `a`, `b = sorted[j+1]` and `c`
/// of the initial store, plus whatever inserts land between them.
fn cloud_range<T: Target + ?Sized>(cx: &Context<'_, T>, w: &mut Worker) -> Result<()> {
    let j = w.chooser.next(&mut w.rng, cx.sorted.len() as u64 - 2) as usize;
    let floor_len = cloud_bounds(&cx.shape, cx.sorted, j, &mut w.key, &mut w.key3);
    cx.shape.key_into(cx.sorted[j + 1], &mut w.key2);
    let (lo, floor) = (&w.key[..], &w.key[..floor_len]);
    let mut check = CloudCheck::new(cx, floor, &w.key2, &mut w.prev, &mut w.scratch);
    let count = cx
        .target
        .range_floor(lo, &w.key3, &mut |k, v| check.item(k, v))?;
    check.finish(count, &w.key3).map_err(|what| {
        BenchError(format!(
            "range floor from {} to {}: {what}",
            show(floor),
            show(&w.key3)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::key_hash;
    use crate::record::SizeRange;
    use crate::target::{BTreeMapTarget, MasstreeTarget, SccTarget, SkipMapTarget};

    /// On the initial store every cloud range holds exactly the 3 records at
    /// sorted positions `j..j+3`, on every target and at varied key sizes.
    #[test]
    fn cloud_ranges_cover_exactly_3_initial_items() {
        let shape = Shape {
            key_size: "16..40".parse().unwrap(),
            value_size: SizeRange::fixed(8),
        };
        let n = 2000u64;
        let mut sorted: Vec<u64> = (0..n).collect();
        sorted.sort_unstable_by_key(|&i| key_hash(i));
        let targets: Vec<Box<dyn Target>> = vec![
            #[cfg(feature = "engine")]
            Box::new(crate::target::EngineTarget::new().unwrap()),
            Box::new(BTreeMapTarget::new()),
            Box::new(SkipMapTarget::new()),
            Box::new(SccTarget::new()),
            Box::new(MasstreeTarget::new()),
        ];
        let (mut k, mut v, mut lo, mut hi) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for t in &targets {
            for i in 0..n {
                let h = shape.key_into(i, &mut k);
                shape.value_into(h, 0, &mut v);
                t.insert(&k, &v).unwrap();
            }
            for j in 0..sorted.len() - 2 {
                cloud_bounds(&shape, &sorted, j, &mut lo, &mut hi);
                let mut got = Vec::new();
                t.range_floor(&lo, &hi, &mut |key, _| got.push(key.to_vec()))
                    .unwrap();
                let want: Vec<Vec<u8>> = sorted[j..j + 3]
                    .iter()
                    .map(|&i| {
                        shape.key_into(i, &mut k);
                        k.clone()
                    })
                    .collect();
                assert_eq!(got, want, "position {j}");
            }
        }
    }
}

//! Every workload on every in-process target, small: loads 2,000 records,
//! runs 5,000 checked operations on two threads (see `threads` for the one
//! exception).

use std::sync::atomic::{AtomicU64, Ordering};

use combkv_bench::Result;
use combkv_bench::generator::Distribution;
use combkv_bench::record::Shape;
use combkv_bench::target::{BTreeMapTarget, Target, TargetKind};
use combkv_bench::workload::Workload;
use combkv_bench::ycsb::{RunSpec, Stop, run_one, run_with};

fn spec(workload: Workload, target: TargetKind) -> RunSpec {
    RunSpec {
        workload,
        target,
        records: 2000,
        stop: Stop::Ops(5000),
        threads: threads(workload, target),
        distribution: workload.default_distribution(),
        shape: Shape::default(),
        read_pct: 95,
        seed: 11,
        connections: 1,
        pipeline: 1,
        server_bin: None,
        hot_cache: None,
    }
}

/// Two, except for Masstree where inserts run beside range scans (e and
/// cloud): the `masstree` crate (0.9.5) sometimes leaves a record that was
/// there all along out of a scan while another thread inserts nearby. The
/// checks catch it (in 40 runs of this test: 3 failed on cloud, a range
/// short of its initial records; with cloud on one thread, 3 failed on e, a
/// scan that missed its start record). One thread checks Masstree's
/// answers there without racing its inserts; `docs/benchmarks.md` tells
/// users of the bench.
fn threads(workload: Workload, target: TargetKind) -> usize {
    let inserts_beside_scans = matches!(workload, Workload::E | Workload::Cloud);
    if inserts_beside_scans && target == TargetKind::Masstree {
        1
    } else {
        2
    }
}

#[test]
fn every_workload_passes_on_every_target() {
    for w in Workload::ALL {
        for t in TargetKind::ALL {
            let r = run_one(&spec(w, t), false).unwrap_or_else(|e| panic!("{w}/{t}: {e}"));
            assert_eq!(r.ops, 5000, "{w}/{t}");
            let c = r.op_counts;
            let total = c.read + c.update + c.insert + c.scan + c.rmw + c.cloud_range;
            assert_eq!(total, 5000, "{w}/{t}: {c:?}");
            assert!(r.throughput_ops > 0.0 && r.p50_us <= r.p99_us && r.p99_us <= r.max_us);
            assert_eq!(r.raw_bytes_per_record, 32.0);
        }
    }
}

#[test]
fn variable_sizes_and_other_distributions_pass() {
    for (w, d) in [
        (Workload::A, Distribution::Uniform),
        (Workload::F, Distribution::Latest),
        (Workload::E, Distribution::Uniform),
        (Workload::Cloud, Distribution::Zipfian),
        (Workload::D, Distribution::Zipfian),
    ] {
        let s = RunSpec {
            distribution: d,
            shape: Shape {
                key_size: "16..64".parse().unwrap(),
                value_size: "8..256".parse().unwrap(),
            },
            read_pct: 50,
            stop: Stop::Secs(0.05),
            ..spec(w, TargetKind::Engine)
        };
        let r = run_one(&s, false).unwrap_or_else(|e| panic!("{w}/{d}: {e}"));
        // Means: keys 40, values 132, within sampling noise over 2,000 records.
        assert!(
            (r.raw_bytes_per_record - 172.0).abs() < 10.0,
            "{}",
            r.raw_bytes_per_record
        );
    }
}

/// A BTreeMap that serves the 1,000th read from a stale snapshot: it returns
/// the value the key had at the start of the run.
#[derive(Debug, Default)]
struct StaleAfter {
    inner: BTreeMapTarget,
    first: BTreeMapTarget,
    reads: AtomicU64,
}

impl Target for StaleAfter {
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut probe = Vec::new();
        if !self.first.get(key, &mut probe)? {
            self.first.insert(key, value)?;
        }
        self.inner.insert(key, value)
    }

    fn read(&self, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool> {
        if self.reads.fetch_add(1, Ordering::Relaxed) >= 1000 {
            self.first.read(key, visit)
        } else {
            self.inner.read(key, visit)
        }
    }

    fn range(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        self.inner.range(start, n, visit)
    }

    fn range_floor(
        &self,
        lo: &[u8],
        hi: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        self.inner.range_floor(lo, hi, visit)
    }
}

#[test]
fn a_stale_read_fails_the_run() {
    let s = RunSpec {
        records: 100,
        stop: Stop::Ops(50_000),
        ..spec(Workload::A, TargetKind::BTreeMap)
    };
    let err = run_with(&s, false, || Ok(StaleAfter::default())).unwrap_err();
    assert!(err.0.contains("must see an update in"), "{err}");
    // The same target before it goes stale passes.
    let s = RunSpec {
        stop: Stop::Ops(500),
        ..s
    };
    run_with(&s, false, || Ok(StaleAfter::default())).unwrap();
}

/// A target that drops every 50th insert after loading: reads of the new
/// records in workload D must find them missing.
#[derive(Debug, Default)]
struct DropsInserts {
    inner: BTreeMapTarget,
    writes: AtomicU64,
}

impl Target for DropsInserts {
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let n = self.writes.fetch_add(1, Ordering::Relaxed);
        if n >= 2000 && n.is_multiple_of(50) {
            return Ok(());
        }
        self.inner.insert(key, value)
    }

    fn read(&self, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool> {
        self.inner.read(key, visit)
    }

    fn range(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        self.inner.range(start, n, visit)
    }

    fn range_floor(
        &self,
        lo: &[u8],
        hi: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        self.inner.range_floor(lo, hi, visit)
    }
}

#[test]
fn a_lost_insert_fails_the_run() {
    let s = RunSpec {
        stop: Stop::Ops(100_000),
        ..spec(Workload::D, TargetKind::BTreeMap)
    };
    let err = run_with(&s, false, || Ok(DropsInserts::default())).unwrap_err();
    assert!(err.0.contains("is missing"), "{err}");
}

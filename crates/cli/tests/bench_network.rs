//! `combkv bench` against `combkv serve` from the same build: the bench
//! finds the server next to itself, starts it on free ports, and every
//! workload passes its checks over both protocols.

use std::process::{Command, Output};

const COMBKV: &str = env!("CARGO_BIN_EXE_combkv");

fn bench(workloads: &str, target: &str, json: &std::path::Path) -> Output {
    Command::new(COMBKV)
        .args(["bench", "--workload", workloads, "--targets", target])
        .args(["--records", "2000", "--ops", "5000"])
        .args(["--connections", "2", "--pipeline", "8"])
        .arg("--json")
        .arg(json)
        .output()
        .unwrap()
}

/// Runs every workload on `target` and checks the JSON lines: 5,000
/// operations per measured pair, `skipped` pairs only where expected.
fn every_workload_passes(target: &str, skips: usize) -> Result<(), String> {
    let json = std::env::temp_dir().join(format!(
        "combkv-bench-{target}-{}.jsonl",
        std::process::id()
    ));
    let out = bench("a,b,c,d,e,f,cloud", target, &json);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let lines = std::fs::read_to_string(&json).unwrap_or_default();
    let _ = std::fs::remove_file(&json);
    if !out.status.success() {
        return Err(format!("combkv bench failed:\n{stdout}\n{stderr}"));
    }
    assert!(stdout.contains("ops/s vs combkv-resp"), "{stdout}");
    let (mut measured, mut skipped) = (0, 0);
    for line in lines.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["target"], target, "{line}");
        if v.get("skipped").is_some() {
            skipped += 1;
        } else {
            assert_eq!(v["ops"], 5000, "{line}");
            assert!(v["bytes_per_record"].as_f64().is_some(), "{line}");
            measured += 1;
        }
    }
    assert_eq!((measured, skipped), (7 - skips, skips), "{lines}");
    Ok(())
}

#[test]
fn bench_runs_every_workload_against_combkv_serve() {
    every_workload_passes("combkv-resp", 0).unwrap();
    every_workload_passes("combkv-memcached", 2).unwrap();
}

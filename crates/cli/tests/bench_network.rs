//! `combkv bench` against `combkv serve` from the same build: the bench
//! finds the server next to itself, starts it on free ports, and every
//! workload passes its checks over both protocols.

use std::process::Command;

const COMBKV: &str = env!("CARGO_BIN_EXE_combkv");

#[test]
fn bench_runs_every_workload_against_combkv_serve() {
    let has_serve = Command::new(COMBKV)
        .args(["serve", "--help"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_serve {
        eprintln!("SKIPPED: this build of combkv has no `serve` subcommand");
        return;
    }
    let json = std::env::temp_dir().join(format!("combkv-bench-net-{}.jsonl", std::process::id()));
    let out = Command::new(COMBKV)
        .args(["bench", "--workload", "a,b,c,d,e,f,cloud"])
        .args(["--targets", "combkv-resp,combkv-memcached"])
        .args(["--records", "2000", "--ops", "5000"])
        .args(["--connections", "2", "--pipeline", "8"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "combkv bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ops/s vs combkv-resp"), "{stdout}");
    let lines = std::fs::read_to_string(&json).unwrap();
    std::fs::remove_file(&json).unwrap();
    let (mut measured, mut skipped) = (0, 0);
    for line in lines.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v.get("skipped").is_some() {
            assert_eq!(v["target"], "combkv-memcached", "{line}");
            skipped += 1;
        } else {
            assert_eq!(v["ops"], 5000, "{line}");
            assert!(v["bytes_per_record"].as_f64().is_some(), "{line}");
            measured += 1;
        }
    }
    assert_eq!((measured, skipped), (7 + 5, 2), "{lines}");
}

//! `combkv-bench` against `combkv serve` from the same workspace: the bench
//! starts the server on free ports, and every workload passes its checks
//! over both protocols. Also how the bench finds the server binary
//! (--server-bin, COMBKV_BIN, next to itself) and that a pair's child is
//! the combkv-bench binary re-executed.
//!
//! The server is another package's binary, which Cargo does not build for
//! this one's tests, so [`combkv_server`] builds it with Cargo, once.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const BENCH: &str = env!("CARGO_BIN_EXE_combkv-bench");

/// The `combkv` server binary, built by `cargo build -p combkv-cli` with the
/// test profile into this build's target directory, so that a workspace
/// `cargo test` has built it already and this costs nothing then. Cargo
/// releases the build lock before it runs the tests, so this does not wait
/// on the `cargo test` that runs it.
fn combkv_server() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "build",
                "--profile",
                "test",
                "-p",
                "combkv-cli",
                "--bin",
                "combkv",
            ])
            .args(["--message-format", "json-render-diagnostics"])
            .output()
            .expect("running cargo build -p combkv-cli");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "cargo build -p combkv-cli failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The artifact message names where the executable is, whatever
        // the target directory. The engine's library is also named combkv:
        // only the binary has an executable.
        stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "combkv")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo build named no combkv executable")
    })
}

fn bench(workloads: &str, target: &str, json: &Path, server: ServerBin) -> Output {
    let mut cmd = Command::new(BENCH);
    cmd.args(["--workload", workloads, "--targets", target])
        .args(["--records", "2000", "--ops", "5000"])
        .args(["--connections", "2", "--pipeline", "8"])
        .arg("--json")
        .arg(json)
        .env_remove("COMBKV_BIN");
    match server {
        ServerBin::Flag => cmd.arg("--server-bin").arg(combkv_server()),
        ServerBin::Env => cmd.env("COMBKV_BIN", combkv_server()),
    };
    cmd.output().unwrap()
}

/// How a run names the server binary.
#[derive(Clone, Copy)]
enum ServerBin {
    Flag,
    Env,
}

/// Runs every workload on `target` and checks the JSON lines: 5,000
/// operations per measured pair, `skipped` pairs only where expected.
fn every_workload_passes(target: &str, skips: usize, server: ServerBin) -> Result<(), String> {
    let json = std::env::temp_dir().join(format!(
        "combkv-bench-{target}-{}.jsonl",
        std::process::id()
    ));
    let out = bench("a,b,c,d,e,f,cloud", target, &json, server);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let lines = std::fs::read_to_string(&json).unwrap_or_default();
    let _ = std::fs::remove_file(&json);
    if !out.status.success() {
        return Err(format!("combkv-bench failed:\n{stdout}\n{stderr}"));
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
    every_workload_passes("combkv-resp", 0, ServerBin::Flag).unwrap();
    every_workload_passes("combkv-memcached", 2, ServerBin::Env).unwrap();
}

/// Runs the combkv-bench binary `exe` on combkv-resp, workload a, with
/// `args` and COMBKV_BIN set to `env` (unset: None), and returns its
/// stderr; the run must fail.
fn failed_run(exe: &Path, args: &[&str], env: Option<&str>) -> String {
    let mut cmd = Command::new(exe);
    cmd.args(["--workload", "a", "--targets", "combkv-resp"])
        .args(["--records", "10", "--ops", "10"])
        .args(args)
        .env_remove("COMBKV_BIN");
    if let Some(v) = env {
        cmd.env("COMBKV_BIN", v);
    }
    let out = cmd.output().unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// --server-bin wins over COMBKV_BIN, which wins over the `combkv` next to
/// the bench; a binary that is not there is named in the error. Nothing
/// here starts a server.
#[test]
fn the_server_binary_is_the_flag_then_the_env_then_next_to_the_bench() {
    let dir = std::env::temp_dir().join(format!("combkv-bench-find-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A copy, not a link: the bench looks next to its own resolved path.
    let copy = dir.join("combkv-bench");
    std::fs::copy(BENCH, &copy).unwrap();
    let (flag, env) = (dir.join("from-flag"), dir.join("from-env"));
    let flag_arg = flag.to_str().unwrap();
    let env_val = env.to_str().unwrap();

    let e = failed_run(&copy, &["--server-bin", flag_arg], Some(env_val));
    assert!(
        e.contains(&format!("no combkv binary at {flag_arg}")),
        "{e}"
    );
    let e = failed_run(&copy, &[], Some(env_val));
    assert!(e.contains(&format!("no combkv binary at {env_val}")), "{e}");
    let e = failed_run(&copy, &[], None);
    let sibling = dir.join("combkv");
    assert!(
        e.contains(&format!("no combkv binary at {}", sibling.display())),
        "{e}"
    );
    assert!(e.contains("--server-bin or COMBKV_BIN"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An in-process run: the parent re-executes combkv-bench as each pair's
/// child (a wrong binary there prints no report line and fails the run).
#[test]
fn in_process_pairs_run_in_combkv_bench_children() {
    let out = Command::new(BENCH)
        .args(["--workload", "a,c", "--targets", "btreemap,skipmap"])
        // A duration, not --ops: a run of a few thousand in-process ops can
        // end before the parent thread takes its start time (0 s, no
        // throughput).
        .args(["--records", "1000", "--duration", "0.2", "--threads", "2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("combkv-bench: 1000 records"), "{stdout}");
    assert!(stdout.contains("workload c"), "{stdout}");
}

/// Options that would be ignored are refused before anything runs.
#[test]
fn options_for_the_other_kind_of_target_are_refused() {
    let out = Command::new(BENCH)
        .args(["--targets", "btreemap", "--pipeline", "4"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("apply to network targets"), "{e}");
    let out = Command::new(BENCH)
        .args(["--targets", "redis", "--threads", "4"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--threads applies to in-process targets"), "{e}");
}

//! Running a measurement in a fresh child process.
//!
//! Resident memory is only meaningful per target when each target lives in
//! its own process, so a driver re-executes its own binary with a hidden
//! flag; the child prints one line starting with [`LINE_PREFIX`] on stdout
//! (its progress and errors go to the inherited stderr) and exits.

use std::process::{Command, Stdio};

use crate::{BenchError, Result};

/// Prefix of the line a child prints on stdout for its parent.
pub const LINE_PREFIX: &str = "COMBKV-BENCH-REPORT";

/// Runs this executable with `args` and returns the child's report line
/// (prefix included). Fails if the child fails or prints no report line.
pub fn run_self(args: &[String]) -> Result<String> {
    let exe = std::env::current_exe()
        .map_err(|e| BenchError(format!("cannot find my own executable: {e}")))?;
    let out = Command::new(&exe)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| BenchError(format!("cannot start {}: {e}", exe.display())))?;
    if !out.status.success() {
        return Err(BenchError(format!("child exited with {}", out.status)));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with(LINE_PREFIX))
        .map(str::to_owned)
        .ok_or_else(|| BenchError::new("child printed no report line"))
}

/// Prints `payload` as the report line for the parent.
pub fn emit(payload: &str) {
    println!("{LINE_PREFIX} {payload}");
}

/// The payload of a report line, if it is one.
pub fn payload(line: &str) -> Option<&str> {
    line.strip_prefix(LINE_PREFIX).map(str::trim_start)
}

//! The deployment files in the repository work as shipped:
//! `deploy/combkv.service` passes `systemd-analyze verify` (where systemd's
//! tools are installed) and its service line, run as systemd runs it
//! (`NOTIFY_SOCKET`, `WATCHDOG_USEC`, its `Environment=`), serves and
//! says READY=1 then pings the watchdog; the `Dockerfile` builds and its
//! image refuses to start without a password (where a Docker daemon
//! answers).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn unit() -> String {
    std::fs::read_to_string(repo().join("deploy/combkv.service")).unwrap()
}

/// The values of `key=` lines in the unit's `[Service]` section.
fn service(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .skip_while(|l| l.trim() != "[Service]")
        .take_while(|l| !l.starts_with("[Install]"))
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
        .collect()
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("combkv-deploy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_systemd_unit_verifies() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: systemd-analyze is not installed here");
        return;
    }
    // Verified with the binary where this build put it.
    let dir = temp_dir("verify");
    let path = dir.join("combkv.service");
    std::fs::write(
        &path,
        unit().replace("/usr/local/bin/combkv", &support::binary()),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_units_service_line_serves_and_notifies_as_systemd_expects() {
    let unit = unit();
    assert_eq!(service(&unit, "Type"), ["notify"]);
    let exec = service(&unit, "ExecStart").pop().expect("ExecStart");
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/combkv"));
    let args: Vec<&str> = words.collect();
    assert_eq!(args[..2], ["serve", "--config"]);

    let dir = temp_dir("notify");
    let resp: std::net::SocketAddr = ([127, 0, 0, 1], support::free_port()).into();
    let config = dir.join("combkv.toml");
    std::fs::write(
        &config,
        format!("resp = \"{resp}\"\nmemcached = \"off\"\nlog-level = \"warn\"\n"),
    )
    .unwrap();
    let socket_path = dir.join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut cmd = Command::new(support::binary());
    cmd.args(&args[..2]).arg(&config);
    for env in service(&unit, "Environment") {
        let (k, v) = env.split_once('=').unwrap();
        // The state directory systemd would make.
        let v = v.replace("/var/lib/combkv", dir.join("state").to_str().unwrap());
        cmd.env(k, v);
    }
    let watchdog = service(&unit, "WatchdogSec").pop().expect("WatchdogSec");
    let secs: u64 = watchdog.parse().unwrap();
    let mut child = cmd
        .env("NOTIFY_SOCKET", &socket_path)
        // A short period, so that the test hears a ping soon.
        .env("WATCHDOG_USEC", (secs.min(1) * 1_000_000).to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut heard = String::new();
    let mut buf = [0u8; 512];
    while !(heard.contains("READY=1") && heard.contains("WATCHDOG=1")) {
        let n = socket
            .recv(&mut buf)
            .expect("READY=1 and WATCHDOG=1 within 30 s");
        heard.push_str(&String::from_utf8_lossy(&buf[..n]));
        heard.push('\n');
    }
    assert!(support::ask(
        resp,
        b"PING\r\n",
        b"+PONG",
        Duration::from_secs(5)
    ));
    assert!(
        dir.join("state").join("LOCK").exists(),
        "the data directory is the one Environment= names"
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_dockerfile_builds_an_image_that_wants_a_password() {
    let daemon = Command::new("docker")
        .arg("info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !daemon {
        eprintln!("skipped: no Docker daemon answers here");
        return;
    }
    let tag = format!("combkv-test:{}", std::process::id());
    let built = Command::new("docker")
        .args(["build", "-t", &tag, "."])
        .current_dir(repo())
        .status()
        .unwrap();
    assert!(built.success(), "docker build failed");
    // Listening on every interface with no password: refused, saying why.
    let out = Command::new("docker")
        .args(["run", "--rm", &tag])
        .output()
        .unwrap();
    let _ = Command::new("docker").args(["rmi", &tag]).status();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("protected mode"), "{said}");
}
